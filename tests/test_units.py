"""Pure unit tests: codec, mux, retry policy, key schema, script loader."""

from __future__ import annotations

import pytest

from asynqpy import InvalidArgumentError, ServeMux, Task, default_retry_delay
from asynqpy.core.model.codec import Message, decode, encode, unique_digest
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.scripts import load_scripts


def test_codec_round_trip_and_compactness() -> None:
    m = Message("email:deliver", {"user_id": 42}, enqueued_at_ms=1_700_000_000_000)
    data = encode(m)
    assert decode(data) == m
    assert len(data) < 40  # trailing defaults are left out
    full = m.with_(retried=3, last_error="boom", result=b"\x00\xff", unique=True, retry_delay_ms=500)
    assert decode(encode(full)) == full
    assert decode(encode(Message("t", b"raw"))).payload == b"raw"


def test_unique_digest_ignores_dict_order_but_not_values() -> None:
    assert unique_digest("t", {"a": 1, "b": 2}) == unique_digest("t", {"b": 2, "a": 1})
    assert unique_digest("t", {"a": 1}) != unique_digest("t", {"a": 2})
    assert unique_digest("t", 1) != unique_digest("u", 1)


def test_mux_registration_errors_and_matching() -> None:
    mux = ServeMux()
    mux.handle("a", lambda t: None)
    with pytest.raises(InvalidArgumentError):
        mux.handle("a", lambda t: None)
    with pytest.raises(InvalidArgumentError):
        mux.handle("  ", lambda t: None)
    with pytest.raises(InvalidArgumentError):
        mux.handle("b", 42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        mux.use(42)  # type: ignore[arg-type]
    h = mux.handle("img:", lambda t: "img")
    assert mux.match("img:resize") is h and mux.match("a") is not None and mux.match("zzz") is None


def test_default_retry_delay_bounds() -> None:
    t = Task("x")
    for n, lo, hi in [(0, 7.5, 15), (5, 240, 480), (20, 43200, 86400), (100, 43200, 86400)]:
        d = default_retry_delay(n, RuntimeError(), t)
        assert lo <= d <= hi, (n, d)


def test_key_schema_shares_one_hash_tag() -> None:
    k = queue_keys("critical")
    keys = [k.tasks, k.pending, k.lease, k.scheduled, k.retry, k.archived, k.completed, k.paused, k.wake,
            k.tick, k.processed, k.failed, k.lock("ab"), k.lock("")]
    assert all(key.startswith("asynqpy:{critical}:") for key in keys)
    assert len(set(keys)) == len(keys)


def test_every_script_has_a_header_and_declared_arity() -> None:
    scripts = load_scripts()
    assert {"enqueue", "schedule", "dequeue", "done", "complete", "retry", "archive", "requeue", "extend",
            "forward", "expired", "drop", "expire", "trim", "pause", "unpause", "stats"} <= set(scripts)
    for s in scripts.values():
        assert s.source.lstrip().startswith("--[["), s.name
        assert "Returns" in s.source.split("]]")[0], s.name


def test_task_info_of_a_message_with_out_of_range_times() -> None:
    """Data written by hand may hold any int64 in a time field; TaskInfo (the inspector, the worker's
    Task.deadline) must not fail on it: ValueError "year 2285384 is out of range" (found by fuzzing)."""
    from datetime import datetime, timezone

    from asynqpy import TaskInfo, TaskState

    m = decode(encode(Message("t", deadline_ms=2**63 - 1, last_failed_at_ms=-2**62, completed_at_ms=4 * 10**15)))
    info = TaskInfo.from_message("id", "q", TaskState.PENDING, m, 2**64 - 1)
    latest, earliest = datetime.max.replace(tzinfo=timezone.utc), datetime.min.replace(tzinfo=timezone.utc)
    assert info.deadline == info.completed_at == info.next_process_at == latest
    assert info.last_failed_at == earliest


def test_payload_with_tuple_keys_round_trips() -> None:
    """msgpack stores a tuple key as an array, which decodes to an unhashable list: the client
    accepted the payload and the worker archived the task as malformed (found by fuzzing)."""
    payload = {(0, ""): None, ((1, 2), 3): [4, {(5,): 6}], "k": (7, 8)}
    m = decode(encode(Message("t", payload, result={(9,): 10})))
    assert m.payload == {(0, ""): None, ((1, 2), 3): [4, {(5,): 6}], "k": [7, 8]}  # a tuple *value* is a list
    assert m.result == {(9,): 10}


def test_message_of_is_the_dataclass_made_faster() -> None:
    """codec.message_of (decode's and a prepared task's message) equals ``Message(*values)`` for every
    length, hashes alike (while hashable), stays frozen, and keeps no state between calls."""
    import dataclasses

    import pytest

    from asynqpy.core.model import codec

    full = [getattr(codec.Message("t", b"x", 5, headers={"a": "b"}, workers=["w"], tenant="z"), f.name)
            for f in dataclasses.fields(codec.Message)]
    for n in (1, 2, 3, 7, len(full)):
        a, b = codec.Message(*full[:n]), codec.message_of(full[:n])
        assert a == b and repr(a) == repr(b) and (n > 15 or hash(a) == hash(b))  # (headers: a dict)
        with pytest.raises(dataclasses.FrozenInstanceError):
            b.type = "other"  # type: ignore[misc]
    assert codec.message_of(["t"]).headers is None and codec.decode(codec.encode(codec.Message(*full))) == \
        codec.Message(*full)
