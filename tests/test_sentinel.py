"""Redis Sentinel: ``redis+sentinel://`` URLs, and a worker that keeps processing through two
failovers (a graceful ``SENTINEL FAILOVER``, which demotes the old master, then a SIGKILL of the
new master), with a master, two replicas and three sentinels started by the test."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
import redis
from redisproc import RedisSentinelGroup, wait_for

from asynqpy import (
    Client,
    Inspector,
    InvalidArgumentError,
    NotReplicatedError,
    ServeMux,
    Server,
    Task,
    TaskIdConflictError,
)
from asynqpy.redisio.connection import _sentinel_parts, async_client, sync_client
from asynqpy.worker.wake import PipelinedWait

pytestmark = pytest.mark.real

WINDOW_BEFORE = 0.5
"""Seconds before a failover starts from which an acknowledged enqueue may still be lost (it may
not have reached the replica yet: replication is asynchronous)."""


def test_sentinel_urls() -> None:
    assert _sentinel_parts("redis+sentinel://u%40x:p%3Aw@h1:1,h2/mymaster/3") == (
        [("h1", 1), ("h2", 26379)], "mymaster", {"username": "u@x", "password": "p:w", "db": 3})
    assert _sentinel_parts("rediss+sentinel://h1:26380/m") == ([("h1", 26380)], "m", {"ssl": True})
    assert _sentinel_parts("redis://h:1/0") is None
    for bad in ("redis+sentinel://h1:1", "redis+sentinel://h1:1/", "redis+sentinel://h1:1/m/x",
                "redis+sentinel://h1:x/m", "redis+sentinel://h:1/a/1/2"):
        with pytest.raises(InvalidArgumentError):
            sync_client(bad)
    for make in (sync_client, async_client):
        r = make("redis+sentinel://127.0.0.1:1,127.0.0.1:2/mymaster/2")  # no I/O until used
        assert type(r).__name__ == "Redis" and r.connection_pool.service_name == "mymaster"
        assert r.connection_pool.connection_kwargs["db"] == 2


class Producer(threading.Thread):
    """Enqueues ``<prefix><i>`` (caller-chosen ids) every few ms until stopped, retrying each until
    it is acknowledged; records when each was."""

    def __init__(self, client: Client, prefix: str) -> None:
        super().__init__(daemon=True)
        self.client, self.prefix = client, prefix
        self.acked: dict[str, float] = {}
        self.lock = threading.Lock()  # (the test reads acked while this thread adds to it)
        self.stopping = threading.Event()
        self.refused = 0

    def snapshot(self) -> dict[str, float]:
        """The tasks acked so far (a copy taken under the lock)."""
        with self.lock:
            return dict(self.acked)

    def run(self) -> None:
        i = 0
        while not self.stopping.is_set():
            id = f"{self.prefix}{i}"
            while not self.stopping.is_set():
                try:
                    self.client.enqueue("job", i, task_id=id)
                except TaskIdConflictError:
                    pass  # an earlier attempt was stored
                except (redis.RedisError, OSError, NotReplicatedError):
                    self.refused += 1
                    time.sleep(0.05)
                    continue
                with self.lock:
                    self.acked[id] = time.time()
                break
            i += 1
            time.sleep(0.005)
        self.client.close()


def test_worker_keeps_processing_through_two_failovers() -> None:
    """A graceful failover (the old master keeps accepting writes until the sentinels demote it,
    up to ~10 s later: a write it acknowledges meanwhile is lost when it resyncs), then a crash.
    Two producers: a plain Client (the direct-connection fast path) and one with
    ``wait_replicas=1``, whose acknowledged tasks must all run."""
    group = RedisSentinelGroup(replicas=2)
    ran: dict[str, int] = {}
    windows: list[tuple[float, float]] = []
    plain = Producer(Client(group.url), "p")
    waited = Producer(Client(group.url, wait_replicas=1, wait_timeout=0.5), "w")
    producers = [plain, waited]

    def failover(how: str) -> None:
        old = group.master_port()
        start = time.time()
        if how == "sentinel":
            redis.Redis(port=group.sentinels[0].port).execute_command("SENTINEL", "FAILOVER", group.name)
        else:
            group.node(old).crash()
        wait_for(lambda: group.master_port() != old, 20, f"failover ({how}) away from :{old}")
        new = group.master_port()
        wait_for(lambda: bool(redis.Redis(port=new).set("probe", 1)), 10, f"new master :{new} writable")
        if how == "sentinel":  # until the sentinels demote the old master, it takes writes too
            wait_for(lambda: redis.Redis(port=old).info("replication")["role"] == "slave", 30,
                     f"old master :{old} demoted")
        windows.append((start - WINDOW_BEFORE, time.time()))

    def acked_after(t: float) -> list[str]:
        return [id for p in producers for id, at in p.snapshot().items() if at > t]

    async def main() -> None:
        mux = ServeMux()

        @mux.handle("job")
        async def job(task: Task) -> None:
            ran[task.id] = ran.get(task.id, 0) + 1

        server = Server(group.url, queues=["default"], concurrency=10, lease=5, heartbeat_interval=0.5,
                        shutdown_timeout=1, idle_timeout=2)
        srv = asyncio.create_task(server.arun(mux))

        async def until_ran(ids: Any, what: str) -> None:
            deadline = time.monotonic() + 20
            while not ids():
                assert not srv.done(), "the server stopped"
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                await asyncio.sleep(0.05)

        try:
            for p in producers:
                p.start()
            await until_ran(lambda: sum(1 for id in acked_after(0) if id in ran) >= 50, "the first tasks")
            for how in ("sentinel", "kill"):
                await asyncio.to_thread(failover, how)
                after = windows[-1][1]  # new tasks, on the new master, run
                await until_ran(lambda: sum(1 for id in acked_after(after) if id in ran) >= 50,
                                f"tasks after the {how} failover")
            for p in producers:
                p.stopping.set()
                await asyncio.to_thread(p.join, 10)
            outside = [id for p in producers for id, at in p.snapshot().items()
                       if not any(a <= at <= b for a, b in windows)]
            await until_ran(lambda: all(id in ran for id in outside + list(waited.snapshot())),
                            "every task acknowledged outside a failover, or with wait_replicas")
            # an acknowledgement the old master took while being demoted is lost with it: that task
            # is active again on the new master until its lease (5 s) expires and the recoverer
            # runs it again; nothing may stay active for good
            with Inspector(group.url) as ins:
                deadline = time.monotonic() + 30
                while (st := await asyncio.to_thread(ins.stats, "default")).active or st.pending:
                    assert time.monotonic() < deadline, f"tasks left behind: {st}"
                    await asyncio.sleep(0.2)
        finally:
            for p in producers:
                p.stopping.set()
            server.stop()
            await asyncio.wait_for(srv, 15)

    try:
        assert PipelinedWait.supported(async_client(group.url))  # the server's pipelined idle wait is in use
        asyncio.run(main())
        inside = [id for id, at in plain.acked.items() if any(a <= at <= b for a, b in windows)]
        lost = [id for id in inside if id not in ran]
        print(f"\nsentinel failovers: {len(plain.acked)} + {len(waited.acked)} (wait_replicas) acked, "
              f"{len(ran)} ran, {sum(ran.values()) - len(ran)} re-runs; {len(inside)} plain enqueues "
              f"acknowledged during a failover, {len(lost)} of them lost; attempts refused: "
              f"{plain.refused} plain, {waited.refused} wait_replicas")
        assert len(waited.acked) > 50
        with Inspector(group.url) as ins:
            assert ins.stats("default").active == 0
    finally:
        for p in producers:
            p.stopping.set()
        group.stop()


def test_wait_replicas_through_sentinel() -> None:
    group = RedisSentinelGroup(replicas=2)
    try:
        with Client(group.url, wait_replicas=2) as c:
            c.redis.script_flush()  # NOSCRIPT: sent again with EVAL, then a second WAIT
            info = c.enqueue("t", 1)
            assert [i.state.value for i in c.enqueue_many([("t", 2), ("t", 3)])] == ["pending", "pending"]
        for n in group.nodes:  # on the master and both replicas, at once
            assert redis.Redis(port=n.port).hexists("asynqpy:{default}:t", info.id)
        with Client(group.url, wait_replicas=3, wait_timeout=0.2) as c:
            with pytest.raises(NotReplicatedError) as exc:
                c.enqueue("t", 4)
            assert exc.value.acked == 2
    finally:
        group.stop()

