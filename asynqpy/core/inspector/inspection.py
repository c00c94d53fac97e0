"""What the Inspector reads and does, written once as sans-IO *plans*.

A plan is a generator: it yields the broker :class:`~asynqpy.broker.Call` list of one round trip
(run pipelined by the caller), receives the list of results (each a value or the exception that
call raised), and finally returns its answer. :class:`~asynqpy.inspector.Inspector` runs plans
synchronously and :class:`~asynqpy.inspector.AsyncInspector` awaits them, so both share every line
of inspection logic.

Redis work per call is O(1) or O(page size) whatever the queue depth: counts come from LLEN/ZCARD,
pages from LRANGE/ZRANGE by rank (a deep LRANGE offset costs one hop per list node, not per
element), bulk operations go in batches of at most ``batch`` tasks per script call.

:class:`Plans` is the operator's actions (here) over the reads (:mod:`.reads`), on the values and
building blocks of :mod:`.values`; every name of those stays importable from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import msgpack

from ..model import codec
from ..model.codec import Message, decode
from ..model.errors import (
    EncryptionError,
    InvalidArgumentError,
    MalformedMessageError,
    QueueNotEmptyError,
    TaskNotFoundError,
    TaskStateError,
)
from ..model.task import TaskInfo, TaskState
from ..security import encryption as enc
from ..security.keyplans import load_plan
from ..security.signing import Refused, Verified, trust_gate
from ..spine.broker import (
    Acted,
    Call,
)
from ..spine.keys import ALL_QUEUES, CRON_QUEUES, queue_keys
from ..spine.stored import is_active, lock_digest, message_of, token_of
from .reads import ReadPlans
from .values import (
    ALLOWED,
    BATCH,
    CANCELLED,
    EDIT_STATES,
    EDITABLE,
    LOCATE_PAGE,
    MAX_HISTORY_DAYS,
    MAX_OFFSET,
    MAX_PAGE_SIZE,
    MEMORY_SAMPLES,
    RUN_STATES,
    SEARCH_BATCH,
    SEARCH_SCAN,
    STATS_BATCH,
    WINDOW,
    A,
    B,
    C,
    DailyStats,
    G,
    GroupInfo,
    M,
    P,
    Plan,
    QueueInfo,
    R,
    RunsRecord,
    S,
    W,
    X,
    _check_removable,
    _edit_changes,
    _EditChanges,
    _edited,
    _group_of,
    _refusal,
    enqueued_at,
    key_slot,
    page_start,
    parse_runs,
    parse_state,
    run_results,
    state_of,
    task_from_stored,
    value,
)

__all__ = [
    "A",
    "ALLOWED",
    "B",
    "BATCH",
    "C",
    "CANCELLED",
    "DailyStats",
    "EDITABLE",
    "EDIT_STATES",
    "G",
    "GroupInfo",
    "LOCATE_PAGE",
    "M",
    "MAX_HISTORY_DAYS",
    "MAX_OFFSET",
    "MAX_PAGE_SIZE",
    "MEMORY_SAMPLES",
    "P",
    "Plan",
    "Plans",
    "QueueInfo",
    "R",
    "RUN_STATES",
    "RunsRecord",
    "S",
    "SEARCH_BATCH",
    "SEARCH_SCAN",
    "STATS_BATCH",
    "W",
    "WINDOW",
    "X",
    "enqueued_at",
    "key_slot",
    "page_start",
    "parse_runs",
    "parse_state",
    "run_results",
    "state_of",
    "task_from_stored",
    "value",
]


class Plans(ReadPlans):
    """The inspector's operations as plans, on one broker (its clock decides "now" for tests)."""

    def pause(self, queue: str) -> Plan[bool]:
        yield from self._known(queue)
        res = yield [self.b.pause(queue)]
        return bool(value(res[0]))

    def unpause(self, queue: str) -> Plan[bool]:
        yield from self._known(queue)
        res = yield [self.b.unpause(queue)]
        return bool(value(res[0]))

    def _action(self, verb: str, queue: str, state: TaskState, items: list[tuple[str, str, int, bytes]],
                window: int) -> Call[list[Acted]]:
        if verb == "delete":
            return self.b.delete_tasks(queue, state, items, window)
        if verb == "archive":
            return self.b.archive_tasks(queue, state, items, window)
        return self.b.run_tasks(queue, state, [item[0] for item in items])

    def act(self, verb: str, queue: str, id: str) -> Plan[None]:
        """delete / run / archive one task. Its state is read first (for the lock key and the
        state check); if it changes before the script runs (another state, or the id reused for
        another task), the script refuses and it is read again."""
        for _ in range(5):
            stored = yield from self._read(queue, id)
            state = state_of(stored)
            if state not in ALLOWED[verb]:
                raise _refusal(verb, id, state)
            if state is M:  # a targeted task: out of its indexes and record too (its running runs finish)
                value((yield [self.b.run_end(queue, id, decode(message_of(stored)),
                                             "D" if verb == "delete" else "X")])[0])  # its error is raised
                return
            if state is G:  # out of its group, which the task's message names
                code = value((yield [self.b.ungroup(queue, id, stored, verb, _group_of(stored))])[0])
                if code == Acted.OK:
                    return
                if code == Acted.NOT_FOUND:
                    raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
                continue
            hint = -1
            while True:
                item = (id, lock_digest(stored), hint, stored)
                res = yield [self._action(verb, queue, state, [item], self.window)]
                code = value(res[0])[0]
                if code != Acted.NOT_LOCATED or hint != -1:
                    break
                hint = yield from self._locate(queue, id, stored)
            if code == Acted.OK:
                return
            if code == Acted.NOT_FOUND:
                raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
            if code == Acted.KEYED:
                raise TaskStateError(f"cannot run {state.value} task {id!r} now: it has a key (key=), and running it "
                                     "would run it beside its key's current task (a scheduled one takes its turn "
                                     "when due; enqueue an archived one again)")
        raise TaskStateError(f"task {id!r} in queue {queue!r} keeps changing state; try again")

    def edit(self, queue: str, id: str, changes: dict[str, Any], max_payload_bytes: int = 1 << 20) -> Plan[TaskInfo]:
        """Change a pending, scheduled or retry task: ``changes`` holds any of ``payload``,
        ``max_retry``, ``process_at`` (datetime or Unix seconds), ``process_in`` (seconds; 0 =
        now), ``priority`` (0..9: a pending task moves to the back of its new priority). Read,
        checked, rewritten only if unchanged since read (else read again)."""
        edit = _edit_changes(changes)
        for _ in range(5):
            stored = yield from self._read(queue, id)
            state = state_of(stored)
            gate = self._editable(queue, id, stored, state)
            if "payload" in edit.fields:
                edit = yield from self._sealed_edit(queue, id, gate.msg, edit)
            msg = _edited(gate.msg, id, edit, max_payload_bytes)
            code = yield from self._write_edit(queue, id, state, stored, gate.store(msg), edit, keyed=bool(msg.key))
            if code == Acted.OK:
                return (yield from self.task_info(queue, id))
            if code == Acted.NOT_FOUND:
                raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        raise TaskStateError(f"task {id!r} in queue {queue!r} keeps changing; try again")

    def _sealed_edit(self, queue: str, id: str, msg: Message, edit: _EditChanges) -> Plan[_EditChanges]:
        """The edit with its new payload encrypted with the Inspector's key ring (none: as given,
        unless the task's payload is encrypted: then an Inspector without the ring cannot edit it)."""
        ring = self.b.ring
        if ring is None:
            if enc.sealed_payload(msg.payload):
                raise EncryptionError(f"task {id!r}'s payload is encrypted: give the Inspector the key ring "
                                      "(encryption=KeyRing(...), --encryption-keys) to edit it")
            return edit
        if ring.needs_tenant_key(msg.tenant):
            yield from load_plan(ring, [(queue, msg.tenant)], create=True)
        payload = edit.fields["payload"]
        proc_args = type(msg.payload) is dict and enc.is_sealed(msg.payload.get("a"))
        if not proc_args:
            payload = ring.seal(payload, enc.PAYLOAD, queue, msg.tenant)
        return replace(edit, fields={**edit.fields, "payload": payload})

    def _editable(self, queue: str, id: str, stored: bytes, state: TaskState) -> Verified:
        """The message of a task read for an edit, through the trust gate; TaskStateError for a
        task not in an editable state, an error for a signed task and a keyless Inspector (its
        edit could not be signed again), and for a message that does not verify (never re-signed)."""
        if state not in EDIT_STATES:
            why = "it is active (running): cancel it instead" if state is A else f"it is {state.value}"
            raise TaskStateError(f"cannot edit task {id!r}: {why} (edit applies to pending, scheduled and "
                                 "retry tasks)")
        body = message_of(stored)
        if self.b.signer is None and len(body) > codec.TAG_LEN and body[-codec.TAG_LEN:-32] == codec.TAG_PREFIX:
            raise InvalidArgumentError(f"task {id!r} is signed: give the Inspector the signing_key, so that "
                                       "the edited message is signed again")
        gate = trust_gate(self.b.signer, queue, id, body)
        if isinstance(gate, Refused):  # never re-sign what did not verify
            raise type(gate.error)(f"task {id!r} in queue {queue!r} is not edited: {gate.reason} (a message "
                                   "that fails verification is never signed again; delete or archive it)")
        return gate

    def _write_edit(self, queue: str, id: str, state: TaskState, stored: bytes, new: bytes, edit: _EditChanges,
                    keyed: bool) -> Plan[Any]:
        """Run the edit script; for a pending task too deep in its list for the script's window,
        locate it from Python and run the script again with its index. Returns the script's code."""
        hint = -1
        while True:
            # a keyed scheduled task due now takes its turn through its key (the forwarder): the
            # script decides "now" on the Redis clock (keyed=True)
            res = yield [self.b.edit_task(queue, state, id, stored, new, edit.at_ms, edit.in_ms, self.window,
                                          hint, keyed=keyed)]
            code = value(res[0])
            if code != Acted.NOT_LOCATED or hint != -1:
                return code
            hint = yield from self._locate(queue, id, stored)

    def _locate(self, queue: str, id: str, stored: bytes) -> Plan[int]:
        """The index of a pending id deep in a long list, read page by page (each LRANGE small, so
        Redis serves others in between); -2 if it is nowhere in the list. A task with a tenant:
        its seq, read from its tenant's band of the tenant zset the same way."""
        try:
            msg: Message | None = decode(message_of(stored))
        except MalformedMessageError:
            msg = None
        if msg is not None and msg.tenant:
            tail = id.encode()
            start = 0
            while True:
                res = yield [self.b.tenant_band(queue, msg.tenant, msg.priority, start, LOCATE_PAGE)]
                members: list[bytes] = value(res[0])
                for m in members:
                    if m.endswith(tail) and len(m) == len(msg.tenant.encode()) + 18 + len(tail):
                        return int(m[-len(tail) - 16:-len(tail)])
                if len(members) < LOCATE_PAGE:
                    return -2
                start += LOCATE_PAGE
        start = 0
        while True:
            res = yield [self.b.pending_ids(queue, start, start + LOCATE_PAGE - 1)]
            ids: list[str] = value(res[0])
            if id in ids:
                return start + ids.index(id)
            if len(ids) < LOCATE_PAGE:
                return -2
            start += LOCATE_PAGE

    def act_all(self, verb: str, queue: str, state: TaskState | str) -> Plan[int]:
        """delete / run / archive every task in ``state``, ``batch`` tasks per script call, as many
        as the state held when called (tasks arriving meanwhile may be left). Returns how many."""
        st = parse_state(state)
        if st not in ALLOWED[verb]:
            allowed = ", ".join(s.value for s in ALLOWED[verb])
            raise InvalidArgumentError(f"cannot {verb} all {st.value} tasks: {verb} applies to {allowed} tasks")
        if st is G:
            return (yield from self._act_all_grouped(verb, queue))
        if st is M:
            return (yield from self._act_all_targeted(verb, queue))
        res = yield [self._member(queue), self.b.stats(queue)]
        self._check(queue, res[0])
        total: int = getattr(value(res[1]), st.value)
        done = skip = idle = 0
        while done < total and idle < 3:
            res = yield [self.b.page(queue, st, skip, skip + self.batch - 1, values=verb != "run")]
            page = value(res[0])
            if not page:
                break
            # (a pending task with a tenant comes with its seq: the hint that finds it in the tenant zset)
            items = [(id, lock_digest(stored), int(score) if st is P and score is not None else -1, stored or b"")
                     for id, score, stored in page]
            codes: list[Acted] = value((yield [self._action(verb, queue, st, items, self.batch)])[0])
            moved = codes.count(Acted.OK)
            done += moved
            idle = 0 if moved else idle + 1
            if st is not P:  # zset entries whose task is in another state, or changed, or keyed, stay
                skip += codes.count(Acted.WRONG_STATE) + codes.count(Acted.CHANGED) + codes.count(Acted.KEYED)
        return done

    def _act_all_targeted(self, verb: str, queue: str) -> Plan[int]:
        """delete / archive every targeted task, ``batch`` per round trip."""
        done = 0
        while True:
            res = yield [self.b.page(queue, M, 0, self.batch - 1, values=True)]
            page = [(id, stored) for id, _, stored in value(res[0]) if stored and state_of(stored) is M]
            if not page:
                return done
            out = yield [self.b.run_end(queue, id, decode(message_of(stored)), "D" if verb == "delete" else "X")
                         for id, stored in page]
            moved = sum(1 for r in out if not isinstance(r, Exception))
            done += moved
            if not moved:
                for r in out:  # every call refused (an ACL, Redis gone): say why rather than "0 done"
                    value(r)
                return done

    def set_workers(self, queue: str, id: str, workers: Sequence[str] | None) -> Plan[TaskInfo]:
        """Change which workers may run a targeted task (None = any, for a task of ``runs`` > 1: a
        task of one run keeps naming workers, InvalidArgumentError). Runs already taken by workers
        no longer allowed are given back at their next lease renewal."""
        from ..spine.keys import validate_worker_name

        names = None
        if workers is not None:
            if isinstance(workers, str) or not isinstance(workers, Sequence) or not workers:
                raise InvalidArgumentError(f"workers must be a non-empty list of worker names or None, got {workers!r}")
            names = list(dict.fromkeys(validate_worker_name(w) for w in workers))
        for _ in range(5):
            stored = yield from self._read(queue, id)
            if state_of(stored) is not M:
                raise TaskStateError(f"task {id!r} is {state_of(stored).value}: only a targeted task (enqueued "
                                     "with workers= or runs=) has workers to change")
            gate = trust_gate(self.b.signer, queue, id, message_of(stored))
            if isinstance(gate, Refused):  # never re-sign what did not verify
                raise type(gate.error)(f"task {id!r} in queue {queue!r} is not changed: {gate.reason} (a message "
                                       "that fails verification is never signed again; delete or archive it)")
            old = gate.msg
            if names is not None and old.runs > len(names):
                raise InvalidArgumentError(f"task {id!r} needs {old.runs} distinct workers: name at least as many")
            if names is None and old.runs <= 1:  # (what its message says makes it targeted: its workers, or runs > 1)
                raise InvalidArgumentError(
                    f"task {id!r} runs once on one of its named workers: it must keep naming workers (any worker "
                    "for one run is an ordinary task: delete it and enqueue it again without workers=)")
            new = old.with_(workers=names)
            code = value((yield [self.b.set_workers(queue, id, stored, old, new, gate.store(new))])[0])
            if code == Acted.OK:
                return (yield from self.task_info(queue, id))
            if code == Acted.NOT_FOUND:
                raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        raise TaskStateError(f"task {id!r} in queue {queue!r} keeps changing; try again")

    def _act_all_grouped(self, verb: str, queue: str) -> Plan[int]:
        """delete / run / archive every aggregating task, group by group, ``batch`` per round trip."""
        done = 0
        for g in (yield from self.groups(queue)):
            while True:
                res = yield [self.b.page(queue, G, 0, self.batch - 1, values=True, group=g.group)]
                page = [(id, stored) for id, _, stored in value(res[0]) if stored]
                if not page:
                    break
                codes = yield [self.b.ungroup(queue, id, stored, verb, g.group) for id, stored in page]
                moved = sum(1 for c in codes if value(c) == Acted.OK)
                done += moved
                if not moved:
                    break
        return done

    def cancel(self, id: str, queue: str | None = None) -> Plan[TaskInfo]:
        """Archive an active task with last_error 'cancelled by an operator' and tell its worker
        (pub/sub) to cancel the handler. ``queue`` None: look in every queue."""
        if queue is None:
            queues = yield from self.queues()
        else:
            yield from self._known(queue)
            queues = [queue]
        where = f"queue {queue!r}" if queue else "any queue"
        for _ in range(5):
            res = yield [self.b.get_task(q, id) for q in queues]
            found = [(q, v) for q, v in zip(queues, res) if isinstance(v, bytes)]
            if not found:
                raise TaskNotFoundError(f"task {id!r} not found in {where}")
            active = [(q, v) for q, v in found if is_active(v)]
            if not active:
                state = state_of(found[0][1])
                raise TaskStateError(f"cannot cancel task {id!r}: it is {state.value}; only an active (running) "
                                     "task can be cancelled (delete or archive it instead)")
            q, stored = active[0]
            new, digest, original = self._cancelled(q, id, message_of(stored))
            token = token_of(stored).decode(errors="surrogateescape")  # written by hand, it may be any bytes
            # the token names the run cancelled: a later run of the same id is not cancelled by it
            notice: bytes = msgpack.packb([q, id, token], unicode_errors="surrogateescape")  # as read
            code = value((yield [self.b.cancel(q, id, token, new, digest, notice, original)])[0])
            if code == Acted.OK:
                return (yield from self.task_info(q, id))
        raise TaskStateError(f"task {id!r} keeps changing state; try again")

    def _cancelled(self, queue: str, id: str, body: bytes) -> tuple[bytes, str, Message | None]:
        """A running task's message rewritten as cancelled, through the trust gate: re-signed only
        if it verifies, else archived unsigned (a malformed one is kept as it is); its lock digest;
        and the message as read (None when malformed), whose key and process the exit needs."""
        gate = trust_gate(self.b.signer, queue, id, body)
        if isinstance(gate, Refused) and isinstance(gate.error, MalformedMessageError):
            return bytes(body), "", None
        cancelled = gate.msg.with_(last_error=CANCELLED, last_failed_at_ms=self.b.clock.now_ms())
        return gate.store(cancelled), gate.msg.lock_digest(), gate.msg

    def remove_queue(self, queue: str, force: bool = False) -> Plan[None]:
        """Remove a queue: it must be empty, or with ``force`` hold no active task (the rest is
        deleted in batches first, unique locks released)."""
        res = yield [self._member(queue), self.b.stats(queue),
                     Call(lambda r: sorted(x.decode(errors="replace") for x in r),
                          command=("HKEYS", queue_keys(queue).cron)), self.b.procs_count(queue)]
        self._check(queue, res[0])
        entries: list[str] = value(res[2])
        _check_removable(queue, value(res[1]), entries, value(res[3]), force)
        if force:
            yield from self._empty_queue(queue, entries)
        yield from self._drop_key_lists(queue)
        code = value((yield [self.b.drop_queue(queue, force)])[0])
        if code == Acted.NOT_EMPTY:
            raise QueueNotEmptyError(f"queue {queue!r} received tasks while being removed; nothing deleted")
        yield [Call(lambda r: r, command=("SREM", ALL_QUEUES, queue)),
               Call(lambda r: r, command=("SREM", CRON_QUEUES, queue))]

    def _empty_queue(self, queue: str, entries: list[str]) -> Plan[None]:
        """Remove a queue's scheduler entries (no scheduler may enqueue into the queue being
        removed), then delete its tasks, state by state."""
        if entries:
            yield [self.b.cron_remove(queue, name) for name in entries]
        # blocked and waiting first: deleting a key's holder (or a parent) first would release
        # the tasks behind it into pending while the queue is being emptied
        for state in (B, W, P, S, R, X, C, G, M):
            yield from self.act_all("delete", queue, state)

    def _drop_key_lists(self, queue: str) -> Plan[None]:
        """Delete the lists of the keys still held (keyed tasks, lua/includes/serial.lua), a page
        of the key index at a time."""
        q = queue_keys(queue)
        cursor = "0"
        while True:
            page = value((yield [Call(lambda r: r, command=("HSCAN", q.keyheld, cursor, "COUNT", 1000))])[0])
            cursor = page[0].decode() if isinstance(page[0], bytes) else str(page[0])
            held = list(page[1]) if isinstance(page[1], dict) else list(page[1][::2])
            if held:
                yield [Call(lambda r: r, command=("DEL", q.key_list(k.decode(errors="surrogateescape"))))
                       for k in held]
            if cursor == "0":
                break
