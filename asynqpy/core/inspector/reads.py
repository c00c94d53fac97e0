"""The Inspector's reads, as plans (sans I/O): queues, their stats and history, pages and searches of
tasks, groups, one task with its runs, links and logs, the live servers. The actions are
:class:`~asynqpy.core.inspector.inspection.Plans`'s own methods."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import msgpack

from ..model import codec
from ..model.errors import (
    InvalidArgumentError,
    MalformedMessageError,
    TaskNotFoundError,
)
from ..model.task import TaskInfo, TaskState, ms_to_datetime
from ..results.tasklogs import LogLine
from ..security.signing import Refused, Verified, trust_gate
from ..server import record as server_record
from ..server.record import ServerInfo
from ..spine.broker import (
    Call,
    QueueStats,
    Snapshot,
    id_arg,
)
from ..spine.keys import SERVERS, queue_keys, server_info, validate_group
from ..spine.queue_settings import STATS_FIELDS, stats_values
from ..spine.stored import message_of
from .values import (
    MAX_HISTORY_DAYS,
    MAX_PAGE_SIZE,
    MEMORY_SAMPLES,
    SEARCH_BATCH,
    SEARCH_SCAN,
    STATS_BATCH,
    DailyStats,
    G,
    GroupInfo,
    Plan,
    PlansBase,
    QueueInfo,
    _add_links,
    _add_runs,
    _as_dict,
    _check_search,
    _first_score,
    _glob_escape,
    _logs_of,
    _progress_value,
    _scanned,
    _scores,
    enqueued_at,
    key_slot,
    page_start,
    parse_state,
    task_from_stored,
    value,
)


class ReadPlans(PlansBase):
    """The Inspector's reads, each a plan (see :class:`~asynqpy.core.inspector.inspection.Plans`)."""

    # -- queues --------------------------------------------------------------------------------

    def queues(self) -> Plan[list[str]]:
        res = yield [self.b.queues()]
        return list(value(res[0]))

    def stats(self, queue: str) -> Plan[QueueStats]:
        res = yield [self._member(queue), self.b.stats(queue)]
        self._check(queue, res[0])
        return value(res[1])  # type: ignore[no-any-return]

    def all_stats(self) -> Plan[list[QueueStats]]:
        names = yield from self.queues()
        res = yield [self.b.snapshots(batch, fields=STATS_FIELDS) for batch in self._batches(names)]
        return [snap.stats for r in res if not isinstance(r, Exception) for snap, _ in r]

    def _batches(self, names: Sequence[str]) -> list[list[str]]:
        """``names`` in groups of at most :data:`STATS_BATCH` queues read by one stats script call:
        on a Cluster, queues of one slot per group (every key of a call in one slot)."""
        if not self.cluster:
            groups = [list(names)]
        else:
            by_slot: dict[int, list[str]] = {}
            for name in names:
                by_slot.setdefault(key_slot(queue_keys(name).pending), []).append(name)
            groups = list(by_slot.values())
        return [g[i:i + STATS_BATCH] for g in groups for i in range(0, len(g), STATS_BATCH)]

    @staticmethod
    def _info(snap: Snapshot, memory: int | None) -> QueueInfo:
        s = snap.stats
        latency = 0.0
        if snap.oldest is not None:
            enqueued = enqueued_at(message_of(snap.oldest))
            latency = max(0, snap.now_ms - enqueued) / 1000 if enqueued else 0.0
        return QueueInfo(
            s.queue, s.size, s.pending, s.active, s.scheduled, s.retry, s.archived, s.completed, s.paused,
            latency, s.processed_today, s.failed_today, s.processed, s.failed, memory,
            ms_to_datetime(snap.now_ms) or datetime.now(timezone.utc), snap.trimmed, s.aggregating, s.groups,
            s.targeted, s.waiting, s.blocked, s.tenants, **stats_values(snap.settings),
        )

    def queue_info(self, queue: str) -> Plan[QueueInfo]:
        res = yield [self._member(queue), self.b.snapshots([queue], MEMORY_SAMPLES, STATS_FIELDS)]
        self._check(queue, res[0])
        return self._info(*value(res[1])[0])

    def all_queue_info(self, memory: bool = True) -> Plan[list[QueueInfo]]:
        """Every queue's info: the queue list, then one pipelined round trip of stats script calls,
        :data:`STATS_BATCH` queues each (on a Cluster, one slot's queues each)."""
        names = yield from self.queues()
        batches = self._batches(names)
        res = yield [self.b.snapshots(batch, MEMORY_SAMPLES if memory else 0, STATS_FIELDS) for batch in batches]
        infos = {snap.stats.queue: self._info(snap, mem) for r in res for snap, mem in value(r)}
        return [infos[name] for name in names]

    def history(self, queue: str, days: int = 7) -> Plan[list[DailyStats]]:
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_HISTORY_DAYS:
            raise InvalidArgumentError(f"days must be an int from 1 to {MAX_HISTORY_DAYS}, got {days!r}")
        q = queue_keys(queue)
        today = self.b.clock.today()
        dates = [today - timedelta(days=i) for i in range(days)]
        keys = [k for d in dates for k in (q.processed_on(d), q.failed_on(d))]
        res = yield [self._member(queue), Call(lambda r: r, command=("MGET", *keys))]
        self._check(queue, res[0])
        counts = [int(x or 0) for x in value(res[1])]
        return [DailyStats(queue, d, counts[2 * i], counts[2 * i + 1]) for i, d in enumerate(dates)]

    # -- tasks ---------------------------------------------------------------------------------

    def list_tasks(self, queue: str, state: TaskState | str, page: int = 1,
                   page_size: int = 30, group: str = "") -> Plan[list[TaskInfo]]:
        st = parse_state(state)
        if group:
            validate_group(group)
            if st is not G:
                raise InvalidArgumentError(f"group applies to aggregating tasks, not {st.value} ones")
        if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= MAX_PAGE_SIZE:
            raise InvalidArgumentError(f"page_size must be an int >= 1 and at most {MAX_PAGE_SIZE}, got {page_size!r}")
        start = page_start(page, page_size)
        res = yield [self._member(queue), self.b.page(queue, st, start, start + page_size - 1, group=group),
                     self._now()]
        self._check(queue, res[0])
        now = value(res[2])
        out = []
        for id, score, stored in value(res[1]):
            if stored is None:
                continue  # its data is gone (being removed right now)
            try:
                out.append(task_from_stored(id, queue, stored, score, now))
            except MalformedMessageError:
                continue
        if st is TaskState.ACTIVE and out:  # running tasks: their latest progress, one more round trip
            q = queue_keys(queue)
            res = yield [Call(lambda r: r, command=("HMGET", q.progress, *(id_arg(t.id) for t in out)))]
            for t, raw in zip(out, value(res[0]) or []):
                t.progress = _progress_value(raw)
        return out

    def groups(self, queue: str) -> Plan[list[GroupInfo]]:
        """The queue's aggregation groups: name, size, when its oldest and newest task joined."""
        q = queue_keys(queue)
        res = yield [self._member(queue), Call(lambda r: r, command=("ZRANGE", q.groups, 0, -1, "WITHSCORES")),
                     Call(lambda r: r, command=("ZRANGE", q.groups_first, 0, -1, "WITHSCORES")),
                     Call(lambda r: r, command=("ZRANGE", q.groups_size, 0, -1, "WITHSCORES"))]
        self._check(queue, res[0])
        newest, first, size = (_scores(value(r)) for r in res[1:])
        return [GroupInfo(name, int(size.get(name, 0)), ms_to_datetime(int(first.get(name, 0))),
                          ms_to_datetime(int(t))) for name, t in sorted(newest.items())]

    def find_tasks(self, queue: str, id_prefix: str = "", task_type: str = "", cursor: int = 0,
                   limit: int = 30, scan: int = SEARCH_SCAN) -> Plan[tuple[int, list[TaskInfo]]]:
        """Tasks of any state whose id starts with ``id_prefix`` and (if given) whose type is
        ``task_type``: HSCAN of the queue's task hash from ``cursor`` (MATCH on the prefix,
        :data:`SEARCH_BATCH` fields a call), until ``limit`` tasks are found or about ``scan``
        fields were looked at. Returns the cursor to go on from (0: the hash was scanned to its
        end) and the tasks found: every match of the batches read, so from ``limit`` to about
        ``limit`` + :data:`SEARCH_BATCH` once enough match (a cursor cannot resume inside a batch;
        a task may be found twice across calls if the hash is resized meanwhile, as SCAN allows).
        Bounded work per call, whatever the queue's size."""
        _check_search(id_prefix, task_type, cursor, limit)
        q = queue_keys(queue)
        pattern = _glob_escape(id_prefix) + "*"
        found: list[TaskInfo] = []
        looked = 0
        while True:
            calls: list[Call[Any]] = [Call(lambda r: r, command=("HSCAN", q.tasks, cursor, "MATCH", pattern,
                                                                 "COUNT", SEARCH_BATCH)), self._now()]
            res = yield calls + [self._member(queue)] if not looked else calls
            if not looked:
                self._check(queue, res[2])
            cursor, batch = _scanned(queue, value(res[0]), value(res[1]))
            found += [t for t in batch if not task_type or t.type == task_type]  # (the whole batch: the cursor
            looked += SEARCH_BATCH                                               # cannot resume inside it)
            if len(found) >= limit or looked >= scan or cursor == 0:
                return cursor, found

    def all_history(self, days: int = 7) -> Plan[dict[str, list[DailyStats]]]:
        """:meth:`history` of every queue: the queue list, then one pipelined round trip (one MGET
        per queue: a queue's day counters share its slot)."""
        if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= MAX_HISTORY_DAYS:
            raise InvalidArgumentError(f"days must be an int from 1 to {MAX_HISTORY_DAYS}, got {days!r}")
        names = yield from self.queues()
        if not names:
            return {}
        today = self.b.clock.today()
        dates = [today - timedelta(days=i) for i in range(days)]
        res = yield [Call(lambda r: r, command=("MGET", *(k for d in dates for k in (queue_keys(n).processed_on(d),
                                                                                   queue_keys(n).failed_on(d)))))
                     for n in names]
        out: dict[str, list[DailyStats]] = {}
        for name, reply in zip(names, res):
            counts = [int(x or 0) for x in value(reply)]
            out[name] = [DailyStats(name, d, counts[2 * i], counts[2 * i + 1]) for i, d in enumerate(dates)]
        return out

    def task_info(self, queue: str, id: str, verified: bool = False) -> Plan[TaskInfo]:
        """One task's info. ``verified``: read its message through the trust gate first (for a copy
        that is going to be signed: the console's duplicate): SignatureError (or
        MalformedMessageError) for a message that does not verify with this reader's keys, never
        a copy of it; InvalidArgumentError for a signed task read without a key (its copy would be
        unsigned, refused by every keyed worker)."""
        q = queue_keys(queue)
        zsets = (q.lease, q.archived, q.scheduled, q.retry, q.completed)
        res = yield [
            self._member(queue), self.b.get_task(queue, id), self._now(),
            Call(lambda r: r, command=("HGET", q.progress, id_arg(id))),
            Call(lambda r: r, command=("HGET", q.runs, id_arg(id))),
            *(Call(lambda r: r, command=("ZSCORE", z, id_arg(id))) for z in zsets),
            self.b.deps(queue, id), self.b.children_of(queue, id),
            Call(_as_dict, command=("HGETALL", q.ran(id))),
        ]
        stored = value(res[1])
        if stored is None:
            self._check(queue, res[0])
            raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        if verified:
            self._copyable(queue, id, message_of(stored))
        info = task_from_stored(id, queue, stored, _first_score(res[5:10]), value(res[2]))
        info.progress = _progress_value(res[3])
        info.logs = _logs_of(stored)
        _add_runs(info, res[4], res[12])
        _add_links(info, res[10], res[11])
        return info

    def _copyable(self, queue: str, id: str, body: bytes) -> Verified:
        """A task's message read for a copy that is enqueued (and signed) anew, through the trust
        gate: a message that does not verify is never copied (its copy would be signed)."""
        if self.b.signer is None and len(body) > codec.TAG_LEN and body[-codec.TAG_LEN:-32] == codec.TAG_PREFIX:
            raise InvalidArgumentError(f"task {id!r} is signed: give the signing_key (asynqpy web "
                                       "--signing-key-file), so that its copy is signed too")
        gate = trust_gate(self.b.signer, queue, id, body)
        if isinstance(gate, Refused):  # never sign a copy of what did not verify
            raise type(gate.error)(f"task {id!r} in queue {queue!r} is not copied: {gate.reason} (a message "
                                   "that fails verification is never signed again; delete or archive it)")
        return gate

    def task_logs(self, queue: str, id: str) -> Plan[list[LogLine]]:
        res = yield [self._member(queue), self.b.get_task(queue, id)]
        stored = value(res[1])
        if stored is None:
            self._check(queue, res[0])
            raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
        return _logs_of(stored)

    # -- servers -------------------------------------------------------------------------------

    def servers(self) -> Plan[list[ServerInfo]]:
        now = self.b.clock.now_ms()
        res = yield [
            Call(lambda r: r, command=("ZREMRANGEBYSCORE", SERVERS, "-inf", now - 60_000)),
            Call(lambda r: [x.decode() for x in r], command=("ZRANGE", SERVERS, now, "+inf", "BYSCORE")),
        ]
        ids: list[str] = value(res[1])
        if not ids:
            return []
        raws = yield [Call(lambda r: r, command=("GET", server_info(i))) for i in ids]
        out = []
        for raw in raws:
            if raw is None or isinstance(raw, Exception):
                continue
            try:
                out.append(server_record.unpack(raw))
            except (ValueError, KeyError, TypeError, msgpack.UnpackException):
                continue
        return sorted(out, key=lambda s: (s.host, s.pid, s.id))
