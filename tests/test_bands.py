"""Bands and sentinels in one number space (issue 43 item 2; docs/internals-scripts.md "Bands and
sentinels"): each has a guard, and each guard is checked here. The scheduled zset's due times stay
below HOLD_FLOOR (the held tasks' bands): refused at the API (a time past year 9999, a delay past
100 years) and in the Lua (a due time at or past the floor: a typed error, nothing written); a
priority's scores in the prio zset never cross into the next priority's band, and a tenant task's
seq keeps its 16 digits (a push that would leave them renumbers first: order kept, nothing lost).
On fakeredis, redis-server and the Cluster."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from asynqpy import Client, InvalidArgumentError
from asynqpy.core.deploy import versions as deploy
from asynqpy.core.model.clock import FakeClock
from asynqpy.core.model.codec import Message, decode
from asynqpy.core.model.options import MAX_EPOCH, MAX_SECONDS
from asynqpy.core.processes.model import TIMER_MAX_S, Step, plan_step
from asynqpy.core.spine.broker import MAX_DELAY_MS, Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

ROOT = Path(__file__).resolve().parent.parent
Q = "bands"
BAND = 2**45
"""lua/includes/priority.lua BAND."""
SEQ0, SEQ_END = 2**52, 10**16
"""lua/includes/tenant.lua SEQ0, SEQ_END."""


def _lua_number(path: str, name: str) -> float:
    m = re.search(rf"^local {name} = ([0-9.e]+)", (ROOT / "lua" / path).read_text(), re.MULTILINE)
    assert m, f"{name} not in {path}"
    return float(m.group(1))


def test_the_lua_bands_are_the_python_ones_and_every_time_stays_below_the_floor() -> None:
    assert _lua_number("includes/bands.lua", "HOLD_FLOOR") == deploy.HOLD_FLOOR
    assert _lua_number("includes/bands.lua", "VERSION_BAND") == deploy.VERSION_BAND
    assert _lua_number("includes/bands.lua", "TYPE_BAND") == deploy.TYPE_BAND
    assert _lua_number("includes/priority.lua", "BAND") == BAND
    assert deploy.VERSION_BAND + deploy.encode_version("9999.9999.9999") < deploy.TYPE_BAND
    assert _lua_number("includes/bands.lua", "VERSION_MAX") == deploy.encode_version("9999.9999.9999")
    # the latest time an option takes, and the longest delay from any time before year 9999
    assert MAX_EPOCH * 1000 + MAX_DELAY_MS < deploy.HOLD_FLOOR
    assert 10 * BAND + BAND < 2**53  # (every prio score an exact double)
    for name in ("HOLD_FLOOR", "VERSION_BAND", "TYPE_BAND"):  # written once in Lua: the include
        for path in [*(ROOT / "lua").glob("*.lua"), *(ROOT / "lua" / "includes").glob("*.lua")]:
            if path.name != "bands.lua":
                assert not re.search(rf"^local {name}\b", path.read_text(), re.MULTILINE), (path.name, name)


def test_a_due_time_at_the_hold_floor_is_refused_and_nothing_is_written(backend: Any) -> None:
    with Client(backend.sync) as c:
        with pytest.raises(InvalidArgumentError, match="from 1970 to 9999"):
            c.enqueue("t", 1, queue=Q, process_at=MAX_EPOCH + 1)
        with pytest.raises(InvalidArgumentError, match="at most 100 years"):
            c.enqueue("t", 1, queue=Q, process_in=101 * 365 * 24 * 3600)
    q = queue_keys(Q)
    ex = SyncExecutor(backend.sync)
    near = FakeClock(deploy.HOLD_FLOOR - 1000)  # (a Redis clock gone far wrong; the Lua is the guard)
    b = Broker(clock=near)
    with pytest.raises(InvalidArgumentError, match="HOLD_FLOOR"):
        ex.run(b.schedule(Q, "s1", Message(type="t"), 1000))
    debounced = Message(type="t", payload="d")
    with pytest.raises(InvalidArgumentError, match="HOLD_FLOOR"):  # (debounce: before its lock's SET too)
        ex.run(b.schedule(Q, "s2", debounced, 5000, unique_ttl=60, mode="d"))
    assert not backend.sync.exists(q.tasks) and not backend.sync.exists(q.scheduled)
    assert not backend.sync.exists(q.lock(debounced.lock_digest()))
    assert ex.run(b.schedule(Q, "s3", Message(type="t"), 999)) == deploy.HOLD_FLOOR - 1  # (just below: kept)
    backend.sync.delete(q.tasks, q.scheduled)
    # a snooze past the floor: refused, the task still active under its lease
    real = Broker()
    with Client(backend.sync) as c:
        t = c.enqueue("t", "snoozed", queue=Q)
    got = ex.run(real.dequeue(Q, 1, 30_000, "tok00001"))
    assert [id for id, _ in got.tasks] == [t.id]
    with pytest.raises(InvalidArgumentError, match="HOLD_FLOOR"):
        ex.run(b.snooze(Q, t.id, "tok00001", 2000))
    assert backend.sync.zscore(q.lease, t.id) is not None and backend.sync.hget(q.tasks, t.id)[:1] == b"a"


def _scores(backend: Any, ids: list[str]) -> list[float]:
    return [backend.sync.zscore(queue_keys(Q).prio, id) for id in ids]


def _take(backend: Any) -> list[Any]:
    ex, b = SyncExecutor(backend.sync), Broker()
    out: list[Any] = []
    while got := ex.run(b.dequeue(Q, 10, 30_000, "tok00001")).tasks:
        out += [decode(m).payload for _, m in got]
    return out


def test_a_priority_band_is_respaced_before_a_push_crosses_its_edge(backend: Any) -> None:
    q, ex, b = queue_keys(Q), SyncExecutor(backend.sync), Broker()
    lo = (9 - 7) * BAND  # priority 7's band: [lo, lo + BAND)
    with Client(backend.sync) as c:
        x = c.enqueue("t", "x", queue=Q, priority=7)
        (xid, _), = ex.run(b.dequeue(Q, 1, 30_000, "tok00001")).tasks
        a = c.enqueue("t", "a", queue=Q, priority=7)
        backend.sync.zadd(q.prio, {a.id: lo + BAND - 1}, xx=True)  # the band's last score (2^44 pushes later)
        n = c.enqueue("t", "b", queue=Q, priority=7)  # the back: one past the band's end without the guard
        more = c.enqueue_many([("t", "c"), ("t", "d")], queue=Q, priority=7)  # a batch at the back
        backend.sync.zadd(q.prio, {a.id: lo}, xx=True)  # now the band's first score
        assert ex.run(b.requeue(Q, xid, "tok00001")) == 1  # the front: one before the band's start
        c.enqueue("t", "six", queue=Q, priority=6)
        c.enqueue("t", "eight", queue=Q, priority=8)
    ids = [x.id, a.id, n.id, *(t.id for t in more)]
    scores = _scores(backend, ids)
    assert all(lo <= s < lo + BAND for s in scores), scores
    assert scores == sorted(scores) and len(set(scores)) == len(scores)  # FIFO within the band kept
    assert _take(backend) == ["eight", "x", "a", "b", "c", "d", "six"]


def test_a_tenant_seq_keeps_its_16_digits(backend: Any) -> None:
    q, ex, b = queue_keys(Q), SyncExecutor(backend.sync), Broker()
    with Client(backend.sync) as c:
        c.enqueue("t", "x", queue=Q, tenant="acme")
        (xid, _), = ex.run(b.dequeue(Q, 1, 30_000, "tok00001")).tasks
        for p in ("a", "b"):
            c.enqueue("t", p, queue=Q, tenant="acme")
        c.enqueue("t", "z1", queue=Q, tenant="zed")
        backend.sync.hset(q.tn, "q", SEQ_END - SEQ0 - 1)  # the counter's next seq has 17 digits
        c.enqueue("t", "c", queue=Q, tenant="acme")  # a back push: renumbered first
        assert int(backend.sync.hget(q.tn, "q")) == 4  # (3 renumbered, then its own)
        head = backend.sync.zrange(q.tq, 0, 0)[0]  # acme's head, at the lowest 16-digit seq
        backend.sync.zrem(q.tq, head)
        backend.sync.zadd(q.tq, {head[:6] + b"1000000000000000" + head[22:]: 0})
        assert ex.run(b.requeue(Q, xid, "tok00001")) == 1  # a front push: one below it has 15 digits
        c.enqueue("t", "z2", queue=Q, tenant="zed")
    members = backend.sync.zrange(q.tq, 0, -1)
    seqs = [m.split(b"\0", 1)[1][1:17] for m in members]
    assert all(len(s) == 16 and s.isdigit() and SEQ0 <= int(s) < SEQ_END for s in seqs), seqs
    acme = [m for m in members if m.startswith(b"acme\0")]
    assert len(acme) == 4 and len(members) == 6  # nothing lost
    got = [p for p in _take(backend) if p.startswith(("x", "a", "b", "c"))]
    assert got == ["x", "a", "b", "c"]  # each tenant's order kept (the front push first)


def test_a_min_version_past_the_band_is_held_in_the_version_band(backend: Any) -> None:
    """A message whose min_version was never encoded (past 9999.9999.9999: the API refuses it) is
    held at the top of VERSION_BAND, never in TYPE_BAND (it would read as a blocked type)."""
    q, ex, b = queue_keys(Q), SyncExecutor(backend.sync), Broker()
    with pytest.raises(InvalidArgumentError):
        deploy.encode_version("10000.0.0")
    ex.run(b.enqueue(Q, "big", Message(type="t", min_version=10**15)))
    ex.run(b.enqueue(Q, "ok", Message(type="t", min_version=deploy.encode_version("2.0"))))
    assert not ex.run(b.dequeue(Q, 5, 30_000, "tok00001", version=deploy.encode_version("1.0"))).tasks
    big, ok = backend.sync.zscore(q.scheduled, "big"), backend.sync.zscore(q.scheduled, "ok")
    assert deploy.held_kind(big) == "version" and big == deploy.VERSION_BAND + deploy.encode_version("9999.9999.9999")
    assert ok == deploy.VERSION_BAND + deploy.encode_version("2.0")


def test_a_process_timer_past_100_years_is_refused() -> None:
    """A durable process's timer (a scheduled keyed input, proc_commit.lua) is bounded like every
    duration: its due time stays below HOLD_FLOOR."""
    assert TIMER_MAX_S == MAX_SECONDS
    with pytest.raises(InvalidArgumentError, match="100 years"):
        plan_step("p", "k", None, Step(timer=TIMER_MAX_S + 1), 0)
    assert plan_step("p", "k", None, Step(timer=TIMER_MAX_S), 0).timer_at == TIMER_MAX_S * 1000
