"""Scripts as Redis Functions (issue 45: core/spine/library.py, redisio/executor.py): each script of
lua/ is also a library whose helpers are made once, at FUNCTION LOAD; the executors call it with
FCALL, load it when the server lacks it (a fresh or restarted server, a new version), and go by
EVALSHA where the server has no functions (Redis < 7.0) or the user may not use them. On fakeredis,
a redis-server and a Cluster."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import fakeredis
import pytest
import redis
from helpers import ROOT

from asynqpy.core.model.codec import Message
from asynqpy.core.spine import library
from asynqpy.core.spine.broker import Broker, Done
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.spine.scripts import load_scripts
from asynqpy.redisio.connection import sync_client
from asynqpy.redisio.executor import AsyncExecutor, SyncExecutor
from asynqpy.redisio.scripts import load_functions

sys.path.insert(0, str(ROOT / "scripts"))
import protocol_vectors

Q = "fn"


def _on_masters(r: Any, *command: Any) -> Any:
    where = {"target_nodes": r.get_primaries()} if hasattr(r, "get_primaries") else {}
    return r.execute_command(*command, **where)


def _libraries(r: Any) -> set[str]:
    """The library names on the server (on a cluster: on the master of the queue's slot)."""
    if hasattr(r, "get_node_from_key"):
        r = r.get_redis_connection(r.get_node_from_key(f"asynqpy:{{{Q}}}:pending"))
    out = set()
    for lib in r.execute_command("FUNCTION", "LIST"):
        name = lib[b"library_name"] if isinstance(lib, dict) else lib[1]
        out.add(name.decode() if isinstance(name, bytes) else name)
    return out


def test_scripts_go_as_functions_and_a_lost_library_is_loaded_again(backend: Any) -> None:
    r, b = backend.sync, Broker()
    x = SyncExecutor(r)
    scripts = load_scripts()
    assert x.run(b.enqueue(Q, "a", Message("t"))) == 1
    assert scripts["enqueue"].function in _libraries(r)
    _on_masters(r, "FUNCTION", "FLUSH")  # a restart without persistence
    assert x.run_many([b.enqueue(Q, "b", Message("t")), b.enqueue(Q, "c", Message("t"))]) == [1, 1]
    _on_masters(r, "FUNCTION", "FLUSH")
    got = x.run(b.dequeue(Q, 5, 30_000, "tok00001"))
    assert [id for id, _ in got.tasks] == ["a", "b", "c"]
    assert x.functions and _libraries(r) == {scripts["dequeue"].function}  # loaded again: its call's alone

    async def main() -> Any:
        ar = backend.new_async()
        try:
            ax = AsyncExecutor(ar)
            _on_masters(r, "FUNCTION", "FLUSH")
            acked = await ax.run(b.done_dequeue(Q, [Done(id, "tok00001", Message("t")) for id in "ab"], 1, 30_000,
                                                "tok00002"))
            _on_masters(r, "FUNCTION", "FLUSH")
            many = await ax.run_many([b.done(Q, "c", "tok00001", Message("t")), b.enqueue(Q, "d", Message("t"))])
            return ax.functions, acked, many
        finally:
            await ar.aclose()

    on, (acked, dequeued), many = asyncio.run(main())
    assert on and len(acked) == 2 and [id for id, _ in dequeued.tasks] == [] and many[1] == 1
    assert [r.hget(queue_keys(Q).tasks, id) for id in "abc"] == [None, None, None]  # all three done
    assert r.hget(queue_keys(Q).tasks, "d") is not None
    assert _libraries(r) == {scripts["done"].function, scripts["enqueue"].function}  # (those since the flush)


def test_a_server_without_functions_is_called_with_evalsha() -> None:
    r = fakeredis.FakeRedis(version=(6, 2))  # FCALL and FUNCTION: unknown commands
    x, b = SyncExecutor(r), Broker()
    assert x.functions
    assert x.run(b.enqueue(Q, "a", Message("t"))) == 1
    assert not x.functions  # from then on, EVALSHA (one failed FCALL in all)
    assert x.run_many([b.enqueue(Q, "b", Message("t")), b.enqueue(Q, "c", Message("t"))]) == [1, 1]
    assert len(x.run(b.dequeue(Q, 5, 30_000, "tok00001")).tasks) == 3
    y = SyncExecutor(r)
    assert y.run_many([b.enqueue(Q, "d", Message("t"))]) == [1] and not y.functions


def test_a_library_level_local_a_helper_changes_is_set_back_at_each_call() -> None:
    defs = ("local LIMIT = 5\nlocal SEEN = false\nlocal CACHE = {}\n"
            "local function remember(k)\n  SEEN = k\n  CACHE[k] = LIMIT\nend\n")
    assert library._resets("t", defs) == ["SEEN = false", "CACHE = {}"]
    with pytest.raises(library.LibraryError, match="BIG"):
        library._resets("t", "local BIG = {\n  1, 2}\nlocal function f()\n  BIG[1] = 3\nend\n")
    source = load_scripts()["enqueue"].library
    body = source[source.index("register_function"):]
    assert "\nEV_CONF = false" in body  # (includes/events: the conf hash events_cap read)
    assert "local function" not in body  # every helper is made at load


def test_the_named_inputs_are_tables_made_once_whose_fields_each_call_sets() -> None:
    """``K`` and ``A`` are made at load; a call sets every field its header names (a table made at
    every call cost ~5 000 of an FCALL's instructions for 18 keys: bench/fcall_ir.py --fixed)."""
    assert library._fields("local K = {tasks = KEYS[1], wake = KEYS[2]}") == ["K.tasks = KEYS[1]", "K.wake = KEYS[2]"]
    assert library._fields("local A = {}") == []
    with pytest.raises(library.LibraryError, match="not a table of KEYS"):
        library._fields("local K = {tasks = KEYS[1], wake = other()}")
    s = load_scripts()["enqueue"]
    top, body = s.library.split("register_function", 1)
    assert "local K, A, G = {}, {}, nil" in top and "local K = {" not in body
    assert all(f"K.{name} = KEYS[{i}]" in body for i, name in enumerate(s.keys, 1))
    assert all(f"A.{name} = ARGV[{i}]" in body for i, name in enumerate(s.args, 1))


@pytest.fixture(params=["fake", "real", pytest.param("cluster", marks=pytest.mark.cluster)])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "fake":
        return fakeredis.FakeRedis()
    if request.param == "real":
        r = redis.Redis.from_url(request.getfixturevalue("redis_server").url)
        r.flushall()
        return r
    return sync_client(request.getfixturevalue("cluster_url"))


def test_the_functions_give_the_recorded_replies_of_the_vectors(store: Any) -> None:
    """tests/vectors/replies.json (recorded with EVAL of the flattened sources) replayed with FCALL
    of the libraries: the same reply for every call."""
    calls = json.loads((ROOT / "tests" / "vectors" / "replies.json").read_text(encoding="utf-8"))["calls"]
    load_functions(store)
    if hasattr(store, "get_nodes"):  # a cluster: every call's keys in the queue's slot
        store = store.get_redis_connection(store.get_node_from_key(calls[0]["keys"][0]))
    scripts = load_scripts()
    got = []
    for c in calls:
        reply = store.execute_command("FCALL", scripts[c["script"]].function, len(c["keys"]), *c["keys"],
                                      *(protocol_vectors.arg_bytes(a) for a in c["args"]))
        got.append(protocol_vectors.reply_json(reply))
    assert got == [c["reply"] for c in calls]


def test_the_body_helpers_that_read_none_of_its_locals_are_made_at_load() -> None:
    body = ("local now = 5\n"
            "local function pure(s, n)\n  return s + n\nend\n"  # (its parameter s: not the body's)
            "local function reads_now(x)\n  return x + now\nend\n"
            "local function calls_pure(x)\n  return pure(x, 1)\nend\n"
            "local function calls_kept(x)\n  return reads_now(x)\nend\n"
            "return calls_kept(pure(now, 1))\n")
    defs, rest = library.hoist("local A0 = 1\n", body)
    assert [n for n in ("pure", "reads_now", "calls_pure", "calls_kept") if f"function {n}(" in defs] == \
        ["pure", "calls_pure"]
    assert "function reads_now(" in rest and "function calls_kept(" in rest and "function pure(" not in rest
    lib = load_scripts()["dequeue"].library
    assert lib.index("local function take_plain(") < lib.index("register_function")


@pytest.mark.parametrize("backend", ["real", pytest.param("cluster", marks=pytest.mark.cluster)], indirect=True)
def test_a_call_that_stores_nothing_replies_as_ever_when_redis_is_full(backend: Any) -> None:
    """A function without allow-oom is refused whole by a full Redis, even when it would store
    nothing; such a call goes again as an EVALSHA script (refused only at its first write that may
    grow memory): a new-task call sent again after its reply was lost reports its own write, alone
    or in a pipeline, while a call that would store something still gets RedisFullError."""
    from asynqpy.core.model.errors import RedisFullError

    r, b = backend.sync, Broker()
    x = SyncExecutor(r)
    first = b.enqueue(Q, "a", Message("t"))
    stored = x.run(first)
    _on_masters(r, "CONFIG", "SET", "maxmemory-policy", "noeviction")
    _on_masters(r, "CONFIG", "SET", "maxmemory", "1")
    try:
        assert x.functions
        assert x.run(first) == stored  # its own write, found
        out = x.run_many([first, b.enqueue(Q, "b", Message("t"))])
        assert out[0] == stored and isinstance(out[1], RedisFullError)
        with pytest.raises(RedisFullError):
            x.run(b.enqueue(Q, "c", Message("t")))
        assert x.functions  # (still on: a full Redis is no refusal of functions)
    finally:
        _on_masters(r, "CONFIG", "SET", "maxmemory", "0")
    assert [id for id, _ in x.run(b.dequeue(Q, 5, 30_000, "tok00001")).tasks] == ["a"]


def test_a_reply_that_is_no_error_is_not_read_as_text() -> None:
    """Every script call's reply goes through ``replies.missed``; ``functions_refused`` wrote the
    reply out (``str``: a dequeue's whole reply, each message's repr) and lowercased it before it
    asked whether it was an error at all: ~9 000 instructions of a worker's task. A reply that is
    no error is now answered without its text; the errors it is for are still recognised."""
    from redis.exceptions import NoPermissionError, ResponseError

    from asynqpy.redisio.replies import functions_refused, missed

    class NoText(list[Any]):
        def __str__(self) -> str:
            raise AssertionError("the reply was written out as text")

        __repr__ = __str__

    reply = NoText([b"a" * 1000, [b"x", 1]])
    assert not functions_refused(reply) and not missed(reply, True)
    assert functions_refused(ResponseError("ERR unknown command 'FCALL', with args beginning with: "))
    assert functions_refused(NoPermissionError("NOPERM this user has no permissions to run the 'fcall' command"))
    assert not functions_refused(ResponseError("ERR wrong number of arguments"))
