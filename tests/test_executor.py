"""The sync executor's direct-connection fast path survives lost connections and restarts."""

from __future__ import annotations

import threading

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

    from asynqpy.connection import async_client

    client = async_client("redis://127.0.0.1:1/0")
    conn = client.connection_pool.make_connection()
    plain = aredis.Connection()
    for args in [("EVALSHA", "ab", 2, "k1", "k2", b"\x00\xff", 1.5, -3), ("CONFIG GET", "maxmemory-policy"),
                 (b"CLIENT UNBLOCK", 5)]:
        assert b"".join(conn.pack_command(*args)) == b"".join(plain.pack_command(*args))
    with pytest.raises(DataError):  # what hiredis cannot pack gets redis-py's own error
        conn.pack_command("SET", "k", None)
