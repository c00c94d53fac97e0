"""The cross-feature model (tests/test_model.py) plus the mechanisms added since, meeting
everything it drives: the same machine, and
- deploy holds: an operator who blocks and later unblocks a task type (every sixth operator step:
  a deploy), tasks gated by ``min_worker_version`` (one producer task in seven), and workers of
  two versions (w2 is version 2; the others have none);
- tenant rates: tenant "a" has a rate of 2/s, which every fifth operator step turns off or on
  again (the model's clock moves by its "time" steps);
- issue 42: the queue's default rate for its tenants, turned on (tenant b sends a burst and waits
  on it) and off while b waits (every third operator step), and the virtual time and passes moved
  up near 10^15 by hand (every seventh).
After every step, beside the model's own checks: a task is held (the scheduled zset, from
HOLD_FLOOR) only while its type is blocked (the type band) or when it needs a newer worker (the
version band), and the queue's blocked types are the operator's; a worker the concurrency limit
held back is woken once a slot is free and tasks it may take are pending (those of a tenant held
by its rate are not: the dequeue's reply says when to look again). At every dequeue, no task of a
blocked type and no task gated above the worker's version is handed out, and tenant "a" has
started no more tasks since its rate was set than the rate allows (its burst, then one a token).
After a dequeue that takes tenants' turns: the tenants held by their rate (``tw``) among the first
count+1 it reads that were due, or whose rate is gone, are back in the round; the virtual time is
below PASS_REBASE; tenant a's rate schedule moved by one interval a task of it started (none for its
held tasks).

Issue 43 item 4, the model meets every mechanism. What an operator can do (the Inspector's methods
that change state, and the CLI commands over them) and every fault, and where the model drives it
(``step`` is tests/test_model.py's rule; ``mechanism`` this module's, taken one step in three):

=================================================  =================================================
action or fault                                    rule (where), or "not modelled: why"
=================================================  =================================================
Client.enqueue / enqueue_many, ``enqueue``         step: produce (every kind); mechanism ``side``
                                                   (lone and batch, tenants, version-gated)
delete_task / archive_task / run_task,             step: operator delete / archive / run
``task delete|archive|run``
cancel, ``task cancel``                            step: operator cancel, contend
edit_task, ``task edit``                           step: operator edit; scenario keyed_edit_due_now
delete_all / run_all / archive_all,                mechanism ``bulk`` (every state each takes)
``task deleteall|runall|archiveall``
delete, then enqueue under the same id (targeted)  step: operator resubmit
set_workers (API only)                             mechanism ``retarget``
set_limits / clear_limits, ``queue limit``         step: background limit, contend; mechanism
                                                   ``resize`` (set below what is leased, then raised)
set_tenant (pause, weight, concurrency, clear),    step: operator tenant; tenant a's rate every 5th
pause/resume/clear_tenant, ``queue tenant``        operator step; its concurrency lowered while its
                                                   tasks run: mechanism ``resize``
set_tenant_defaults / clear_tenant_defaults,       every 3rd operator step: on, then cleared or
``queue tenants --rate``                           rate 0 while a tenant waits on it (a worker is
                                                   woken; every other time the sweep runs first)
block_type / unblock_type, ``queue block|unblock`` every 6th operator step (a deploy)
pause / unpause, ``queue pause|unpause``           mechanism ``pause`` (nothing handed out while
                                                   paused; unpaused, a worker is woken)
remove_queue, ``queue rm [--force]``, then the     every 3rd operator step (xr2, emptied first);
same name used again                               mechanism ``side_remove`` (a side queue, forced
                                                   or empty: no key of it left), then ``side``
set_events, ``queue events``                       the model's cap is 40 (events_within_cap);
                                                   ``active=True`` not modelled: one more kind of
                                                   entry, counted the same way (test_events.py)
the sweep (janitor: tenant_fix, reconcile)         every 4th operator step, after keys edited by
                                                   hand; the ring part after the defaults change
retention expiry, the archive's age limit          mechanism ``expire`` (600 s, 1 h: the janitor's
(janitor: expire, trim)                            expire and trim)
more than four queues, a pattern, discovery        mechanism ``side``: six side queues served by a
                                                   pattern worker (worker/queues.py's ServedQueues
                                                   and QueueOrder, fetching by wake token, its scan)
version gates and take-backs                       step: w2 (version 2) beside older workers;
                                                   ``side``: an older server sets tasks aside, the
                                                   side worker (version 2) takes them back (its look
                                                   at queues new to it, its scan)
stop/quiet/resume/scale_server, ``server ...``     not modelled: messages to a running Server's
                                                   Python loops, no script (test_control.py: the
                                                   scale-down and the idle wait's dequeue); the Lua
                                                   half of a resize is the limits (``resize``)
cron_add/remove/pause/resume/run_now, ``cron ...`` not modelled: entries are keys of their own; a
                                                   firing is an enqueue (test_cron.py)
durable processes, ``process ...``                 not here: tests/test_process_machine.py
durable runs: start (sent again), signal (twice    rule ``durable_runs`` (every other step; its
under one key), cancel, remove; a step failing,    driver and checks: tests/model_durable.py);
a worker killed in a step / after a checkpoint /   scenario durable_runs
before its commit, a commit resent, the runs'
timers, their queue removed, tenant turns, a hold,
a run's version gate (r3; workers of 2 and none),  scenario durable_batched_commit
a live resize under a batched commit,              scenario durable_resumed
a failed run resumed by the operator
``outbox relay|retry|discard``                     not modelled: the database's side; the relay's
                                                   store is an enqueue_many (test_outbox.py)
a worker's lease renewal (its heartbeat: extend)   mechanism ``extend`` (a run no longer allowed
                                                   after ``retarget`` is given back)
fault: a store call's reply lost, sent again       step: keyed_resent, child_resent; every 3rd
                                                   produce step: resend_meets (after the task's
                                                   end too: completed, archived, retried, gone)
fault: the application sends the same task again   resend_meets
fault: a worker's outcome reply lost, sent again   every 3rd outcome: outcome_resent (changes
                                                   nothing)
fault: a dequeue's reply lost                      mechanism ``lost_dequeue`` (the lease expires)
fault: a worker dies holding leases                step: background crash, recover
fault: a worker restarted under the same name      every w1 dequeue that got a run
fault: a cancelled run's late outcome              step: cancel, then the worker's outcome
fault: producer / propagator / forwarder dies      step: child_resent after_register, propagate
between two calls of one plan                      crash_at, forward gate=False
fault: an aggregation whose read went stale        step: aggregate stale
fault: keys edited or removed by hand              every 4th operator step (then the sweep)
fault: a wake token lost                           mechanism ``side`` (fetch with its token lost)
fault: passes near 10^15                           every 7th operator step
fault: Redis restarts, failovers, the Cluster      not modelled: one Redis here (tests/faults/,
                                                   test_cluster.py, test_replication.py)
fault: clocks apart (a client's, Redis's)          not modelled: one FakeClock (test_skew.py)
=================================================  =================================================

Checks after every step added for item 4: nothing lost (a known task leaves Redis only by a way
that removes it: its end without retention, an operator's delete, an aggregation, a debounce, the
end of its retention or of the archive's age limit), the queue's counts (queue_info) are its tasks'
states, the event stream's count is what it holds and within its cap, a side queue holding tasks
is a known queue, a kept targeted task keeps its runs record; at each dequeue nothing is handed out
while the queue is paused and no more is leased than the limit (but what was leased before a
resize). Scenarios (SCENARIOS, at the end) drive each meeting step by step; the mutants of
tests/mutants/plus/ name the one that catches them.

A subclass, so that the model's own examples (and the mutants it is checked against,
tests/test_model_mutants.py) stay as they are: hypothesis derives a machine's examples from its
source."""

from __future__ import annotations

import os
from typing import Any

import fakeredis
import pytest
import redis
from helpers import sized
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule, run_state_machine_as_test
from model_durable import DQ, DurableDriver
from test_model import ENDED, LEASE_MS, LIVE, SETTINGS, TENANTS, WORKERS, CrossMachine, K, Known, Q, Run

from asynqpy import DuplicateTaskError, LeaseLostError, QueueFullError, TaskIdConflictError, TaskNotFoundError
from asynqpy.core.deploy.versions import HOLD_FLOOR, TYPE_BAND, VERSION_BAND, encode_version
from asynqpy.core.model import codec
from asynqpy.core.model.errors import InvalidArgumentError, QueueNotEmptyError, QueueNotFoundError, TaskStateError
from asynqpy.core.spine.broker import Broker, Call, Dequeued
from asynqpy.core.spine.keys import ALL_QUEUES, queue_keys
from asynqpy.core.spine.stored import message_of
from asynqpy.core.tenants.plans import PASS_REBASE
from asynqpy.worker.queues import SCAN_PER_S, QueueOrder, ServedQueues

VERSIONS = {"w2": encode_version("2"), "mq": encode_version("2")}
"""The workers' versions (the others have none)."""
BLOCKABLE = ("t", "child", "tg")
"""The task types the operator blocks in turn."""
GATE_EVERY = 7
"""One plain task in this many needs version 2."""
REUSED = "xr2"
"""Issue 42: the side queue an operator removes and the model's client uses again."""


class VersionedBroker(Broker):
    """The model's broker, whose dequeue tells each worker's version."""

    def dequeue(self, queue: str, count: int, lease_ms: int, token: str, worker: str = "",
                version: int = 0) -> Call[Dequeued]:
        return super().dequeue(queue, count, lease_ms, token, worker, version or VERSIONS.get(worker, 0))


class GatingClient:
    """The model's client: one plain task in GATE_EVERY (of those with an id of the model's: not the
    lone producer's) is enqueued with min_worker_version="2"."""

    def __init__(self, client: Any, machine: PlusMachine) -> None:
        self._client, self._machine = client, machine

    def enqueue(self, task_type: str, payload: Any = None, **opts: Any) -> Any:
        if task_type == "t" and "group" not in opts and "task_id" in opts and self._machine.n % GATE_EVERY == 3:
            opts["min_worker_version"] = "2"
            self._machine.gated.add(opts["task_id"])
        if "task_id" in opts:  # (issue 42: what the application sends again)
            self._machine.sent.setdefault(opts["task_id"], (task_type, payload, dict(opts)))
        return self._client.enqueue(task_type, payload, **opts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


RATE, BURST = 2.0, 1
"""Tenant a's rate when on (tasks a second) and its burst."""
DEFAULT_RATE = 4.0
"""The queue's default rate for its tenants when on (issue 42)."""


class RingWithHeld:
    """The model's Redis, whose ready ring (read whole, without scores) also lists the tenants held
    by their rate (``tw``) that have pending tasks: for the model's own check of where tenants are."""

    def __init__(self, r: Any) -> None:
        self._r = r

    def zrange(self, key: str, start: int, end: int, **kw: Any) -> Any:
        got = self._r.zrange(key, start, end, **kw)
        if key != K.tr or kw or (start, end) != (0, -1):
            return got
        held = [t for t in self._r.zrange(K.tw, 0, -1)
                if t not in got and self._r.zlexcount(K.tq, b"[" + t + b"\0", b"(" + t + b"\1")]
        return got + held

    def __getattr__(self, name: str) -> Any:
        return getattr(self._r, name)


EVENTS_CAP = 40
"""The model queue's event cap (Inspector.set_events): small, so the stream is trimmed within an example."""
ARCHIVE_MAX_AGE_MS = 3_600_000
"""The archive's age limit the model's archive calls give (an hour)."""
IDS_PER_ENTRY = 50
"""Most tasks one event entry names (lua/includes/events.lua)."""
SIDE = tuple(f"xs{i}" for i in range(6))
"""The side queues: more than FEW_QUEUES, so the worker serving them fetches by wake token."""
SIDE_PATTERN = "xs*"
SIDE_RATED = ("xs0", "xs3")
"""Side queues whose tenants have a default rate (set again when a removed one is used again)."""
SIDE_IDLE_S = 5.0
"""The side worker's idle timeout (its scan's base)."""
MECHANISMS = ["side", "bulk", "side", "pause", "side", "resize", "side", "lost_dequeue", "side_remove", "retarget",
              "extend", "expire", "side_settle"]
"""The mechanisms in the order the ``mechanism`` rule takes them (from an offset drawn once: a draw
of one of them would favour the first)."""
MECHANISM_EVERY = 3
"""The ``mechanism`` rule may be drawn at one step in this many (the ``step`` rule at every one)."""
DURABLE_EVERY = 2
"""The ``durable_runs`` rule (issue 46) may be drawn at one step in this many."""
FINISH_RESEND_EVERY = 3
"""One worker outcome (done, complete, retry, archive, snooze, requeue) in this many is sent again
after it committed (its reply lost): the resend must change nothing."""
STATE_CODES = {"pending": "p", "active": "a", "scheduled": "s", "retry": "r", "archived": "x", "completed": "c",
               "waiting": "w", "blocked": "b", "aggregating": "g", "targeted": "m"}


BULK_STATES = {"delete": ["pending", "scheduled", "retry", "archived", "completed"],
               "run": ["scheduled", "retry", "archived"], "archive": ["pending", "scheduled", "retry"]}


class RecordingExecutor:
    """The model's executor, which keeps the calls of its last ``run_many`` (a worker's outcome:
    what PlusMachine.outcome_resent sends again)."""

    def __init__(self, x: Any) -> None:
        self._x = x
        self.last: list[Call[Any]] = []

    def run_many(self, calls: Any) -> Any:
        self.last = list(calls)
        return self._x.run_many(self.last)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._x, name)


class SideWorker:
    """A server of the pattern ``xs*`` (version 2, named "mq") over the six side queues, with the
    worker's own queue choice (worker/queues.py: ServedQueues, QueueOrder: wake tokens, the scan,
    the queues new to it looked at for tasks held for its version), fetching as
    Processor._fetch_once does when it fetches by token; and an older server (version none, named
    "old") that sets aside what needs version 2. Faults: a wake token popped and lost (issue 42
    #10), a queue removed and used again by the long-lived client (#3), tasks held for a version
    by the old server after the new one looked at the queue (#2)."""

    def __init__(self, m: PlusMachine) -> None:
        self.m = m
        self.served = ServedQueues({SIDE_PATTERN: 1})
        self.order = QueueOrder({}, strict=False)
        self.removed: set[str] = set()
        self.sent = 0

    def now(self) -> float:
        return self.m.clock.now_ms() / 1000

    def discover(self) -> None:
        """The discovery loop's pass: the known queues the pattern matches are served (as
        Processor._set_queues: only the new ones are fresh; the backlog it knew goes on)."""
        added, dropped = self.served.replace(self.m.insp.queues())
        if added or dropped:
            before = self.order
            self.order = QueueOrder(dict(self.served.current), strict=False)
            self.order.fresh.difference_update(before.queues)
            self.order.backlog.update(before.backlog & set(self.order.queues))
            self.order.scan_from(SIDE_IDLE_S, self.now())
            self.m.trace.append(f"side worker serves {sorted(self.served.current)}")

    def wake_keys(self) -> dict[str, str]:
        keys = {queue_keys(q).wake: q for q in self.order.queues}
        keys.update({queue_keys(q).wake_for("mq"): q for q in self.order.queues})
        return keys

    def pop_token(self, skip: set[str], lose: bool) -> str | None:
        """Pop the first wake token of the served queues not in ``skip`` (as LMPOP/BLPOP do);
        ``lose``: its reply is lost (the token is gone, nobody acts on it)."""
        for key, q in self.wake_keys().items():
            if q not in skip and self.m.r.lpop(key) is not None:
                if lose:
                    self.m.trace.append(f"side worker: the wake token of {q} lost")
                    return None
                self.order.woken(q, by_dequeue=False)
                return q
        return None

    def fetch(self, lose: bool = False) -> int:
        """One fetch (Processor._fetch_once by token), then an idle wait's pop if it took nothing."""
        self.discover()
        o = self.order
        if o.fresh:  # _look_fresh
            fresh = sorted(o.fresh)
            o.fresh.clear()
            held = self.m.x.run_many([self.m.b.version_held(q, VERSIONS["mq"]) for q in fresh])
            o.backlog.update(q for q, h in zip(fresh, held) if h is not False)
        if o.backlog and len(o.backlog) < len(o.queues):  # _poll
            q = self.pop_token(set(o.backlog), lose)
            if q is not None:
                o.backlog.add(q)
        taken = 0
        for q in o.candidates(self.now()):
            if o.skip(q, self.now()):
                continue
            token = self.m.new_token()
            res = self.m.x.run(self.m.b.dequeue(q, 4, LEASE_MS, token, "mq"))
            if res.tasks:
                self.m.x.run_many([self.m.b.done(q, id, token, codec.decode(msg)) for id, msg in res.tasks])
            o.took(q, res, self.now())
            taken += len(res.tasks)
        if not taken:  # the idle wait: a token makes its queue owed
            o.owed = self.pop_token(set(), lose)
        return taken

    def enqueue(self, q: str, way: str, tenant: str, gated: bool) -> None:
        """The long-lived client enqueues into side queue ``q`` (used again if it was removed)."""
        opts: dict[str, Any] = {"queue": q, "max_retry": 1}
        if tenant:
            opts["tenant"] = tenant
        if gated:
            opts["min_worker_version"] = "2"
        client = self.m.client._client  # (GatingClient's: no gate, no resend records)
        if way == "batch":
            client.enqueue_many([("xs", 1), ("xs", 2)], **opts)
        else:
            client.enqueue("xs", None, **opts)
        if q in SIDE_RATED and not self.m.r.hexists(queue_keys(q).tn, "d"):
            self.m.insp.set_tenant_defaults(q, rate=DEFAULT_RATE)
        self.removed.discard(q)
        self.m.trace.append(f"side enqueue {q} {way} tenant={tenant!r} gated={gated}")

    def old_worker(self, q: str) -> None:
        """The older server (no version) dequeues ``q``: it runs what it may, sets aside what needs 2."""
        token = self.m.new_token()
        res = self.m.x.run(self.m.b.dequeue(q, 3, LEASE_MS, token, "old"))
        if res.tasks:
            self.m.x.run_many([self.m.b.done(q, id, token, codec.decode(msg)) for id, msg in res.tasks])
        self.m.trace.append(f"old worker on {q}: ran {len(res.tasks)}")

    def step(self, data: st.DataObject) -> None:
        what = data.draw(st.sampled_from(["enqueue", "enqueue", "old", "fetch", "fetch", "time"]))
        if what == "enqueue":
            self.enqueue(data.draw(st.sampled_from(SIDE)), data.draw(st.sampled_from(["lone", "batch"])),
                         data.draw(st.sampled_from(["", "a", "b"])), data.draw(st.booleans()))
        elif what == "old":
            self.old_worker(data.draw(st.sampled_from(SIDE)))
        elif what == "fetch":
            self.fetch(lose=data.draw(st.booleans()))
        else:
            self.m.time_passes(1_100)

    def remove(self, q: str, force: bool) -> None:
        """An operator removes side queue ``q`` (``queue rm``, ``--force`` deletes its tasks
        first): nothing of it is left in Redis, and it is no longer a known queue."""
        try:
            self.m.insp.remove_queue(q, force=force)
        except (QueueNotEmptyError, QueueNotFoundError, TaskStateError) as exc:
            self.m.trace.append(f"remove {q} force={force}: {type(exc).__name__}")
            return
        self.removed.add(q)
        left = sorted(k.decode() for k in self.m.r.scan_iter(match=f"{queue_keys(q).base}*", count=1000)
                      if self.m.r.ttl(k) == -1)  # (daily counters and a batch's marker expire on their own)
        assert not left, (f"queue {q} removed, but its keys {left} are left", self.m.trace[-12:])
        self.m.trace.append(f"remove {q} force={force}")

    def settle(self) -> None:
        """The side worker fetches for twice its scan's period (without faults, as when nothing
        goes wrong any more): by then every task of the queues it serves that it may run has run,
        whatever tokens were lost before and whatever the old server set aside for version 2."""
        period = max(SIDE_IDLE_S, len(SIDE) / SCAN_PER_S)
        for _ in range(int(2 * period) + 2):
            self.fetch()
            self.m.clock.advance(1)
        self.m.trace.append(f"side worker settled ({int(2 * period) + 2} s)")
        for q in self.order.queues:
            k = queue_keys(q)
            pending = self.m.r.llen(k.pending) + self.m.r.zcard(k.prio) + self.m.r.zcard(k.tq)
            held = self.m.r.zcount(k.scheduled, VERSION_BAND, VERSION_BAND + VERSIONS["mq"])
            assert not pending and not held, (f"side queue {q}: {pending} pending, {held} held for a version up to "
                                              "the side worker's, after it served it for twice its scan period",
                                              self.m.trace[-12:])

    def check(self) -> None:
        for q in SIDE:
            if self.m.r.hlen(queue_keys(q).tasks):
                assert self.m.r.sismember(ALL_QUEUES, q), (f"side queue {q} holds tasks and is not a known queue",
                                                           self.m.trace[-12:])


class PlusMachine(CrossMachine):
    def __init__(self) -> None:
        super().__init__()
        self.b = VersionedBroker(self.clock)
        self.client = GatingClient(self.client, self)  # type: ignore[assignment]
        self.blocked: set[str] = set()
        self.gated: set[str] = set()
        self.operator_steps = 0
        self.insp.set_tenant(Q, "a", rate=RATE, burst=BURST)  # on from the start; every 5th operator step toggles it
        self.rate_since: int | None = self.clock.now_ms()  # when tenant a's rate was set (ms), None: no rate
        self.rate_started = 0  # a's tasks started since
        self.init_resends()
        self.init_mechanisms()

    def operator(self, data: st.DataObject, verb: str) -> None:
        self.operator_steps += 1
        if self.operator_steps % 5 == 0:  # tenant a's rate on or off
            on = self.rate_since is None
            self.insp.set_tenant(Q, "a", rate=RATE if on else 0, burst=BURST)
            self.rate_since, self.rate_started = (self.clock.now_ms() if on else None), 0
            self.trace.append(f"tenant a rate {'on' if on else 'off'}")
            self.burst_of_a()
        if self.operator_steps % 6 == 0:  # a deploy: block a type; the next one unblocks it
            if self.blocked:
                mtype = self.blocked.pop()
                moved = self.insp.unblock_type(Q, mtype)
            else:
                mtype = BLOCKABLE[self.operator_steps // 6 % len(BLOCKABLE)]
                moved = len(self.insp.block_type(Q, mtype))
                self.blocked.add(mtype)
            self.trace.append(f"block {mtype}: blocked now {sorted(self.blocked)} ({moved})")
        if self.operator_steps % 4 == 0:  # keys edited by hand, then the sweep's tenant parts
            self.hand_edit_then_sweep()
        if self.operator_steps % 3 == 0:  # issue 42: the queue's default rate on, or off while b waits on it
            self.default_rate_toggle()
        if self.operator_steps % 7 == 0:  # issue 42: passes near 10^15
            self.passes_grow_large()
        if self.operator_steps % 3 == 0:  # issue 42: a removed queue used again (reuse_removed_queue)
            self.reuse_removed_queue()
        if self.operator_steps % 2 == 0:  # issue 43 item 5: producers meet a cap (cap_storm, at the end)
            self.cap_storm()
        self.note_ends()  # (what ended above, a cap's drop, ended a parent: the verb below may run it again)
        super().operator(data, verb)
        if self.rate_since is not None and len((self.r.hget(K.tn, "l:a") or b"").split(b" ")) < 5:
            self.rate_since = None  # the model's own operator cleared tenant a: no rate any more

    def hand_edit_then_sweep(self) -> None:
        """A tenant taking turns is removed from the ring and an active tenant task's entry from
        ``ta`` by hand; one pass of each tenant part of the sweep and of its tasks part follows
        (lua/tenant_fix-10.lua, lua/reconcile-10.lua): the model's checks after the step say
        whether it put everything back."""
        ring = [t for t in self.r.zrange(K.tr, 0, -1) if t]
        active = sorted(self.r.hkeys(K.ta))
        if ring:
            self.r.zrem(K.tr, ring[self.operator_steps // 4 % len(ring)])
        if active:
            self.r.hdel(K.ta, active[0])
        for mode in ("active", "ring", "tasks"):
            cursor = "0"
            for _ in range(1000):
                call = self.b.reconcile(Q, cursor, 3) if mode == "tasks" else self.b.tenant_fix(Q, mode, cursor, 2)
                cursor, _ = self.x.run(call)
                if cursor == "0":
                    break
        self.trace.append(f"hand edit: {ring[:1]} out of the ring, {active[:1]} out of ta; swept")

    def burst_of_a(self) -> None:
        """Tenant a sends two tasks at once (no draw): its rate meets a backlog."""
        for _ in range(2):
            id = self.new_id()
            self.client.enqueue("t", self.n, queue=Q, task_id=id, tenant="a", max_retry=1)
            self.known[id] = Known(tenant="a")
            self.trace.append(f"enqueue {id} tenant=a (a burst)")

    def dequeue(self, count: int, worker: str = "") -> list[str]:
        blocked = set(self.blocked)
        before = self.rate_state_before(count)
        leases, paused = self.r.zcard(K.lease), self.r.exists(K.paused)
        got = super().dequeue(count, worker)
        assert not (paused and got), (f"the queue is paused, and a dequeue handed out {got}", self.trace[-12:])
        if self.limit:  # (a live resize: never more leased than the limit, but those leased before it)
            now = self.r.zcard(K.lease)
            assert now <= max(self.limit, leases), (f"{now} leased after a dequeue, over the limit {self.limit}",
                                                    self.trace[-12:])
        self.rate_state_after(before, count, got)
        self.restarted_worker_meets(got, worker)
        for id in got:
            stored = self.r.hget(K.tasks, id.rpartition("|")[0] or id)
            mtype = codec.decode(message_of(stored)).type if stored else "?"
            assert mtype not in blocked, (f"{id} of type {mtype} runs while its type is blocked", self.trace[-12:])
            assert id not in self.gated or VERSIONS.get(worker, 0) >= VERSIONS["w2"], (
                f"{id} runs on {worker or 'a worker'}, older than it needs", self.trace[-12:])
            if self.rate_since is not None and id in self.known and self.known[id].tenant == "a":
                self.rate_started += 1
        if self.rate_since is not None:
            allowed = BURST + int(RATE * (self.clock.now_ms() - self.rate_since) / 1000 + 1e-9)
            assert self.rate_started <= allowed, (f"tenant a started {self.rate_started} tasks under its rate, "
                                                  f"at most {allowed} allowed", self.trace[-12:])
        return got

    def a_held_back_worker_is_woken(self) -> None:
        """The model's check, less the tasks of tenants held by their rate (``tw``, out of the ring:
        their dequeue's reply tells when to look again; no worker is woken for them), also one a
        push put back in the ring while its next task is not due (includes/tenant tenant_ready: the
        dequeue that meets it holds it again)."""
        if not (self.held_back and self.limit):
            return
        if self.r.exists(K.paused) or self.r.zcard(K.lease) >= self.limit:
            return
        now = self.clock.now_ms()
        held = {t for t, due in self.r.zrange(K.tw, 0, -1, withscores=True) if due > now}
        pending = self.r.llen(K.pending) + self.r.zcard(K.prio)
        pending += sum(self.r.zlexcount(K.tq, b"[" + t + b"\0", b"(" + t + b"\1")
                       for t in self.r.zrange(K.tr, 0, -1) if t and t not in held)
        if pending:
            assert self.r.llen(K.wake) > 0, ("a slot is free and tasks are pending, but no worker is woken",
                                             self.trace[-12:])

    def pending_tasks_in_one_place(self) -> None:
        """The model's check, where a tenant held by its rate (``tw``, out of the ring) that has
        pending tasks counts as in the ring (a tw entry of a tenant with none is dropped by the
        dequeue that meets it)."""
        real = self.r
        self.r = RingWithHeld(real)  # type: ignore[assignment]
        try:
            super().pending_tasks_in_one_place()
        finally:
            self.r = real

    # -- issue 42 defects 1, 5, 6: the queue's default rate cleared while a tenant waits on it, held
    # tasks of a rated tenant, passes that grow large

    def default_rate_toggle(self) -> None:
        """The queue's default rate for its tenants, on: tenant b sends a burst and a worker takes
        what the rate allows (b waits on the default rate); off (clear_tenant_defaults or
        set_tenant_defaults(rate=0), in turn) while it waits: the dequeue checks say b is back in
        the round at once."""
        if not self.r.hexists(K.tn, "d"):
            self.insp.set_tenant_defaults(Q, rate=DEFAULT_RATE)
            self.trace.append(f"tenant defaults rate {DEFAULT_RATE}")
            self.burst_of("b")
            self.dequeue(2)
        else:
            held = self.r.zcard(K.tw)
            if self.operator_steps % 2:
                self.insp.clear_tenant_defaults(Q)
            else:
                self.insp.set_tenant_defaults(Q, rate=0)
            self.trace.append(f"tenant defaults {'cleared' if self.operator_steps % 2 else 'rate 0'}")
            assert not held or self.r.llen(K.wake) > 0, (
                "the default rate changed while tenants were held by a rate, and no worker is woken", self.trace[-12:])
            self.sweeps += 1
            if self.sweeps % 2 == 0:  # the sweep's ring part comes first (issue 42 #1: it covers them too)
                self.ring_sweep_puts_back()
            self.dequeue(1)  # the worker it woke

    def ring_sweep_puts_back(self) -> None:
        """One pass of the sweep's ring part (tenant_fix): after it, no tenant is held by a rate it
        no longer has (its own settings' or the queue's defaults')."""
        cursor = "0"
        for _ in range(1000):
            cursor, _ = self.x.run(self.b.tenant_fix(Q, "ring", cursor, 2))
            if cursor == "0":
                break
        tn = {f.decode(): v.decode() for f, v in self.r.hgetall(K.tn).items()}
        for name in self.r.zrange(K.tw, 0, -1):
            if self.r.zscore(K.tr, name) is not None:  # in the ring too (a push put it back while held: includes/
                continue  # tenant tenant_ready): it takes turns; the next dequeue drops its tw entry (tenant_back)
            own = tn.get(f"l:{name.decode()}", tn.get("d", "")).split(" ")
            pending = self.r.zlexcount(K.tq, b"[" + name + b"\0", b"(" + name + b"\1")
            assert not pending or (len(own) >= 5 and float(own[3]) > 0), (
                f"tenant {name.decode()} is still held by a rate it no longer has after the sweep", self.trace[-12:])
        self.trace.append("sweep: ring part")

    def passes_grow_large(self) -> None:
        """The state ~10^12 turns of weight 1 leave on a queue whose tenant work never ran dry: the
        virtual time and every pass moved up to near 10^15 (by hand, as the repro does); the next
        dequeue must rebase them (rate_state_after) and serve every tenant as before."""
        v = self.r.hget(K.tn, "v")
        if v is None:
            return
        shift = 10**15 - 2_000 - int(float(v))
        ring = self.r.zrange(K.tr, 0, -1, withscores=True)
        if ring:
            self.r.zadd(K.tr, {t: score + shift for t, score in ring})
        self.r.hset(K.tn, "v", str(int(float(v)) + shift))
        self.trace.append(f"passes moved up by {shift}")

    def rate_state_before(self, count: int) -> dict[str, Any]:
        """What a dequeue is held to, read before it: tw's head (a tenant held by its rate) when its
        next task is due or its rate is gone, and tenant a's rate schedule (its TAT)."""
        tn = {f.decode(): v.decode() for f, v in self.r.hgetall(K.tn).items()}
        n = count if not self.limit else min(count, self.limit - self.r.zcard(K.lease))  # (the dequeue's count)
        free = not self.r.exists(K.paused) and n > 0 and self.r.exists(K.tr, K.tw) > 0  # (it runs take_fair)
        stuck: dict[str, bool] = {}  # tw's first n+1 (what the dequeue reads): due, or with no rate in force
        for name, due in self.r.zrange(K.tw, 0, n, withscores=True) if free else []:
            own = tn.get(f"l:{name.decode()}", tn.get("d", "")).split(" ")
            gone = len(own) < 5 or float(own[3]) <= 0  # no rate in force for it any more
            if due <= self.clock.now_ms() or gone:
                stuck[name.decode()] = gone
        return {"stuck": stuck, "n": n, "free": free, "tat": tn.get("k:a"), "now": self.clock.now_ms()}

    def rate_state_after(self, before: dict[str, Any], count: int, got: list[str]) -> None:
        """After a dequeue that took tenants' turns (not paused, a slot free, not every one of
        ``count`` a targeted run): tw's head, due or with no rate in force, is back in the round
        (or held again, until a time to come); the passes and the virtual time are below
        PASS_REBASE; and tenant a's schedule moved by its rate's interval for each task of it
        started, and by nothing for its tasks held (issue 42 defects 1, 6, 5)."""
        now = before["now"]
        fair = before["free"] and sum("|" in i for i in got) < before["n"]  # (the dequeue took tenants' turns)
        for name, gone in before["stuck"].items() if fair else ():
            due = self.r.zscore(K.tw, name)
            assert due is None or (due > now and not gone), (f"tenant {name} still held by its rate after a dequeue "
                                                             "(its next task was due, or its rate was gone)",
                                                             self.trace[-12:])
        v = self.r.hget(K.tn, "v")
        assert not fair or v is None or float(v) < PASS_REBASE, (f"the virtual time {v!r} is past PASS_REBASE", self.trace[-12:])
        started = sum(1 for i in got if i in self.known and self.known[i].tenant == "a")
        after = self.r.hget(K.tn, "k:a")
        if self.rate_since is None or after is None:
            return
        t = 1000 / RATE
        tat = float(before["tat"]) if before["tat"] is not None else None
        want = (max(tat, now - min(t / 2, 100)) + started * t) if tat is not None else now + started * t
        if started == 0:
            want = tat if tat is not None else float(after)
        assert abs(float(after) - want) < 1, (f"tenant a's rate schedule moved to {float(after)}, not {want}: "
                                               f"{started} task(s) of it started", self.trace[-12:])

    def burst_of(self, tenant: str) -> None:
        """Tenant ``tenant`` sends two tasks at once (no draw)."""
        for _ in range(2):
            id = self.new_id()
            self.client.enqueue("t", self.n, queue=Q, task_id=id, tenant=tenant, max_retry=1)
            self.known[id] = Known(tenant=tenant)
            self.trace.append(f"enqueue {id} tenant={tenant} (a burst)")

    @invariant()
    def held_tasks_in_their_band(self) -> None:
        assert set(self.insp.blocked_types(Q)) == self.blocked, (self.insp.blocked_types(Q), self.trace[-12:])
        for member, score in self.r.zrange(K.scheduled, HOLD_FLOOR, "+inf", byscore=True, withscores=True):
            id = member.decode()
            raw = self.r.hget(K.tasks, id)
            assert raw is not None and raw[:1] == b"s", (f"held {id} is {raw[:1] if raw else 'gone'}", self.trace[-12:])
            if score >= TYPE_BAND:
                mtype = codec.decode(message_of(raw)).type
                assert mtype in self.blocked, (f"{id} held for its type {mtype}, not blocked", self.trace[-12:])
            else:
                assert id in self.gated, (f"{id} held for a version it does not need", self.trace[-12:])

    # -- issue 42 defects 2, 3, 4, 10 ---------------------------------------------------------------
    # 3: every third operator step, a worker runs what a side queue (REUSED) holds, the operator
    # removes it, empty (Inspector.remove_queue), and the model's long-lived client uses it again,
    # by its lone enqueue, a batch, and an enqueue with options in turn; after every step a queue
    # holding tasks is a known queue (asynqpy:queues, Inspector.queues()), the set the servers that
    # find their queues by pattern serve. The client once cached the queues it had registered: the
    # task then waited in a queue nothing served, for good.
    # 2, 10 and 4 are the worker's own Python mechanisms (which queues a server of more than four
    # dequeues when a wake token is lost or none announces a task held for its version; the count
    # of the dequeue riding with its idle wait after a live resize); the model's workers are broker
    # calls and its checks take wake tokens for reliable (a held-back worker is woken by one), so
    # they are driven by scenario tests instead: tests/test_queues_many.py
    # (test_a_queue_whose_wake_token_was_lost_is_still_served,
    # test_a_worker_of_many_queues_takes_back_what_was_held_for_its_version), tests/test_deploy_holds.py
    # (test_drain_runs_what_an_older_worker_held_for_the_apps_version) and tests/test_control.py
    # (test_a_scale_down_holds_for_the_dequeue_riding_with_the_idle_wait).

    def reuse_removed_queue(self) -> None:
        token = self.new_token()
        for _ in range(100):  # a worker runs what the queue holds
            got = self.x.run(self.b.dequeue(REUSED, 10, 30_000, token))
            if not got.tasks:
                break
            self.x.run_many([self.b.done(REUSED, id, token, codec.decode(m)) for id, m in got.tasks])
        removed = REUSED in self.insp.queues()
        if removed:
            self.insp.remove_queue(REUSED)
        self.reuses = getattr(self, "reuses", 0) + 1
        way = ("lone", "batch", "options")[self.reuses % 3]
        if way == "lone":
            self.client.enqueue("xr", None, queue=REUSED)
        elif way == "batch":
            self.client.enqueue_many([("xr", 1), ("xr", 2)], queue=REUSED)
        else:
            self.client.enqueue("xr", None, queue=REUSED, max_retry=1)
        self.trace.append(f"queue {REUSED}: {'removed, then ' if removed else ''}used again ({way})")

    @invariant()
    def queues_holding_tasks_are_known(self) -> None:
        if self.r.hlen(queue_keys(REUSED).tasks):
            assert self.r.sismember(ALL_QUEUES, REUSED) and REUSED in self.insp.queues(), (
                f"queue {REUSED} holds tasks and is not a known queue", self.trace[-12:])
    # -- issue 42 defects 7, 9, 11: resends whatever the timing; a worker restarted under its name ---
    # A store call sent again by the connection after its task completed, was archived, went to
    # retry, or is gone (its retention ended); the application sending the same task again (a new
    # call) while it is live; a worker killed while it holds a run, restarted at once under the same
    # name. Deterministic hooks (no draws of their own), so the model's examples stay put.

    RESEND_EVERY = 3
    """One producer step in this many is followed by a resend (issue 42 #7, #11)."""
    RESTART_EVERY = 1
    """Every dequeue by w1 that got a run is followed by w1's restart (issue 42 #9): a rare enough meeting."""

    def init_resends(self) -> None:
        self.stores: dict[str, tuple[Call[Any], codec.Message]] = {}  # id -> its store call and message
        self.generated: set[str] = set()  # ids a client generated (random: whatever is under one is the caller's)
        self.sent: dict[str, tuple[str, Any, dict[str, Any]]] = {}  # id -> the application's enqueue
        self.produced = 0
        self.resent = 0
        self.w1_dequeues = 0
        self.stale: dict[str, Run] = {}  # run id -> the run a killed w1 held (its late success to come)
        self.restarting = False
        inner = self.client._client  # (GatingClient's)
        one = inner._one_call

        def record(p: Any) -> Call[Any]:
            call = one(p)
            if call.script in ("enqueue", "enqueue_keyed", "schedule", "enqueue_target", "group_add"):
                self.stores.setdefault(p.id, (call, p.msg))
                if p.generated_id:
                    self.generated.add(p.id)
            return call

        inner._one_call = record

    def produce(self, data: st.DataObject, kind: str) -> None:
        super().produce(data, kind)
        self.produced += 1
        if self.produced % self.RESEND_EVERY == 0:
            self.resend_meets()

    def resend_meets(self) -> None:
        """A store call the connection sends again, and the same task the application sends again:
        the id's task, whatever became of it, is recognised as the caller's own (nothing written,
        no conflict), but for another task under the id (an operator's edit of a task whose id the
        caller chose: a generated one cannot collide, so it stays the caller's, as the scripts
        document) and a task that is gone (stored again: at-least-once)."""
        ids = sorted(self.stores)
        if not ids:
            return
        id = ids[self.resent % len(ids)]
        self.resent += 1
        call, msg = self.stores[id]
        before = self.r.hget(K.tasks, id)
        st_ = before[:1].decode() if before else "-"
        if st_ == "-":
            k = self.known.get(id)
            if call.script != "enqueue" or not k or k.key or k.parents or msg.unique or msg.group:
                return
            assert self.x.run(call) == 1  # gone: stored again (what no store can see)
            self.trace.append(f"resend {id} (gone) -> stored again")
            return
        stored = codec.decode(message_of(before))
        own = codec.same_task(stored, msg, True) if st_ in "cx" else codec.same_task(stored, msg, False)
        own = own or id in self.generated  # (a generated id cannot collide: an operator's edit left it the caller's)
        if st_ in "cx" and not own:
            return  # another task's end (an edited one): a new copy would replace it (documented)
        try:
            reply: Any = self.x.run(call)
        except TaskIdConflictError:
            reply = "conflict"
        assert (reply != "conflict") == own, (f"resend of {id} ({st_}) -> {reply!r}, own={own}", self.trace[-12:])
        assert self.r.hget(K.tasks, id) == before, (f"resend of {id} ({st_}) wrote", self.trace[-12:])
        self.trace.append(f"resend {id} ({st_}) -> {reply!r}")
        sent = self.sent.get(id)
        if sent and st_ in LIVE and call.script in ("enqueue", "enqueue_keyed") and not msg.group:
            task_type, payload, opts = sent
            try:
                self.client._client.enqueue(task_type, payload, **opts)  # (no gate: the same options)
                again = "ok"
            except TaskIdConflictError:
                again = "conflict"
            except DuplicateTaskError:
                again = "duplicate"
            assert again != "duplicate" and (again == "ok") == own, (
                f"the application sent {id} ({st_}) again -> {again}, own={own}", self.trace[-12:])
            assert self.r.hget(K.tasks, id) == before, (f"sending {id} ({st_}) again wrote", self.trace[-12:])
            self.trace.append(f"application sent {id} ({st_}) again -> {again}")

    def restarted_worker_meets(self, got: list[str], worker: str) -> None:
        """w1 holding a run is killed and a new w1 starts at once: the new one is not handed the run
        while the old lease lives; once the recoverer marked it expired, the new one takes it again,
        and the old run's late success is refused and changes nothing."""
        for id in got:
            old = self.stale.pop(id, None)
            if old is not None:  # taken again: the killed process's success arrives now
                task = id.rpartition("|")[0]
                before = (self.r.hget(K.tasks, task), self.r.hget(K.runs, task))
                try:
                    self.x.run(self.b.run_end(Q, task, codec.decode(old.raw), "s", run=id, token=old.token))
                    late = "accepted"
                except (LeaseLostError, TaskNotFoundError):
                    late = "refused"
                assert late == "refused" and (self.r.hget(K.tasks, task), self.r.hget(K.runs, task)) == before, (
                    f"a killed w1's late success of {id} was {late}", self.trace[-12:])
                self.trace.append(f"killed w1's late success of {id}: {late}")
        runs = [id for id in got if id.endswith("|w1")]
        if worker != "w1" or not runs or self.restarting:
            return
        self.w1_dequeues += 1
        if self.w1_dequeues % self.RESTART_EVERY:
            return
        for id in runs:  # w1 is killed: its runs are left leased
            self.stale[id] = self.running.pop(id)
        self.trace.append(f"w1 killed holding {runs}; a new w1 starts")
        self.restarting = True
        try:
            again = self.dequeue(3, "w1")
            taken = [id for id in again if id in runs]
            assert not taken, (f"a new w1 took {taken} while the killed w1's lease lived", self.trace[-12:])
            self.time_passes(LEASE_MS + 1_000)  # the killed w1's leases expire; the recoverer marks them
            self.r.delete(K.wake_for("w1"))
            self.recover()
            open_ = [id for id in runs if self.state(id.rpartition("|")[0]) == "m"
                     and codec.decode(self.stale[id].raw).workers is None]
            assert not open_ or self.r.llen(K.wake_for("w1")) > 0, (
                f"the new w1 is not woken for {open_} (the queue's token may go to a worker that cannot "
                "take them)", self.trace[-12:])
            self.dequeue(3, "w1")  # the new w1 takes them again (the killed one's late success: above)
            self.runs_records_sound()
        finally:
            self.restarting = False

    def finish_one(self, id: str, how: str, data: st.DataObject) -> None:
        self.touched.add(id.rpartition("|")[0] or id)
        if id in self.running:  # (a run of a killed w1 writes nothing)
            self.x.last = []
            super().finish_one(id, how, data)
            self.finishes += 1
            if self.x.last and self.finishes % FINISH_RESEND_EVERY == 0:
                self.outcome_resent(id, self.x.last[0])

    def outcome_resent(self, id: str, call: Call[Any]) -> None:
        """The worker's outcome call, sent again after it committed (its reply lost): refused or
        answered as done, it changes nothing."""
        task = id.rpartition("|")[0] or id
        before = (self.r.hget(K.tasks, task), self.r.hget(K.runs, task), self.r.zcard(K.lease), self.r.llen(K.pending))
        out = self.x.run_many([call])[0]
        assert not isinstance(out, Exception) or isinstance(out, (LeaseLostError, TaskNotFoundError)), (
            f"{call.script} of {id} sent again -> {out!r}", self.trace[-12:])
        after = (self.r.hget(K.tasks, task), self.r.hget(K.runs, task), self.r.zcard(K.lease), self.r.llen(K.pending))
        assert after == before, (f"{call.script} of {id} sent again after it committed changed {before} -> {after}",
                                 self.trace[-12:])
        self.trace.append(f"{call.script} of {id} sent again -> {type(out).__name__}")

    @invariant()
    def runs_records_sound(self) -> None:
        """A targeted task's runs record names each worker once, and each run it says is running is
        a live run task with a lease (else no worker could take its place: the task strands)."""
        for task, rec in self.r.hgetall(K.runs).items():
            names = [e.split(b"=")[0] for e in rec.split(b" ")[3:]]
            assert len(names) == len(set(names)), (f"runs record of {task!r} names a worker twice: {rec!r}",
                                                   self.trace[-12:])
            for e in rec.split(b" ")[3:]:
                name, _, st_ = e.partition(b"=")
                if st_[:1] == b"r":
                    run = task + b"|" + name
                    v = self.r.hget(K.tasks, run)
                    assert v and v[:1] == b"a" and self.r.zscore(K.lease, run) is not None, (
                        f"{run!r} is running in its record but is {v[:1] if v else 'gone'}", self.trace[-12:])

    # -- bounded queues (issue 43 item 5; docs/queues.md "Bounded queues"): a self-contained block ----

    cap_rejected_seen = 0
    cap_dropped_seen = 0
    """The tasks the model saw its caps refuse and drop (the conf counters must say the same)."""
    cap_storms = 0

    def cap_storm(self) -> None:
        """(Every second operator step; no draw of its own, so the model's examples, and the plus
        mutants they catch, stay as they were: its choices cycle with the storms.) An operator caps the queue or tenant "a" at its pending count plus 0 to 2 (reject or
        drop_oldest), producers send 1 to 4 plain tasks (a tenant, a priority; one in three a
        batch of two; in every second storm one more, the lone producer's, with default options),
        then the cap goes. At each call: a refused call stored nothing and changed
        no task; an accepted one brought the capped count to at most the cap (it was at most the
        cap before); every task that changed is a new one or a drop: pending before, archived now,
        with no key and not unique, its 'archived' event saying 'dropped: queue full', and of the
        capped tenant for a tenant's cap. Everything else the model checks after the step (children
        of a dropped parent told, pending tasks in one place, the ring) holds as well."""
        self.cap_storms += 1
        k = self.cap_storms + self.n  # (varies with the example: how many tasks came before)
        tenant_cap, overflow = k % 3 == 2, ("reject", "drop_oldest")[k // 2 % 2]

        def count() -> int:
            if tenant_cap:
                return int(self.r.zlexcount(K.tq, b"[a\0", b"(a\1"))
            return int(self.r.llen(K.pending) + self.r.zcard(K.prio) + self.r.zcard(K.tq))

        cap = count() + k % 3 or 1
        if tenant_cap:
            self.insp.set_tenant(Q, "a", max_pending=cap, overflow=overflow)
        else:
            self.insp.set_queue_cap(Q, cap, overflow)
        self.trace.append(f"cap {'tenant a' if tenant_cap else 'queue'} {cap} {overflow}")
        client = self.client._client  # (not the gating client: a refused id is not sent again later)
        for j in range(1 + k % 4 + k % 2):
            lone = j == 1 + k % 4  # (an odd storm's last call: the lone producer's, lua/enqueue_lone.lua)
            n = 2 if (k + j) % 3 == 0 and not lone else 1
            tenant = "" if lone else "a" if tenant_cap else TENANTS[(k + j) % len(TENANTS)]
            ids = [] if lone else [self.new_id() for _ in range(n)]
            before, start = dict(self.r.hgetall(K.tasks)), count()
            opts: dict[str, Any] = {"queue": Q, "max_retry": 1, "priority": (5, 5, 2, 8)[(k * 3 + j) % 4]}
            if tenant:
                opts["tenant"] = tenant
            try:
                if lone:  # its quick call meets the cap: it leaves the task to enqueue.lua's admission
                    client._ruled.clear()  # (a queue it found ruled before is tried again at once)
                    ids = [client.enqueue("t", self.n, queue=Q).id]
                elif n == 1:
                    client.enqueue("t", self.n, task_id=ids[0], **opts)
                else:
                    client.enqueue_many([("t", i, {"task_id": i}) for i in ids], **opts)
            except QueueFullError as exc:
                self.cap_rejected_seen += exc.count
                self.trace.append(f"cap refused {ids}")
                assert dict(self.r.hgetall(K.tasks)) == before, ("a refused call changed tasks", self.trace[-12:])
                continue
            for id in ids:
                self.known[id] = Known(tenant=tenant)
            after = dict(self.r.hgetall(K.tasks))
            changed = [i for i in set(before) | set(after) if before.get(i) != after.get(i)]
            dropped = sorted(i.decode() for i in changed if i.decode() not in ids)
            self.trace.append(f"cap accepted {ids}, dropped {dropped}")
            assert count() <= max(cap, start), (f"{count()} pending over the cap {cap}", self.trace[-12:])
            events: dict[str, Any] = {}
            for _, f in self.r.xrevrange(K.events, count=50):  # (newest first: each id's last event)
                if b"id" in f:
                    events.setdefault(f[b"id"].decode(), f)
            for id in dropped:
                was, now = before[id.encode()], after[id.encode()]
                m = codec.decode(message_of(was))
                assert was[:1] == b"p" and now[:1] == b"x" and not m.key and not m.unique, (
                    f"{id} changed by an enqueue: {was[:1]!r} -> {now[:1]!r}, key {m.key!r}, unique {m.unique}",
                    self.trace[-12:])
                assert not tenant_cap or m.tenant == "a", (f"{id} of {m.tenant!r} dropped for a's cap", self.trace[-12:])
                ev = events.get(id, {})
                assert ev.get(b"e") == b"archived" and ev.get(b"error") == b"dropped: queue full", (
                    f"dropped {id} has no event with its reason: {ev}", self.trace[-12:])
            self.cap_dropped_seen += len(dropped)
        if tenant_cap:
            self.insp.set_tenant(Q, "a", max_pending=None)
        else:
            self.insp.set_queue_cap(Q, None)

    @invariant()
    def cap_counters_match(self) -> None:
        """The queue's counters are the refusals and drops the model saw, and no cap outlives its storm."""
        conf = self.r.hmget(K.conf, "cap_rejected", "cap_dropped", "cap", "cap:a")
        assert (int(conf[0] or 0), int(conf[1] or 0)) == (self.cap_rejected_seen, self.cap_dropped_seen), (
            f"counters {conf[:2]}, the model saw {self.cap_rejected_seen} refused, {self.cap_dropped_seen} dropped",
            self.trace[-12:])
        assert conf[2] is None and conf[3] is None, (f"a cap left: {conf[2:]}", self.trace[-12:])


    # -- issue 43 item 4: the mechanisms the model did not meet yet --------------------------------
    # One rule of its own (``mechanism``), so the ``step`` rule's draws stay as they were.

    def init_mechanisms(self) -> None:
        self.insp.set_events(Q, EVENTS_CAP)  # a small cap: the stream is trimmed within an example
        self.events_full = False  # the stream held its cap of events once (it keeps holding it)
        self.touched: set[str] = set()  # ids this step may have removed (an end, an operator, ...)
        self.refresh: set[str] = set()  # the debounced tasks (a debounce may replace any of them)
        self.last_seen: dict[str, str] = {}  # the known tasks' states after the last step
        self.last_kept: dict[str, tuple[str, float]] = {}  # completed/archived -> (c|x, expiry|archived at)
        self.sweeps = 0
        self.finishes = 0
        self.steps_done = 0
        self.mechanisms, self.mech_offset = 0, -1
        self.side = SideWorker(self)
        self.x = RecordingExecutor(self.x)  # type: ignore[assignment]
        self.durable = DurableDriver(self)

    @precondition(lambda self: self.steps_done % DURABLE_EVERY == 1)
    @rule(data=st.data(), actions=st.integers(1, 3))
    def durable_runs(self, data: st.DataObject, actions: int) -> None:
        """Issue 46: durable runs as one more kind of work (tests/model_durable.py): started,
        signalled, cancelled, removed, worked with faults (a step failing, a worker killed in a step,
        after a checkpoint or before its commit, a commit's reply lost), their timers, the
        recoverer, the queue removed, tenant turns and a deploy hold."""
        for _ in range(actions):
            self.durable.step(data)

    @precondition(lambda self: self.steps_done % MECHANISM_EVERY == MECHANISM_EVERY - 1)
    @rule(data=st.data())
    def mechanism(self, data: st.DataObject) -> None:
        """One meeting the ``step`` rule does not draw: retention expiry (the janitor's pass after
        the retention of completed tasks, or the archive's age, ran out), the side queues (more
        than four, served by a worker of a pattern that fetches by wake token; enqueued into,
        removed and used again, with lost wake tokens and version holds taken back), and live
        resizes (the queue's or a tenant's concurrency lowered and raised while tasks are leased),
        the queue paused, the bulk actions, a targeted task's workers changed, a dequeue's reply lost."""
        if self.mech_offset < 0:
            self.mech_offset = data.draw(st.integers(0, len(MECHANISMS) - 1))
        what = MECHANISMS[(self.mech_offset + self.mechanisms) % len(MECHANISMS)]
        self.mechanisms += 1
        if what == "expire":
            self.retention_passes(data.draw(st.sampled_from([601_000, 3_601_000])))
        elif what == "side":
            self.side.step(data)
        elif what == "side_remove":
            self.side.remove(data.draw(st.sampled_from(SIDE)), data.draw(st.booleans()))
        elif what == "side_settle":
            self.side.settle()
        elif what == "resize":
            self.live_resize(data.draw(st.sampled_from(["queue", "tenant"])))
        elif what == "pause":
            self.pause_toggle()
        elif what == "bulk":
            verb = data.draw(st.sampled_from(["delete", "run", "archive"]))
            self.bulk(verb, data.draw(st.sampled_from(BULK_STATES[verb])))
        elif what == "retarget":
            self.retarget(data.draw(st.sampled_from([["w1"], None, ["w1", "w2"]])))
        elif what == "extend":
            self.extend()
        else:
            self.lost_dequeue(data.draw(st.integers(1, 2)))

    def pause_toggle(self) -> None:
        """The operator pauses the queue (``queue pause``), or unpauses it: while paused a dequeue
        hands out nothing (PlusMachine.dequeue checks it); unpaused with tasks pending, a worker is
        woken."""
        if self.r.exists(K.paused):
            self.insp.unpause(Q)
            pending = self.r.llen(K.pending) + self.r.zcard(K.prio) + self.r.zcard(K.tq)
            assert not pending or self.r.llen(K.wake) > 0, ("unpaused with tasks pending, but no worker is woken",
                                                            self.trace[-12:])
            self.trace.append("unpause")
        else:
            self.insp.pause(Q)
            self.trace.append("pause")

    def bulk(self, verb: str, state: str) -> None:
        """``task deleteall|runall|archiveall``: every task of one state at once."""
        code = STATE_CODES[state]
        ids = [i for i, s_ in self.states().items() if s_ == code]
        self.touched.update(ids)
        n = getattr(self.insp, f"{verb}_all")(Q, state)
        after = self.states()
        for id in ids:
            if verb == "run":
                self.forced.add(id)
                if self.known[id].key and after[id] in "pb":
                    self.admit(id)
        self.trace.append(f"{verb}_all {state}: {n} ({ids})")

    def retarget(self, workers: list[str] | None) -> None:
        """``Inspector.set_workers``: a targeted task's allowed workers change while it may have
        runs going on."""
        ids = [i for i in self.targeted if self.state(i) == "m"]
        if not ids:
            return
        id = ids[self.n % len(ids)]
        try:
            self.insp.set_workers(Q, id, workers)
        except (TaskStateError, TaskNotFoundError, InvalidArgumentError) as exc:
            self.trace.append(f"set_workers {id} {workers}: {type(exc).__name__}")
            return
        self.trace.append(f"set_workers {id} {workers}")

    def extend(self) -> None:
        """The workers renew the leases of what they run (their heartbeat: ``extend``): a lease
        renewed ends a lease period from now; one refused is one the worker no longer holds (its
        lease expired and was recovered, an operator cancelled it, or a run's worker is no longer
        allowed: it is given back), and the worker drops it."""
        if not self.running:
            return
        held = [(id, run.token, id.rpartition("|")[0]) for id, run in sorted(self.running.items())]
        now, lost = self.x.run(self.b.extend(Q, LEASE_MS, held))
        for id, token, task in held:
            v = self.r.hget(K.tasks, id)
            mine = v is not None and v[:1] == b"a" and v[1:9] == token.encode()
            if id in lost:
                assert not mine or task, (f"the lease of {id}, held, was refused", self.trace[-12:])
                del self.running[id]
            else:
                assert mine and self.r.zscore(K.lease, id) == now + LEASE_MS, (
                    f"the lease of {id} was renewed, but it is not held till {now + LEASE_MS}", self.trace[-12:])
                self.running[id].deadline = now + LEASE_MS
        self.trace.append(f"extend {[id for id, _, _ in held]}: lost {lost}")

    def lost_dequeue(self, count: int) -> None:
        """A dequeue whose reply is lost: its tasks are leased to no one that knows it, until the
        lease expires and the recoverer hands them on (the model's checks: nothing lost, no slot
        without an active task)."""
        got = self.x.run(self.b.dequeue(Q, count, LEASE_MS, self.new_token(), ""))
        self.trace.append(f"dequeue {count}: reply lost ({[i for i, _ in got.tasks]})")

    def retention_passes(self, ms: int) -> None:
        """Time passes beyond the retention of completed tasks (600 s; or the archive's age limit,
        an hour, as the model's archive calls give it), and the janitor's pass runs: every
        completed task whose retention ended is gone after it, archived ones past the age limit
        too; the others stay (nothing_lost)."""
        self.time_passes(ms)
        deleted, nxt = self.x.run(self.b.expire(Q, 100))
        trimmed = self.x.run(self.b.trim(Q, 10_000, ARCHIVE_MAX_AGE_MS))
        now = self.clock.now_ms()
        left = self.r.zrange(K.completed, "-inf", now, byscore=True)
        assert not left, (f"completed tasks past their retention are kept after the janitor's pass: {left}",
                          self.trace[-12:])
        self.trace.append(f"retention: +{ms} ms, expired {deleted}, trimmed {trimmed} (next {nxt})")

    def live_resize(self, what: str) -> None:
        """The operator resizes while tasks are leased: the queue's concurrency limit (or tenant
        a's) set below what runs now, a dequeue (held back: nothing more is handed out, the
        dequeue checks say), then raised again (a worker held back is woken: the model's check)."""
        if not self.running:
            self.dequeue(2, "w1")
        leased = self.r.zcard(K.lease)
        if what == "queue":
            self.set_limit(max(1, leased - 1))
            before = self.r.zcard(K.lease)
            got = self.dequeue(2)
            assert not got or before < self.limit, (f"a dequeue got {got} with {before} leased at a limit of "
                                                    f"{self.limit}", self.trace[-12:])
            self.set_limit(self.limit + 2)
        else:
            active = int(self.r.hget(K.tn, "a:a") or 0)
            self.insp.set_tenant(Q, "a", concurrency=max(1, active - 1))
            self.trace.append(f"tenant a concurrency {max(1, active - 1)} with {active} active")
            self.dequeue(2)  # (the dequeue's check: no tenant over its concurrency by a dequeue)
            self.insp.set_tenant(Q, "a", concurrency=0)
            self.trace.append("tenant a concurrency 0")

    def pick_target(self, data: st.DataObject, verb: str) -> str:
        id = super().pick_target(data, verb)
        self.touched.add(id)
        return id

    def aggregate(self, group: str, stale: bool) -> None:
        self.touched.update(i.decode() for i in self.r.zrange(K.group(group), 0, -1))
        super().aggregate(group, stale)

    def enqueue_debounced(self, payload: int) -> None:
        self.touched.update(self.refresh)
        super().enqueue_debounced(payload)
        self.refresh.add(f"t{self.n}")

    # -- the checks of issue 43 item 4 ---------------------------------------------------------

    @invariant()
    def nothing_lost(self) -> None:
        """A known task leaves Redis only by a way that removes it: its own end (success without
        retention), an operator's delete, an aggregation of its group, a debounce replacing it, the
        end of its retention (completed) or of the archive's age limit (archived); never by a step
        that did not touch it."""
        states = self.states()
        now = self.clock.now_ms()
        for id, st_ in states.items():
            was = self.last_seen.get(id)
            if st_ != "-" or was is None or was == "-" or id in self.touched:
                continue
            kept = self.last_kept.get(id)
            assert kept is not None and kept[1] <= now, (
                f"{id} is gone (it was {was}), though no step removed it", self.trace[-12:])
        self.last_seen = states
        self.last_kept = {m.decode(): ("c", s) for m, s in self.r.zrange(K.completed, 0, -1, withscores=True)}
        self.last_kept.update({m.decode(): ("x", s + ARCHIVE_MAX_AGE_MS)
                               for m, s in self.r.zrange(K.archived, 0, -1, withscores=True)})
        self.touched = set()
        self.steps_done += 1

    @invariant()
    def counts_agree(self) -> None:
        """The queue's counts (Inspector.queue_info) are the tasks' states as stored."""
        by_state: dict[str, int] = {}
        for v in self.r.hvals(K.tasks):
            by_state[v[:1].decode()] = by_state.get(v[:1].decode(), 0) + 1
        info = self.insp.queue_info(Q)
        seen = {"pending": info.pending, "active": info.active, "scheduled": info.scheduled, "retry": info.retry,
                "archived": info.archived, "completed": info.completed, "waiting": info.waiting,
                "blocked": info.blocked, "aggregating": info.aggregating, "targeted": info.targeted}
        stored = {name: by_state.get(code, 0) for name, code in STATE_CODES.items()}
        assert seen == stored, (f"the queue's counts {seen}, its tasks {stored}", self.trace[-12:])

    @invariant()
    def events_within_cap(self) -> None:
        """The event stream's count of its events (conf 'kept') is what it holds, at most the cap
        and a hundredth (and one entry) more, and once it held the cap it keeps holding it: the
        oldest events go, never more (issue 42 #8)."""
        held = 0
        for _, fields in self.r.xrange(K.events):
            ids = fields.get(b"ids")
            held += len(ids.split(b" ")) if ids else 1
        kept = self.r.hget(K.conf, "kept")
        assert kept is None or int(kept) == held, (f"the stream counts {kept} events, holds {held}", self.trace[-12:])
        assert held <= EVENTS_CAP + max(1, EVENTS_CAP // 100) + IDS_PER_ENTRY, (
            f"the stream holds {held} events, its cap is {EVENTS_CAP}", self.trace[-12:])
        if held >= EVENTS_CAP:
            self.events_full = True
        assert not self.events_full or held >= EVENTS_CAP, (
            f"the stream holds {held} events, below its cap {EVENTS_CAP} it held before", self.trace[-12:])

    @invariant()
    def side_queues_sound(self) -> None:
        self.side.check()

    @invariant()
    def durable_runs_sound(self) -> None:
        self.durable.check()

    @invariant()
    def targeted_runs_kept(self) -> None:
        """A targeted task kept after its end (completed with retention, archived) keeps its final
        runs record (issue 29 #8)."""
        states = self.states()
        for id in self.targeted:
            if states.get(id) in ("c", "x"):
                assert self.r.hexists(K.ran(id), ""), (f"targeted {id} is kept ({states[id]}) without its runs "
                                                       "record", self.trace[-12:])


# -- scenarios: a meeting driven step by step, with every check after each -----------------------
# A mutant whose header names one (``scenario: NAME``, tests/test_model_mutants.py) runs it before
# the model's drawn examples: its catch does not depend on what the examples draw. Each runs here
# on fakeredis on the scripts as they are (it must pass), in well under a second.


class Draws:
    """A scenario's stand-in for hypothesis's ``data``: the values queued, then the first element
    of a ``sampled_from`` (False for a boolean, the lowest integer)."""

    def __init__(self, *values: Any) -> None:
        self.values = list(values)

    def draw(self, strategy: Any) -> Any:
        if self.values:
            return self.values.pop(0)
        while hasattr(strategy, "wrapped_strategy"):
            strategy = strategy.wrapped_strategy
        if hasattr(strategy, "elements"):
            return strategy.elements[0]
        return getattr(strategy, "start", False)


CHECKS = ("checks", "held_tasks_in_their_band", "queues_holding_tasks_are_known", "runs_records_sound",
          "nothing_lost", "counts_agree", "events_within_cap", "side_queues_sound", "targeted_runs_kept",
          "durable_runs_sound")
"""Every check the model plus makes after a step (its invariants)."""


def check_all(m: PlusMachine) -> None:
    for name in CHECKS:
        getattr(m, name)()


def enqueue_plain(m: PlusMachine, **opts: Any) -> str:
    id = m.new_id()
    m.client.enqueue("t", m.n, queue=Q, task_id=id, max_retry=1, **opts)
    m.known[id] = Known(tenant=opts.get("tenant", ""), key=opts.get("key", ""))
    if opts.get("key") and not opts.get("process_in"):
        m.admit(id)
    m.trace.append(f"enqueue {id} {opts}")
    check_all(m)
    return id


def resend_after_commit(m: PlusMachine) -> None:
    """A task kept with a retention completes; its store call is sent again (its reply was lost)."""
    id = enqueue_plain(m, retention=600)
    assert m.dequeue(1) == [id]
    m.finish_one(id, "complete", Draws())
    check_all(m)
    m.resend_meets()
    check_all(m)


def restarted_worker(m: PlusMachine) -> None:
    """w1 takes a run of a task any worker may run (runs=2), is killed and restarted under its name
    (PlusMachine.restarted_worker_meets: its lease expires, the recoverer ends the run, the new w1
    must be woken and take it again, counted once)."""
    id = m.new_id()
    m.client.enqueue("tg", m.n, queue=Q, task_id=id, runs=2, max_retry=1)
    m.known[id] = Known()
    m.targeted[id] = 0
    check_all(m)
    assert m.dequeue(1, "w1") == [f"{id}|w1"]
    check_all(m)


def events_counted(m: PlusMachine) -> None:
    """Tasks enqueued, taken and done: the stream's count of events follows every entry."""
    for _ in range(3):
        enqueue_plain(m)
    for id in m.dequeue(3):
        m.finish_one(id, "done", Draws())
        check_all(m)


def cap_storms(m: PlusMachine) -> None:
    """Producers meet caps (PlusMachine.cap_storm) six times in a row: the queue's and tenant a's,
    reject and drop_oldest, single calls and batches of two, each through the producer entry
    (lua/includes/admit.lua)."""
    for _ in range(3):
        enqueue_plain(m)
    for _ in range(6):
        m.cap_storm()
        check_all(m)


def removed_queue_rated(m: PlusMachine) -> None:
    """A side queue whose tenants have a default rate: tenant a waits on it (tw) when the
    operator removes the queue (--force); the client uses it again and the side worker serves it."""
    m.side.enqueue("xs0", "batch", "a", False)
    check_all(m)
    m.side.old_worker("xs0")
    check_all(m)
    assert m.r.zcard(queue_keys("xs0").tw), "(the scenario's premise: tenant a waits on the rate)"
    m.side.remove("xs0", True)
    check_all(m)
    m.side.enqueue("xs0", "lone", "a", False)
    m.side.settle()
    check_all(m)


def defaults_changed(m: PlusMachine, sweep: bool = False) -> None:
    """The queue's default rate on (tenant b's burst: b waits on it), then cleared while b waits
    (PlusMachine.default_rate_toggle); ``sweep``: the sweep's ring part runs first."""
    m.operator_steps = 1  # (odd: clear_tenant_defaults)
    m.sweeps = 1 if sweep else 0
    m.default_rate_toggle()
    check_all(m)
    assert m.r.zcard(K.tw), "(the scenario's premise: tenant b waits on the default rate)"
    m.default_rate_toggle()
    check_all(m)


def side_tokens_lost_versions_held(m: PlusMachine) -> None:
    """The side worker (six queues: it fetches by wake token) loses tokens, and the old server
    sets aside a task for version 2 in a queue the side worker already looked at (no token
    announces it): its scan still serves every queue (issue 42 #2, #10)."""
    m.side.enqueue("xs1", "lone", "", False)
    m.side.enqueue("xs2", "lone", "", False)
    m.side.fetch()
    m.side.fetch()
    m.side.enqueue("xs1", "lone", "", True)
    m.side.old_worker("xs1")
    assert m.r.zcount(queue_keys("xs1").scheduled, VERSION_BAND, "+inf"), "(premise: a task held for version 2)"
    m.side.enqueue("xs2", "batch", "b", False)
    m.side.enqueue("xs4", "lone", "", False)
    m.side.fetch(lose=True)
    m.side.fetch(lose=True)
    check_all(m)
    m.side.settle()
    check_all(m)


def retention_expiry(m: PlusMachine) -> None:
    """Completed tasks kept 600 s, archived ones: the janitor's pass after the retention ends."""
    kept = enqueue_plain(m, retention=600)
    failed = enqueue_plain(m)
    for id in m.dequeue(2):
        m.finish_one(id, "complete" if id == kept else "archive", Draws())
        check_all(m)
    m.retention_passes(601_000)
    check_all(m)
    assert m.state(kept) == "-" and m.state(failed) == "x"
    m.retention_passes(3_601_000)
    check_all(m)
    assert m.state(failed) == "-"


def live_resize(m: PlusMachine) -> None:
    """The queue's limit and tenant a's concurrency lowered below what runs, then raised."""
    m.set_limit(3)
    for tenant in ("a", "a", "", ""):
        enqueue_plain(m, **({"tenant": tenant} if tenant else {}))
    m.insp.set_tenant(Q, "a", rate=0)
    m.rate_since = None
    m.dequeue(3, "w1")
    check_all(m)
    m.live_resize("queue")
    check_all(m)
    m.live_resize("tenant")
    check_all(m)


def targeted_kept(m: PlusMachine) -> None:
    """A targeted task (w1 or w2, one run) kept 600 s: its run succeeds; its runs record is kept."""
    id = m.new_id()
    m.client.enqueue("tg", m.n, queue=Q, task_id=id, workers=["w1", "w2"], runs=1, max_retry=1, retention=600)
    m.known[id] = Known()
    m.targeted[id] = 0
    check_all(m)
    assert m.dequeue(1, "w2") == [f"{id}|w2"]
    m.finish_one(f"{id}|w2", "done", Draws())
    check_all(m)
    assert m.state(id) == "c"


def keyed_edit_due_now(m: PlusMachine) -> None:
    """A keyed task scheduled behind its key's holder is edited to run now: it stays scheduled,
    due, for the forwarder's key gate (issue 29 #9), never pending beside the holder."""
    enqueue_plain(m, key="k1")
    later = enqueue_plain(m, key="k1", process_in=1.5)
    m.insp.edit_task(Q, later, process_in=0)
    m.trace.append(f"edit {later} process_in=0 -> {m.state(later)}")
    check_all(m)
    m.forward(True)
    check_all(m)


def tenant_paused_resumed(m: PlusMachine) -> None:
    """Tenant b with pending tasks is paused, then resumed: it is back in the ready ring."""
    for _ in range(2):
        enqueue_plain(m, tenant="b")
    for paused in (True, False):
        m.insp.set_tenant(Q, "b", paused=paused)
        m.trace.append(f"tenant b paused={paused}")
        check_all(m)


def held_frees_its_slot(m: PlusMachine) -> None:
    """A limit of one; the first pending task is of a blocked type: the dequeue holds it, its slot
    is free again, and the worker is not told it was held back by the limit."""
    m.set_limit(1)
    m.insp.block_type(Q, "t")
    m.blocked.add("t")
    enqueue_plain(m)
    id = m.new_id()
    m.client.enqueue("x", m.n, queue=Q, task_id=id, max_retry=1)
    m.known[id] = Known()
    check_all(m)
    m.dequeue(2)  # (two asked, one slot free: the limit bounds the dequeue, and the held task took the slot)
    check_all(m)


def passes_near_the_band(m: PlusMachine) -> None:
    """Tenant b takes turns with passes moved up near 10^15: the next dequeue rebases them."""
    for _ in range(3):
        enqueue_plain(m, tenant="b")
    m.dequeue(1)
    m.passes_grow_large()
    check_all(m)
    m.dequeue(1)
    check_all(m)


def cancel_parent(m: PlusMachine) -> None:
    """A running workflow parent, a child waiting on it, and the operator's cancel of the parent."""
    parent = enqueue_plain(m)
    child = m.new_id()
    m.client.enqueue("child", m.n, queue=Q, task_id=child, after=[(Q, parent)], max_retry=1)
    m.known[child] = Known(parents=[parent])
    check_all(m)
    assert m.dequeue(1) == [parent]
    m.cancel(parent)
    m.trace.append(f"cancel {parent}")
    check_all(m)


def cancel_keyed_holder(m: PlusMachine) -> None:
    """The running holder of key k1 is cancelled by the operator: the key is released."""
    holder = enqueue_plain(m, key="k1")
    assert m.dequeue(1) == [holder]
    m.cancel(holder)
    m.trace.append(f"cancel {holder}")
    check_all(m)


def snoozed_holder(m: PlusMachine) -> None:
    """The holder of key k1 snoozes (RateLimited: scheduled); a later task of k1 waits behind it."""
    holder = enqueue_plain(m, key="k1")
    assert m.dequeue(1) == [holder]
    m.finish_one(holder, "snooze", Draws(1000))
    check_all(m)
    enqueue_plain(m, key="k1")
    m.dequeue(1)
    check_all(m)


def application_resends(m: PlusMachine) -> None:
    """A pending task's store call sent again (its reply lost), and the application sending the
    same task again (a new call, a moment later): both find the caller's own task (issue 42 #11)."""
    enqueue_plain(m)
    m.time_passes(300)
    m.resend_meets()
    check_all(m)


def leases_renewed(m: PlusMachine) -> None:
    """A worker renews the leases of a task and of a targeted run while the operator changes the
    run's allowed workers: a run no longer allowed is given back."""
    enqueue_plain(m)
    tg = m.new_id()
    m.client.enqueue("tg", m.n, queue=Q, task_id=tg, workers=["w1", "w2"], runs=1, max_retry=1)
    m.known[tg] = Known()
    m.targeted[tg] = 0
    assert len(m.dequeue(2, "w2")) == 2
    check_all(m)
    m.extend()
    check_all(m)
    m.insp.set_workers(Q, tg, ["w1"])
    m.trace.append(f"set_workers {tg} ['w1']")
    m.extend()
    check_all(m)
    assert f"{tg}|w2" not in m.running, "(the run no longer allowed is given back)"


def enqueue_typed(m: PlusMachine, task_type: str, **opts: Any) -> str:
    id = m.new_id()
    m.client.enqueue(task_type, m.n, queue=Q, task_id=id, max_retry=1, **opts)
    m.known[id] = Known(tenant=opts.get("tenant", ""))
    m.trace.append(f"enqueue {id} {task_type} {opts}")
    check_all(m)
    return id


def rated_tenant_backlog(m: PlusMachine) -> None:
    """Tenant a (2/s, a burst of 1) has a backlog: a dequeue of three starts one."""
    for _ in range(3):
        enqueue_plain(m, tenant="a")
    m.dequeue(3)
    check_all(m)


def held_tasks_of_a_rated_tenant(m: PlusMachine) -> None:
    """Tenant a (2/s) ran a task; a while later it has a task of a blocked type ahead of one it
    may run: the held one spends no token of its rate (its schedule moves by one interval), and
    the other starts."""
    enqueue_typed(m, "x", tenant="a")
    m.dequeue(1)
    m.time_passes(1_100)
    m.insp.block_type(Q, "t")
    m.blocked.add("t")
    enqueue_plain(m, tenant="a")
    enqueue_typed(m, "x", tenant="a")
    m.dequeue(2)
    check_all(m)


def held_tenant_task(m: PlusMachine) -> None:
    """Tenant b's task of a blocked type: the dequeue holds it, and b's slot is free again."""
    m.insp.block_type(Q, "t")
    m.blocked.add("t")
    enqueue_plain(m, tenant="b")
    m.dequeue(1)
    check_all(m)


def tenant_at_its_concurrency(m: PlusMachine) -> None:
    """Tenant b at a concurrency of 1 with three tasks: a dequeue of three starts one of them."""
    m.insp.set_tenant(Q, "b", concurrency=1)
    for _ in range(3):
        enqueue_plain(m, tenant="b")
    m.dequeue(3)
    check_all(m)


def ring_edited_then_swept(m: PlusMachine) -> None:
    """Tenant b is removed from the ready ring by hand; the sweep's ring part puts it back."""
    for _ in range(2):
        enqueue_plain(m, tenant="b")
    m.hand_edit_then_sweep()
    check_all(m)


def debounced_parent(m: PlusMachine) -> None:
    """A child waits on a debounced task, which the next debounced enqueue replaces."""
    m.enqueue_debounced(0)
    parent = f"t{m.n}"
    check_all(m)
    child = m.new_id()
    m.client.enqueue("child", m.n, queue=Q, task_id=child, after=[(Q, parent)], max_retry=1)
    m.known[child] = Known(parents=[parent])
    check_all(m)
    m.enqueue_debounced(1)
    check_all(m)


def keyed_resent_blocked(m: PlusMachine) -> None:
    """A keyed enqueue whose task waits behind its key's holder, sent again (its reply lost)."""
    enqueue_plain(m, key="k1")
    m.enqueue_keyed_resent("k1")
    check_all(m)


def slot_freed(m: PlusMachine, how: str) -> None:
    """A limit of one: a worker runs a task, a second worker is held back by the limit, and the
    run ends (``how``: done, complete, archive; cancel: the operator's; run: a targeted run's lease
    expired, ended by the recoverer): the freed slot wakes the held-back worker."""
    m.set_limit(1)
    if how == "run":
        id = m.new_id()
        m.client.enqueue("tg", m.n, queue=Q, task_id=id, workers=["w1", "w2"], runs=1, max_retry=1)
        m.known[id] = Known()
        m.targeted[id] = 0
        first = m.dequeue(1, "w2")
    else:
        first = [enqueue_plain(m)]
        assert m.dequeue(1) == first
    enqueue_plain(m)
    m.dequeue(1)
    assert m.held_back, "(premise: the second worker is held back by the limit)"
    m.r.delete(K.wake)  # (the token the enqueue left: taken by a worker that found the limit)
    if how == "cancel":
        m.cancel(first[0])
        m.trace.append(f"cancel {first[0]}")
    elif how == "run":  # (the worker's own end of a run is followed by a rewake: the recoverer's is not)
        m.time_passes(LEASE_MS + 1_000)  # (the held-back worker polls: held back again)
        m.r.delete(K.wake)
        m.recover()
    else:
        m.finish_one(first[0], "done" if how == "run" else how, Draws())
    check_all(m)


def operator_on_parent(m: PlusMachine, verb: str) -> None:
    """A child waits on a pending parent; the operator deletes or archives the parent."""
    parent = enqueue_plain(m)
    child = m.new_id()
    m.client.enqueue("child", m.n, queue=Q, task_id=child, after=[(Q, parent)], max_retry=1)
    m.known[child] = Known(parents=[parent])
    check_all(m)
    m.touched.add(parent)
    getattr(m.insp, f"{verb}_task")(Q, parent)
    m.trace.append(f"{verb} {parent}")
    check_all(m)


def operator_on_holder(m: PlusMachine, verb: str) -> None:
    """Key k1's pending holder and a task blocked behind it; the operator deletes or archives the holder."""
    holder = enqueue_plain(m, key="k1")
    enqueue_plain(m, key="k1")
    m.touched.add(holder)
    getattr(m.insp, f"{verb}_task")(Q, holder)
    m.trace.append(f"{verb} {holder}")
    check_all(m)


def child_of_a_failed_parent(m: PlusMachine) -> None:
    """A child enqueued after a parent that already failed (archived), under ``cancel``."""
    parent = enqueue_plain(m)
    m.insp.archive_task(Q, parent)
    child = m.new_id()
    m.client.enqueue("child", m.n, queue=Q, task_id=child, after=[(Q, parent)], max_retry=1)
    m.known[child] = Known(parents=[parent])
    m.trace.append(f"child {child} after {parent} -> {m.state(child)}")
    check_all(m)


def tenant_task_retried(m: PlusMachine) -> None:
    """Tenant b's running task fails and goes to retry: its tenant slot is free again."""
    id = enqueue_plain(m, tenant="b")
    assert m.dequeue(1) == [id]
    m.finish_one(id, "retry", Draws())
    check_all(m)


def tenant_last_task_deleted(m: PlusMachine) -> None:
    """The operator deletes tenant b's only pending task: b leaves the ready ring."""
    id = enqueue_plain(m, tenant="b")
    m.touched.add(id)
    m.insp.delete_task(Q, id)
    m.trace.append(f"delete {id}")
    check_all(m)


def rated_tenant_emptied(m: PlusMachine) -> None:
    """Tenant a (2/s, a burst of 1) waits on its rate with one task left; the operator deletes that
    task, and once a's time came a dequeue of a task without a tenant meets a in ``tw``: a leaves
    ``tw`` without entering the ready ring (found by fuzzing the model, 2026-12-01: it entered
    the ring with no task)."""
    first, second = enqueue_plain(m, tenant="a"), enqueue_plain(m, tenant="a")
    assert m.dequeue(2) == [first]
    m.touched.add(second)
    m.insp.delete_task(Q, second)
    m.trace.append(f"delete {second}")
    check_all(m)
    m.time_passes(1_100)
    other = enqueue_typed(m, "x")  # (no tenant: the tenant '', whose turn comes first; a type no version gate holds)
    assert m.dequeue(1) == [other]
    check_all(m)


def targeted_resubmitted(m: PlusMachine) -> None:
    """A targeted task whose run is going on is deleted and enqueued again under its id; the old
    run then ends: it changes nothing of the new task."""
    id = m.new_id()
    m.client.enqueue("tg", m.n, queue=Q, task_id=id, workers=["w1", "w2"], runs=1, max_retry=1)
    m.known[id] = Known()
    m.targeted[id] = 0
    assert m.dequeue(1, "w2") == [f"{id}|w2"]
    m.touched.add(id)
    m.insp.delete_task(Q, id)
    m.enqueue_targeted(Draws(None, 1, 0), id)
    check_all(m)
    m.finish_one(f"{id}|w2", "done", Draws())
    check_all(m)


def any_worker_for_one_run(m: PlusMachine) -> None:
    """A targeted task of one run on w1 or w2; the operator asks for any worker (``set_workers``
    None, refused: its message would no longer say it is targeted, found by fuzzing the model,
    2026-12-01), then w2 runs it: the run ends as a run, the task completes."""
    id = m.new_id()
    m.client.enqueue("tg", m.n, queue=Q, task_id=id, workers=list(WORKERS), runs=1, max_retry=1)
    m.known[id] = Known()
    m.targeted[id] = 0
    m.touched.add(id)
    m.retarget(None)
    assert m.dequeue(1, "w2") == [f"{id}|w2"]
    check_all(m)
    m.finish_one(f"{id}|w2", "done", Draws())
    check_all(m)
    assert m.state(id) in ENDED, (id, m.state(id), m.trace[-12:])


def run_id_still_leased(m: PlusMachine) -> None:
    """A queue of limit 2; a targeted task of two runs, its run on w2 going on, is deleted and
    stored again under its id, and a plain task waits: w2's dequeue may not take the new task's
    run under the run id the old run's lease holds (found by fuzzing the model, 2026-12-01: one
    lease entry for two runs, the limit said reached with a slot free, no worker woken)."""
    m.set_limit(2)
    id = m.new_id()
    m.client.enqueue("tg", m.n, queue=Q, task_id=id, runs=2, max_retry=1)
    m.known[id] = Known()
    m.targeted[id] = 0
    assert m.dequeue(1, "w2") == [f"{id}|w2"]
    m.touched.add(id)
    m.insp.delete_task(Q, id)
    m.trace.append(f"delete {id}")
    m.enqueue_targeted(Draws(None, 1, 0), id)
    enqueue_typed(m, "x")
    m.dequeue(2, "w2")
    check_all(m)


def durable_runs(m: PlusMachine) -> None:
    """Issue 46: durable runs meet the faults (tests/model_durable.py), every check after each
    action (clients waiting for runs: each commit wakes the waiters registered since the last); settled, each run ends with the result its recorded steps give."""
    d = m.durable
    for act in (lambda: d.start("r1", ""), lambda: d.start("r2", "a"), lambda: d.start("r3", "a", resend=True),
                lambda: d.watch("r1"), lambda: d.watch("r1"), lambda: d.watch("r2"), lambda: d.work(3, "", 0),
                lambda: d.watch("r1"), lambda: d.signal("r1", True), lambda: d.fail_next("a"), lambda: d.work(3, "checkpoint"),
                lambda: d.work(3, ""), lambda: d.time(1_100), lambda: d.work(3, "step"),
                lambda: d.block(), lambda: d.work(3, ""), lambda: d.block(), lambda: d.time(6_000),
                lambda: d.work(3, "lost_reply"), lambda: d.signal("r2", False), lambda: d.time(3_000),
                lambda: d.work(3, "commit"), lambda: d.recover(), lambda: d.cancel("r3")):
        act()
        check_all(m)
    d.settle()
    check_all(m)
    for rid in ("r1", "r2"):
        state = m.insp.process(DQ, rid, first=1, count=1).state
        assert state["status"] == "completed" and state["result"][0] == rid, (rid, state, m.trace[-12:])
    assert m.insp.process(DQ, "r3", first=1, count=1).state["status"] == "cancelled", m.trace[-12:]


def durable_batched_commit(m: PlusMachine) -> None:
    """Issue 46 meets a live resize: three runs started, a worker holds two of their inputs, the
    runs' queue's limit is lowered to 1 under them, a second worker is held back, and the first
    commits both inputs in one ``proc_commit``: the second item's end frees the slot, and the
    held-back worker is woken for the third run's input (tests/model_durable.py ``contend``);
    then with the runs signalled, a batch of one and one of two again."""
    d = m.durable
    for act in (lambda: d.contend(2), lambda: d.work(3, ""), lambda: d.contend(1), lambda: d.work(3, ""),
                lambda: d.contend(2)):
        act()
        check_all(m)
    assert any("held_back=True" in t for t in m.trace), ("(premise: a worker was held back)", m.trace[-12:])


def durable_resumed(m: PlusMachine) -> None:
    """Issue 46's fix and resume in the model: run r1's step ``a`` fails both its attempts (the run
    fails: ``flow`` does not catch it), the operator resumes it, step ``a`` runs again (its final
    failure taken back, not a record), and the run ends completed with the second attempt's
    result; a resume of a run that did not fail changes nothing."""
    d = m.durable
    for act in (lambda: d.start("r1", ""), lambda: d.fail_next("a", 2), lambda: d.work(3, ""),
                lambda: d.time(1_100), lambda: d.work(3, ""), lambda: d.resume("r2"), lambda: d.resume("r1"),
                lambda: d.work(3, ""), lambda: d.signal("r1", False), lambda: d.work(3, "")):
        act()
        check_all(m)
    failed = [e for e in d.history("r1") if e.get("k") == "failed"]
    assert failed and any(e.get("k") == "resume" for e in d.history("r1")), ("(premise: r1 failed, then was "
                                                                             "resumed)", m.trace[-12:])
    d.settle()
    check_all(m)
    state = m.insp.process(DQ, "r1", first=1, count=1).state
    assert state["status"] == "completed" and state["result"][1] == "a3", (state, m.trace[-12:])


SCENARIOS: dict[str, Any] = {
    "resend_after_commit": resend_after_commit,
    "restarted_worker": restarted_worker,
    "events_counted": events_counted,
    "removed_queue_rated": removed_queue_rated,
    "cap_storms": cap_storms,
    "defaults_changed": defaults_changed,
    "defaults_cleared_swept": lambda m: defaults_changed(m, sweep=True),
    "side_tokens_lost_versions_held": side_tokens_lost_versions_held,
    "retention_expiry": retention_expiry,
    "live_resize": live_resize,
    "targeted_kept": targeted_kept,
    "keyed_edit_due_now": keyed_edit_due_now,
    "tenant_paused_resumed": tenant_paused_resumed,
    "held_frees_its_slot": held_frees_its_slot,
    "passes_near_the_band": passes_near_the_band,
    "cancel_parent": cancel_parent,
    "cancel_keyed_holder": cancel_keyed_holder,
    "snoozed_holder": snoozed_holder,
    "application_resends": application_resends,
    "leases_renewed": leases_renewed,
    "rated_tenant_backlog": rated_tenant_backlog,
    "held_tasks_of_a_rated_tenant": held_tasks_of_a_rated_tenant,
    "held_tenant_task": held_tenant_task,
    "tenant_at_its_concurrency": tenant_at_its_concurrency,
    "ring_edited_then_swept": ring_edited_then_swept,
    "debounced_parent": debounced_parent,
    "keyed_resent_blocked": keyed_resent_blocked,
    **{f"slot_freed_{how}": (lambda how: lambda m: slot_freed(m, how))(how)
       for how in ("done", "complete", "archive", "cancel", "run")},
    "delete_parent": lambda m: operator_on_parent(m, "delete"),
    "archive_parent": lambda m: operator_on_parent(m, "archive"),
    "delete_holder": lambda m: operator_on_holder(m, "delete"),
    "archive_holder": lambda m: operator_on_holder(m, "archive"),
    "child_of_a_failed_parent": child_of_a_failed_parent,
    "tenant_task_retried": tenant_task_retried,
    "tenant_last_task_deleted": tenant_last_task_deleted,
    "targeted_resubmitted": targeted_resubmitted,
    "rated_tenant_emptied": rated_tenant_emptied,
    "any_worker_for_one_run": any_worker_for_one_run,
    "run_id_still_leased": run_id_still_leased,
    "durable_runs": durable_runs,
    "durable_batched_commit": durable_batched_commit,
    "durable_resumed": durable_resumed,
}


def run_scenario(name: str, factory: Any) -> None:
    """Run scenario ``name`` on a fresh model plus on the Redis ``factory()`` connects to."""
    PlusMachine.redis_factory = staticmethod(factory)
    m = PlusMachine()
    try:
        m.start(0, 0)
        SCENARIOS[name](m)
    finally:
        m.teardown()


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_scenario_on_fakeredis(name: str) -> None:
    run_scenario(name, lambda: fakeredis.FakeRedis(server=fakeredis.FakeServer()))


@pytest.mark.slow
@pytest.mark.one_process
@pytest.mark.real
def test_scenarios_on_redis_server(redis_url: str) -> None:
    """(The mutants run them on redis-server too, each on its mutant's scripts.)"""
    for name in sorted(SCENARIOS):
        run_scenario(name, lambda: redis.Redis.from_url(redis_url))


def test_the_side_scenario_catches_a_worker_without_its_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Python half of issue 42 #2 and #10 (the Lua mutants cannot revert it): a server of
    more than four queues whose scan never comes (QueueOrder.scan a no-op) leaves a lost token's
    task, and a task held for its version, unserved; the side worker's settle says so."""
    monkeypatch.setattr(QueueOrder, "scan", lambda self, now: None)
    with pytest.raises(AssertionError, match="held for a version up to the side worker"):
        run_scenario("side_tokens_lost_versions_held", lambda: fakeredis.FakeRedis(server=fakeredis.FakeServer()))


EXAMPLES = int(os.environ.get("ASYNQPY_PLUS_MODEL_EXAMPLES", str(sized(12, 25))))
"""The fakeredis run's examples: 12 in CI, 25 in the deep run (ASYNQPY_DEEP=1, tests/helpers.py);
its mutants run it on redis-server with 100 (tests/test_model_mutants.py)."""


def run_plus_model(factory: Any, examples: int = EXAMPLES) -> None:
    PlusMachine.redis_factory = staticmethod(factory)
    run_state_machine_as_test(PlusMachine, settings=settings(SETTINGS, max_examples=examples))


def test_model_plus_on_fakeredis() -> None:
    """(On redis-server it runs as the plus mutants' model: tests/test_model_mutants.py.)"""
    run_plus_model(lambda: fakeredis.FakeRedis(server=fakeredis.FakeServer()))


