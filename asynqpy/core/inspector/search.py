"""Search a queue's tasks by what they hold, then act on the matches (sans-I/O).

:func:`make_search` checks what the caller asks for and gives a :class:`Search`; a :class:`Scan`
reads a queue with it, one bounded script call at a time (``lua/search.lua``: an HSCAN of the
queue's tasks hash, each task checked in place in Redis, only the matches sent back), like the
events' reader: :meth:`Scan.call`, :meth:`Scan.feed`, until :attr:`Scan.done`. Its cursor resumes
a search later (:attr:`Scan.cursor`) and :attr:`Scan.looked` of :attr:`Scan.total` is its progress.
:func:`matches` is the same test on a decoded message, for a reader that must look at what Redis
cannot (tests check the two agree). :func:`act_plan` applies an action to matched tasks, each
through the Inspector's own action (its checks and refusals), and counts the outcomes.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from ..model.codec import Message, packer
from ..model.errors import InvalidArgumentError, TaskNotFoundError, TaskStateError
from ..model.task import TaskInfo, TaskState
from ..offload.refs import is_ref
from ..spine.broker import Call
from ..spine.calls import script_call
from ..spine.keys import queue_keys, validate_queue
from .values import Plan, PlansBase, _glob_escape, task_from_stored, value

BATCH = 250
"""HSCAN COUNT of one batch inside the script."""
BUDGET = 1000
"""Tasks a call looks at, about: a call costs Redis ~8 500-14 000 instructions per task (bench/search.py
--instr), ~14 M for 1 000 tasks: a few ms, under 10 ms with room on a slow or shared core (2 000 took
8-10 ms of Redis CPU on the loaded 2-core VM: too close)."""
MAX_BUDGET = 20000
ACTIONS = ("retry", "run", "archive", "delete", "cancel")
"""What can be done to matched tasks: ``retry`` runs a retry or archived task now, ``run`` a
scheduled, retry, archived or aggregating one, ``archive``, ``delete``, ``cancel`` (an active one)."""
_ACTION_STATES: dict[str, tuple[TaskState, ...]] = {
    "retry": (TaskState.RETRY, TaskState.ARCHIVED),
    "run": (TaskState.SCHEDULED, TaskState.RETRY, TaskState.ARCHIVED, TaskState.AGGREGATING),
    "archive": (TaskState.PENDING, TaskState.SCHEDULED, TaskState.RETRY, TaskState.AGGREGATING,
                TaskState.TARGETED, TaskState.WAITING, TaskState.BLOCKED),
    "delete": tuple(s for s in TaskState if s is not TaskState.ACTIVE),
    "cancel": (TaskState.ACTIVE,),
}


@dataclass(frozen=True, slots=True)
class Search:
    """What a task must hold to match (every condition given; none = every task). ``payload``: a
    dotted path into the payload (map keys, list indexes in digits) -> the value there (compared as
    encoded: 1 and 1.0 differ), or ``...`` for "present, whatever its value"."""

    states: tuple[TaskState, ...] = ()
    type: str = ""
    tenant: str = ""
    payload: tuple[tuple[str, Any], ...] = ()
    text: str = ""
    error: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    since_ms: int | None = None
    before_ms: int | None = None
    id_prefix: str = ""

    def conds(self) -> list[str | bytes]:
        """The script's conditions (its ``conds`` tail: where, path, value, hint for each)."""
        conds: list[str | bytes] = []
        pack = packer().pack
        for where, pairs in (("p", self.payload), ("h", self.headers)):
            for path, want in pairs:
                last = path.rpartition(".")[2] if where == "p" else path
                value = b"" if want is ... else pack(want)
                # the hint: a map stores a key and its value side by side (an index in digits may
                # be an array's: no key then)
                hint = pack(last) + value if last and not last.isdigit() else value
                conds += [where, path.replace(".", "\0") if where == "p" else path, value, hint]
        return conds


def _ms(name: str, t: datetime | float | None) -> int | None:
    if t is None:
        return None
    if isinstance(t, datetime):
        return int(t.timestamp() * 1000)
    if isinstance(t, bool) or not isinstance(t, (int, float)):
        raise InvalidArgumentError(f"{name} must be a datetime or Unix seconds, got {t!r}")
    return int(t * 1000)


def _text(name: str, v: Any) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise InvalidArgumentError(f"{name} must be a str, got {type(v).__name__}")
    return v


def _states(state: TaskState | str | Iterable[TaskState | str] | None) -> tuple[TaskState, ...]:
    out: list[TaskState] = []
    for s in ([state] if isinstance(state, (str, TaskState)) else list(state or ())):
        try:
            out.append(TaskState(s))
        except ValueError:
            raise InvalidArgumentError(f"no such task state {s!r} (one of {', '.join(x.value for x in TaskState)})") \
                from None
    return tuple(dict.fromkeys(out))


def _payload(payload: Mapping[str, Any] | None) -> tuple[tuple[str, Any], ...]:
    pairs: list[tuple[str, Any]] = []
    for path, want in (payload or {}).items():
        if not isinstance(path, str) or (path != "" and "" in path.split(".")):
            raise InvalidArgumentError(f"a payload path is names separated by dots, got {path!r}")
        if want is not ...:
            try:
                packer().pack(want)
            except (TypeError, ValueError, OverflowError) as exc:
                raise InvalidArgumentError(f"payload value for {path!r} cannot be encoded: {exc}") from None
        pairs.append((path, want))
    return tuple(pairs)


def _headers(header: Mapping[str, str] | None) -> tuple[tuple[str, str], ...]:
    for k, v in (header or {}).items():
        if not isinstance(k, str) or not k or not isinstance(v, str):
            raise InvalidArgumentError(f"a header condition is a name and a str value, got {k!r}: {v!r}")
    return tuple((header or {}).items())


def make_search(*, state: TaskState | str | Iterable[TaskState | str] | None = None, type: str | None = None,
                tenant: str | None = None, payload: Mapping[str, Any] | None = None, text: str | None = None,
                error: str | None = None, header: Mapping[str, str] | None = None,
                since: datetime | float | None = None, until: datetime | float | None = None,
                id_prefix: str | None = None) -> Search:
    """A :class:`Search` from the Inspector's arguments; InvalidArgumentError names what is wrong."""
    since_ms, before_ms = _ms("since", since), _ms("until", until)
    if since_ms is not None and before_ms is not None and before_ms <= since_ms:
        raise InvalidArgumentError("until must come after since")
    return Search(_states(state), _text("type", type), _text("tenant", tenant), _payload(payload),
                  _text("text", text), _text("error", error), _headers(header), since_ms, before_ms,
                  _text("id_prefix", id_prefix))


def parse_payload_condition(text: str) -> tuple[str, Any]:
    """A CLI condition ``path=value`` (the value read as JSON when it is JSON, else as the string
    itself: ``n=42`` is the int, ``n='"42"'`` the string) or ``path`` alone (present)."""
    path, eq, raw = text.partition("=")
    if not eq:
        return path, ...
    try:
        return path, json.loads(raw)
    except ValueError:
        return path, raw


def _at(obj: Any, path: str) -> tuple[bool, Any]:
    for name in path.split(".") if path else []:
        if isinstance(obj, dict) and name in obj:
            obj = obj[name]
        elif isinstance(obj, list) and name.isdigit() and int(name) < len(obj):
            obj = obj[int(name)]
        else:
            return False, None
    return True, obj


def _fields_match(s: Search, state: TaskState, msg: Message) -> bool:
    """The conditions on the task's own fields (state, type, tenant, enqueue time, last error)."""
    return not ((s.states and state not in s.states) or (s.type and msg.type != s.type)
                or (s.tenant and msg.tenant != s.tenant)
                or (s.since_ms is not None and msg.enqueued_at_ms < s.since_ms)
                or (s.before_ms is not None and msg.enqueued_at_ms >= s.before_ms)
                or (s.error and s.error.encode() not in packer().pack(msg.last_error)))


def _payload_matches(s: Search, payload: Any) -> bool:
    if (s.text or s.payload) and is_ref(payload):  # an offloaded payload: its content is not in Redis
        return False
    pack = packer().pack
    if s.text and s.text.encode() not in pack(payload):
        return False
    for path, want in s.payload:
        found, got = _at(payload, path)
        if not found or (want is not ... and pack(got) != pack(want)):
            return False
    return True


def matches(search: Search, id: str, state: TaskState, msg: Message) -> bool:
    """Does a decoded task match (what the script decides in place; a reader that decrypts or
    decodes first uses this)."""
    return id.startswith(search.id_prefix) and _fields_match(search, state, msg) and \
        _payload_matches(search, msg.payload) and all((msg.headers or {}).get(k) == v for k, v in search.headers)


@dataclass(frozen=True, slots=True)
class Step:
    """One call's reply: where to go on from, how many tasks it looked at and matched, and the
    matches (id, stored value: the value is b'' for a reply of ids only)."""

    cursor: int
    looked: int
    matched: int
    found: list[tuple[str, bytes]]


def search_call(queue: str, search: Search, cursor: int = 0, budget: int = BUDGET, reply: str = "values") -> Call[Step]:
    """The call of one step of a search (lua/search.lua)."""
    q = queue_keys(queue)

    def parse(r: list[Any]) -> Step:
        rest = r[3:]
        if reply == "values":
            found = [(_str(rest[i]), bytes(rest[i + 1])) for i in range(0, len(rest), 2)]
        else:
            found = [(_str(x), b"") for x in rest]
        return Step(int(r[0]), int(r[1]), int(r[2]), found)

    s = search
    return script_call("search", parse, tasks=q.tasks, cursor=cursor, budget=budget, batch=BATCH, reply=reply,
                       match=_glob_escape(s.id_prefix) + "*", states="".join(x.code for x in s.states),
                       type=s.type, tenant=s.tenant,
                       since="" if s.since_ms is None else s.since_ms,
                       before="" if s.before_ms is None else s.before_ms, error=s.error, text=s.text, conds=s.conds())


def _str(x: Any) -> str:
    return x.decode(errors="surrogateescape") if isinstance(x, bytes) else str(x)


@dataclass
class Scan:
    """A search of ``queue`` read step by step: ``call()`` (its first step also checks the queue
    exists and counts its tasks), ``feed(reply)`` gives the matches' TaskInfos, until ``done``
    (the end of the queue, or ``limit`` matches). Resumable from ``cursor``."""

    queue: str
    search: Search
    cursor: int = 0
    limit: int | None = None
    budget: int = BUDGET
    count_only: bool = False
    ring: Any = None  # the reader's KeyRing: payload conditions are checked here, on decrypted payloads
    looked: int = 0
    matched: int = 0
    total: int | None = None
    done: bool = False
    _started: bool = field(default=False, repr=False)
    _now: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        validate_queue(self.queue)
        if isinstance(self.cursor, bool) or not isinstance(self.cursor, int) or self.cursor < 0:
            raise InvalidArgumentError(f"cursor must be an int >= 0, got {self.cursor!r}")
        if self.limit is not None and (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                                       or self.limit < 1):
            raise InvalidArgumentError(f"limit must be an int >= 1 or None, got {self.limit!r}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or not 1 <= self.budget <= MAX_BUDGET:
            raise InvalidArgumentError(f"budget must be an int from 1 to {MAX_BUDGET}, got {self.budget!r}")

    @property
    def reader_side(self) -> bool:
        """Whether the payload's conditions are checked by the reader (it holds a key ring: the
        payloads may be encrypted, which Redis cannot look into), the others in Redis."""
        return self.ring is not None and bool(self.search.payload or self.search.text)

    def call(self, now: Call[int]) -> list[Call[Any]]:
        """The next step's calls (``now``: the reader's call of Redis's time, PlansBase._now)."""
        search = replace(self.search, payload=(), text="") if self.reader_side else self.search
        reply = "count" if self.count_only and not self.reader_side else "values"
        calls: list[Call[Any]] = [search_call(self.queue, search, self.cursor, self.budget, reply)]
        if not self._started:
            calls += [PlansBase._member(self.queue), Call(int, command=("HLEN", queue_keys(self.queue).tasks)), now]
        return calls

    def feed(self, replies: list[Any]) -> list[TaskInfo]:
        """The matches of a step's replies (the queue checked at the first)."""
        if not self._started:
            PlansBase._check(self.queue, replies[1])
            self.total, self._now = value(replies[2]), value(replies[3])
            self._started = True
        step: Step = value(replies[0])
        if self.reader_side:  # (the candidates: step_plan checks their payloads, counts and limits them)
            self.cursor, self.looked = step.cursor, self.looked + step.looked
            self.done = self.cursor == 0
            return [task_from_stored(id, self.queue, v, None, self._now) for id, v in step.found]
        self.cursor, self.looked, self.matched = step.cursor, self.looked + step.looked, self.matched + step.matched
        out: list[TaskInfo] = []
        for id, stored in step.found:
            if self.limit is not None and len(out) + self.matched - step.matched >= self.limit:
                break
            out.append(task_from_stored(id, self.queue, stored, None, self._now))
        if self.cursor == 0 or (self.limit is not None and self.matched >= self.limit):
            self.done = True
        return out


@dataclass(frozen=True, slots=True)
class SearchPage:
    """One page of a search: its matches, the cursor to go on from (0: the queue was read to its
    end), and its progress (tasks looked at by this page, of the queue's ``total``)."""

    tasks: list[TaskInfo]
    cursor: int
    looked: int
    total: int


def step_plan(scan: Scan, now: Call[int]) -> Plan[list[TaskInfo]]:
    """One step of ``scan``: its matches. Reader-side (:attr:`Scan.reader_side`), the candidates
    Redis sent are decrypted (core/security/keyplans.reveal_plan: the tenant keys loaded as
    needed) and their payloads checked here; the count and the limit follow."""
    found = scan.feed((yield scan.call(now)))
    if not scan.reader_side:
        return found
    from ..security.keyplans import reveal_plan

    found = yield from reveal_plan(scan.ring, found, scan.queue)
    found = [t for t in found if _payload_matches(scan.search, t.payload)]
    if scan.limit is not None:
        found = found[:scan.limit - scan.matched]
        scan.done = scan.done or scan.matched + len(found) >= scan.limit
    scan.matched += len(found)
    return found


def scan_plan(scan: Scan, now: Call[int], pages: int | None = None, enough: int | None = None) -> Plan[list[TaskInfo]]:
    """Run ``scan`` until it is done, or for ``pages`` steps, or until a step ends with ``enough``
    matches: every match of the steps read (a cursor cannot resume inside a step)."""
    out: list[TaskInfo] = []
    steps = 0
    while not scan.done and (pages is None or steps < pages) and (enough is None or len(out) < enough):
        out += yield from step_plan(scan, now)
        steps += 1
    return out


@dataclass(frozen=True, slots=True)
class ActionReport:
    """What an action on matched tasks did: ``done`` tasks acted on, ``skipped`` in a state the
    action does not apply to (by state), ``gone`` no longer there, ``refused`` (id -> why)."""

    action: str
    done: int
    skipped: dict[str, int]
    gone: int
    refused: dict[str, str]


def check_action(action: str) -> None:
    if action not in ACTIONS:
        raise InvalidArgumentError(f"no such action {action!r} (one of {', '.join(ACTIONS)})")


def act_plan(plans: Any, queue: str, action: str, tasks: Iterable[TaskInfo]) -> Plan[ActionReport]:
    """Apply ``action`` to each task through the Inspector's plans (``plans``: its
    :class:`~asynqpy.core.inspector.inspection.Plans`): a task whose state the action does not
    apply to is skipped and counted, one gone meanwhile counted, one refused (it changed state,
    or has a key) named with the reason."""
    check_action(action)
    done, gone, skipped, refused = 0, 0, dict[str, int](), dict[str, str]()
    verb = {"retry": "run"}.get(action, action)
    for t in tasks:
        if t.state not in _ACTION_STATES[action]:
            skipped[t.state.value] = skipped.get(t.state.value, 0) + 1
            continue
        try:
            if action == "cancel":
                yield from plans.cancel(t.id, queue)
            else:
                yield from plans.act(verb, queue, t.id)
            done += 1
        except TaskNotFoundError:
            gone += 1
        except (TaskStateError, InvalidArgumentError) as exc:
            refused[t.id] = str(exc)
    return ActionReport(action, done, skipped, gone, refused)


__all__ = ["ACTIONS", "ActionReport", "Scan", "Search", "Step", "act_plan", "make_search", "matches",
           "parse_payload_condition", "search_call"]
