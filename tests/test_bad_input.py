"""Bad input gets a typed error, the worker keeps running, and nothing already queued is lost."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

import pytest
from helpers import serving, until

from asynqpy import (
    Client,
    Inspector,
    InvalidArgumentError,
    MalformedMessageError,
    PayloadError,
    ServeMux,
    Server,
    Task,
    TaskState,
)
from asynqpy.core.model.codec import decode
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor


@pytest.mark.parametrize(
    "args, kwargs, error",
    [
        (("t", object()), {}, PayloadError),  # not msgpack-serializable
        (("t", {1: {2: {3}}}), {}, PayloadError),
        (("", None), {}, InvalidArgumentError),  # empty type
        (("   ", None), {}, InvalidArgumentError),
        ((None, None), {}, InvalidArgumentError),
        (("t", None), {"queue": ""}, InvalidArgumentError),
        (("t", None), {"queue": "has space"}, InvalidArgumentError),
        (("t", None), {"queue": "{brace}"}, InvalidArgumentError),
        (("t", None), {"process_in": -1}, InvalidArgumentError),  # negative delay
        (("t", None), {"process_in": timedelta(seconds=-5)}, InvalidArgumentError),
        (("t", None), {"process_in": 1, "process_at": 2}, InvalidArgumentError),
        (("t", None), {"max_retry": -1}, InvalidArgumentError),
        (("t", None), {"timeout": 0}, InvalidArgumentError),
        (("t", None), {"timeout": float("nan")}, InvalidArgumentError),
        (("t", None), {"unique": 0.5}, InvalidArgumentError),
        (("t", None), {"task_id": ""}, InvalidArgumentError),
        (("t", None), {"retention": -1}, InvalidArgumentError),
        (("t", b"x" * 2000), {}, PayloadError),  # over the client's 1000-byte limit below
        (("t", None), {"process_in": 1e12}, InvalidArgumentError),  # out of range: the task was scheduled,
        (("t", None), {"process_in": 1e300}, InvalidArgumentError),  # then a ValueError/OverflowError/OSError
        (("t", None), {"process_at": 1e17}, InvalidArgumentError),  # from the TaskInfo's datetime
        (("t", None), {"deadline": 1e14}, InvalidArgumentError),
        (("t", None), {"deadline": -1}, InvalidArgumentError),  # stored negative = no deadline at all
        (("t", None), {"unique": 1e300}, InvalidArgumentError),  # was a ResponseError from SET EX
        (("t", None), {"timeout": 1e17}, InvalidArgumentError),  # was a PayloadError blaming the payload
        (("t\udc80", None), {}, InvalidArgumentError),  # not UTF-8 text (was PayloadError)
        (("t", None), {"task_id": "\ud800"}, InvalidArgumentError),  # (was UnicodeEncodeError from redis-py)
        (("t", None), {"queue": ["q"]}, InvalidArgumentError),  # unhashable (was TypeError on the fast path)
        (("t", None), {"bogus": 1}, InvalidArgumentError),  # unknown options (was TypeError)
        (("t", None), {"now": "x"}, InvalidArgumentError),  # internal knobs are not options (was ValueError)
        (("t", None), {"max_payload_bytes": 10**9}, InvalidArgumentError),
    ],
)
def test_enqueue_rejects_bad_input_and_keeps_queued_tasks(backend: Any, args: Any, kwargs: Any, error: type) -> None:
    client = Client(backend.sync, max_payload_bytes=1000)
    kept = client.enqueue("t", {"keep": 1})
    with pytest.raises(error):
        client.enqueue(*args, **kwargs)
    with pytest.raises(error):  # a batch is validated whole before anything is sent
        client.enqueue_many([("t", 1), (*args, kwargs)])
    s = SyncExecutor(backend.sync).run(Broker().stats("default"))
    assert s.pending == 1
    assert Inspector(backend.sync).task_info("default", kept.id).state is TaskState.PENDING


@pytest.mark.parametrize("item", [("t", 1, 5), ("t", 1, [("queue", "q")]), ("t", 1, "queue"), ("t", 1, 0),
                                  ("t", 1, {1: 2}), ("t", 1, {}, 4), (), "t", None])
def test_enqueue_many_rejects_bad_items_and_sends_nothing(backend: Any, item: Any) -> None:
    client = Client(backend.sync)
    with pytest.raises(InvalidArgumentError):  # item options that are not a mapping were a TypeError
        client.enqueue_many([("t", 0), item])
    assert backend.sync.keys("*") == []


@pytest.mark.parametrize("delay", [None, 60, 3 * 10**9])  # (3e9 s: 95 years ahead, as the fuzz drew)
def test_an_id_given_twice_in_one_batch_is_refused_for_the_later_task(backend: Any, delay: int | None) -> None:
    """Found by tests/test_fuzz.py: two tasks of one batch with the same task_id were both reported
    stored when scheduled (the second was taken for a resend of the first; one task was stored),
    while a pending batch refused the second. The later one is now refused in every case, before
    anything is sent, and the first is stored."""
    from asynqpy import TaskIdConflictError

    client = Client(backend.sync)
    options = {"process_in": delay} if delay else {}
    out = client.enqueue_many([("t", 1), ("t", 1), ("t", 2, {"task_id": "other"})], task_id="id1",
                              return_exceptions=True, **options)
    assert not isinstance(out[0], Exception) and isinstance(out[1], TaskIdConflictError), list(out)
    assert not isinstance(out[2], Exception)
    assert backend.sync.hlen(queue_keys("default").tasks) == 2
    with pytest.raises(TaskIdConflictError, match="given twice"):
        Client(backend.sync).enqueue_many([("t", 1, {"task_id": "x"}), ("t", 2, {"task_id": "x"})])


@pytest.mark.parametrize("url", ["foo", "redis://127.0.0.1:abc/0", "redis://127.0.0.1:99999/0",
                                 "redis+cluster://127.0.0.1:abc", "redis://127.0.0.1:1/0?socket_timeout=abc",
                                 "unix:///tmp/\udcff", "redis://\ud800:1/0"])
def test_bad_redis_url_is_invalid_argument(url: str) -> None:
    """A malformed URL was a ValueError from redis-py (or from int() for a cluster URL)."""
    from asynqpy import AsyncClient

    for make in (Client, Inspector, AsyncClient):
        with pytest.raises(InvalidArgumentError, match="bad Redis URL"):
            make(url)


def test_errors_are_asynqpy_errors() -> None:
    from asynqpy import AsynqpyError

    assert issubclass(PayloadError, InvalidArgumentError) and issubclass(InvalidArgumentError, AsynqpyError)
    assert issubclass(InvalidArgumentError, ValueError)


@pytest.mark.parametrize(
    "options",
    [{"queues": {}}, {"queues": {"bad name": 1}}, {"queues": {"q": 0}}, {"concurrency": 0},
     {"lease": 1, "heartbeat_interval": 2}, {"unknown_type": "explode"}, {"no_such_option": 1},
     # found by fuzzing: accepted, or a TypeError/AttributeError instead of InvalidArgumentError
     {"queues": "default"}, {"queues": 5}, {"queues": [["q"]]}, {"queues": ["q", 1]}, {"concurrency": "10"},
     {"concurrency": 2.5}, {"concurrency": True}, {"lease": float("nan")}, {"lease": float("inf")},
     {"lease": "30"}, {"idle_timeout": 1e300}, {"shutdown_timeout": None}, {"fetch_batch": 10**15},
     {"fetch_batch": 1.5}, {"strict_priority": "yes"}, {"sync_threads": 0}, {"sync_threads": 1.5},
     {"default_timeout": "x"}, {"default_timeout": float("nan")}, {"retry_delay": None},
     {"archive_max_size": -1.5}, {"archive_max_age": float("inf")}, {"recover_interval": 0},
     {"janitor_interval": -1}, {"unknown_type": ["retry"]}],
)
def test_server_rejects_bad_options(options: dict[str, Any]) -> None:
    with pytest.raises(InvalidArgumentError):
        Server("redis://localhost:1/0", **options)


@pytest.mark.parametrize("garbage", [b"", b"\xc1\xc1\xc1", b"\x93\x01\x02\x03", b"\x91\xa0", b"\x81\xa1a\x01"])
def test_decoder_rejects_garbage(garbage: bytes) -> None:
    with pytest.raises(MalformedMessageError):
        decode(garbage)


def test_malformed_message_in_redis_is_archived_and_worker_keeps_running(backend: Any) -> None:
    k = queue_keys("default")
    client = Client(backend.sync)
    client.enqueue("t", 1)
    backend.sync.hset(k.tasks, "bad1", b"p\xc1\xc1garbage")  # written by someone else, by hand
    backend.sync.lpush(k.pending, "bad1")
    client.enqueue("t", 2)
    mux = ServeMux()
    ran: list[int] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    async def main() -> None:
        async with serving(backend.new_async(), mux):
            await until(lambda: sorted(ran) == [1, 2] and backend.sync.zcard(k.archived) == 1)
            client.enqueue("t", 3)
            await until(lambda: sorted(ran) == [1, 2, 3])

    asyncio.run(main())
    info = Inspector(backend.sync).task_info("default", "bad1")
    assert info.state is TaskState.ARCHIVED and "undecodable" in info.last_error
    assert info.payload.startswith(b"\xc1\xc1garbage")


def test_task_ids_that_are_not_utf8_do_not_stop_the_worker(backend: Any) -> None:
    """Ids written by hand may be any bytes. Reading one as UTF-8 made every dequeue that met it and
    every recoverer pass fail "unexpectedly", for good (found by fuzzing the data in Redis)."""
    from asynqpy.core.model.codec import Message, encode

    k = queue_keys("default")
    r = backend.sync
    r.hset(k.tasks, b"\xff1", b"p" + encode(Message("t", 1)))  # a valid task under an odd id: it runs
    r.lpush(k.pending, b"\xff1")
    r.hset(k.tasks, b"\xd5", b"a12345678\xc1garbage")  # a crashed worker's garbage, lease expired
    r.zadd(k.lease, {b"\xd5": 1})
    client = Client(r)
    client.enqueue("t", 2)
    mux = ServeMux()
    ran: list[int] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    async def main() -> None:
        async with serving(backend.new_async(), mux, lease=1.5, recover_interval=0.5):
            await until(lambda: sorted(ran) == [1, 2] and r.zscore(k.archived, b"\xd5") is not None)
            client.enqueue("t", 3)
            await until(lambda: sorted(ran) == [1, 2, 3])

    asyncio.run(main())
    assert "undecodable" in decode(r.hget(k.tasks, b"\xd5")[1:]).last_error
    assert r.hget(k.tasks, b"\xff1") is None  # done


def test_task_ids_that_are_not_utf8_with_signing(backend: Any) -> None:
    """The signature covers the id: encoding a non-UTF-8 id for it raised UnicodeEncodeError, so
    fetching and recovery failed "unexpectedly" again, for good."""
    from asynqpy.core.model.codec import Message, encode

    key = b"k" * 32
    k = queue_keys("default")
    r = backend.sync
    forged = b"\xc4\x20" + b"0" * 32  # a tag of the right shape, made with no key
    r.hset(k.tasks, b"\xff1", b"p" + encode(Message("t", 1)) + forged)  # archived unrun
    r.lpush(k.pending, b"\xff1")
    r.hset(k.tasks, b"\xd5", b"a12345678" + encode(Message("t", 9)) + forged)  # lease expired
    r.zadd(k.lease, {b"\xd5": 1})
    client = Client(r, signing_key=key)
    client.enqueue("t", 2)
    mux = ServeMux()
    ran: list[int] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    def archived() -> bool:
        return all(r.zscore(k.archived, id) is not None for id in (b"\xff1", b"\xd5"))

    async def main() -> None:
        async with serving(backend.new_async(), mux, lease=1.5, recover_interval=0.5, signing_key=key):
            await until(lambda: ran == [2] and archived())
            client.enqueue("t", 3)
            await until(lambda: ran == [2, 3])

    asyncio.run(main())
    for id in (b"\xff1", b"\xd5"):
        assert "signature" in decode(r.hget(k.tasks, id)[1:]).last_error


@pytest.mark.parametrize("value", [b"", b"?abc", b"\xff", b"a123", b"p\xc1"])
def test_task_info_of_garbage_is_a_malformed_message(backend: Any, value: bytes) -> None:
    """A stored value with no valid state char was a KeyError or UnicodeDecodeError (found by fuzzing);
    one with a state and an undecodable message shows as type (malformed)."""
    Client(backend.sync).enqueue("t", 1)
    backend.sync.hset(queue_keys("default").tasks, "x", value)
    if value[:1] in (b"a", b"p"):
        assert Inspector(backend.sync).task_info("default", "x").type == "(malformed)"
        return
    with pytest.raises(MalformedMessageError):
        Inspector(backend.sync).task_info("default", "x")


@pytest.mark.parametrize("queue, id", [("default", None), ("default", 5), ("default", "\ud800"), (["default"], "x")])
def test_inspector_rejects_bad_arguments(backend: Any, queue: Any, id: Any) -> None:
    """A non-str id was an AttributeError, an unhashable queue a TypeError (found by fuzzing)."""
    Client(backend.sync).enqueue("t", 1)
    insp = Inspector(backend.sync)
    with pytest.raises(InvalidArgumentError):
        insp.task_info(queue, id)
    if not isinstance(queue, str):
        for method in (insp.stats, insp.pause, insp.unpause):
            with pytest.raises(InvalidArgumentError):
                method(queue)


def test_cancel_of_a_hand_written_active_task(backend: Any) -> None:
    """Cancelling an active task whose id is not UTF-8, or whose lease token is not text: the cancel
    notice could not be packed (UnicodeEncodeError), the token not read (UnicodeDecodeError); found by
    the inspector fuzz test."""
    from asynqpy.core.model.codec import Message, encode

    k = queue_keys("default")
    r = backend.sync
    Client(r).enqueue("t", 0)  # the queue exists
    for id, token in ((b"\xff", b"abcd1234"), (b"odd", b"\xff\x00abcde")):
        r.hset(k.tasks, id, b"a" + token + encode(Message("t", 1)))
        r.zadd(k.lease, {id: 1})
    insp = Inspector(r)
    for id in ("\udcff", "odd"):
        assert insp.cancel(id, "default").state is TaskState.ARCHIVED
    assert r.zcard(k.lease) == 0 and r.zcard(k.archived) == 2


@pytest.mark.parametrize("limit", ["x", 0, -1, True, 1.5, None])
def test_client_rejects_a_bad_payload_limit(limit: Any) -> None:
    """max_payload_bytes was not checked: 'x' made every enqueue a TypeError, -1 refused every payload."""
    import fakeredis

    from asynqpy import AsyncClient

    for make in (Client, AsyncClient):
        with pytest.raises(InvalidArgumentError):
            make(fakeredis.FakeRedis(), max_payload_bytes=limit)


CONTROL_CHARACTERS = ["\x00", "\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\u2028", "\u2029"]
"""Unicode category Cc (a sample: NUL, newline, CR, tab, ESC, DEL, NEL) and the line and paragraph
separators: each could end or forge a log line."""


@pytest.mark.parametrize("char", CONTROL_CHARACTERS, ids=lambda c: f"U+{ord(c):04X}")
@pytest.mark.parametrize("kind", ["type", "task_id", "key", "unique_key", "group", "queue"])
def test_names_with_control_characters_are_refused(backend: Any, kind: str, char: str) -> None:
    """Task types, ids, keys, unique keys, groups and queues took NUL, newline and any control
    character (a type 'ok\\nERROR worker crashed' forged a log line): each is now refused with
    InvalidArgumentError naming it, the batch sends nothing, and what was queued stays."""
    client = Client(backend.sync)
    kept = client.enqueue("t", {"keep": 1})
    name = f"ok{char}forged"
    task_type, options = ("t", {kind: name}) if kind != "type" else (name, {})
    with pytest.raises(InvalidArgumentError, match="control character|invalid .*name"):
        client.enqueue(task_type, None, **options)
    with pytest.raises(InvalidArgumentError):
        client.enqueue_many([("t", 1), (task_type, None, options)])
    assert SyncExecutor(backend.sync).run(Broker().stats("default")).pending == 1
    assert Inspector(backend.sync).task_info("default", kept.id).state is TaskState.PENDING
    client.enqueue("t", None, **({kind: "fine-name"} if kind != "type" else {}))  # the same kind, printable


@pytest.mark.parametrize("char", CONTROL_CHARACTERS, ids=lambda c: f"U+{ord(c):04X}")
def test_handler_and_entry_names_with_control_characters_are_refused(char: str) -> None:
    """The worker side of the same names: a handler pattern, a task function's name, a periodic
    entry's name."""
    from asynqpy import App, Scheduler

    with pytest.raises(InvalidArgumentError, match="control character"):
        ServeMux().handle(f"t{char}x", lambda t: None)
    app = App("redis://localhost:1/0")
    with pytest.raises(InvalidArgumentError, match="control character"):
        app.task(name=f"t{char}x")(lambda: None)

    @app.task(name="fine")
    def fine() -> None: ...

    with pytest.raises(InvalidArgumentError, match="control character"):
        app.periodic(fine, every=60, name=f"e{char}x")
    with pytest.raises(InvalidArgumentError, match="control character"):
        Scheduler("redis://localhost:1/0").register(f"e{char}x", "t", every=60)


def test_printable_unicode_names_are_still_accepted(backend: Any) -> None:
    client = Client(backend.sync)
    info = client.enqueue("émail:envoi✉", None, task_id="id-ü", key="k ✓", group=None)
    assert Inspector(backend.sync).task_info("default", info.id).type == "émail:envoi✉"


def test_a_generated_task_id_never_starts_with_a_dash() -> None:
    """The README's quickstart failed in CI now and then: `asynqpy task inspect ID` took a
    generated id starting with '-' (1 in 64) for an option."""
    from asynqpy.core.model.options import new_task_id, new_task_ids

    ids = [new_task_id() for _ in range(2000)] + new_task_ids(2000)
    assert not [i for i in ids if i.startswith("-")]
    assert all(len(i) == 16 for i in ids) and len(set(ids)) == len(ids)
