"""The cross-feature model (tests/test_model.py) plus the mechanisms added since, meeting
everything it drives: the same machine, and
- deploy holds: an operator who blocks and later unblocks a task type (every sixth operator step:
  a deploy), tasks gated by ``min_worker_version`` (one producer task in seven), and workers of
  two versions (w2 is version 2; the others have none);
- tenant rates: tenant "a" has a rate of 2/s, which every fifth operator step turns off or on
  again (the model's clock moves by its "time" steps).
After every step, beside the model's own checks: a task is held (the scheduled zset, from
HOLD_FLOOR) only while its type is blocked (the type band) or when it needs a newer worker (the
version band), and the queue's blocked types are the operator's; a worker the concurrency limit
held back is woken once a slot is free and tasks it may take are pending (those of a tenant held
by its rate are not: the dequeue's reply says when to look again). At every dequeue, no task of a
blocked type and no task gated above the worker's version is handed out, and tenant "a" has
started no more tasks since its rate was set than the rate allows (its burst, then one a token).

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
from test_model import SETTINGS, CrossMachine, K, Known, Q

from asynqpy.core import codec
from asynqpy.core.broker import Broker, Call, Dequeued
from asynqpy.core.deploy import HOLD_FLOOR, TYPE_BAND, encode_version
from asynqpy.core.keys import ALL_QUEUES, queue_keys
from asynqpy.core.stored import message_of
from asynqpy.core.tenants import RATE_BAND

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
        return self._client.enqueue(task_type, payload, **opts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


RATE, BURST = 2.0, 1
"""Tenant a's rate when on (tasks a second) and its burst."""


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
        if self.operator_steps % 3 == 0:  # issue 42: a removed queue used again (reuse_removed_queue)
            self.reuse_removed_queue()
        super().operator(data, verb)
        if self.rate_since is not None and len((self.r.hget(K.tn, "l:a") or b"").split(b" ")) < 5:
            self.rate_since = None  # the model's own operator cleared tenant a: no rate any more

    def hand_edit_then_sweep(self) -> None:
        """A tenant taking turns is removed from the ring and an active tenant task's entry from
        ``ta`` by hand; one pass of each tenant part of the sweep and of its tasks part follows
        (lua/tenant_fix-9.lua, lua/reconcile-10.lua): the model's checks after the step say
        whether it put everything back."""
        ring = [t for t, score in self.r.zrange(K.tr, 0, -1, withscores=True) if t and score < RATE_BAND]
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
        got = super().dequeue(count, worker)
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
        """The model's check, less the tasks of tenants held by their rate (the ring's rate band:
        their dequeue's reply tells when to look again; no worker is woken for them)."""
        if not (self.held_back and self.limit):
            return
        if self.r.exists(K.paused) or self.r.zcard(K.lease) >= self.limit:
            return
        pending = self.r.llen(K.pending) + self.r.zcard(K.prio)
        pending += sum(self.r.zlexcount(K.tq, b"[" + t + b"\0", b"(" + t + b"\1")
                       for t, score in self.r.zrange(K.tr, 0, -1, withscores=True) if t and score < RATE_BAND)
        if pending:
            assert self.r.llen(K.wake) > 0, ("a slot is free and tasks are pending, but no worker is woken",
                                             self.trace[-12:])

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


EXAMPLES = int(os.environ.get("ASYNQPY_PLUS_MODEL_EXAMPLES", "25"))


def run_plus_model(factory: Any, examples: int = EXAMPLES) -> None:
    PlusMachine.redis_factory = staticmethod(factory)
    run_state_machine_as_test(PlusMachine, settings=settings(SETTINGS, max_examples=examples))


def test_model_plus_on_fakeredis() -> None:
    """(On redis-server it runs as the plus mutants' model: tests/test_model_mutants.py.)"""
    run_plus_model(lambda: fakeredis.FakeRedis(server=fakeredis.FakeServer()))


