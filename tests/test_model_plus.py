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

A subclass, so that the model's own examples (and the mutants it is checked against,
tests/test_model_mutants.py) stay as they are: hypothesis derives a machine's examples from its
source."""

from __future__ import annotations

import os
from typing import Any

import fakeredis
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import invariant, run_state_machine_as_test
from test_model import LEASE_MS, LIVE, SETTINGS, TENANTS, CrossMachine, K, Known, Q, Run

from asynqpy import DuplicateTaskError, LeaseLostError, QueueFullError, TaskIdConflictError, TaskNotFoundError
from asynqpy.core import codec
from asynqpy.core.broker import Broker, Call, Dequeued
from asynqpy.core.deploy import HOLD_FLOOR, TYPE_BAND, encode_version
from asynqpy.core.keys import ALL_QUEUES, queue_keys
from asynqpy.core.stored import message_of
from asynqpy.core.tenants import PASS_REBASE

VERSIONS = {"w2": encode_version("2")}
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
    """The model's client: one plain task in GATE_EVERY is enqueued with min_worker_version="2"."""

    def __init__(self, client: Any, machine: PlusMachine) -> None:
        self._client, self._machine = client, machine

    def enqueue(self, task_type: str, payload: Any = None, **opts: Any) -> Any:
        if task_type == "t" and "group" not in opts and self._machine.n % GATE_EVERY == 3:
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
        got = super().dequeue(count, worker)
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
        their dequeue's reply tells when to look again; no worker is woken for them)."""
        if not (self.held_back and self.limit):
            return
        if self.r.exists(K.paused) or self.r.zcard(K.lease) >= self.limit:
            return
        pending = self.r.llen(K.pending) + self.r.zcard(K.prio)
        pending += sum(self.r.zlexcount(K.tq, b"[" + t + b"\0", b"(" + t + b"\1")
                       for t in self.r.zrange(K.tr, 0, -1) if t)
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
            if self.operator_steps % 2:
                self.insp.clear_tenant_defaults(Q)
            else:
                self.insp.set_tenant_defaults(Q, rate=0)
            self.trace.append(f"tenant defaults {'cleared' if self.operator_steps % 2 else 'rate 0'}")
            self.dequeue(1)  # the worker it woke

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
        no conflict), but for another task under the id (an operator's edit) and a task that is gone
        (stored again: at-least-once)."""
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
        if id in self.running:  # (a run of a killed w1 writes nothing)
            super().finish_one(id, how, data)

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
        batch of two), then the cap goes. At each call: a refused call stored nothing and changed
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
        for j in range(1 + k % 4):
            n = 2 if (k + j) % 3 == 0 else 1
            tenant = "a" if tenant_cap else TENANTS[(k + j) % len(TENANTS)]
            ids = [self.new_id() for _ in range(n)]
            before, start = dict(self.r.hgetall(K.tasks)), count()
            opts: dict[str, Any] = {"queue": Q, "max_retry": 1, "priority": (5, 5, 2, 8)[(k * 3 + j) % 4]}
            if tenant:
                opts["tenant"] = tenant
            try:
                if n == 1:
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


EXAMPLES = int(os.environ.get("ASYNQPY_PLUS_MODEL_EXAMPLES", "25"))


def run_plus_model(factory: Any, examples: int = EXAMPLES) -> None:
    PlusMachine.redis_factory = staticmethod(factory)
    run_state_machine_as_test(PlusMachine, settings=settings(SETTINGS, max_examples=examples))


def test_model_plus_on_fakeredis() -> None:
    """(On redis-server it runs as the plus mutants' model: tests/test_model_mutants.py.)"""
    run_plus_model(lambda: fakeredis.FakeRedis(server=fakeredis.FakeServer()))


