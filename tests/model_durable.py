"""Durable runs in the cross-feature model (issue 46: "the cross-feature model drives runs too").

:class:`DurableDriver` is one more kind of work of the model plus (tests/test_model_plus.py, its
``mechanism`` rule): runs of a durable function (its real replay, ``mux.durable``'s processor, on
the model's clock) in a queue of their own (``xd``), worked by a worker that follows
worker/runner.py's path for a process input with broker calls: read the process, replay (a new
step's record checkpointed with ``proc_step`` as ``_checkpoint`` does, the run going on in the same
input), commit with ``proc_commit``. What it drives: a start (idempotent by id, and sent again as
after a lost reply), signals (some sent twice under one idempotency key), cancel, removal (the
``remove`` input: deleting a run), a step that fails and is retried on the run's timer, a sleep's and
a wait's timers (the forwarder, the model's time), a worker killed inside a step, after a
checkpoint or before its commit, a commit's reply lost and the commit sent again, the recoverer
after a lease expiry, the queue removed (forced) and used again, tenant turns (tenant ``a`` runs at
most one input at a time), a run failed (step ``a`` failing twice) and resumed by the operator, deploy holds (the run's type blocked, then unblocked), a version gate
(run ``r3`` is started with ``min_worker_version="2"``; the worker is of version 2 or of none), and
a live resize under a worker's batched commit (``contend``: the limit lowered to 1 under the inputs
a worker holds, a second worker held back, the inputs committed in one ``proc_commit``).

Checks after every step of the model (:meth:`DurableDriver.check`): each run's history in Redis is
exactly the events its checkpoints and commits wrote (nothing lost, nothing twice: a script that
dropped or overwrote a recorded step fails here); a completed step never runs again (each step body
looks, when it starts, that Redis holds no final record of it); a signal is delivered once (no two
signal events of one send); a timer fires once (one ``fired`` per position); a completed run's
result is written with its last step and is what its recorded steps and wait returned; a run not
finished (and not stopped in error) has an input alive; a removed run leaves no record, history or
input; every live input of ``r3`` carries its gate; after a batched commit, a worker held back is
woken once no input is leased and one is pending. At each dequeue: no input of a blocked type is
handed out, nor one of ``r3`` to a worker of no version; tenant ``a`` has at most one input active."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

from asynqpy import Retry, ServeMux, StepFailedError
from asynqpy.core.deploy.versions import encode_version
from asynqpy.core.durable import function as durable_function
from asynqpy.core.durable import replay as durable_replay
from asynqpy.core.durable.life import resumed
from asynqpy.core.limits.serial import gate_due
from asynqpy.core.model import codec
from asynqpy.core.model.codec import Message
from asynqpy.core.model.errors import (
    LeaseLostError,
    QueueNotEmptyError,
    QueueNotFoundError,
    TaskNotFoundError,
    TaskStateError,
)
from asynqpy.core.processes import model as proc
from asynqpy.core.processes.model import ProcessNotFoundError
from asynqpy.core.spine.keys import ALL_QUEUES, queue_keys
from asynqpy.core.spine.stored import is_active, message_of, token_of
from asynqpy.redisio.executor import run_plan

DQ = "xd"
"""The durable runs' queue."""
DK = queue_keys(DQ)
RUNS = ("r1", "r2", "r3")
GATED = {"r3": encode_version("2")}
"""The runs started with a version gate (min_worker_version="2")."""
LEASE_MS = 30_000
LIVE = "psarbwm"  # the stored states of an input that has not ended
STEP_NAMES = ("a", "b")
ACTIONS = ["start", "watch", "work", "signal", "work", "time", "work", "fail_next", "start", "work", "recover",
           "signal", "work", "time", "resend_start", "work", "cancel", "work", "time", "block", "work", "start",
           "remove", "work", "signal", "time", "work", "block", "work", "queue_rm", "work", "start", "contend",
           "start", "fail_next", "work", "time", "work", "resume", "work"]
"""The driver's actions in the order it takes them, from an offset drawn once (a draw of one of them
would favour the first: hypothesis leans to the first element). ``watch``: a client waits for a
run's result (:meth:`DurableDriver.watch`)."""


class Killed(BaseException):
    """The worker is killed here (SIGKILL): nothing after this point of its input happens."""


class DurableDriver:
    """Durable runs in the model plus (see the module's docstring); ``m``: the PlusMachine."""

    def __init__(self, m: Any) -> None:
        self.m = m
        self.mux = ServeMux()
        self.fail: dict[str, int] = {}  # step name -> how many of its next attempts fail
        self.kill_at = ""  # where the worker running the next input is killed: 'step', 'checkpoint', 'commit'
        self.ran: dict[tuple[str, str], int] = {}  # (run, step) -> times its body ran
        self.written: dict[str, list[dict[str, Any]]] = {}  # run -> the events written, in order
        self.started: set[str] = set()  # runs whose start was accepted (and not removed since)
        self.removing: set[str] = set()  # runs a remove input was sent for
        self.waiters: dict[str, set[str]] = {}  # run -> the inboxes of the clients waiting for it (proc_watch)
        self.sends = 0
        self.blocked = False
        self.inputs = 0
        self.offset, self.actions = -1, 0
        self.function = self.mux.durable(self.flow, name="mflow", queue=DQ, retention=3600)
        self.type = proc.task_type(self.function.type)
        handler = self.mux.match(self.type)
        assert isinstance(handler, proc.ProcessHandler)
        self.handler = handler
        self.settings()

    @property
    def client(self) -> Any:
        return self.m.client._client  # (GatingClient's real client)

    def settings(self) -> None:
        if self._registered():
            self.m.insp.set_tenant(DQ, "a", concurrency=1)

    def _registered(self) -> bool:
        return bool(self.m.r.sismember(ALL_QUEUES, DQ))

    # -- the function ------------------------------------------------------------------------------

    async def flow(self, ctx: Any, tag: str) -> list[Any]:
        a = await ctx.step("a", self.body("a"), retry=Retry(attempts=2, delay=1.0))
        ev = await ctx.wait_for("go", timeout=timedelta(seconds=5))
        await ctx.sleep(2)
        try:
            b = await ctx.step("b", self.body("b"), retry=Retry(attempts=2, delay=1.0))
        except StepFailedError:
            b = "failed"
        return [tag, a, ev, b]

    def body(self, name: str) -> Any:
        async def run() -> str:
            rid = durable_replay._STEP_ID.get().split(":")[0]
            # (a final failure a resume took back is not a record: the step runs again, life.resumed)
            done = [e for e in resumed(self.history(rid)) if e.get("k") == "step" and e.get("n") == name]
            assert not done, (f"run {rid}: step {name!r} runs again, though Redis holds its record {done}",
                              self.m.trace[-12:])
            n = self.ran[(rid, name)] = self.ran.get((rid, name), 0) + 1
            if self.kill_at == "step":
                self.kill_at = ""
                raise Killed(f"inside step {name}")
            if self.fail.get(name):
                self.fail[name] -= 1
                raise RuntimeError(f"step {name} failed")
            return f"{name}{n}"

        return run

    # -- reading Redis -------------------------------------------------------------------------------

    def history(self, rid: str) -> list[dict[str, Any]]:
        try:
            p = self.m.insp.process(DQ, rid, first=1, count=500)
        except (ProcessNotFoundError, QueueNotFoundError):
            return []
        return [dict(e.data) for e in p.history]

    def inputs_of(self) -> dict[str, list[tuple[str, str, Message]]]:
        """Each run's inputs stored in the queue: (id, state code, message)."""
        out: dict[str, list[tuple[str, str, Message]]] = {}
        for id, v in self.m.r.hgetall(DK.tasks).items():
            msg = codec.decode(message_of(v))
            parsed = proc.parse_input(msg.type, msg.key, msg.payload)
            if parsed is not None:
                out.setdefault(parsed[0], []).append((id.decode(), v[:1].decode(), msg))
        return out

    # -- the actions -----------------------------------------------------------------------------------

    def step(self, data: Any) -> None:
        if self.offset < 0:
            self.offset = data.draw(st.integers(0, len(ACTIONS) - 1))
        what = ACTIONS[(self.offset + self.actions) % len(ACTIONS)]
        self.actions += 1
        rid = data.draw(st.sampled_from(RUNS))
        if what == "start":
            self.start(rid, data.draw(st.sampled_from(["", "a", "b"])))
        elif what == "resend_start":
            self.start(rid, "", resend=True)
        elif what == "signal":
            self.signal(rid, twice=data.draw(st.booleans()))
        elif what == "work":
            self.work(data.draw(st.integers(1, 3)), data.draw(st.sampled_from(["", "", "", "step", "checkpoint",
                                                                              "commit", "lost_reply"])),
                      data.draw(st.sampled_from([0, GATED["r3"]])))
        elif what == "time":
            self.time(data.draw(st.sampled_from([1_100, 3_000, 6_000])))
        elif what == "recover":
            self.recover()
        elif what == "contend":
            self.contend(data.draw(st.integers(1, 2)))
        elif what == "cancel":
            self.cancel(rid)
        elif what == "resume":  # (a failed run, if one is)
            self.resume(next((r for r in RUNS if self.status(r) == "failed"), rid))
        elif what == "remove":
            self.remove(rid)
        elif what == "block":
            self.block()
        elif what == "watch":
            self.watch(rid)
        elif what == "fail_next":
            self.fail_next(data.draw(st.sampled_from(STEP_NAMES)), data.draw(st.integers(1, 2)))
        else:
            self.queue_rm()

    def start(self, rid: str, tenant: str, resend: bool = False) -> None:
        fresh = not self._registered()
        opts: dict[str, Any] = {"tenant": tenant} if tenant else {}
        if rid in GATED:
            opts["min_worker_version"] = "2"
        run = self.client.start(self.function, rid, id=rid, queue=DQ, max_retry=1, **opts)
        if fresh:
            self.settings()
        if resend:  # its reply was lost: the application sends it again
            again = self.client.start(self.function, rid, id=rid, queue=DQ, max_retry=1, **opts)
            assert not again.created, (f"run {rid} started twice", self.m.trace[-12:])
        if run.created:
            self.started.add(rid)
            self.removing.discard(rid)
            self.written[rid] = []
        self.m.trace.append(f"durable start {rid} tenant={tenant!r} created={run.created} resend={resend}")

    def signal(self, rid: str, twice: bool) -> None:
        self.sends += 1
        key = f"send{self.sends}"
        for _ in range(2 if twice else 1):
            try:
                self.client.signal(rid, "go", {"n": self.sends}, queue=DQ, timeout=0, idempotency_key=key)
            except (TimeoutError, ProcessNotFoundError, proc.ProcessError):
                pass
        self.m.trace.append(f"durable signal {rid} {key} twice={twice}")

    def fail_next(self, name: str, times: int = 1) -> None:
        """The next ``times`` attempts of step ``name`` (of whichever run) fail: two fail step
        ``a`` for good (its two attempts), and the run with it (``flow`` does not catch it)."""
        self.fail[name] = times
        self.m.trace.append(f"durable fail {name} x{times}")

    def status(self, rid: str) -> str:
        """The run's status as its state says ('' = no such run)."""
        try:
            return str((self.m.insp.process(DQ, rid).state or {}).get("status", ""))
        except (ProcessNotFoundError, QueueNotFoundError):
            return ""

    def resume(self, rid: str) -> None:
        """The operator resumes the run (``client.resume``, after a fix): a failed run goes on
        from its failed step (which runs again); any other run is left as it is."""
        try:
            self.client.resume(rid, queue=DQ, timeout=0)
        except (TimeoutError, ProcessNotFoundError, QueueNotFoundError, proc.ProcessError):
            pass
        self.m.trace.append(f"durable resume {rid}")

    def cancel(self, rid: str) -> None:
        try:
            self.client.cancel(rid, queue=DQ, timeout=0)
        except (TimeoutError, proc.ProcessError):
            pass
        self.m.trace.append(f"durable cancel {rid}")

    def remove(self, rid: str) -> None:
        try:
            self.client.remove_process(rid, queue=DQ, timeout=0)
        except (TimeoutError, proc.ProcessError):
            pass
        if rid in self.started:
            self.removing.add(rid)
        self.m.trace.append(f"durable remove {rid}")

    def watch(self, rid: str) -> None:
        """A client waits for the run's result (``Client.result``): its inbox registered; the run's
        next commit must name it (and only the inboxes registered since its last commit)."""
        self.sends += 1
        inbox = f"inbox{self.sends}"
        if self.m.x.run(self.m.b.proc_watch(DQ, rid, inbox)):
            self.waiters.setdefault(rid, set()).add(inbox)
        else:
            assert not self.m.r.hexists(DK.proc, rid), (f"run {rid} exists, its waiter was not registered",
                                                         self.m.trace[-12:])
        self.m.trace.append(f"durable watch {rid} {inbox}")

    def block(self) -> None:
        """A deploy: the runs' type blocked (its inputs held), or unblocked."""
        if not self._registered():
            return
        if self.blocked:
            self.m.insp.unblock_type(DQ, self.type)
        else:
            self.m.insp.block_type(DQ, self.type)
        self.blocked = not self.blocked
        self.m.trace.append(f"durable {'block' if self.blocked else 'unblock'}")

    def queue_rm(self) -> None:
        """The operator removes the runs' queue (``queue rm --force``): its runs go with it."""
        try:
            self.m.insp.remove_queue(DQ, force=True)
        except (QueueNotEmptyError, QueueNotFoundError, TaskStateError) as exc:
            self.m.trace.append(f"durable queue rm: {type(exc).__name__}")
            return
        left = [k.decode() for k in self.m.r.scan_iter(match=f"{DK.base}*", count=1000) if self.m.r.ttl(k) == -1]
        assert not left, (f"queue {DQ} removed, its keys {left} are left", self.m.trace[-12:])
        self.started.clear()
        self.removing.clear()
        self.written.clear()
        self.waiters.clear()
        self.blocked = False
        self.m.trace.append("durable queue rm")

    def time(self, ms: int) -> None:
        # the model's own time (its clock, and a held-back worker's poll of the queue it models,
        # which comes after LIMIT_WAIT_MS: time is everyone's; found by scripts/fuzz.py, a model error)
        self.m.time_passes(ms)
        self.forward()
        self.m.trace.append(f"durable time +{ms} ms")

    def forward(self) -> None:
        if not self._registered():
            return
        res = self.m.x.run(self.m.b.forward(DQ, 100))
        if res.keyed:
            run_plan(self.m.x, gate_due(self.m.b, DQ, res.keyed))

    def recover(self) -> None:
        """The recoverer: inputs whose lease expired are retried, or archived on their last try."""
        if not self._registered():
            return
        res = self.m.x.run(self.m.b.expired(DQ, 100))
        for id, value in res.tasks:
            if value is None or not is_active(value):
                self.m.x.run(self.m.b.drop(DQ, id))
                continue
            msg = codec.decode(message_of(value))
            failed = msg.with_(last_error="lease expired", last_failed_at_ms=res.now_ms)
            try:
                if failed.retried >= failed.max_retry:
                    self._woken(self.m.x.run(self.m.b.archive(DQ, id, token_of(value), failed, 1000, 3_600_000,
                                                              recover=True)), failed)
                else:
                    self.m.x.run(self.m.b.retry(DQ, id, token_of(value), failed.with_(retried=failed.retried + 1),
                                                0, recover=True))
            except (LeaseLostError, TaskNotFoundError):
                pass
        self.m.trace.append(f"durable recover {len(res.tasks)}")

    # -- the worker ----------------------------------------------------------------------------------

    def work(self, count: int, fault: str, version: int = GATED["r3"]) -> None:
        """A worker dequeues up to ``count`` inputs and runs each (worker/runner.py's path);
        ``fault``: the first of them meets it (killed inside its step, after a checkpoint, before
        its commit; or its commit's reply lost and the commit sent again); ``version``: the worker's."""
        if not self._registered():
            return
        self.forward()
        token = self.m.new_token()
        res = self.m.x.run(self.m.b.dequeue(DQ, count, LEASE_MS, token, "dw", version))
        for id, raw in res.tasks:
            msg = codec.decode(raw)
            assert msg.min_version <= version, (f"input {id} (gate {msg.min_version}) handed to a worker of "
                                                f"version {version}", self.m.trace[-12:])
            assert not (self.blocked and msg.type == self.type), (f"input {id} of a blocked type handed out",
                                                                   self.m.trace[-12:])
        active_a = [i for ins in self.inputs_of().values() for i, s, m in ins if s == "a" and m.tenant == "a"]
        assert len(active_a) <= 1, (f"tenant a has {len(active_a)} inputs active, its concurrency is 1",
                                    self.m.trace[-12:])
        for id, raw in res.tasks:
            self.kill_at, fault = (fault if fault in ("step", "checkpoint", "commit") else ""), ""
            self.run_input(id, token, codec.decode(raw), lost_reply=fault == "lost_reply")
            self.kill_at = ""
        self.m.trace.append(f"durable work {[i for i, _ in res.tasks]}")

    def run_input(self, id: str, token: str, msg: Message, lost_reply: bool = False) -> None:
        got = self.plan_input(id, token, msg)
        if got is None:
            return
        pid, plan, timer = got
        call = self.m.b.proc_commit(DQ, id, token, msg, plan, timer)
        try:
            res = self.m.x.run(call)
        except (LeaseLostError, TaskNotFoundError):
            return  # refused: the lease was lost, or the process changed since it was read
        self._woken(res, msg)
        self._committed(pid, plan)
        if lost_reply:  # sent again: it must change nothing
            try:
                self.m.x.run(call)
            except (LeaseLostError, TaskNotFoundError):
                pass
            else:
                raise AssertionError(f"input {id}'s commit, sent again, was accepted again", self.m.trace[-12:])

    def plan_input(self, id: str, token: str, msg: Message) -> tuple[str, proc.Plan, Any] | None:
        """Run input ``id`` up to its commit (worker/runner.py's path: read, replay with its
        checkpoints): its (process id, plan, timer input), or None when it ended otherwise (refused
        and archived, failed, the worker killed, a checkpoint refused)."""
        parsed = proc.parse_input(msg.type, msg.key, msg.payload)
        assert parsed is not None, msg
        pid, kind, args = parsed
        reply = self.m.x.run(self.m.b.proc_read(DQ, pid, 0, self.handler.history))
        rec = proc.parse_record(pid, reply[0]) if reply else None
        history = proc.History(int(reply[1]), reply[2:]) if reply else proc.History(1, [])
        try:
            plan = proc.decide(pid, kind, rec, id)
        except proc.Refused as exc:
            self.m.x.run(self.m.b.archive(DQ, id, token, msg.with_(last_error=str(exc)), 1000, 3_600_000,
                                          mark_process=False))
            return None
        held = {"rec": rec}
        if plan is None:
            assert rec is not None
            inp = proc.Input(kind, args, id, msg.retried + 1)
            try:
                with self.clocked():
                    step = asyncio.run(self._replay(rec.view(history, DQ), inp, self._checkpoint(id, token, pid, kind,
                                                                                               msg.key, held)))
            except Killed:
                return None  # the lease expires; the recoverer takes it
            except LeaseLostError:
                return None  # a checkpoint refused: the input is let go of
            except Exception as exc:  # noqa: BLE001 - the handler's failure: retried or archived
                failed = msg.with_(last_error=repr(exc), last_failed_at_ms=self.m.clock.now_ms())
                if msg.retried < msg.max_retry:
                    self.m.x.run(self.m.b.retry(DQ, id, token, failed.with_(retried=msg.retried + 1), 0))
                else:
                    self._woken(self.m.x.run(self.m.b.archive(DQ, id, token, failed, 1000, 3_600_000)), failed)
                return None
            plan = proc.plan_step(pid, kind, held["rec"], step, self.m.clock.now_ms())
            plan.keep = step.keep if step.keep > 0 else 0
        if self.kill_at == "commit":
            return None
        timer = None
        if plan.timer == "s" and not plan.skipped and not plan.remove:
            self.inputs += 1
            timer = (f"dt{self.inputs}", Message(type=msg.type, payload=proc.input_payload(pid, "timeout", None),
                                                 enqueued_at_ms=self.m.clock.now_ms(), max_retry=msg.max_retry,
                                                 key=msg.key, tenant=msg.tenant, min_version=msg.min_version))
        return pid, plan, timer

    def contend(self, count: int) -> None:
        """A live resize meets a worker's batched commit (the writer's: one ``proc_commit`` for the
        inputs that finished since its last write): each run started or signalled, a worker holds
        up to ``count`` inputs, the queue's concurrency limit is lowered to 1 under them, a second
        worker is held back by it, and the first commits its inputs in one call. Once a slot is
        free and inputs are pending, the held-back worker is woken (a wake token), whichever item
        of the batch freed it (e4cb4a9: the script looked only at the first item's end). The limit
        is cleared after."""
        for rid in RUNS:  # (inputs: a start, or a signal whatever the run waits for; one more than held)
            if rid in self.started:
                self.signal(rid, twice=False)
            else:
                self.start(rid, "")
        self.forward()
        token = self.m.new_token()
        res = self.m.x.run(self.m.b.dequeue(DQ, count, LEASE_MS, token, "dw", GATED["r3"]))
        self.m.insp.set_limits(DQ, concurrency=1)
        try:
            self.m.r.delete(DK.wake)  # (the second worker takes the token set_limits may leave, then dequeues)
            other_token = self.m.new_token()
            other = self.m.x.run(self.m.b.dequeue(DQ, 1, LEASE_MS, other_token, "dw2", GATED["r3"]))
            planned = [(id, msg, self.plan_input(id, token, msg)) for id, msg in
                       ((id, codec.decode(raw)) for id, raw in res.tasks)]
            commits = [(id, msg, got) for id, msg, got in planned if got is not None]
            if commits:
                items = [self.m.b.commit(DQ, id, token, msg, got[1], got[2]) for id, msg, got in commits]
                for (id, msg, (pid, plan, _)), out in zip(commits, self.m.x.run(self.m.b.proc_commit_many(DQ, items))):
                    if not isinstance(out, Exception):
                        self._woken(out, msg)
                        self._committed(pid, plan)
            if other.slot_bound:
                self.held_back_woken()
            for id, raw in other.tasks:  # (the second worker was not held back: a slot was free)
                self.run_input(id, other_token, codec.decode(raw))
        finally:
            self.m.insp.clear_limits(DQ)
        self.m.trace.append(f"durable contend {[i for i, _ in res.tasks]} batched, held_back={other.slot_bound}")

    def held_back_woken(self) -> None:
        """A worker held back by the limit of 1: woken once no input is leased and one is pending."""
        if self.m.r.zcard(DK.lease) >= 1:
            return
        pending = self.m.r.llen(DK.pending) + self.m.r.zcard(DK.prio)  # and the turns of tenants in the ring
        pending += sum(self.m.r.zlexcount(DK.tq, b"[" + t + b"\0", b"(" + t + b"\1")
                       for t in self.m.r.zrange(DK.tr, 0, -1) if t)
        if pending:
            assert self.m.r.llen(DK.wake) > 0, ("a batched commit freed a slot and inputs are pending, but the "
                                                "worker held back is not woken", self.m.trace[-12:])

    def _woken(self, res: Any, msg: Message) -> None:
        """An input ended (committed, or archived: its process marked error): the clients waiting
        for its run are woken, exactly those registered since the run's last such end."""
        pid = proc.process_of(msg)[0]
        woken, waiting = set(getattr(res, "watchers", ())), self.waiters.pop(pid, set())
        assert woken == waiting, (f"run {pid}'s input {msg.type} ended, waking {woken}; its waiters are {waiting}",
                                  self.m.trace[-12:])

    async def _replay(self, p: proc.Process, inp: proc.Input, checkpoint: Any) -> Any:
        saved = proc.CHECKPOINT.set(checkpoint)
        try:
            return await self.handler.fn(p, inp)  # type: ignore[misc]
        finally:
            proc.CHECKPOINT.reset(saved)

    def _checkpoint(self, id: str, token: str, pid: str, kind: str, key: str, held: dict[str, Any]) -> Any:
        """The worker's checkpoint (worker/runner.py Runner._checkpoint): the events so far written
        with ``proc_step``; the run goes on while no other input of it waits."""
        async def checkpoint(events: Any) -> bool:
            rec = held["rec"]
            count, packed, _ = proc.checkpoint_args(rec, kind, events, id.encode())
            got = self.m.x.run(self.m.b.proc_step(DQ, [(id, token, pid, rec, count, packed, key)]))[0]
            if isinstance(got, Exception):
                raise got
            held["rec"] = proc.checkpointed(rec, count, got[0])  # (as the worker holds it)
            self.written.setdefault(pid, []).extend(_plain(e) for e in events)
            if self.kill_at == "checkpoint":
                self.kill_at = ""
                raise Killed("after a checkpoint")
            return bool(got[1] > 0)

        return checkpoint

    def _committed(self, pid: str, plan: proc.Plan) -> None:
        if plan.skipped:
            return
        if plan.remove:
            self.written.pop(pid, None)
            self.started.discard(pid)
            self.removing.discard(pid)
            return
        self.written.setdefault(pid, []).extend(_plain(codec.decode_value(e)) for e in plan.events)

    @contextlib.contextmanager
    def clocked(self) -> Iterator[None]:
        """The replay's clock is the model's (a run's timers fall due by the model's time)."""
        mods, name = (durable_replay, durable_function), "_now_ms"  # (function.py imported replay's)
        saved = [getattr(mod, name) for mod in mods]
        for mod in mods:
            setattr(mod, name, self.m.clock.now_ms)
        try:
            yield
        finally:
            for mod, was in zip(mods, saved):
                setattr(mod, name, was)

    # -- the checks --------------------------------------------------------------------------------------

    def check(self) -> None:
        inputs = self.inputs_of()
        for rid in RUNS:
            stored = self.m.r.hget(DK.pwatch, rid)
            assert set(stored.decode().split() if stored else ()) == self.waiters.get(rid, set()), (
                f"run {rid}: its waiters in Redis {stored!r}, the model's {self.waiters.get(rid)}", self.m.trace[-12:])
            try:
                p = self.m.insp.process(DQ, rid, first=1, count=500)
            except (ProcessNotFoundError, QueueNotFoundError):
                p = None
            live = [i for i, s, _ in inputs.get(rid, []) if s in LIVE]
            gates = {m.min_version for _, s, m in inputs.get(rid, []) if s in LIVE}
            assert gates <= {GATED.get(rid, 0)}, (f"run {rid}: live inputs carry the gates {gates}", self.m.trace[-12:])
            if p is None:
                assert rid not in self.started or rid in self.removing, (
                    f"run {rid} is gone, though no removal was sent", self.m.trace[-12:])
                assert rid in self.removing or not [e for e in self.m.r.hkeys(DK.hist)
                                                    if e.decode().rpartition(":")[0] == rid], (
                    f"run {rid} has no record but history is left", self.m.trace[-12:])
                continue
            events = [dict(e.data) for e in p.history]
            assert [_plain(e) for e in events] == self.written.get(rid, []), (
                f"run {rid}: Redis holds the history {events}, its inputs wrote {self.written.get(rid)}",
                self.m.trace[-12:])
            self.check_run(rid, p, events, live)

    def check_run(self, rid: str, p: proc.Process, events: list[dict[str, Any]], live: list[str]) -> None:
        fired = [e["i"] for e in events if e.get("k") == "fired"]
        assert len(fired) == len(set(fired)), (f"run {rid}: a timer fired twice {events}", self.m.trace[-12:])
        sigs = [repr(e.get("p")) for e in events if e.get("k") == "signal"]
        assert len(sigs) == len(set(sigs)), (f"run {rid}: a signal delivered twice {sigs}", self.m.trace[-12:])
        steps = {e["n"]: e for e in events if e.get("k") == "step"}
        state = p.state if isinstance(p.state, dict) else {}
        if state.get("status") == "completed":
            done = [e for e in events if e.get("k") == "done"]
            assert len(done) == 1 and "b" in steps, (f"run {rid} completed without its last step's record",
                                                     self.m.trace[-12:])
            wait = next(e for e in events if e.get("k") == "wait")
            got = next((e.get("p") for e in events if e.get("k") == "signal"
                        and events.index(e) < next((events.index(f) for f in events
                                                    if f.get("k") == "fired" and f["i"] == wait["i"]), len(events))),
                       None)
            b = steps["b"].get("v", "failed")
            assert done[0]["v"] == [rid, steps["a"]["v"], got, b] == state.get("result"), (
                f"run {rid}: its result {done[0]['v']} is not what its steps recorded", self.m.trace[-12:])
        finished = state.get("status") in ("completed", "failed", "cancelled")
        assert finished or p.status == proc.ERROR or live or rid in self.removing, (
            f"run {rid} ({state.get('status') or p.status}) has no input alive: it is stranded", self.m.trace[-12:])

    def settle(self) -> None:
        """No more faults: the runs go on until each is finished (or waits for nothing but time)."""
        self.fail.clear()
        if self.blocked:
            self.block()
        idle = 0
        while idle < 3:
            self.m.clock.advance(LEASE_MS / 1000 + 1)
            self.recover()
            self.forward()
            before = len(self.m.trace)
            self.work(3, "")
            idle = idle + 1 if self.m.trace[before:] == ["durable work []"] else 0
            self.check()


def _plain(e: Any) -> Any:
    """An event as compared (its start time ``s`` left out: checkpointed events get it when sent)."""
    return {k: v for k, v in e.items() if k != "s"} if isinstance(e, dict) else e


__all__ = ["DQ", "DurableDriver"]
