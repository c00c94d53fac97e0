"""A stateful property test of durable processes (hypothesis ``RuleBasedStateMachine``), on
fakeredis and the real redis-server: random sequences of process starts, inputs (calls, repairs,
removals), dequeues, the worker's path for an input (read the process, decide, run a processor,
checkpoint with ``proc_step`` as a durable run does, commit with ``proc_commit``; or fail, retried or archived; or crash; or a commit sent late, after
the input's lease may have expired and the input run again), the recoverer, timers falling due
through the forwarder and its key gate, and time passing, against the real scripts. A model
applies each commit the scripts accepted; after every step it checks, from Redis:
- each process's record (status, event count, state, timer, broken_by) and history (event n is
  the model's n-th, by the input that appended it) are the model's: nothing lost, nothing twice;
  for p2, whose type keeps its last 3 events, exactly those are kept;
- an input commits at most once, whatever crashed or came late;
- a removed process leaves no record, no history field, no listing entry;
- a process's pending timer is a stored input of that process that has not ended;
- at most one input of a process is pending, active or waiting for a retry (serial);
- p2 belongs to tenant t2 (``start_process(..., tenant=)``): its record says so, every input of it
  alive (its timers too) is t2's, its pending ones wait in the tenant zset, and the active tenant
  entries and count are exactly its active inputs (none outlives its input, whatever ended it).
And when a failure marks a process ``error``, the failed input is one the worker would have run the
processor for (not a stale timer, a second init, a refused call or repair, a removal)."""

from __future__ import annotations

import os
from typing import Any

import fakeredis
import pytest
import redis
from helpers import sized
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from asynqpy import FakeClock
from asynqpy.core.limits.serial import gate_due
from asynqpy.core.model.codec import Message, decode
from asynqpy.core.model.errors import LeaseLostError, TaskNotFoundError
from asynqpy.core.model.task import TaskState
from asynqpy.core.processes import model as proc
from asynqpy.core.spine.broker import Broker, Call
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.spine.stored import is_active, message_of, token_of
from asynqpy.core.workflows.records import rec_unpack
from asynqpy.redisio.executor import SyncExecutor, run_plan

Q = "psm"
K = queue_keys(Q)
START_MS = 1_740_866_400_000
LEASE_MS = 30_000
TYPE = proc.task_type("acct")
PIDS = ("p1", "p2")
MAX_EVENTS = {"p2": 3}  # p2's type keeps its last 3 events (max_events); p1's keeps them all
TENANT = {"p2": "t2"}  # p2's process belongs to tenant t2: its inputs take turns as t2's tasks
LIVE = "pbars"  # stored states of an input that has not ended (pending, blocked, active, retry, scheduled)


class ProcessMachine(RuleBasedStateMachine):
    redis_factory: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.r = self.redis_factory()
        self.r.flushall()
        self.clock = FakeClock(START_MS)
        self.b = Broker(self.clock)
        self.x = SyncExecutor(self.r)
        self.n = self.tokens = 0
        self.pid_of: dict[str, str] = {}  # input id -> its process
        self.model: dict[str, dict[str, Any] | None] = {}  # pid -> record and history as committed
        self.late: list[tuple[str, Call[Any], proc.Plan, str]] = []  # commits a slow worker sends later
        self.committed: set[str] = set()

    def teardown(self) -> None:
        self.r.close()

    # -- helpers -----------------------------------------------------------------------------

    def _new(self, pid: str) -> str:
        self.n += 1
        id = f"i{self.n}"
        self.pid_of[id] = pid
        return id

    def _msg(self, pid: str, kind: str, args: Any = None, max_retry: int = 1) -> Message:
        return Message(TYPE, proc.input_payload(pid, kind, args), enqueued_at_ms=self.clock.now_ms(),
                       max_retry=max_retry, key=proc.key_of(pid), tenant=TENANT.get(pid, ""))

    def _states(self) -> dict[str, str]:
        ids = list(self.pid_of)
        vals = self.r.hmget(K.tasks, ids) if ids else []
        return {i: (v[:1].decode() if v else "-") for i, v in zip(ids, vals)}

    def _active(self) -> list[str]:
        return sorted(i for i, s in self._states().items() if s == "a")

    def _record(self, pid: str) -> proc.Record | None:
        raw = self.r.hget(K.proc, pid)
        return proc.parse_record(pid, raw) if raw else None

    def _processor(self, kind: str, rec: proc.Record, id: str, data: st.DataObject) -> proc.Step:
        """A processor: one event naming the input, a state counting inputs, a timer drawn
        (kept, cancelled, set), sometimes the process removed by a call."""
        state = proc._unpack(rec.fields[proc.R_STATE]) if rec.fields[proc.R_STATE] else None
        n = (state or {}).get("n", 0) + 1
        timer = data.draw(st.sampled_from([proc.KEEP, proc.KEEP, None, 2, 20]), label="timer")
        remove = kind == "call" and data.draw(st.sampled_from([False, False, False, True]), label="remove")
        return proc.Step(events=[f"{kind}:{id}"], state={"n": n}, timer=timer, remove=remove)

    def _commit(self, id: str, call: Call[Any], plan: proc.Plan, tid: str) -> None:
        try:
            self.x.run(call)
        except (LeaseLostError, TaskNotFoundError):
            event("commit refused")
            return  # refused: the lease was lost, or the process changed since it was read
        assert id not in self.committed, f"input {id} committed twice"
        self.committed.add(id)
        event(f"commit {plan.kind}{' skipped' if plan.skipped else ' remove' if plan.remove else ''}")
        pid = plan.pid
        m = self.model.get(pid)
        if plan.skipped:
            if m is not None and m["timer"] == id:  # a timer that fell due while the process was in error
                m["timer"] = ""
            return
        assert m is not None, (id, plan)  # the script checked the record it was read from
        if plan.remove:
            self.model[pid] = None
            return
        m["events"] += [id] * len(plan.events)
        if plan.keep and len(m["events"]) - plan.keep >= m["first"]:
            m["first"] = len(m["events"]) - plan.keep + 1
        m["status"], m["broken_by"] = "running", ""
        if plan.state is not None:
            m["state"] = plan.state
        if plan.timer != "k" or m["timer"] == id:  # a timer that fired is spent
            m["timer"] = ""
        if plan.timer == "s":
            m["timer"] = tid

    def _failed_for_good(self, pid: str, id: str, kind: str, before: proc.Record | None) -> None:
        """An input was archived (marking its process): check and follow the mark."""
        after = self._record(pid)
        m = self.model.get(pid)
        if after is None or m is None:
            return
        if m["timer"] == id:  # the timer fired and failed for good: spent
            m["timer"] = ""
        if after.status == proc.ERROR and after.fields[proc.R_BROKEN].decode() == id:
            assert before is not None
            try:
                would_run = proc.decide(pid, kind, before, id) is None
            except proc.Refused:
                would_run = False
            assert would_run, f"input {id} ({kind}) marked process {pid} error, but would not have run its processor"
            m["status"], m["broken_by"] = proc.ERROR, id
            event(f"{kind} broke its process")
        else:
            event(f"{kind} failed for good, process left alone")
            assert after.fields[proc.R_BROKEN] == (before.fields[proc.R_BROKEN] if before else b""), (id, kind)

    # -- rules -------------------------------------------------------------------------------

    @rule(pid=st.sampled_from(PIDS))
    def start(self, pid: str) -> None:
        id = self._new(pid)
        res = self.x.run(self.b.proc_start(Q, pid, id, self._msg(pid, "init", {"v": 1})))
        if self.model.get(pid) is None:
            assert res in (1, 2), res
            self.model[pid] = {"status": proc.STARTING, "events": [], "state": b"", "timer": "", "broken_by": "",
                               "first": 1}
        else:
            assert res == 0, res

    @rule(pid=st.sampled_from(PIDS), kind=st.sampled_from(["call", "call", "call", "repair", "remove"]),
          max_retry=st.sampled_from([0, 1]))
    def send(self, pid: str, kind: str, max_retry: int) -> None:
        id = self._new(pid)
        assert self.x.run(self.b.enqueue_keyed(Q, id, self._msg(pid, kind, {"n": self.n}, max_retry))) in (TaskState.PENDING,
                                                                                           TaskState.BLOCKED)

    @rule(count=st.integers(1, 3))
    def dequeue(self, count: int) -> None:
        self.tokens += 1
        self.x.run(self.b.dequeue(Q, count, LEASE_MS, f"tok{self.tokens:05d}"))

    @precondition(lambda self: bool(self._active()))
    @rule(data=st.data(), outcome=st.sampled_from(["ok", "ok", "ok", "fail", "crash", "late"]))
    def run_input(self, data: st.DataObject, outcome: str) -> None:
        """The worker's path for one active input (worker/runner.py _process_chain)."""
        id = data.draw(st.sampled_from(self._active()), label="input")
        value = self.r.hget(K.tasks, id)
        token, msg = token_of(value).decode(), decode(message_of(value))
        parsed = proc.parse_input(msg.type, msg.key, msg.payload)
        assert parsed is not None
        pid, kind, _ = parsed
        reply = self.x.run(self.b.proc_read(Q, pid, 0, proc.HISTORY_WINDOW))
        rec = proc.parse_record(pid, reply[0]) if reply else None
        if outcome == "crash":
            return  # the lease expires; the recoverer retries or archives the input
        try:
            plan = proc.decide(pid, kind, rec, id)
        except proc.Refused as exc:
            self.x.run(self.b.archive(Q, id, token, msg.with_(last_error=str(exc)), 1000, 3_600_000,
                                      mark_process=False))
            assert self._record(pid) == rec, (id, kind)  # a refused input leaves its process alone
            return
        if plan is None:
            assert rec is not None
            rec = self._checkpoints(id, token, pid, kind, msg.key, rec, data)
            if rec is None:
                return  # a checkpoint refused: the worker lets go of the input (its lease expires)
            if outcome == "fail":
                failed = msg.with_(last_error="boom", last_failed_at_ms=self.clock.now_ms())
                if msg.retried < msg.max_retry:
                    self.x.run(self.b.retry(Q, id, token, failed.with_(retried=msg.retried + 1), 0))
                else:
                    self.x.run(self.b.archive(Q, id, token, failed, 1000, 3_600_000))
                    self._failed_for_good(pid, id, kind, rec)
                return
            plan = proc.plan_step(pid, kind, rec, self._processor(kind, rec, id, data), self.clock.now_ms())
        tid, timer = "", None
        if plan.timer == "s" and not plan.skipped and not plan.remove:
            tid = self._new(pid)
            timer = (tid, self._msg(pid, "timeout", None, msg.max_retry))
        plan.keep = MAX_EVENTS.get(pid, 0)
        call = self.b.proc_commit(Q, id, token, msg, plan, timer)
        if outcome == "late":
            self.late.append((id, call, plan, tid))
        else:
            self._commit(id, call, plan, tid)

    def _checkpoints(self, id: str, token: str, pid: str, kind: str, key: str, rec: proc.Record,
                     data: st.DataObject) -> proc.Record | None:
        """A durable run's checkpoints inside its input (lua/proc_step.lua), 0 to 2 of them, each
        appending one event (the record keeps its status, state and timer); the record as the
        last one left it, or None if one was refused (the lease lost: another attempt holds it)."""
        for _ in range(data.draw(st.sampled_from([0, 0, 1, 2]), label="checkpoints")):
            count, events, _ = proc.checkpoint_args(rec, kind, [f"step:{id}"], id.encode())
            got = self.x.run(self.b.proc_step(Q, [(id, token, pid, rec, count, events, key)]))[0]
            if isinstance(got, Exception):
                assert isinstance(got, (LeaseLostError, TaskNotFoundError)), got
                event("checkpoint refused")
                return None
            event("checkpoint")
            m = self.model[pid]
            assert m is not None
            m["events"].append(id)
            # the worker does not parse the record a checkpoint answers (proc.checkpointed): it is
            # the one read, its count set, but its `updated` (which no write of the worker reads)
            held, read = proc.checkpointed(rec, count, got[0]), proc.parse_record(pid, got[0])
            assert held.raw == read.raw and held.count == read.count == count
            assert [f for i, f in enumerate(held.fields) if i != proc.R_UPDATED] == \
                [f for i, f in enumerate(read.fields) if i != proc.R_UPDATED]
            rec = held
        return rec

    @precondition(lambda self: bool(self.late))
    @rule(data=st.data())
    def late_commit(self, data: st.DataObject) -> None:
        i = data.draw(st.integers(0, len(self.late) - 1), label="late")
        id, call, plan, tid = self.late.pop(i)
        self._commit(id, call, plan, tid)

    @rule()
    def recover(self) -> None:
        """The recoverer (worker/recoverer.py): expired leases retried, or archived on the last try."""
        res = self.x.run(self.b.expired(Q, 100))
        for id, value in res.tasks:
            if value is None or not is_active(value):
                self.x.run(self.b.drop(Q, id))
                continue
            msg = decode(message_of(value))
            failed = msg.with_(last_error="lease expired", last_failed_at_ms=res.now_ms)
            pid, kind = proc.process_of(msg)
            before = self._record(pid)
            try:
                if failed.retried >= failed.max_retry:
                    self.x.run(self.b.archive(Q, id, token_of(value), failed, 1000, 3_600_000, recover=True))
                    self._failed_for_good(pid, id, kind, before)
                else:
                    self.x.run(self.b.retry(Q, id, token_of(value), failed.with_(retried=failed.retried + 1), 0,
                                            recover=True))
            except (LeaseLostError, TaskNotFoundError):
                pass

    @rule()
    def forward(self) -> None:
        res = self.x.run(self.b.forward(Q, 100))
        if res.keyed:
            run_plan(self.x, gate_due(self.b, Q, res.keyed))

    @rule(ms=st.sampled_from([1000, 5000, 40_000]))
    def time_passes(self, ms: int) -> None:
        self.clock.advance(ms / 1000)

    # -- invariants --------------------------------------------------------------------------

    @invariant()
    def processes_are_the_model(self) -> None:
        listed = {p.decode() for p in self.r.zrange(K.procs, 0, -1)}
        fields = [f.decode() for f in self.r.hkeys(K.hist)]
        states = self._states()
        for pid in PIDS:
            m = self.model.get(pid)
            rec = self._record(pid)
            mine = sorted(int(f.rpartition(":")[2]) for f in fields if f.rpartition(":")[0] == pid)
            if m is None:
                assert rec is None and pid not in listed and mine == [], (pid, rec, mine)
                continue
            assert rec is not None and pid in listed, pid
            assert rec.status == m["status"], (pid, rec.status, m["status"])
            assert rec.count == len(m["events"]) and rec.first == m["first"], (pid, rec.count, rec.first)
            assert mine == list(range(m["first"], rec.count + 1)), (pid, m["first"], rec.count, mine)
            if mine:
                got = self.r.hmget(K.hist, [f"{pid}:{n}" for n in mine])
                assert [rec_unpack(e)[1].decode() for e in got] == m["events"][m["first"] - 1:], pid
            assert rec.fields[proc.R_STATE] == m["state"], pid
            assert rec.timer_id == m["timer"], (pid, rec.timer_id, m["timer"])
            if m["status"] == proc.ERROR:
                assert rec.fields[proc.R_BROKEN].decode() == m["broken_by"], pid
            if rec.timer_id:
                assert self.pid_of.get(rec.timer_id) == pid and states[rec.timer_id] in LIVE, \
                    (pid, rec.timer_id, states.get(rec.timer_id))

    @invariant()
    def tenants_follow_the_process(self) -> None:
        states = self._states()
        for pid in PIDS:
            rec = self._record(pid)
            if rec is not None:
                assert rec.view([], Q).tenant == TENANT.get(pid, ""), (pid, rec.fields)
        live = [i for i, st_ in states.items() if st_ in LIVE]
        vals = self.r.hmget(K.tasks, live) if live else []
        for id, v in zip(live, vals):
            assert v is not None and decode(message_of(v)).tenant == TENANT.get(self.pid_of[id], ""), id
        pending_t2 = {i for i, st_ in states.items() if st_ == "p" and self.pid_of[i] == "p2"}
        assert len(pending_t2) == self.r.zcard(K.tq), (pending_t2, self.r.zrange(K.tq, 0, -1))
        active_t2 = {i for i, st_ in states.items() if st_ == "a" and self.pid_of[i] == "p2"}
        ta = {k.decode(): v.decode() for k, v in self.r.hgetall(K.ta).items()}
        assert ta == dict.fromkeys(active_t2, "t2"), (ta, active_t2)
        assert int(self.r.hget(K.tn, "a:t2") or 0) == len(active_t2), (self.r.hget(K.tn, "a:t2"), active_t2)

    @invariant()
    def serial(self) -> None:
        states = self._states()
        for pid in PIDS:
            running = [i for i, s in states.items() if s in "par" and self.pid_of[i] == pid]
            assert len(running) <= 1, (pid, running)


# 50 examples against redis-server (the authority) in the full suite, 150 in the deep run
# (ASYNQPY_DEEP=1, tests/helpers.py; CI ran 150 before issue 43's budget); 40 on fakeredis in the
# fast tier (a developer's loop: the full suite has the long run), 10 in the full suite (20 deep),
# where the run on redis-server drives the same rules over the same scripts: there the fakeredis
# run shows that the in-process store agrees, as the queue machine's does (tests/test_state_machine.py)
FAKE_EXAMPLES = 40 if os.environ.get("ASYNQPY_FAST") == "1" else sized(10, 20)
SETTINGS = settings(max_examples=sized(50, 150), stateful_step_count=40, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def test_process_machine_on_fakeredis() -> None:
    ProcessMachine.redis_factory = staticmethod(lambda: fakeredis.FakeRedis(server=fakeredis.FakeServer()))
    run_state_machine_as_test(ProcessMachine, settings=settings(SETTINGS, max_examples=FAKE_EXAMPLES))


@pytest.mark.real
def test_process_machine_on_redis_server(redis_url: str) -> None:
    ProcessMachine.redis_factory = staticmethod(lambda: redis.Redis.from_url(redis_url))
    run_state_machine_as_test(ProcessMachine, settings=SETTINGS)
