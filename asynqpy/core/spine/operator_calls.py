"""The broker's calls of an operator (the Inspector, the CLI, the console): queue stats and pages,
pausing, and the actions on stored tasks (delete, archive, edit, run, cancel, ungroup, drop)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..model.codec import Message
from ..model.task import TaskState
from ..processes import model as process
from .calls import (
    STATS_WIDTH,
    Acted,
    BrokerBase,
    Call,
    QueueStats,
    Rewrapped,
    Snapshot,
    T,
    _acted,
    _allowed,
    _keylist,
    _q,
    _queue_stats,
    _s,
    _snapshot,
    _stats_keys,
    _targets,
    container_of,
    exit_keys,
    id_arg,
    pending_keys,
    script_call,
)
from .keys import ALL_QUEUES, CANCEL_CHANNEL, QueueKeys, known_queues, queue_keys
from .stored import key_of, lock_digest


class OperatorCalls(BrokerBase):
    """The broker's calls of an operator (the Inspector, the CLI, the console): queue stats and pages,"""

    def set_workers(self, queue: str, id: str, read: bytes, old: Message, new: Message, stored: bytes) -> Call[Acted]:
        """A targeted task's allowed workers: ``old`` (the message read, as ``read``) -> ``new``,
        stored as ``stored`` (sealed by :func:`~asynqpy.core.security.signing.trust_gate`). Codes in
        lua/set_workers.lua."""
        q = queue_keys(queue)
        old_index, _ = _targets(q, old.workers)
        new_index, wakes = _targets(q, new.workers)
        before = set(old.workers or ())
        wakes = [q.wake_for(w) for w in new.workers or () if w not in before]
        return script_call("set_workers", Acted, **_q(q, "tasks runs targeted wake"),
                           targets=[*old_index, *new_index, *wakes], id=id_arg(id), read=read, msg=stored,
                           allowed=_allowed(new.workers), a=len(old_index), b=len(new_index))

    # -- queue control and reads -------------------------------------------------------------

    def pause(self, queue: str) -> Call[bool]:
        q = queue_keys(queue)
        return script_call("pause", lambda r: bool(int(r)), paused=q.paused, now=self.clock.script_now())

    def unpause(self, queue: str) -> Call[bool]:
        q = queue_keys(queue)
        return script_call("unpause", lambda r: bool(int(r)), **_q(q, "paused wake"), **pending_keys(q))

    def stats(self, queue: str) -> Call[QueueStats]:
        """Counts per state and counters of a queue (one atomic read)."""
        return self._stats_call([queue], lambda r: _queue_stats(queue, r))

    def snapshot(self, queue: str) -> Call[Snapshot]:
        """:meth:`stats` plus the trimmed counter, Redis's time and the oldest pending task."""
        return self._stats_call([queue], lambda r: _snapshot(queue, r))

    def snapshots(self, queues: Sequence[str], samples: int = 0,
                  fields: Sequence[str] = ()) -> Call[list[tuple[Snapshot, int | None]]]:
        """:meth:`snapshot` of each of ``queues`` (at least one; one script call: on a Cluster they
        must share a slot) with, for ``samples`` > 0, its memory (MEMORY USAGE ... SAMPLES
        ``samples`` of its tasks hash, pending list and state zsets; None when not asked or when
        Redis refuses MEMORY), and the values of its conf ``fields`` (``Snapshot.settings``)."""
        names, width = list(queues), STATS_WIDTH + len(fields)

        def parse(r: list[Any]) -> list[tuple[Snapshot, int | None]]:
            out = []
            for i, name in enumerate(names):
                row = r[i * width:(i + 1) * width]
                out.append((_snapshot(name, row), None if row[19] is None else int(row[19])))
            return out

        return self._stats_call(names, parse, samples, fields)

    def _stats_call(self, queues: Sequence[str], parse: Callable[[Any], T], samples: int = 0,
                    fields: Sequence[str] = ()) -> Call[T]:
        q = queue_keys(queues[0])
        processed_day, failed_day = self._day_keys(q)
        day = self.clock.today()
        more = [k for name in queues[1:] for k in _stats_keys(queue_keys(name), day)]
        return script_call(
            "stats", parse, **pending_keys(q),
            **_q(q, "lease scheduled retry archived completed paused processed failed tasks trimmed aggregating groups "
                    "targeted waiting blocked conf"),
            processed_day=processed_day, failed_day=failed_day, more=more, now=self.clock.script_now(),
            samples=samples, fields=list(fields))

    def page(self, queue: str, state: TaskState, start: int, stop: int,
             values: bool = True, group: str = "") -> Call[list[tuple[str, float | None, bytes | None]]]:
        """Ranks ``start``..``stop`` of the tasks in ``state`` (pending: oldest first; scheduled,
        retry, active: soonest score first; archived, completed: newest first; aggregating, of
        ``group``: oldest first), each with its stored value: [(id, score or None, value or None)]."""
        q = queue_keys(queue)
        kind = "list" if state is TaskState.PENDING else "zset"
        order = "desc" if state in (TaskState.ARCHIVED, TaskState.COMPLETED) else "asc"

        def parse(r: list[Any]) -> list[tuple[str, float | None, bytes | None]]:
            return [(_s(r[i]), float(r[i + 1]) if r[i + 1] else None, r[i + 2] or None) for i in range(0, len(r), 3)]

        return script_call("page", parse, container=container_of(q, state, group), **_q(q, "tasks prio tq tr tn"),
                           kind=kind, order=order, start=start, stop=stop, values="1" if values else "0")

    def queues(self) -> Call[list[str]]:
        """Every known queue's name, sorted: the one read of :data:`ALL_QUEUES` (invalid members are
        skipped and logged, :func:`~asynqpy.core.spine.keys.known_queues`)."""
        return Call(known_queues, command=("SMEMBERS", ALL_QUEUES))

    def get_task(self, queue: str, id: str) -> Call[bytes | None]:
        """The stored value of a task (state char [+ token] + message), or None."""
        q = queue_keys(queue)
        return Call(lambda r: r, command=("HGET", q.tasks, id_arg(id)))

    # -- operator actions (the Inspector) ----------------------------------------------------

    def delete_tasks(self, queue: str, state: TaskState, items: Sequence[tuple[str, str, int, bytes]],
                     window: int) -> Call[list[Acted]]:
        """Delete tasks still in ``state`` (not active) and unchanged since read. ``items``: (id, lock
        digest or '', index hint or -1 / -2, the stored value read; see delete_tasks.lua).
        Returns a code per task (1 = deleted, :data:`CHANGED` = read it again)."""
        q = queue_keys(queue)
        locks, args = self._per_task(q, items)
        return script_call("delete_tasks", _acted, **_q(q, "tasks deps"), **exit_keys(q),
                           container=container_of(q, state), locks=locks, state=state.code, window=window, items=args)

    def archive_tasks(self, queue: str, state: TaskState, items: Sequence[tuple[str, str, int, bytes]],
                      window: int) -> Call[list[Acted]]:
        """pending/scheduled/retry -> archived; ``items`` as for :meth:`delete_tasks`."""
        q = queue_keys(queue)
        locks, args = self._per_task(q, items)
        return script_call("archive_tasks", _acted, **_q(q, "tasks archived"), **exit_keys(q),
                           container=container_of(q, state), locks=locks, state=state.code, window=window,
                           now=self.clock.script_now(), items=args)

    @staticmethod
    def _per_task(q: QueueKeys, items: Sequence[tuple[str, str, int, bytes]]) -> tuple[list[str], list[Any]]:
        """An operator batch's per-task keys (lock, key's list) and arguments (id, hint, read, key)."""
        keys: list[str] = []
        args: list[Any] = []
        for id, digest, hint, read in items:
            key = key_of(read)  # a holder's key goes to its next task (lua/includes/exit.lua)
            keys += [q.lock(digest), _keylist(q, key)]
            args += [id_arg(id), hint, read, key]
        return keys, args

    def rewrap(self, queue: str, id: str, read: bytes, value: bytes, tkeys: bool = False) -> Call[Rewrapped]:
        """A task's stored value ``read`` -> ``value`` (its encrypted values sealed again: key
        rotation), only if unchanged since read and not active (lua/rewrap.lua); ``tkeys``: a
        tenant key's record instead: :class:`Rewrapped`."""
        q = queue_keys(queue)
        return script_call("rewrap", lambda r: Rewrapped(int(r)), tasks=q.tkeys if tkeys else q.tasks, id=id,
                           read=read, value=value)

    def edit_task(self, queue: str, state: TaskState, id: str, read: bytes, new: bytes, at_ms: int | None,
                  in_ms: int | None, window: int, hint: int, keyed: bool = False) -> Call[Acted]:
        """pending/scheduled/retry -> the same task with the message ``new`` (sealed by
        :func:`~asynqpy.core.security.signing.trust_gate`, never here: it rewrites a message read from Redis)
        and, if ``at_ms`` or ``in_ms`` is given, a new due time. ``read``: the stored value the caller
        read (the task must still hold it). ``keyed``: a scheduled task due now stays scheduled (due
        now by the Redis clock) for the forwarder's key gate. Codes in lua/edit_task.lua."""
        q = queue_keys(queue)
        return script_call("edit_task", Acted, **_q(q, "tasks scheduled wake tick events conf"), **pending_keys(q),
                           container=container_of(q, state), id=id_arg(id), state=state.code, read=read, msg=new,
                           at_ms="" if at_ms is None else at_ms, in_ms="" if in_ms is None else in_ms, window=window,
                           hint=hint, now=self.clock.script_now(), keyed="1" if keyed else "0")

    def ungroup(self, queue: str, id: str, read: bytes, verb: str, group: str) -> Call[Acted]:
        """aggregating -> deleted (``verb`` 'delete'), archived ('archive') or pending ('run'), if
        the task still holds the value ``read``. Codes in lua/ungroup.lua."""
        q = queue_keys(queue)
        target = {"archive": q.archived, "run": q.pending}.get(verb, q.group(group))
        return script_call("ungroup", Acted,
                           **_q(q, "tasks groups groups_first groups_size aggregating wake events conf"),
                           group=q.group(group), target=target, lock=q.lock(lock_digest(read)),
                           id=id_arg(id), read=read, verb=verb, name=group, now=self.clock.script_now())

    def run_tasks(self, queue: str, state: TaskState, ids: Sequence[str]) -> Call[list[Acted]]:
        """scheduled/retry/archived -> pending now. Returns a code per task (1 = moved)."""
        q = queue_keys(queue)
        return script_call("run_tasks", _acted, **_q(q, "tasks wake events conf"), **pending_keys(q),
                           container=container_of(q, state), state=state.code, ids=[id_arg(id) for id in ids])

    def cancel(self, queue: str, id: str, token: str, msg: bytes, digest: str, notice: bytes,
               original: Message | None = None) -> Call[Acted]:
        """active -> archived (``msg``: the rewritten encoded message) if still leased with
        ``token``, and ``notice`` published on the cancel channel. ``original``: the task's
        message as read (None: malformed), whose key and process the exit bookkeeping needs
        (lua/includes/exit.lua: children told, key released, process marked error)."""
        q = queue_keys(queue)
        key = original.key if original is not None else ""
        pid, kind = process.process_of(original) if original is not None else ("", "")
        return script_call("cancel", lambda r: Acted.OK if r == b"!" else Acted(int(r)),
                           **_q(q, "tasks lease archived progress proc procs"), **exit_keys(q), lock=q.lock(digest),
                           keylist=_keylist(q, key), id=id_arg(id), token=id_arg(token), msg=msg,
                           now=self.clock.script_now(), channel=CANCEL_CHANNEL, notice=notice, key=key, pid=pid,
                           kind=kind)

    def drop_queue(self, queue: str, force: bool = False) -> Call[Acted]:
        """Delete an empty queue's keys (1), or refuse (-7) if a task is left (or, unless
        ``force``, a durable process)."""
        q = queue_keys(queue)
        return script_call("drop_queue", Acted, **_q(
            q, "lease scheduled retry archived completed tasks paused wake tick processed failed trimmed watch pwatch "
               "progress events conf aggregating groups groups_first groups_size targeted runs targeted_any "
               "waiting deps children outbox blocked keyheld proc procs hist tw blobs"), **pending_keys(q),
            force="1" if force else "0")

    def pending_ids(self, queue: str, start: int, stop: int) -> Call[list[str]]:
        """LRANGE of the pending list (from its left end: newest first)."""
        return Call(lambda r: [_s(x) for x in r], command=("LRANGE", queue_keys(queue).pending, start, stop))
