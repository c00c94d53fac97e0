"""Every script at maxmemory (issue 9, item 1), on the real redis-server (fakeredis has no maxmemory).

Redis refuses a script whose *first* write is a command that may grow memory and lets a script
that has already written go on. The scripts that store new tasks must be refused whole (nothing
stored: :class:`RedisFullError`); every script a worker or an operator needs to drain queues or to
free memory must run (they start with a removal, or a no-op one). Each script is set up on its
main path, then Redis is made full (``maxmemory 1``, policy noeviction) and the script is called.
A test also checks that every script in ``lua/`` is covered here, so a new script must say which
kind it is.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from asynqpy import FakeClock, RedisFullError
from asynqpy.core.cron.entries import Entry, encode_entry, fire_call, make_entry
from asynqpy.core.deploy import holds
from asynqpy.core.inspector import search
from asynqpy.core.model.codec import Message, decode, encode
from asynqpy.core.model.task import TaskState
from asynqpy.core.processes.model import Plan, new_record
from asynqpy.core.spine.broker import Broker, Call, Done
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.spine.library import RUN_WHEN_FULL
from asynqpy.core.tenants import plans as tenants
from asynqpy.redisio.executor import SyncExecutor
from asynqpy.redisio.scripts import load_functions, load_scripts

pytestmark = pytest.mark.real

Q = "full"
K = queue_keys(Q)
T0 = 1_700_000_000_000
MAX_AGE = 90 * 24 * 3600 * 1000


class H:
    def __init__(self, url: str) -> None:
        self.r = redis.Redis.from_url(url)
        self.clock = FakeClock(T0)
        self.b = Broker(self.clock)
        self.x = SyncExecutor(self.r)

    def enqueue(self, id: str, msg: Message | None = None) -> None:
        self.x.run(self.b.enqueue(Q, id, msg or Message("t", id)))

    def take(self, n: int = 1, lease_ms: int = 30_000) -> None:
        self.x.run(self.b.dequeue(Q, n, lease_ms, "tok00001"))

    def active_msg(self, id: str) -> Message:
        return decode(self.r.hget(K.tasks, id)[9:])

    def stored(self, id: str) -> bytes:
        return bytes(self.r.hget(K.tasks, id))


@pytest.fixture
def h(redis_url: str) -> Iterator[H]:
    h = H(redis_url)
    yield h
    h.r.config_set("maxmemory", 0)


def _active(h: H, lease_ms: int = 30_000) -> None:
    h.enqueue("a")
    h.take(lease_ms=lease_ms)


def _expired(h: H) -> None:
    _active(h, lease_ms=1000)
    h.clock.advance(2)


# script -> (set-up, the call to make while Redis is full); all of them must run when full
DRAIN: dict[str, tuple[Callable[[H], None], Callable[[H], Call[Any]]]] = {
    "dequeue": (lambda h: h.enqueue("a"), lambda h: h.b.dequeue(Q, 1, 30_000, "tok00002")),
    # with a caller waiting (Client.call): the outcome's push comes after the removals
    "done": (_active, lambda h: h.b.done(Q, "a", "tok00001", h.active_msg("a").with_(reply_to="in1"), b"outcome")),
    # a busy worker's acknowledgement and next dequeue in one call: its first write is done's removal
    "done_dequeue": (lambda h: (_active(h), h.enqueue("b")),
                     lambda h: h.b.done_dequeue(Q, [Done("a", "tok00001", h.active_msg("a"))], 1, 30_000, "tok00002")),
    "complete": (_active, lambda h: h.b.complete(Q, "a", "tok00001", h.active_msg("a").with_(retention_ms=60_000))),
    # the worker's retry with an empty retry zset: its tick token used to be the first write
    "retry": (_active, lambda h: h.b.retry(Q, "a", "tok00001", h.active_msg("a").with_(retried=1), 1000)),
    "archive": (_active, lambda h: h.b.archive(Q, "a", "tok00001", h.active_msg("a"), 10, MAX_AGE)),
    "requeue": (_active, lambda h: h.b.requeue(Q, "a", "tok00001")),
    "snooze": (_active, lambda h: h.b.snooze(Q, "a", "tok00001", 1000)),
    "extend": (_active, lambda h: h.b.extend(Q, 30_000, [("a", "tok00001")])),
    "forward": (lambda h: (h.x.run(h.b.schedule(Q, "s", Message("t"), 1000)), h.clock.advance(2)),
                lambda h: h.b.forward(Q)),
    "expired": (_expired, lambda h: h.b.expired(Q)),
    "drop": (lambda h: h.r.zadd(K.lease, {"gone": 1}), lambda h: h.b.drop(Q, "gone")),
    "reconcile": (lambda h: (h.enqueue("a"), h.take(), h.r.zrem(K.lease, "a")), lambda h: h.b.reconcile(Q, "0")),
    # a tenant task removed by hand while it ran: the sweep frees its slot
    "tenant_fix": (lambda h: (h.enqueue("a", Message("t", "a", tenant="x")), h.take(), h.r.hdel(K.tasks, "a")),
                   lambda h: h.b.tenant_fix(Q, "active", "0")),
    "expire": (lambda h: (_active(h), h.x.run(h.b.complete(Q, "a", "tok00001", h.active_msg("a").with_(retention_ms=1))),
                          h.clock.advance(1)), lambda h: h.b.expire(Q)),
    "trim": (lambda h: (_active(h), h.x.run(h.b.archive(Q, "a", "tok00001", h.active_msg("a"), 10, MAX_AGE))),
             lambda h: h.b.trim(Q, 0, MAX_AGE)),
    "pause": (lambda h: None, lambda h: h.b.pause(Q)),
    "tenants": (lambda h: None, lambda h: tenants.page_call(Q)),  # a read
    "search": (lambda h: h.enqueue("a"), lambda h: search.search_call(Q, search.make_search(type="t"))),  # a read
    "unpause": (lambda h: (h.enqueue("a"), h.x.run(h.b.pause(Q))), lambda h: h.b.unpause(Q)),
    "rewake": (lambda h: (h.enqueue("a"), h.r.delete(K.wake)), lambda h: h.b.rewake(Q)),
    # a worker of many queues takes their tokens (a removal: LPOP) while Redis is full
    "wake_take": (lambda h: h.enqueue("a"), lambda h: h.b.wake_take([K.wake, K.wake_for("w")], 2)),
    "stats": (lambda h: h.enqueue("a"), lambda h: h.b.stats(Q)),
    "page": (lambda h: h.enqueue("a"), lambda h: h.b.page(Q, TaskState.PENDING, 0, 10)),
    # operator actions: deleting is how an operator frees memory; a deep pending task is removed
    # with LSET (a command that may grow memory) first, unless the script starts with a removal
    "delete_tasks": (lambda h: h.enqueue("a"),
                     lambda h: h.b.delete_tasks(Q, TaskState.PENDING, [("a", "", 0, h.stored("a"))], 10)),
    "archive_tasks": (lambda h: h.enqueue("a"),
                      lambda h: h.b.archive_tasks(Q, TaskState.PENDING, [("a", "", 0, h.stored("a"))], 10)),
    "run_tasks": (lambda h: h.x.run(h.b.schedule(Q, "s", Message("t"), 60_000)),
                  lambda h: h.b.run_tasks(Q, TaskState.SCHEDULED, ["s"])),
    "cancel": (_active, lambda h: h.b.cancel(Q, "a", "tok00001", h.stored("a")[9:], "", b"notice")),
    "forget_gone": (lambda h: (h.enqueue("a"), h.x.run(h.b.watch(Q, "a", "in1")), h.r.hdel(K.tasks, "a")),
                     lambda h: h.b.unwatch_gone(Q, "0")),
    # the sweep's lease: claimed when due (its first write is PERSIST), then each step saved
    "sweep": (lambda h: (h.x.run(h.b.sweep_claim(Q, "own", 1000, 5000, ["tasks"])), h.clock.advance(5)),
              lambda h: h.b.sweep_claim(Q, "own", 1000, 5000, ["tasks"])),
    "drop_queue": (lambda h: (h.enqueue("a"), h.x.run(h.b.delete_tasks(Q, TaskState.PENDING,
                                                                      [("a", "", -1, h.stored("a"))], 10))),
                   lambda h: h.b.drop_queue(Q)),
    # aggregation: a group's tasks leave it (they are deleted as the aggregate is stored: less memory),
    # and an operator takes a task out of its group
    "aggregate": (lambda h: h.x.run(h.b.group_add(Q, "m1", Message("t", 1, group="g"))),
                  lambda h: h.b.aggregate(Q, "g", [("m1", h.stored("m1"))], "agg", Message("digest", [1]))),
    "ungroup": (lambda h: h.x.run(h.b.group_add(Q, "m1", Message("t", 1, group="g"))),
                lambda h: h.b.ungroup(Q, "m1", h.stored("m1"), "delete", "g")),
    # a run of a targeted task ends (its run task is deleted: less memory), or an operator deletes one
    "run_end": (lambda h: (h.x.run(h.b.enqueue_target(Q, "m", Message("t", workers=["w"]))),
                           h.x.run(h.b.dequeue(Q, 1, 30_000, "tok00001", "w"))),
                lambda h: h.b.run_end(Q, "m", Message("t", workers=["w"]), "s", run="m|w", token="tok00001")),
    # scheduler entries: an operator removes or pauses them on a full Redis (stopping an inflow)
    "cron_remove": (lambda h: _cron_entry(h), lambda h: h.b.cron_remove(Q, "e")),
    "cron_pause": (lambda h: _cron_entry(h), lambda h: h.b.cron_pause(Q, "e", True)),
    # a process input's commit (its completion, with the process's events and state: the input's
    # removals come first), and the read of a process
    "proc_commit": (lambda h: (_active(h), h.r.hset(K.proc, "p", new_record("t"))),
                    lambda h: h.b.proc_commit(Q, "a", "tok00001", h.active_msg("a").with_(key="proc:p"),
                                              Plan("p", "init", expect=new_record("t"), state=b"\x01",
                                                   events=[b"\x02"]))),
    "proc_read": (lambda h: h.r.hset(K.proc, "p", new_record("t")), lambda h: h.b.proc_read(Q, "p")),
    # the read of a workflow child's record (its parents and how each ended)
    "flow_read": (lambda h: (h.enqueue("old"), h.x.run(h.b.enqueue_after(Q, "kid", Message("t", after=[[Q, "old"]]), "c",
                                                                        [(b"1:q3:old", b"")]))),
                  lambda h: h.b.deps(Q, "kid")),
    # the rules engine dead-letters an event (its removal first), and sends dead events back (a move)
    "rules_redrive": (lambda h: h.r.lpush("in/dead", '{"event": "e1"}'), lambda h: h.b.rules_redrive("in/dead", "in",
                                                                                                    10)),
    "rules_dead": (lambda h: h.r.lpush("in/taken", "e1"), lambda h: h.b.rules_dead("in/taken", "in/dead", b"e1",
                                                                                  '{"event": "e1"}')),
}

# scripts that store new tasks: refused whole when Redis is full
STORE: dict[str, Callable[[H], Call[Any]]] = {
    "enqueue": lambda h: h.b.enqueue(Q, "new", Message("t")),
    # the lone producer's quick path (a generated id: its HSETNX is the first write)
    "enqueue_lone": lambda h: h.b.enqueue_lone(Q)("new", encode(Message("t"))),
    "group_add": lambda h: h.b.group_add(Q, "new", Message("t", group="g")),
    "enqueue_many": lambda h: h.b.enqueue_many(Q, [("n1", b"\x91\xa1t"), ("n2", b"\x91\xa1t")], False),
    "schedule": lambda h: h.b.schedule(Q, "new", Message("t"), 5000),
    # a waiter's registration and a late waiter's notification (the waiter's recheck covers it)
    "watch": lambda h: h.b.watch(Q, "old", "in1"),
    "reply": lambda h: h.b.reply(Q, "in1", b"outcome"),
    # a durable run's waiter's registration (its process stored first)
    "proc_watch": lambda h: (h.r.hset(K.proc, "p1", b"rec"), h.b.proc_watch(Q, "p1", "in1"))[1],
    # an operator's edit of a waiting task (it frees nothing)
    "edit_task": lambda h: h.b.edit_task(Q, TaskState.PENDING, "old", h.stored("old"), encode(Message("t", 2)), None, None, 10,
                                         -1),
    # a scheduler entry's tick: refused whole (the tick is not recorded as fired; it fires later)
    "cron_fire": lambda h: _cron_fire(h),
    # a targeted task, and an operator's change of its workers (it frees nothing)
    "enqueue_target": lambda h: h.b.enqueue_target(Q, "new", Message("t", runs=2)),
    "set_workers": lambda h: (h.x.run(h.b.enqueue_target(Q, "m", Message("t", workers=["a"]))),
                              h.b.set_workers(Q, "m", h.stored("m"), Message("t", workers=["a"]),
                                              Message("t", workers=["b"]), encode(Message("t", workers=["b"]))))[1],
    # a workflow child's registration with its parent, and its storing (nothing stored: the
    # producer gets RedisFullError)
    "register_child": lambda h: h.b.register_child(Q, "old", Q, "kid"),
    "enqueue_after": lambda h: h.b.enqueue_after(Q, "new", Message("t", after=[[Q, "old"]]), "c",
                                                 [(b"1:q3:old", b"")]),
    # an operator's change of a tenant's settings (kept in Redis: refused whole)
    "set_tenant": lambda h: tenants.set_call(Q, "acme", weight=3),
    # an operator's block or unblock of a task type (deploy holds: refused whole, done again once
    # Redis has room; an unblock cut short is finished by any later one)
    "hold": lambda h: holds.hold_call(Q, "block", "t"),
    # a keyed task (nothing stored: the producer gets RedisFullError)
    "enqueue_keyed": lambda h: h.b.enqueue_keyed(Q, "new", Message("t", key="k")),
    # a batch of keyed tasks (nothing stored: the producer gets RedisFullError for the batch)
    "enqueue_keyed_many": lambda h: h.b.enqueue_keyed_many(Q, [("new", Message("t", key="k"), None),
                                                              ("new2", Message("t", key="k"), None)], True),
    # a process's start (its record and init input: nothing stored, the caller gets RedisFullError)
    "proc_start": lambda h: h.b.proc_start(Q, "p", "new", Message("process:t", key="proc:p")),
    # a rule's task string (Resc's make), guarded by its set (nothing written: the event stays taken)
    "rules_push": lambda h: h.b.rules_push("out", "task", "out/set"),
    # key rotation's rewrite of a stored value (refused whole: the value stays as it was, sealed
    # with its older key, and the resumable rotation rewrites it on its next pass)
    "rewrap": lambda h: h.b.rewrap(Q, "old", h.stored("old"), h.stored("old")),
}
# a running task's progress report: refused when full (the task goes on without it), see below;
# a named limit's grant (refused when full: the handler gets the error and its task is retried)
# a parent's end delivered to a child, and a child cancelled by a failed parent (refused when full:
# the end stays in the outbox and the propagator delivers it once Redis has room)
# and the janitor's release of a key whose task ended without releasing it (retried next sweep)
# and the rules engine's take of events (refused whole: they stay in the input list; it retries)
# and a durable run's events after its input's commit (refused when full: the stream misses them)
# and a durable run's checkpoint inside its input (refused whole: the input ends there, its commit,
# a draining script, writes what the checkpoint would have)
OPTIONAL = {"progress", "limit_acquire", "resolve", "fail_waiting", "key_free", "key_gate", "rules_take",
            "durable_emit", "proc_step"}


def _cron_entry(h: H) -> Entry:
    e = make_entry("e", "t", every=1, queue=Q)
    h.r.hset(K.cron, "e", encode_entry(e))
    return e


def _cron_fire(h: H) -> Call[Any]:
    e = _cron_entry(h)
    return fire_call(h.b, e, encode_entry(e), 1000, 2000)[1]


def _full(h: H) -> None:
    load_functions(h.r)  # (every library loaded: the call is the function's, its flags hold; a library
    # found missing when Redis is full cannot be loaded, and that call goes by EVAL)
    h.r.config_set("maxmemory-policy", "noeviction")
    h.r.config_set("maxmemory", 1)


def test_every_script_is_classified() -> None:
    assert set(load_scripts()) == set(DRAIN) | set(STORE) | OPTIONAL
    assert RUN_WHEN_FULL == set(DRAIN)  # (their functions carry allow-oom: core/spine/library.py)


@pytest.mark.parametrize("script", sorted(DRAIN))
def test_draining_and_operator_scripts_run_when_redis_is_full(h: H, script: str) -> None:
    setup, call = DRAIN[script]
    setup(h)
    c = call(h)
    assert c.script == script
    _full(h)
    h.x.run(c)  # no RedisFullError


@pytest.mark.parametrize("script", sorted(STORE))
def test_new_task_scripts_are_refused_whole_when_redis_is_full(h: H, script: str) -> None:
    h.enqueue("old")
    c = STORE[script](h)  # (a scheduler entry's call stores its entry first)
    before = {k: h.r.dump(k) for k in h.r.keys("*")}
    assert c.script == script
    _full(h)
    with pytest.raises(RedisFullError):
        h.x.run(c)
    h.r.config_set("maxmemory", 0)
    assert {k: h.r.dump(k) for k in h.r.keys("*")} == before  # nothing stored, nothing lost


def test_progress_is_refused_whole_when_redis_is_full_and_the_task_goes_on(h: H) -> None:
    _active(h)
    before = {k: h.r.dump(k) for k in h.r.keys("*")}
    _full(h)
    with pytest.raises(RedisFullError):
        h.x.run(h.b.progress(Q, "a", "tok00001", h.active_msg("a"), b"\x01"))
    h.x.run(h.b.done(Q, "a", "tok00001", h.active_msg("a")))  # and it still finishes
    h.r.config_set("maxmemory", 0)
    assert h.r.hget(K.tasks, "a") is None and before[K.tasks.encode()] is not None


def test_recoverer_retries_an_expired_task_when_redis_is_full(h: H, redis_url: str) -> None:
    """The recoverer's retry (delay 0, an empty retry zset: the usual case) must go through when
    Redis is full; it raised RedisFullError and the task stayed active for every pass."""
    from asynqpy.worker.context import Context
    from asynqpy.worker.recoverer import Recoverer, RecovererParams
    from asynqpy.worker.settings import ServerOptions

    _expired(h)
    _full(h)

    async def main() -> None:
        import redis.asyncio as aredis

        ar = aredis.Redis.from_url(redis_url)
        try:
            ctx = Context(ar, h.clock)
            await Recoverer(ctx, RecovererParams.of(ServerOptions(queues={Q: 1}).validate())).recover_once()
        finally:
            await ar.aclose()

    asyncio.run(main())
    stored = h.r.hget(K.tasks, "a")
    assert stored[:1] == b"r" and decode(stored[1:]).retried == 1
    assert h.r.zscore(K.lease, "a") is None

