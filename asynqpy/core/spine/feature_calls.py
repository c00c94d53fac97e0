"""The broker's calls of the features: keyed tasks, durable processes, the rules engine, workflows,
periodic tasks, tenants and deploy holds (one method per Lua script, as the rest of the broker)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..deploy.versions import VERSION_BAND
from ..model.codec import Message
from ..model.errors import (
    AsynqpyError,
    LeaseLostError,
    TaskIdConflictError,
)
from ..model.task import TaskState
from ..processes import model as process
from ..workflows import records as workflow
from .calls import (
    _AFTER_STATES,
    _KEYED_STATES,
    CHANGED,
    DAY_TTL_S,
    ID_CONFLICT,
    OK,
    Acted,
    BrokerBase,
    Call,
    Commit,
    Finished,
    Registered,
    Resolved,
    _batch_codes,
    _commit_code,
    _event_text,
    _finish_code,
    _new_task_code,
    _one,
    _q,
    _s,
    delay_arg,
    exit_keys,
    id_arg,
    pending_keys,
    script_call,
    serial_keys,
)
from .keys import queue_keys


class FeatureCalls(BrokerBase):
    """The broker's calls of the features: keyed tasks, durable processes, the rules engine, workflows,"""

    def enqueue_keyed(self, queue: str, id: str, msg: Message, data: bytes | None = None,
                      check_id: bool = True, keep_finished: bool = False) -> Call[TaskState]:
        """(new) -> pending holding ``msg.key``, or blocked behind it: the state. Raises
        TaskIdConflictError. ``keep_finished``: a finished task (completed, archived) holding the
        id is a conflict too, instead of being replaced (an idempotent call's repeat)."""
        q = queue_keys(queue)
        code = _new_task_code(id, queue)
        return script_call("enqueue_keyed", lambda r: _KEYED_STATES[code(r)],
                           **_q(q, "tasks archived completed"), **exit_keys(q),
                           keylist=q.key_list(msg.key), id=id_arg(id), msg=self.seal(queue, id, msg, data),
                           check=("2" if keep_finished else "1") if check_id else "0", key=msg.key,
                           now=self.clock.script_now())

    def enqueue_keyed_many(self, queue: str, entries: Sequence[tuple[str, Message, bytes | None]],
                           check_ids: bool) -> Call[list[TaskState | TaskIdConflictError]]:
        """(new) x N -> pending or blocked, each as :meth:`enqueue_keyed` stores one, in one script
        call (tasks of one key keep their order). ``entries``: (id, message, its encoded payload or
        None). Returns per task its state, or the TaskIdConflictError refusing it."""
        q = queue_keys(queue)
        keylists: list[str] = []
        items: list[Any] = []
        for id, msg, data in entries:
            keylists.append(q.key_list(msg.key))
            items += [id_arg(id), self.seal(queue, id, msg, data), msg.key]

        def parse(reply: Any) -> list[TaskState | TaskIdConflictError]:
            return [_KEYED_STATES[c] if c != ID_CONFLICT else
                    TaskIdConflictError(f"a live task with id {id!r} exists in queue {queue!r}")
                    for c, (id, _, _) in zip(_batch_codes(queue, len(entries), reply), entries)]

        return script_call("enqueue_keyed_many", parse,
                           **_q(q, "tasks archived completed"), **exit_keys(q),
                           keylists=keylists, check="1" if check_ids else "0", now=self.clock.script_now(),
                           items=items)

    def key_gate(self, queue: str, items: Sequence[tuple[str, str]]) -> Call[list[TaskState | None]]:
        """Due keyed tasks, each ``(id, key)`` as :meth:`forward` named them, in one call: each
        takes its key (pending) or queues behind it (blocked); per item its state, None = its key
        is not ``key`` any more (edited), it is not scheduled or not due."""
        q = queue_keys(queue)
        lists: dict[str, int] = {}
        args: list[Any] = []
        for id, key in items:
            args += [id_arg(id), key, lists.setdefault(q.key_list(key), len(lists) + 1)]
        return script_call("key_gate", lambda r: [_KEYED_STATES.get(int(c)) for c in r],
                           **_q(q, "tasks scheduled events conf"), **serial_keys(q), keylists=list(lists),
                           now=self.clock.script_now(), items=args)

    def key_free(self, queue: str, key: str, holder: str) -> Call[bool]:
        """Release ``key`` if ``holder`` still holds it and has ended (the janitor's repair): True
        if it did."""
        q = queue_keys(queue)
        return script_call("key_free", lambda r: int(r) == OK, **_q(q, "tasks events conf"), **serial_keys(q),
                           keylist=q.key_list(key), key=key, holder=id_arg(holder))

    # -- durable processes (core/processes/model.py, lua/includes/process.lua) -----------------------------

    def proc_start(self, queue: str, pid: str, id: str, msg: Message, data: bytes | None = None) -> Call[int]:
        """Create process ``pid`` (status starting) with its init input ``id``: 1 (init pending),
        2 (init blocked behind inputs of an earlier process of the id), 0 (it exists: nothing
        written)."""
        q = queue_keys(queue)
        return script_call("proc_start", _new_task_code(id, queue),
                           **_q(q, "tasks events conf archived completed proc procs"), **serial_keys(q),
                           keylist=q.key_list(msg.key), id=id_arg(id), msg=self.seal(queue, id, msg, data),
                           key=msg.key, now=self.clock.script_now(), pid=id_arg(pid),
                           record=process.new_record(msg.type[len(process.TYPE_PREFIX):], msg.tenant,
                                                     msg.min_version))

    def proc_read(self, queue: str, pid: str, first: int = 0, count: int = process.HISTORY_WINDOW) -> Call[Any]:
        """A process's record and ``count`` events from event ``first`` (0: its last ``count``):
        the raw reply (:func:`asynqpy.core.processes.model.parse_read` reads it)."""
        q = queue_keys(queue)
        return script_call("proc_read", lambda r: r[0], **_q(q, "proc hist"), first=first, count=count,
                           items=[id_arg(pid), 0])

    def proc_read_many(self, queue: str, pids: Sequence[str], first: int = 0, count: int = process.HISTORY_WINDOW,
                       known: Sequence[int] = ()) -> Call[list[Any]]:
        """:meth:`proc_read` of several processes of one queue in one script call: the raw reply of
        each, in order. ``known``: per process, the newest event the caller holds (0 = none): the
        reply's events start there when it is within the page (see lua/proc_read.lua)."""
        q = queue_keys(queue)
        items: list[Any] = []
        for i, p in enumerate(pids):
            items += [id_arg(p), known[i] if i < len(known) else 0]
        return script_call("proc_read", list, **_q(q, "proc hist"), first=first, count=count, items=items)

    def proc_watch(self, queue: str, pid: str, inbox: str) -> Call[bool]:
        """Register ``inbox`` as a waiter of process ``pid`` (lua/proc_watch.lua): the next commit
        of an input of the process wakes it (a durable run's ``result``). False: no such process."""
        q = queue_keys(queue)
        return script_call("proc_watch", lambda r: int(r) == 1, **_q(q, "proc pwatch"), pid=id_arg(pid), inbox=inbox)

    def proc_commit(self, queue: str, id: str, token: str, msg: Message, plan: process.Plan,
                    timer: tuple[str, Message] | None = None, outcome: bytes = b"") -> Call[int]:
        """Complete the process input ``id`` and write ``plan`` (see ``lua/proc_commit.lua``): a
        :meth:`proc_commit_many` of one. ``timer``: the (id, message) of the timeout input a plan
        that sets a timer schedules. ``msg``: the input's message (with its completion written in,
        when it has a retention). Raises LeaseLostError (also when the process changed since it was
        read: the input then runs again after its lease) / TaskNotFoundError."""
        return _one(self.proc_commit_many(queue, [self.commit(queue, id, token, msg, plan, timer, outcome)]))

    def commit(self, queue: str, id: str, token: str, msg: Message, plan: process.Plan,
               timer: tuple[str, Message] | None = None, outcome: bytes = b"", progressed: bool = True) -> Commit:
        """One input of a :meth:`proc_commit_many` (as :meth:`proc_commit` takes it; ``progressed``:
        whether its run wrote progress). Raises what encoding it raises (nothing is sent)."""
        q = queue_keys(queue)
        tid, tmsg = timer if timer is not None else ("", None)
        iid = id_arg(id)
        sets = tmsg is not None and plan.timer == "s" and not plan.skipped and not plan.remove  # a new timer
        tid_arg = id_arg(tid) if sets else b""
        op, rec_a, rec_due, rec_b, rec_c, events, drop_from, drop_to, cancel = process.step_args(plan, iid, tid_arg)
        args = [iid, token, self.seal(queue, id, msg) if msg.retention_ms > 0 else b"", msg.retention_ms, 0,
                outcome, msg.retried + 1, id_arg(plan.pid), plan.kind, b"" if plan.skipped else plan.expect, op,
                rec_a, rec_due, rec_b, rec_c, events, drop_from, drop_to, cancel, plan.timer_at, tid_arg,
                self.seal(queue, tid, tmsg) if sets and tmsg is not None else b"", msg.key, 0,
                process.response_of(plan), 1 if progressed else 0]
        return Commit(id, plan.pid, args, q.inbox(msg.reply_to) if outcome and msg.reply_to else "",
                      q.key_list(msg.key) if msg.key else "")

    def proc_commit_many(self, queue: str, items: Sequence[Commit]) -> Call[list[int | Exception]]:
        """Commit a batch of process inputs of one queue (each built by :meth:`commit`) in one script
        call (the worker's batched commit, as :meth:`done_many` acknowledges tasks). The reply holds,
        per item in order, its :class:`Finished` (or 1) or the exception its write met
        (LeaseLostError, also when its process changed since it was read; TaskNotFoundError); one
        refused item does not stop the others."""
        q = queue_keys(queue)
        processed_day, _ = self._day_keys(q)
        extra: dict[str, int] = {}  # the batch's own keys, KEYS[22 + j]: key -> j
        args: list[Any] = []
        for c in items:
            a = list(c.args)
            if c.inbox:
                a[4] = extra.setdefault(c.inbox, len(extra) + 1)
            if c.keylist:
                a[23] = extra.setdefault(c.keylist, len(extra) + 1)
            args += a
        parsers = [_commit_code(c.id, c.pid) for c in items]

        def parse(reply: list[Any]) -> list[int | Exception]:
            out: list[int | Exception] = []
            for p, r in zip(parsers, reply):
                try:
                    out.append(p(r))
                except AsynqpyError as exc:
                    out.append(exc)
            return out

        return script_call("proc_commit", parse,
                           **_q(q, "tasks lease completed processed progress watch pwatch proc procs hist scheduled"),
                           tick=q.tick,
                           deps=q.deps,
                           **exit_keys(q), processed_day=processed_day, extra=list(extra), day_ttl=DAY_TTL_S,
                           now=self.clock.script_now(), items=args)

    def proc_step(self, queue: str, items: Sequence[tuple[str, str, str, process.Record, int, bytes, str]]) \
            -> Call[list[tuple[bytes, int] | Exception]]:
        """Durable runs' checkpoints inside their running inputs (``lua/proc_step.lua``), one call
        for those of one queue: per item (input id, lease token, process id, the record as held
        (:class:`~asynqpy.core.processes.model.Record`), the count once the events are appended,
        which the script writes with the record's other items as held, the events as
        :func:`asynqpy.core.processes.model.checkpoint_args` builds them, the process's key), its
        events appended; the input goes on. The reply holds, per item, (the record as stored now,
        how many inputs wait behind the process's key), or the exception its write met
        (LeaseLostError, also when the process changed since it was read; TaskNotFoundError)."""
        q = queue_keys(queue)
        extra: dict[str, int] = {}
        args: list[Any] = []
        for id, token, pid, held, count, events, key in items:
            f = process.checkpointed(held, count, b"").fields  # (but its 'updated', which the script puts in)
            args += [id_arg(id), token, id_arg(pid), held.raw, workflow.rec_pack(f[:process.R_UPDATED]),
                     workflow.rec_pack(f[process.R_UPDATED + 1:]), events,
                     extra.setdefault(q.key_list(key), len(extra) + 1)]

        def one(id: str, pid: str, reply: list[Any]) -> tuple[bytes, int] | Exception:
            code = int(reply[0])
            if code == CHANGED:
                return LeaseLostError(f"proc_step: process {pid} changed since input {id} read it; nothing written")
            try:
                _finish_code("proc_step", id)(code)
            except AsynqpyError as exc:
                return exc
            return bytes(reply[1]), int(reply[2])

        def parse(reply: list[Any]) -> list[tuple[bytes, int] | Exception]:
            return [one(it[0], it[2], r) for it, r in zip(items, reply)]

        return script_call("proc_step", parse, **_q(q, "tasks lease proc procs hist"), extra=list(extra),
                           now=self.clock.script_now(), items=args)

    def procs(self, queue: str, start: int, stop: int) -> Call[list[tuple[str, int]]]:
        """Process ids of ``queue`` by last change, newest first, with the change's time (ms)."""
        def parse(r: list[Any]) -> list[tuple[str, int]]:
            pairs = r if r and isinstance(r[0], (list, tuple)) else list(zip(r[0::2], r[1::2]))
            return [(_s(k), int(float(v))) for k, v in pairs]

        return Call(parse, command=("ZREVRANGE", queue_keys(queue).procs, start, stop, "WITHSCORES"))

    def procs_count(self, queue: str) -> Call[int]:
        return Call(int, command=("ZCARD", queue_keys(queue).procs))

    # -- the rules engine (core/rules/config.py): lists named by its configuration -------------------------

    def rules_take(self, input: str, taken: str, n: int) -> Call[list[bytes]]:
        """Move up to ``n`` events from ``input`` to ``taken`` (oldest first, as stored)."""
        return script_call("rules_take", lambda r: [x if isinstance(x, bytes) else str(x).encode() for x in r],
                           input=input, taken=taken, n=n)

    def rules_push(self, queue: str, task: str | bytes, guard: str | None) -> Call[int]:
        """LPUSH ``task`` to ``queue`` unless in the sorted set ``guard`` (added there first):
        1 pushed, 0 already there."""
        return script_call("rules_push", int, queue=queue, set=guard or queue, task=task,
                           guarded="1" if guard else "0", now="")

    def rules_redrive(self, dead: str, input: str, n: int) -> Call[int]:
        """Move up to ``n`` dead events (oldest first) back to ``input``; how many moved."""
        return script_call("rules_redrive", int, dead=dead, input=input, n=n)

    def rules_dead(self, taken: str, dead: str, event: bytes, record: str) -> Call[int]:
        """Move ``event`` from ``taken`` to ``dead`` as ``record`` (1; 0 if it was not in taken)."""
        return script_call("rules_dead", int, taken=taken, dead=dead, event=event, record=record)

    # -- workflows (lua/includes/flow.lua; core/workflows/records.py) -------------------------------------

    def register_child(self, queue: str, parent: str, child_queue: str,
                       child: str) -> Call[tuple[Registered, bytes]]:
        """Tell ``parent`` (in ``queue``) that ``child`` waits on it. Returns how the parent stands,
        with its stored message when it completed (b'' else)."""
        q = queue_keys(queue)
        return script_call("register_child", lambda r: (Registered(int(r[0])), r[1] if len(r) > 1 else b""),
                           **_q(q, "tasks children"), parent=id_arg(parent), child=workflow.ref(child_queue, child))

    def enqueue_after(self, queue: str, id: str, msg: Message, policy: str, ends: Sequence[tuple[bytes, bytes]],
                      data: bytes | None = None, check_id: bool = True, delay_ms: int = 0,
                      cancelled: Message | None = None) -> Call[TaskState]:
        """(new) -> waiting, or pending when no parent is left to wait for. ``ends``: per parent its
        ref and its end as far as known (b'' = not ended); ``delay_ms``: how long after now it may
        run once released; ``cancelled`` (policy 'c'): the message stored archived, in the same
        script, when a parent has already failed. Returns the state it is in: pending, scheduled,
        waiting, or archived (a failed parent under the cancel policy); raises TaskIdConflictError."""
        q = queue_keys(queue)
        pairs: list[bytes] = []
        for r, st in ends:
            pairs += [r, st]

        def parse(reply: Any) -> TaskState:
            code = int(reply)
            if code == ID_CONFLICT:
                raise TaskIdConflictError(f"a live task with id {id!r} exists in queue {queue!r}")
            return _AFTER_STATES[code]

        return script_call(
            "enqueue_after", parse,
            **_q(q, "tasks waiting deps wake events conf archived completed scheduled tick"), **pending_keys(q),
            id=id_arg(id), msg=self.seal(queue, id, msg, data), check="1" if check_id else "0", policy=policy,
            now=self.clock.script_now(), delay=delay_arg(delay_ms),
            cancelled=self.seal(queue, id, cancelled) if cancelled is not None else "", ends=pairs)

    def resolve(self, queue: str, child: str, parent_ref: bytes, state: bytes) -> Call[Resolved]:
        """Deliver one parent's end to ``child`` (idempotent): what it did."""
        q = queue_keys(queue)
        return script_call("resolve", lambda r: Resolved(int(r)),
                           **_q(q, "tasks waiting deps wake events conf scheduled tick"), **pending_keys(q),
                           child=id_arg(child), ref=parent_ref, state=state, now=self.clock.script_now())

    def fail_waiting(self, queue: str, id: str, read: bytes, new: bytes, error: str) -> Call[int]:
        """waiting -> archived as ``new`` (the stored message rewritten with ``error``, which says
        which parent failed; sealed by :func:`~asynqpy.core.security.signing.trust_gate`, never here: the
        message was read from Redis), if the task still holds ``read``. Returns 1 (a
        :class:`Finished` whose ``told`` says it had children), 0 gone, :data:`CHANGED`."""
        q = queue_keys(queue)
        return script_call("fail_waiting", lambda r: Finished.with_late(r) if isinstance(r, bytes) else Acted(int(r)),
                           **_q(q, "tasks waiting archived children outbox events conf"),
                           id=id_arg(id), read=read, msg=new, now=self.clock.script_now(), error=_event_text(error))

    def outbox_read(self, queue: str, count: int = 100) -> Call[list[tuple[bytes, dict[bytes, bytes]]]]:
        """The oldest ``count`` entries of a queue's outbox (parents' ends to deliver)."""
        q = queue_keys(queue)
        return Call(lambda r: [(i, f) for i, f in r or []], command=("XRANGE", q.outbox, "-", "+", "COUNT", count))

    def outbox_delete(self, queue: str, entry_ids: Sequence[bytes]) -> Call[int]:
        """Forget delivered outbox entries."""
        q = queue_keys(queue)
        return Call(int, command=("XDEL", q.outbox, *entry_ids))

    def deps(self, queue: str, id: str) -> Call[workflow.Record | None]:
        """A task's record as a child (its parents and how each ended), or None."""
        q = queue_keys(queue)
        return script_call("flow_read", workflow.parse_record, deps=q.deps, child=id_arg(id))

    def children_of(self, queue: str, id: str) -> Call[list[tuple[str, str]]]:
        """The (queue, id) of the tasks registered as waiting on task ``id`` (until it ends)."""
        q = queue_keys(queue)
        return Call(lambda r: workflow.refs(r) if r else [], command=("HGET", q.children, id_arg(id)))

    def version_held(self, queue: str, version: int) -> Call[bool]:
        """Whether ``queue`` holds a task set aside for a version up to ``version`` (by a worker of
        an older one: core/deploy/versions.py), which a dequeue by a worker of ``version`` takes back (a
        command the worker's ACL has: docs/security.md, "Minimal ACL")."""
        return Call(bool, command=("ZRANGEBYSCORE", queue_keys(queue).scheduled, VERSION_BAND, VERSION_BAND + version,
                                   "LIMIT", 0, 1))

    def tenant_fix(self, queue: str, mode: str, cursor: str,
                   count: int = 200) -> Call[tuple[str, list[tuple[str, str]]]]:
        """One step of a tenant part of the consistency sweep (lua/tenant_fix.lua): ``mode``
        "active" frees the slots counted for tasks no longer active; "ring" puts tenants with
        pending tasks that no dequeue would pick back in the ready ring (and corrects the count of
        one held at its concurrency). Returns (next cursor, '0' = pass done; [(id or tenant, what
        was repaired)])."""
        q = queue_keys(queue)

        def parse(r: list[Any]) -> tuple[str, list[tuple[str, str]]]:
            return _s(r[0]), [(_s(r[i]), _s(r[i + 1])) for i in range(1, len(r), 2)]

        return script_call("tenant_fix", parse, tasks=q.tasks, **pending_keys(q), wake=q.wake, lease=q.lease, tw=q.tw,
                           mode=mode, cursor=cursor, count=count)

    # -- periodic tasks (scheduler entries; see asynqpy.core.cron.entries) -----------------------------

    def cron_fire(self, queue: str, name: str, definition: bytes, tick_ms: int, id: str, msg: Message,
                  keep: int) -> Call[tuple[int, int]]:
        """Enqueue the task of entry ``name`` for ``tick_ms`` (0 = run now), exactly once across
        schedulers. Returns (code, Redis now in ms); codes in lua/cron_fire.lua."""
        q = queue_keys(queue)
        return script_call(
            "cron_fire", lambda r: (int(r[0]), int(r[1])),
            **_q(q, "cron cron_last cron_paused tasks wake events conf"), **pending_keys(q),
            history=q.cron_history(name), name=name, definition=definition, tick=tick_ms, id=id,
            msg=self.seal(queue, id, msg), now=self.clock.script_now(), keep=keep)

    def cron_remove(self, queue: str, name: str) -> Call[int]:
        """Forget entry ``name``: its definition, last tick, pause and history. 1 = removed, 0 = none."""
        q = queue_keys(queue)
        return script_call("cron_remove", int, **_q(q, "cron cron_last cron_paused"), history=q.cron_history(name),
                           name=name)

    def cron_pause(self, queue: str, name: str, paused: bool) -> Call[int]:
        """Pause or resume entry ``name`` (ticks that fall in a pause never fire). 1 = done, 0 = no
        such entry."""
        q = queue_keys(queue)
        return script_call("cron_pause", int, **_q(q, "cron cron_paused cron_last"), name=name,
                           pause="1" if paused else "0", now=self.clock.script_now())

    def tenant_band(self, queue: str, tenant: str, priority: int, start: int, count: int) -> Call[list[bytes]]:
        """Members ``start``.. (``count`` of them) of one tenant's tasks of one priority in the
        queue's tenant zset (lua/includes/priority.lua: ``tenant \\0 band seq id``, oldest first)."""
        t = tenant.encode()
        return Call(list, command=("ZRANGE", queue_keys(queue).tq, b"[" + t + b"\0" + bytes([57 - priority]),
                                   b"(" + t + b"\0" + bytes([58 - priority]), "BYLEX", "LIMIT", start, count))
