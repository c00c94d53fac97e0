"""The broker: one method per Lua script, the only place that builds script calls and turns script
replies (small integer codes) into results, enums (:class:`Acted`, ...) or typed errors.

Each call names its keys and arguments as the script's header declares them
(:func:`script_call`; :mod:`asynqpy.core.spine.scripts` binds the names to positional KEYS and ARGV and
refuses a missing or extra one). Queue keys are picked by their :class:`QueueKeys` names
(``_q``); the keys every end path shares come from :func:`exit_keys`, built here once.

The broker does no I/O. Each method returns a :class:`Call`, a description of one script call and
of how to read its reply; :mod:`asynqpy.executor` runs calls on a sync or an async Redis client
(one at a time or pipelined). Sync and async users thus share every line of broker logic.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..model import codec
from ..model.codec import Message
from ..model.errors import AsynqpyError
from ..processes import model as process
from .calls import (
    ARCHIVED_RUNS_TTL_MS,
    CHANGED,
    DAY_TTL_S,
    DUPLICATE,
    GROUP_KEYS,
    ID_CONFLICT,
    KEYED,
    LEASE_ALIVE,
    LEASE_LOST,
    MAX_DELAY_MS,
    NOT_EMPTY,
    NOT_FOUND,
    NOT_LOCATED,
    OK,
    STATS_WIDTH,
    TRIM_PER_CALL,
    WRONG_STATE,
    Acted,
    BrokerBase,
    Call,
    Commit,
    Dequeued,
    Done,
    Expired,
    Finished,
    Forwarded,
    QueueStats,
    Registered,
    Resolved,
    Snapshot,
    SweepLease,
    Watched,
    _allowed,
    _batch_codes,
    _done_batch,
    _event_text,
    _finish_code,
    _keylist,
    _new_task_code,
    _one,
    _q,
    _s,
    _targets,
    container_of,
    delay_arg,
    event_keys,
    exit_keys,
    id_arg,
    parse_dequeued,
    pending_keys,
    script_call,
    serial_keys,
    token_arg,
)
from .feature_calls import FeatureCalls
from .keys import ALL_QUEUES, queue_keys
from .operator_calls import OperatorCalls
from .scripts import load_scripts
from .stored import lock_digest

__all__ = [
    "ARCHIVED_RUNS_TTL_MS",
    "Acted",
    "Broker",
    "BrokerBase",
    "CHANGED",
    "Call",
    "Commit",
    "DAY_TTL_S",
    "DUPLICATE",
    "Dequeued",
    "Done",
    "Expired",
    "Finished",
    "Forwarded",
    "GROUP_KEYS",
    "ID_CONFLICT",
    "KEYED",
    "LEASE_ALIVE",
    "LEASE_LOST",
    "LONE_FULL",
    "MAX_DELAY_MS",
    "NOT_EMPTY",
    "NOT_FOUND",
    "NOT_LOCATED",
    "OK",
    "QueueStats",
    "Registered",
    "Resolved",
    "STATS_WIDTH",
    "Snapshot",
    "SweepLease",
    "TRIM_PER_CALL",
    "WRONG_STATE",
    "Watched",
    "container_of",
    "delay_arg",
    "event_keys",
    "exit_keys",
    "id_arg",
    "pending_keys",
    "script_call",
    "serial_keys",
    "token_arg",
]


LONE_FULL = "full"
"""enqueue_lone.lua's answer when a producer rule (a cap) is set for the queue or the task's
tenant: nothing was written; the task goes through enqueue.lua, which admits it."""


def _lone_code(reply: Any) -> int | str:
    """enqueue_lone.lua's reply: 1 (enqueued, or the call's own earlier write) or :data:`LONE_FULL`."""
    if isinstance(reply, bytes):
        reply = reply.decode()
    if reply == LONE_FULL:
        return LONE_FULL
    if reply != 1:
        raise AsynqpyError(f"unexpected reply of enqueue_lone: {reply!r}")
    return 1


class Broker(FeatureCalls, OperatorCalls):
    """Builds the calls of every state transition. ``clock`` decides the ``now`` scripts use;
    ``signer`` (optional) signs every message written (see :mod:`asynqpy.signing`)."""

    # -- new tasks ---------------------------------------------------------------------------

    def enqueue(
        self, queue: str, id: str, msg: Message, unique_ttl: int = 0, data: bytes | None = None, check_id: bool = True,
        mode: str = "",
    ) -> Call[int]:
        """(new) -> pending. Raises DuplicateTaskError (ThrottledError with ``mode`` 't': then
        ``unique_ttl`` is the throttle window) / TaskIdConflictError when run.
        ``data``: ``msg`` already encoded, if the caller has it; ``check_id`` False for a
        generated (random) id, which cannot collide."""
        q = queue_keys(queue)
        return script_call(
            "enqueue", _new_task_code(id, queue, mode),
            **_q(q, "tasks archived completed"), **exit_keys(q),
            lock=q.lock(msg.lock_digest(mode == "t") if unique_ttl else ""),
            id=id, msg=self.seal(queue, id, msg, data), unique=unique_ttl, check="1" if check_id else "0")

    def enqueue_lone(self, queue: str) -> Callable[[str, bytes], Call[int | str]]:
        """The lone producer's quick call for ``queue`` (lua/enqueue_lone.lua: a task with a
        generated id, not unique, not delayed), its keys bound once: ``(id, data) -> Call``
        (``data``: the encoded message, sealed here as :meth:`enqueue` seals it). The call answers
        1 (enqueued, or this call's own earlier write) or :data:`LONE_FULL`: a producer rule (a
        cap) is set, nothing was written, and the task goes through :meth:`enqueue`."""
        q = queue_keys(queue)
        blank = Message(type="")  # (seal's message: unread, the encoded one is given)
        built = script_call("enqueue_lone", _lone_code, tasks=q.tasks, wake=q.wake, **pending_keys(q), **event_keys(q),
                            id="", msg=b"")
        name, keys, script = built.script, built.keys, load_scripts()[built.script]

        def call(id: str, data: bytes) -> Call[int | str]:
            return Call(_lone_code, name, keys,
                        script.pick_args({"id": id, "msg": self.seal(queue, id, blank, data)}))

        return call

    def enqueue_many(self, queue: str, entries: Sequence[tuple[str, bytes]], check_ids: bool) -> Call[list[int]]:
        """(new) x N -> pending in one script call, for non-unique tasks of one queue. ``entries``:
        (id, encoded message). Returns the 0-based positions refused for an id conflict. A batch
        of generated ids carries a random marker, so that the call sent again writes nothing."""
        q = queue_keys(queue)
        marker = q.batch("" if check_ids else base64.urlsafe_b64encode(os.urandom(12)).decode())
        flat: list[Any] = [b""] * (2 * len(entries))
        flat[0::2] = [id for id, _ in entries]
        if self.signer is None:
            flat[1::2] = [b"p" + data for _, data in entries]
        else:
            seal = self.signer.seal
            flat[1::2] = [b"p" + seal(queue, id, data) for id, data in entries]
        return script_call("enqueue_many", lambda r: [x - 1 for x in _batch_codes(queue, len(entries), r)],
                           **_q(q, "tasks archived completed"), **exit_keys(q), marker=marker,
                           check="1" if check_ids else "0", entries=flat)

    def group_add(self, queue: str, id: str, msg: Message, unique_ttl: int = 0, data: bytes | None = None,
                  check_id: bool = True, mode: str = "") -> Call[int]:
        """(new) -> aggregating in the group ``msg.group``. Raises DuplicateTaskError /
        ThrottledError / TaskIdConflictError when run."""
        q = queue_keys(queue)
        return script_call(
            "group_add", _new_task_code(id, queue, mode),
            **_q(q, "tasks groups groups_first groups_size aggregating archived completed events conf"),
            group=q.group(msg.group), lock=q.lock(msg.lock_digest(mode == "t") if unique_ttl else ""),
            id=id, msg=self.seal(queue, id, msg, data), unique=unique_ttl, check="1" if check_id else "0",
            group_name=msg.group, now=self.clock.script_now())

    def schedule(
        self, queue: str, id: str, msg: Message, delay_ms: int, unique_ttl: int = 0, data: bytes | None = None,
        check_id: bool = True, mode: str = "",
    ) -> Call[Any]:
        """(new) -> scheduled, due ``delay_ms`` from now on the Redis clock. Returns the due time;
        with ``mode`` 'd' (debounce) ``(due, id of the scheduled task replaced or '')``; 't':
        throttled. ``check_id`` False for a generated (random) id."""
        q = queue_keys(queue)
        return script_call(
            "schedule", _new_task_code(id, queue, mode),
            **_q(q, "tasks scheduled tick archived completed events conf children outbox"),
            lock=q.lock(msg.lock_digest(mode == "t") if unique_ttl else ""),
            id=id, msg=self.seal(queue, id, msg, data), unique=unique_ttl, delay=delay_arg(delay_ms),
            now=self.clock.script_now(), check="1" if check_id else "0", mode=mode if mode == "d" else "")

    def enqueue_target(self, queue: str, id: str, msg: Message, unique_ttl: int = 0, data: bytes | None = None,
                       check_id: bool = True) -> Call[int]:
        """(new) -> targeted: a task with ``msg.workers`` and/or ``msg.runs`` (lua/includes/runs.lua).
        Raises DuplicateTaskError / TaskIdConflictError when run."""
        q = queue_keys(queue)
        index, wakes = _targets(q, msg.workers)
        return script_call(
            "enqueue_target", _new_task_code(id, queue),
            **_q(q, "tasks targeted runs wake archived completed events conf"),
            lock=q.lock(msg.lock_digest() if unique_ttl else ""), targets=[*index, *wakes],
            id=id, msg=self.seal(queue, id, msg, data), unique=unique_ttl, check="1" if check_id else "0",
            runs_needed=msg.runs, allowed=_allowed(msg.workers), now=self.clock.script_now(), k=len(index))

    def run_end(self, queue: str, task_id: str, msg: Message, outcome: str, *, run: str = "", token: str | bytes = "",
                recover: bool = False, failed: Message | None = None, max_retry: int | None = None,
                result: Any = None, sign: bool = True) -> Call[tuple[int, str]]:
        """A run of targeted task ``task_id`` ended (``outcome`` s, f, e, g: see lua/run_end.lua),
        or (``run`` '') an operator deletes (D) or archives (X) the task. ``msg``: the task's
        message (its workers name the keys, its retention decides what completing keeps);
        ``failed``: the message with the run's error (``sign`` False: stored unsigned, for a message
        that did not verify); ``result``: a succeeded run's result (kept
        per worker when the task has a retention; the task's result if this run completes it). A
        kept task (completed with retention, archived) keeps its final runs record. Returns
        (code, the task's state after)."""
        q = queue_keys(queue)
        index, wakes = _targets(q, msg.workers)
        if outcome == "e" and run and msg.workers is None:
            # a run whose lease expired frees its worker's turn: that worker (a process restarted
            # under its name) may take it again, so its own wake list is told too; the queue's token
            # alone may go to a worker that cannot take the run, and a worker of many queues
            # dequeues only a queue it holds a token for (issue 42 #9)
            wakes = [q.wake_for(run.rpartition("|")[2])]
        done = b""
        if run and msg.retention_ms > 0:  # a run's success (an operator's D/X never stores it: unverified)
            done = self.seal(queue, task_id, msg.with_(completed_at_ms=self.clock.now_ms(), result=result))
        processed_day, failed_day = self._day_keys(q)
        check = _finish_code("run_end", run or task_id)

        def parse(r: list[Any]) -> tuple[int, str]:
            code = int(r[0])
            if code < OK:
                check(code)
            return code, _s(r[1])

        return script_call(
            "run_end", parse,
            **_q(q, "tasks lease targeted runs archived completed events conf progress processed failed wake"),
            **pending_keys(q),
            processed_day=processed_day, failed_day=failed_day, lock=q.lock(msg.lock_digest()),
            kept=q.ran(task_id), targets=[*index, *wakes],
            run=id_arg(run) if run else "", token=token, outcome=outcome, task=id_arg(task_id),
            recover="1" if recover else "0", now=self.clock.script_now(), done=done, retention=msg.retention_ms,
            failed_msg=self.seal(queue, task_id, failed, sign=sign) if failed is not None else b"",
            max_retry=msg.max_retry if max_retry is None else max_retry, k=len(index), day_ttl=DAY_TTL_S,
            archived_ttl=ARCHIVED_RUNS_TTL_MS,
            result=codec.encode_payload(result, "result") if outcome == "s" and msg.retention_ms > 0 else b"")

    def register_queues(self, queues: Sequence[str]) -> Call[Any]:
        """Add queue names to the global queue set (plain SADD; a separate slot from the queues)."""
        return Call(lambda r: r, command=("SADD", ALL_QUEUES, *queues))

    # -- the worker's transitions ------------------------------------------------------------

    def dequeue(self, queue: str, count: int, lease_ms: int, token: str, worker: str = "",
                version: int = 0, pages: int = -1) -> Call[Dequeued]:
        """pending -> active for up to ``count`` tasks, leased until now + ``lease_ms``; first,
        runs of targeted tasks ``worker`` may take ('' = none: its run ids are '<id>|<worker>').
        ``version``: the worker's (core/deploy/versions.py encode_version, 0 = none): a task that needs a
        newer one, or whose type is blocked, is held instead (lua/includes/hold.lua). ``pages``
        >= 0: each process input taken comes with its process's record and last ``pages`` events
        (:attr:`Dequeued.procs`)."""
        q = queue_keys(queue)
        return script_call(
            "dequeue", parse_dequeued,
            **_q(q, "tasks lease paused wake events conf runs targeted_any scheduled tw proc hist"), **pending_keys(q),
            mine=q.targeted_for(worker) if worker else q.targeted_any,
            count=count, lease_ms=lease_ms, token=token, now=self.clock.script_now(), name=worker, version=version,
            pages=pages)

    def done(self, queue: str, id: str, token: str, msg: Message, outcome: bytes = b"") -> Call[int]:
        """active -> deleted (success, no retention). ``outcome``: what to push to the inbox of
        ``msg.reply_to`` (:func:`~asynqpy.core.results.plans.pack_outcome`), b'' when nobody waits. The
        call's reply is a :class:`Finished` (1, with the late waiters to notify)."""
        return _one(self.done_many(queue, [Done(id, token, msg, outcome)]))

    def done_many(self, queue: str, items: Sequence[Done]) -> Call[list[int | Exception]]:
        """:meth:`done` for a batch of tasks of one queue, in one script call (the worker's
        batched acknowledgement). The reply holds, per item in order, its :class:`Finished` or
        the exception its write met (:class:`~asynqpy.errors.LeaseLostError`,
        :class:`~asynqpy.errors.TaskNotFoundError`); one refused item does not stop the others."""
        q = queue_keys(queue)
        processed_day, _ = self._day_keys(q)
        args, extra, plain, parse = _done_batch(q, items)
        return script_call("done", parse, **_q(q, "tasks lease processed progress watch deps"), **exit_keys(q),
                           processed_day=processed_day, extra=extra, day_ttl=DAY_TTL_S, plain=plain, items=args)

    def done_dequeue(self, queue: str, items: Sequence[Done], count: int, lease_ms: int, token: str,
                     worker: str = "", version: int = 0,
                     pages: int = -1) -> Call[tuple[list[int | Exception], Dequeued]]:
        """:meth:`done_many` of ``items``, then :meth:`dequeue` of the same queue, in one script call
        (lua/done_dequeue.lua: a busy worker's acknowledgement and its next dequeue in one round
        trip). The reply: the acknowledgement's (as :meth:`done_many`'s) and the dequeue's."""
        q = queue_keys(queue)
        processed_day, _ = self._day_keys(q)
        args, extra, plain, parse_ack = _done_batch(q, items)

        def parse(reply: list[Any]) -> tuple[list[int | Exception], Dequeued]:
            return parse_ack(reply[0]), parse_dequeued(reply[1])

        return script_call(
            "done_dequeue", parse,
            **_q(q, "tasks lease processed progress watch deps paused runs targeted_any scheduled tw proc hist"),
            **exit_keys(q), processed_day=processed_day, mine=q.targeted_for(worker) if worker else q.targeted_any,
            extra=extra, count=count, lease_ms=lease_ms, token=token, now=self.clock.script_now(), name=worker,
            version=version, pages=pages, day_ttl=DAY_TTL_S, plain=plain, items=args)

    def complete(self, queue: str, id: str, token: str, msg: Message, outcome: bytes = b"") -> Call[int]:
        """active -> completed, kept ``msg.retention_ms`` with ``msg.result``; ``outcome`` as for
        :meth:`done`."""
        q = queue_keys(queue)
        processed_day, _ = self._day_keys(q)
        return script_call(
            "complete", _finish_code("complete", id), **_q(q, "tasks lease completed processed progress watch"),
            **exit_keys(q), processed_day=processed_day, lock=q.lock(msg.lock_digest()), reply=q.inbox(msg.reply_to),
            keylist=_keylist(q, msg.key), id=id_arg(id), token=token, msg=self.seal(queue, id, msg),
            retention=msg.retention_ms, day_ttl=DAY_TTL_S, now=self.clock.script_now(), payload=outcome,
            attempt=msg.retried + 1, result=b"" if msg.result is None else codec.encode_payload(msg.result, "result"),
            key=msg.key)

    def retry(self, queue: str, id: str, token: str | bytes, msg: Message, delay_ms: float,
              recover: bool = False) -> Call[int]:
        """active -> retry, due in ``delay_ms`` (capped to 0..:data:`MAX_DELAY_MS`). ``token``: the
        lease token of the run being finished; ``recover``: the recoverer calls (the lease must
        also have expired)."""
        q = queue_keys(queue)
        processed_day, failed_day = self._day_keys(q)
        return script_call(
            "retry", _finish_code("retry", id),
            **_q(q, "tasks lease retry tick processed failed progress events conf wake"), **pending_keys(q),
            processed_day=processed_day, failed_day=failed_day, id=id_arg(id), token=token_arg(token),
            msg=self.seal(queue, id, msg), delay=delay_arg(delay_ms), day_ttl=DAY_TTL_S, now=self.clock.script_now(),
            recover="1" if recover else "0", attempt=msg.retried, error=_event_text(msg.last_error))

    def archive(
        self, queue: str, id: str, token: str | bytes, msg: Message, max_size: int, max_age_ms: int,
        sign: bool = True, recover: bool = False, outcome: bytes = b"", mark_process: bool = True,
    ) -> Call[int]:
        """active -> archived, trimming the archive to ``max_size`` tasks and ``max_age_ms``.
        A process input's process is marked error (unless ``mark_process`` is False: an input
        the process refused).
        ``sign`` False: the message is stored unsigned (a task the worker refused to trust must not
        become runnable by being archived). ``token`` and ``recover`` as for :meth:`retry`;
        ``outcome`` as for :meth:`done`."""
        q = queue_keys(queue)
        processed_day, failed_day = self._day_keys(q)
        pid, kind = process.process_of(msg) if mark_process else ("", "")
        return script_call(
            "archive", _finish_code("archive", id, pid),
            **_q(q, "tasks lease archived processed failed trimmed progress watch pwatch proc procs"), **exit_keys(q),
            processed_day=processed_day, failed_day=failed_day, lock=q.lock(msg.lock_digest()),
            reply=q.inbox(msg.reply_to), keylist=_keylist(q, msg.key),
            id=id_arg(id), token=token_arg(token), msg=self.seal(queue, id, msg, sign=sign), max_size=max_size,
            max_age=max_age_ms, day_ttl=DAY_TTL_S, now=self.clock.script_now(), recover="1" if recover else "0",
            payload=outcome, attempt=msg.retried + 1, error=_event_text(msg.last_error), key=msg.key, pid=pid,
            kind=kind)

    def progress(self, queue: str, id: str, token: str, msg: Message, value: bytes, push: bytes = b"") -> Call[int]:
        """A running task's progress (``value``: msgpack), kept as its latest; ``push`` goes to the
        inbox of ``msg.reply_to`` (b'' = nobody waits). Raises LeaseLostError / TaskNotFoundError."""
        q = queue_keys(queue)
        return script_call("progress", _finish_code("progress", id), **_q(q, "tasks progress events conf"),
                           reply=q.inbox(msg.reply_to) if msg.reply_to else q.progress,
                           id=id_arg(id), token=token, value=value, payload=push)

    # -- waiting for outcomes ------------------------------------------------------------------

    def watch(self, queue: str, id: str, inbox: str = "") -> Call[bytes | Watched]:
        """Read whether a task finished, registering ``inbox`` as a waiter if not (see
        :mod:`asynqpy.core.results.plans`): the stored value of a finished task, else :class:`Watched`."""
        q = queue_keys(queue)
        return script_call("watch", lambda r: r if isinstance(r, bytes) else Watched(int(r)),
                           **_q(q, "tasks watch"), id=id_arg(id), inbox=inbox)

    def reply(self, queue: str, inbox: str, outcome: bytes) -> Call[int]:
        """Push a finished task's outcome to a late waiter's inbox."""
        return script_call("reply", int, inbox=queue_keys(queue).inbox(inbox), payload=outcome)

    def rewake(self, queue: str) -> Call[int]:
        """Put back a wake token taken for ``queue`` and not acted on (1 = a token waits)."""
        q = queue_keys(queue)
        return script_call("rewake", int, **_q(q, "wake"), **pending_keys(q))

    def wake_take(self, lists: Sequence[str], n: int) -> Call[list[int]]:
        """Take the wake tokens of up to ``n`` of ``lists`` (wake lists, in the order to take
        them; one Redis: they span slots): the 0-based positions of those whose token was taken."""
        return script_call("wake_take", lambda r: [int(i) - 1 for i in r or ()], lists=lists, n=n)

    def snooze(self, queue: str, id: str, token: str, delay_ms: float) -> Call[int]:
        """active -> scheduled in ``delay_ms`` (capped to 0..:data:`MAX_DELAY_MS`), nothing counted
        (RateLimited). Returns the due time."""
        q = queue_keys(queue)
        return script_call("snooze", _finish_code("snooze", id),
                           **_q(q, "tasks lease scheduled tick progress events conf wake"), **pending_keys(q),
                           id=id_arg(id), token=token, delay=delay_arg(delay_ms), now=self.clock.script_now())

    def requeue(self, queue: str, id: str, token: str) -> Call[int]:
        """active -> front of pending (shutdown); nothing counted."""
        q = queue_keys(queue)
        return script_call("requeue", _finish_code("requeue", id), **_q(q, "tasks lease wake progress"),
                           **pending_keys(q), id=id_arg(id), token=token)

    def extend(self, queue: str, lease_ms: int,
               held: Sequence[tuple[str, str] | tuple[str, str, str]]) -> Call[tuple[int, list[str]]]:
        """Renew leases for (id, token) pairs, or (id, token, run_of) for a run of targeted task
        ``run_of`` (only those are runs: an id holding '|' is not one by itself). Returns (now, ids
        whose lease was lost)."""
        q = queue_keys(queue)
        triples: list[Any] = []
        for id, token, *run_of in held:
            triples += [id_arg(id), token, id_arg(run_of[0]) if run_of and run_of[0] else ""]
        return script_call("extend", lambda r: (int(r[0]), [_s(x) for x in r[1:]]),
                           **_q(q, "tasks lease runs progress wake"), lease_ms=lease_ms, now=self.clock.script_now(),
                           held=triples)

    # -- background maintenance --------------------------------------------------------------

    def forward(self, queue: str, batch: int = 100) -> Call[tuple[int, int]]:
        """scheduled/retry -> pending when due. Returns (moved, ms until next due or -1), a
        :class:`Forwarded` whose ``keyed`` names the due keyed tasks left for :meth:`key_gate`, each
        ``(id, key)``."""
        q = queue_keys(queue)
        return script_call("forward", lambda r: Forwarded.of(int(r[0]), int(r[1]),
                                                             [(_s(r[i]), _s(r[i + 1])) for i in range(2, len(r), 2)]),
                           **_q(q, "scheduled retry tasks wake keyheld"), **pending_keys(q), **event_keys(q),
                           batch=batch,
                           now=self.clock.script_now())

    def expired(self, queue: str, limit: int = 100) -> Call[Expired]:
        """List active tasks whose lease expired."""
        q = queue_keys(queue)

        def parse(r: list[Any]) -> Expired:
            items = [(_s(r[i]), r[i + 1] or None) for i in range(3, len(r), 2)]
            return Expired(int(r[0]), int(r[1]), items, int(r[2]))

        return script_call("expired", parse, **_q(q, "lease tasks outbox"), limit=limit, now=self.clock.script_now())

    def drop(self, queue: str, id: str) -> Call[Acted]:
        """Remove an expired lease whose task data is gone: OK (done), NOT_FOUND, LEASE_ALIVE."""
        q = queue_keys(queue)
        return script_call("drop", Acted, **_q(q, "lease tasks wake"), **pending_keys(q), id=id_arg(id),
                           now=self.clock.script_now())

    def reconcile(self, queue: str, cursor: str, count: int = 200) -> Call[tuple[str, list[tuple[str, str]]]]:
        """One step of the consistency sweep: puts tasks back into the container their state
        names. Returns (next cursor, '0' = sweep done; [(id, what was repaired)])."""
        q = queue_keys(queue)

        def parse(r: list[Any]) -> tuple[str, list[tuple[str, str]]]:
            return _s(r[0]), [(_s(r[i]), _s(r[i + 1])) for i in range(1, len(r), 2)]

        return script_call("reconcile", parse,
                           **_q(q, "tasks lease scheduled retry archived completed targeted waiting blocked ta"),
                           cursor=cursor, count=count, now=self.clock.script_now())

    def sweep_claim(self, queue: str, owner: str, lease_ms: int, interval_ms: int,
                    parts: Sequence[str]) -> Call[SweepLease]:
        """Ask for the lease of the queue's consistency sweep (lua/sweep.lua): granted when a
        sweep is due (one ``interval_ms`` after the last ended; a queue never swept is recorded
        now, its first sweep due an interval later) or under way with no live holder. The reply's
        ``cursors`` (granted) say where to go on: the parts not done yet, each at its cursor."""
        return script_call("sweep", SweepLease.of, sweep=queue_keys(queue).sweep, owner=owner, lease=lease_ms,
                           interval=interval_ms, now=self.clock.script_now(), mode="claim", parts=list(parts))

    def sweep_save(self, queue: str, owner: str, lease_ms: int, interval_ms: int,
                   cursors: Mapping[str, str]) -> Call[SweepLease]:
        """Record a step of the queue's consistency sweep: the parts left, each at its next
        cursor (none left: the sweep ended), and renew the lease; refused (code 0) when the lease
        is another's now."""
        flat = [x for kv in cursors.items() for x in kv]
        return script_call("sweep", SweepLease.of, sweep=queue_keys(queue).sweep, owner=owner, lease=lease_ms,
                           interval=interval_ms, now=self.clock.script_now(), mode="save", parts=flat)

    def unwatch_gone(self, queue: str, cursor: str, count: int = 200) -> Call[tuple[str, int]]:
        """One step of the sweep of the watch hash: forgets the waiters of tasks that are gone.
        Returns (next cursor, '0' = pass done; entries removed)."""
        return self.forget_gone(queue, "watch", cursor, count)

    def forget_gone(self, queue: str, kind: str, cursor: str, count: int = 200) -> Call[tuple[str, int]]:
        """One step of the sweep of a per-task hash (``kind``: "watch", "children" or "deps"):
        forgets the entries of tasks that are gone. Returns (next cursor, '0' = pass done;
        entries removed)."""
        q = queue_keys(queue)
        key = {"watch": q.watch, "children": q.children, "deps": q.deps}[kind]
        return script_call("forget_gone", lambda r: (_s(r[0]), int(r[1])), tasks=q.tasks, hash=key,
                           cursor=cursor, count=count, mode=kind, now=self.clock.script_now())

    def expire(self, queue: str, batch: int = 100) -> Call[tuple[int, int]]:
        """completed -> deleted past retention. Returns (deleted, ms until next or -1)."""
        q = queue_keys(queue)
        return script_call("expire", lambda r: (int(r[0]), int(r[1])), **_q(q, "completed tasks"), batch=batch,
                           now=self.clock.script_now())

    def trim(self, queue: str, max_size: int, max_age_ms: int) -> Call[int]:
        """archived -> deleted beyond the size/age limits (data included). Returns how many (at most
        :data:`TRIM_PER_CALL`: that many means more may be left)."""
        q = queue_keys(queue)
        return script_call("trim", int, **_q(q, "archived tasks trimmed"), max_size=max_size, max_age=max_age_ms,
                           now=self.clock.script_now())

    def aggregate(self, queue: str, group: str, members: Sequence[tuple[str, bytes]], id: str,
                  msg: Message) -> Call[Acted]:
        """A group's ``members`` ((id, stored value read), oldest first) -> deleted, and the
        aggregate ``msg`` -> pending under ``id``, in one step, only if every member is still in
        the group unchanged. Codes in lua/aggregate.lua."""
        q = queue_keys(queue)
        locks: list[str] = []  # KEYS[10 + j]
        triples: list[Any] = []
        for mid, read in members:
            digest = lock_digest(read)
            if digest:
                locks.append(q.lock(digest))
            triples += [id_arg(mid), read, len(locks) if digest else 0]
        return script_call("aggregate", Acted,
                           **_q(q, "tasks groups groups_first groups_size aggregating pending wake events conf"),
                           group=q.group(group), locks=locks, name=group, id=id, msg=self.seal(queue, id, msg),
                           members=triples)
