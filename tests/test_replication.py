"""``wait_replicas``: a client's writes are acknowledged only once replicas have them (``WAIT`` on
the connection that wrote them), on a single server and across the masters of a Redis Cluster."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis
from redisproc import RedisCluster

from asynqpy import AsyncClient, Client, InvalidArgumentError, NotReplicatedError, TaskState
from asynqpy.core.spine.keys import queue_keys

QUEUES = ["reports", "critical", "low"]  # one per master of the test cluster


@pytest.mark.parametrize("kwargs", [{"wait_replicas": -1}, {"wait_replicas": "1"}, {"wait_replicas": True},
                                    {"wait_timeout": 0}, {"wait_timeout": float("inf")}, {"wait_timeout": "1"}])
def test_bad_wait_options(kwargs: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        Client("redis://127.0.0.1:1", **kwargs)
    with pytest.raises(InvalidArgumentError):
        AsyncClient("redis://127.0.0.1:1", **kwargs)


@pytest.mark.real
def test_no_replica_means_not_replicated_but_stored(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    with Client(redis_url, wait_replicas=1, wait_timeout=0.05) as c:
        with pytest.raises(NotReplicatedError) as exc:
            c.enqueue("t", 1, task_id="a")
        assert exc.value.acked == 0
        out = c.enqueue_many([("t", 2), ("t", 3, {"task_id": "a"})], return_exceptions=True)
        assert isinstance(out[0], NotReplicatedError)  # stored, not confirmed
        assert type(out[1]).__name__ == "TaskIdConflictError"  # refused: nothing to confirm
        with pytest.raises(NotReplicatedError):
            c.pause("default")
    assert r.hexists(queue_keys("default").tasks, "a") and r.llen(queue_keys("default").pending) == 2
    assert r.exists(queue_keys("default").paused)

    async def main() -> None:
        async with AsyncClient(redis_url, wait_replicas=1, wait_timeout=0.05) as ac:
            with pytest.raises(NotReplicatedError):
                await ac.enqueue("t", 4)
            with pytest.raises(NotReplicatedError):
                await ac.unpause("default")

    asyncio.run(main())
    assert r.llen(queue_keys("default").pending) == 3 and not r.exists(queue_keys("default").paused)


@pytest.mark.cluster
def test_cluster_every_master_waits_for_its_replica(replicated_cluster: RedisCluster) -> None:
    replicated_cluster.flush()
    cluster_url = replicated_cluster.url
    async def main() -> None:
        async with AsyncClient(cluster_url, wait_replicas=1) as ac:
            await ac.redis.script_flush()
            infos = await ac.enqueue_many([("t", i, {"queue": QUEUES[i % 3]}) for i in range(30)]
                                          + [("t", 99, {"queue": QUEUES[0], "process_in": 60})])
            assert [i.state for i in infos] == [TaskState.PENDING] * 30 + [TaskState.SCHEDULED]
            assert await ac.pause(QUEUES[1]) is True
        async with AsyncClient(cluster_url, wait_replicas=2, wait_timeout=0.05) as ac:
            out = await ac.enqueue_many([("t", 0, {"queue": q}) for q in QUEUES], return_exceptions=True)
            assert [type(x) for x in out] == [NotReplicatedError] * 3 and {x.acked for x in out} == {1}

    asyncio.run(main())
    with Client(cluster_url, wait_replicas=1) as c:
        assert len(c.enqueue_many([("t", i, {"queue": q}) for i in range(4) for q in QUEUES], unique=60)) == 12
        assert c.unpause(QUEUES[1]) is True
        rc = c.redis
        for q in QUEUES:  # every task is on its master's replica too
            master = rc.get_redis_connection(rc.get_node_from_key(queue_keys(q).tasks))
            role = master.execute_command("ROLE")  # [b"master", offset, [[ip, port, offset], ...]]
            host, port, _ = role[2][0]
            node = redis.Redis(host=host.decode(), port=int(port))
            assert node.execute_command("READONLY") and node.hlen(queue_keys(q).tasks) == 10 + 4 + 1 + (q == QUEUES[0])
            node.close()
