"""The sync executor's direct-connection fast path survives lost connections and restarts."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import redis

from asynqpy import Client, Inspector

pytestmark = pytest.mark.real


def test_fast_path_reconnects_after_connections_are_killed(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url)
    c = Client(redis_url)
    c.enqueue("t", 1)
    killer = redis.Redis.from_url(redis_url)
    killer.client_kill_filter(_type="normal", skipme=True)  # cuts the client's held connection
    c.enqueue("t", 2)  # reconnects by itself
    killer.script_flush()  # and a restarted server has no scripts cached
    c.enqueue("t", 3)
    assert Inspector(r).stats("default").pending == 3


def test_the_lone_enqueue_skips_the_plan_and_still_meets_a_flushed_library(redis_url: str,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """SyncExecutor.run_many_now sends a lone enqueue and its registration without driving the
    executor's plan; a reply saying the function is gone (FUNCTION FLUSH: a restarted server)
    goes as the plan's resend (the library loaded, the call sent again), and the guard's first
    check is the plan's."""
    r = redis.Redis.from_url(redis_url)
    c = Client(redis_url)
    ex = c._exec
    assert not ex._checked()  # nothing checked yet: the plan runs (and checks the store)
    c.enqueue("t", 1, queue="lone")
    c.enqueue("t", 2, queue="lone")  # the lone path from here on
    assert ex._checked()
    driven: list[Any] = []
    real = type(ex)._drive
    monkeypatch.setattr(type(ex), "_drive", lambda self, plan: driven.append(plan) or real(self, plan))
    c.enqueue("t", 3, queue="lone")
    assert driven == []  # no plan driven
    r.function_flush()
    info = c.enqueue("t", 4, queue="lone")  # missed, then loaded and sent again
    assert driven[0].__name__ == "_resend" and info.state.value == "pending"  # (then its loads' pipelines)
    ins = Inspector(r)
    assert ins.stats("lone").pending == 4 and ins.task_info("lone", info.id).payload == 4
    assert b"lone" in r.smembers("asynqpy:queues")


def test_fast_path_one_connection_per_thread(redis_url: str) -> None:
    c = Client(redis_url)
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for i in range(200):
                c.enqueue("t", [k, i])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors
    assert Inspector(redis_url).stats("default").pending == 800


def test_async_connections_pack_with_hiredis_like_redis_py() -> None:
    import redis.asyncio as aredis
    from redis.exceptions import DataError

    from asynqpy.redisio.connection import async_client

    client = async_client("redis://127.0.0.1:1/0")
    conn = client.connection_pool.make_connection()
    plain = aredis.Connection()
    for args in [("EVALSHA", "ab", 2, "k1", "k2", b"\x00\xff", 1.5, -3), ("CONFIG GET", "maxmemory-policy"),
                 (b"CLIENT UNBLOCK", 5)]:
        assert b"".join(conn.pack_command(*args)) == b"".join(plain.pack_command(*args))
    with pytest.raises(DataError):  # what hiredis cannot pack gets redis-py's own error
        conn.pack_command("SET", "k", None)


def test_the_test_time_bound_fires_during_a_redis_call(redis_url: str) -> None:
    """The alarm of conftest's time bound must not be taken for a broken connection and retried
    (a TimeoutError is an OSError: redis-py swallowed it and a hung test ran on)."""
    import signal
    import time

    r = redis.Redis.from_url(redis_url)
    start = time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, 0.2)  # replaces this test's own bound (60 s) with 0.2 s
    with pytest.raises(Exception) as raised:
        r.blpop(["nothing-here"], timeout=3)
    assert type(raised.value).__name__ == "TimeBoundExceeded" and time.monotonic() - start < 2


def test_unix_socket_url(tmp_path: Any) -> None:
    """unix:// URLs (README) failed on the first command: the TCP-only socket_keepalive option was
    passed to redis-py's Unix socket connection (TypeError; found by fuzzing the CLI)."""
    import asyncio

    from helpers import serving, until
    from redisproc import RedisProcess

    from asynqpy import AsyncClient, ServeMux, Task

    sock = tmp_path / "redis.sock"
    server = RedisProcess("--unixsocket", str(sock))
    url = f"unix://{sock}"
    try:
        with Client(url) as c:
            info = c.enqueue("t", 1)

        async def main() -> str:
            async with AsyncClient(url) as ac:
                return (await ac.enqueue("t", 2)).id

        second = asyncio.run(main())
        insp = Inspector(url)
        assert [insp.task_info("default", i).payload for i in (info.id, second)] == [1, 2]
        insp.close()
        mux, ran = ServeMux(), []

        @mux.handle("t")
        async def t(task: Task) -> None:
            ran.append(task.payload)

        async def work() -> None:
            async with serving(url, mux):
                await until(lambda: sorted(ran) == [1, 2])

        asyncio.run(work())
    finally:
        server.stop()


def test_clients_give_their_connection_back_to_a_shared_pool(redis_url: str) -> None:
    """Each Client/Inspector made on a caller's redis client kept one pooled connection for good, even
    after close(): the 101st on redis-py's default pool raised MaxConnectionsError (found by fuzzing)."""
    r = redis.Redis.from_url(redis_url, max_connections=5)
    for i in range(20):
        Client(r).enqueue("t", i)  # dropped without close()
        assert Inspector(r).queues() == ["default"]
        with Client(r) as c:
            c.enqueue("t", i)
        insp = Inspector(r)
        insp.stats("default")
        insp.close()
    assert Inspector(r).stats("default").pending == 40


def test_a_registration_and_its_store_call_go_in_one_write_each_reply_in_place(redis_url: str) -> None:
    """Issue 42 (defect 3): a lone enqueue and its queue's registration (SADD) go in one write on
    the connection, not a redis-py pipeline (sync and async): each reply in place, an error
    reply (WRONGTYPE) for its own call only, a script Redis forgot (SCRIPT FLUSH) sent again as
    EVAL, and the connection clean for the next call."""
    import asyncio

    from asynqpy.core.spine.broker import Broker
    from asynqpy.core.spine.keys import ALL_QUEUES, queue_keys
    from asynqpy.redisio.executor import AsyncExecutor, SyncExecutor

    r = redis.Redis.from_url(redis_url)
    b = Broker()

    def calls(queue: str, id: str) -> list[Any]:
        from asynqpy.core.model.codec import Message

        return [b.register_queues([queue]), b.enqueue(queue, id, Message("t", b""))]

    ex = SyncExecutor(r)
    assert ex.run_many(calls("d1", "a")) == [1, 1]
    r.script_flush()
    assert ex.run_many(calls("d1", "b")) == [0, 1]  # (NOSCRIPT: the store sent again as EVAL)
    r.delete(ALL_QUEUES)
    r.set(ALL_QUEUES, "not a set")
    got = ex.run_many(calls("d1", "c"))
    assert isinstance(got[0], redis.ResponseError) and got[1] == 1  # the store went on
    r.delete(ALL_QUEUES)

    async def main() -> list[Any]:
        aex = AsyncExecutor(redis.asyncio.Redis.from_url(redis_url))
        first = await aex.run_many(calls("d2", "a"))
        r.script_flush()
        return [first, await aex.run_many(calls("d2", "b"))]

    assert asyncio.run(main()) == [[1, 1], [0, 1]]
    assert r.llen(queue_keys("d1").pending) == 3 and r.llen(queue_keys("d2").pending) == 2
    assert sorted(r.smembers(ALL_QUEUES)) == [b"d2"]
    assert ex.run(b.register_queues(["d3"])) == 1  # (the connection read every reply)


def test_the_async_clients_direct_path_keeps_one_connection(redis_url: str) -> None:
    """An AsyncClient that made its Redis client keeps its direct path's connection between calls
    (AsyncExecutor.keep_direct): one connection in use, the same each call; a connection the
    server killed meanwhile is dropped and the call still goes (the plan's pipeline), a call
    cancelled halfway leaves its connection disconnected and given back, a client on a Redis
    client of the caller's keeps none, and close gives it back."""
    from redis.asyncio import Redis as AsyncRedis

    from asynqpy import AsyncClient

    async def main() -> None:
        c = AsyncClient(redis_url)
        ex, pool = c._exec, c.redis.connection_pool
        assert ex.keep_direct
        await c.enqueue("t", 1, queue="kept")
        await c.enqueue("t", 2, queue="kept")  # the lone path: two commands, the direct path
        first = ex._direct_conn[1]
        for i in range(3, 8):
            await c.enqueue("t", i, queue="kept")
        assert ex._direct_conn[1] is first and len(pool._in_use_connections) == 1
        redis.Redis.from_url(redis_url).client_kill_filter(_type="normal", skipme=True)
        await c.enqueue("t", 8, queue="kept")  # the kept one was killed: dropped, the call went
        assert ex._direct_conn is None or ex._direct_conn[1] is not first
        await c.enqueue("t", 9, queue="kept")
        conn = ex._direct_conn[1]

        async def stuck(*args: Any, **kwargs: Any) -> Any:
            raise asyncio.CancelledError

        conn.read_response = stuck  # cancelled while its replies are unread
        with pytest.raises(asyncio.CancelledError):
            await c.enqueue("t", 10, queue="kept")
        assert ex._direct_conn is None and conn not in pool._in_use_connections and not conn.is_connected
        del conn.read_response
        await c.enqueue("t", 11, queue="kept")
        await c.close()
        assert ex._direct_conn is None

        mine = AsyncRedis.from_url(redis_url)
        c2 = AsyncClient(mine)
        assert not c2._exec.keep_direct
        for i in range(3):
            await c2.enqueue("t", i, queue="kept")
        assert c2._exec._direct_conn is None and len(mine.connection_pool._in_use_connections) == 0
        await c2.close()
        await mine.aclose()

    asyncio.run(main())
    pending = Inspector(redis_url).stats("kept").pending
    assert pending in (13, 14)  # 11 and 3; the cancelled call's write may have gone out before its read


def test_a_server_on_the_callers_redis_client_gives_its_connections_back(redis_url: str) -> None:
    """The worker's executor keeps its direct path's connection while it serves (keep_direct) and
    gives it back when it stops: a server run on a Redis client of the caller's leaves none of its
    pool's connections in use."""
    from redis.asyncio import Redis as AsyncRedis

    from asynqpy import ServeMux, Server, Task

    ran: list[int] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    Client(redis_url).enqueue_many([("t", i) for i in range(50)], queue="back")

    async def main() -> None:
        mine = AsyncRedis.from_url(redis_url)
        server = Server(mine, queues=["back"], concurrency=5, shutdown_timeout=1)
        run = asyncio.create_task(server.arun(mux))
        deadline = asyncio.get_running_loop().time() + 20
        while len(ran) < 50 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        server.stop()
        await run
        assert len(ran) == 50 and mine.connection_pool._in_use_connections == set()
        await mine.aclose()

    asyncio.run(main())


@pytest.mark.parametrize("where", ["server", pytest.param("cluster", marks=pytest.mark.cluster)])
def test_more_concurrent_waits_than_a_pools_hundred_connections_wait_their_turn(where: str,
                                                                                request: pytest.FixtureRequest) -> None:
    """redis-py's default pool fails a call at once past 100 connections ("Too many connections"):
    300 coroutines awaiting results on one AsyncClient, or 150 threads sharing one Client, each
    check one out for their watch call, and some got RedisUnavailableError. A client made from a
    URL has room for one per concurrent call or thread (a cluster client's nodes too): each wait
    here ends in its own timeout, the tasks are still queued."""
    from concurrent.futures import ThreadPoolExecutor

    redis_url = request.getfixturevalue("redis_url" if where == "server" else "cluster_url")

    from asynqpy import AsyncClient, Inspector

    async def waits() -> set[type[BaseException]]:
        async with AsyncClient(redis_url) as c:
            infos = [await c.enqueue("t", i, queue="pool-a") for i in range(300)]
            got = await asyncio.gather(*(c.result(t, timeout=0.3) for t in infos), return_exceptions=True)
        return {type(g) for g in got}

    assert asyncio.run(waits()) == {TimeoutError}
    with Client(redis_url) as c:
        infos = [c.enqueue("t", i, queue="pool-s") for i in range(150)]
        with ThreadPoolExecutor(150) as ex:
            futures = [ex.submit(c.result, t, timeout=0.3) for t in infos]
            assert {type(f.exception()) for f in futures} == {TimeoutError}
    with Inspector(redis_url) as insp:
        assert insp.queue_info("pool-a").pending == 300 and insp.queue_info("pool-s").pending == 150
