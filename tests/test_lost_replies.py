"""Issue 9, item 5: a call whose reply was lost is sent again (by redis-py's retry, or the sync
executor's reconnect); the scripts that store new tasks recognise their own earlier write.

Real redis-server behind a loopback proxy (:class:`ReplyDropper`) that, when armed, swallows the
next reply from Redis and closes the client's connection: the call ran, the client sees a
dropped connection and sends it again. Before the fix a caller-chosen id got TaskIdConflictError
for its own task, a unique task DuplicateTaskError against itself, and a generated id was pushed
onto pending twice.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from asynqpy import AsyncClient, Client
from asynqpy.core.spine.keys import queue_keys

pytestmark = pytest.mark.real

K = queue_keys("default")


class ReplyDropper:
    """A TCP proxy on 127.0.0.1 in front of one Redis; :meth:`arm` makes it drop the next reply
    Redis sends (to any client) and close that client's connection."""

    def __init__(self, target_port: int) -> None:
        self.target = ("127.0.0.1", target_port)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.dropped = threading.Event()
        self._socks: list[socket.socket] = []
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def arm(self) -> None:
        self.dropped.clear()
        self.armed.set()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            self._socks += [client, server]
            threading.Thread(target=self._pump, args=(client, server, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, replies: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                if replies and self.armed.is_set():
                    self.armed.clear()
                    self.dropped.set()
                    break  # the reply is lost with the connection
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def close(self) -> None:
        """Stop the proxy and its threads: a shutdown wakes a pump blocked in recv (a close alone
        left it blocked on the connection into the next tests of the process)."""
        self._stop = True
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # (wakes the accepting thread: Linux)
        except OSError:
            pass
        self.listener.close()
        for s in self._socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


@pytest.fixture
def proxy(redis_url: str) -> Iterator[ReplyDropper]:
    p = ReplyDropper(int(redis_url.rsplit(":", 1)[1].split("/")[0]))
    yield p
    p.close()


def _retrying(proxy: ReplyDropper, cls: Any = redis.Redis) -> Any:
    """A client made as most applications make one (not from a URL): redis-py then sends a command
    again after a connection error, with its default policy."""
    return cls(host="127.0.0.1", port=proxy.port, socket_timeout=5)


def _client(proxy: ReplyDropper) -> Client:
    from asynqpy.redisio.scripts import load_scripts

    r = redis.Redis(port=proxy.target[1])
    for script in load_scripts().values():  # EVALSHA finds every script: the first reply is the call's
        r.script_load(script.source)
    c = Client(_retrying(proxy))
    c.enqueue("warm-up")  # the queue is known: only the call itself goes out
    r.delete(K.pending, K.tasks, K.wake)
    return c


def _pending_ids(proxy: ReplyDropper) -> list[bytes]:
    return list(redis.Redis(port=proxy.target[1]).lrange(K.pending, 0, -1))


def test_enqueue_sent_again_with_a_caller_chosen_id(proxy: ReplyDropper) -> None:
    c = _client(proxy)
    proxy.arm()
    info = c.enqueue("t", {"n": 1}, task_id="mine")
    assert proxy.dropped.is_set()  # the first reply was lost: the call was sent twice
    assert info.id == "mine" and _pending_ids(proxy) == [b"mine"]


def test_enqueue_sent_again_with_a_unique_task(proxy: ReplyDropper) -> None:
    c = _client(proxy)
    proxy.arm()
    info = c.enqueue("t", {"n": 1}, unique=60)
    assert proxy.dropped.is_set()
    assert _pending_ids(proxy) == [info.id.encode()]


def test_enqueue_sent_again_with_a_generated_id(proxy: ReplyDropper) -> None:
    c = _client(proxy)
    proxy.arm()
    info = c.enqueue("t", {"n": 1})
    assert proxy.dropped.is_set()
    assert _pending_ids(proxy) == [info.id.encode()]  # pushed once


@pytest.mark.parametrize("chosen", [False, True])
def test_schedule_sent_again(proxy: ReplyDropper, chosen: bool) -> None:
    c = _client(proxy)
    proxy.arm()
    info = c.enqueue("t", process_in=60, **({"task_id": "later"} if chosen else {}))
    assert proxy.dropped.is_set()
    assert redis.Redis(port=proxy.target[1]).zrange(K.scheduled, 0, -1) == [info.id.encode()]


@pytest.mark.parametrize("chosen", [False, True])
def test_enqueue_many_sent_again(proxy: ReplyDropper, chosen: bool) -> None:
    c = _client(proxy)
    items = [("t", i, {"task_id": f"id{i}"} if chosen else {}) for i in range(5)]
    proxy.arm()
    infos = c.enqueue_many(items)
    assert proxy.dropped.is_set()
    assert len(infos) == 5 and sorted(_pending_ids(proxy)) == sorted(i.id.encode() for i in infos)


def test_async_enqueue_sent_again(proxy: ReplyDropper) -> None:
    import asyncio

    import redis.asyncio as aredis

    async def main() -> None:
        async with AsyncClient(_retrying(proxy, aredis.Redis)) as c:
            _client(proxy)
            await c.enqueue("warm-up")
            redis.Redis(port=proxy.target[1]).delete(K.pending, K.tasks, K.wake)
            proxy.arm()
            await c.enqueue("t", task_id="mine")

    asyncio.run(main())
    assert proxy.dropped.is_set()
    assert _pending_ids(proxy) == [b"mine"]


def test_a_late_copy_leaves_a_worker_holding_the_task_alone(redis_url: str) -> None:
    """The copy that runs last may find the task already active (a worker took it meanwhile): it
    must not write it back to pending, which would steal the worker's lease."""
    from asynqpy.core.model.codec import Message
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    r = redis.Redis.from_url(redis_url)
    b, x = Broker(), SyncExecutor(r)
    call = b.enqueue("default", "gen", Message("t", 1, enqueued_at_ms=1), check_id=False)
    assert x.run(call) == 1
    x.run(b.dequeue("default", 1, 30_000, "tok00001"))
    assert x.run(call) == 1  # the late copy: recognised
    assert r.hget(K.tasks, "gen")[:9] == b"atok00001" and r.llen(K.pending) == 0
