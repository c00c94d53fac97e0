"""The queue settings table: each setting a queue keeps in its conf hash, once.

Like the enqueue option table (core/model/options.py) and the server settings table
(worker/settings.py SETTINGS), :data:`QUEUE_SETTINGS` holds one :class:`QueueSetting` row per
setting: its conf field (and a tenant's), the counters its Lua keeps beside it, its inputs with
their types and checks, how it is stored and read back, its Inspector setter and getter, its
``asynqpy queue`` command and flags, the values it adds to :class:`~asynqpy.QueueInfo` (each with
its metric name and console label). Derived from it, with no hand edit per setting:

- the Inspector's setter and getter (:class:`QueueSettingPlans`, a base of InspectorPlans; the
  twin machinery makes the sync and async methods, scripts/inspector_reference.py their page);
- the ``asynqpy queue <command>`` commands (cli/queue.py makes one per row) and the row of
  ``asynqpy queue inspect``;
- the stats script's settings reply: lua/stats.lua reads :data:`STATS_FIELDS` (its ``fields``
  tail) and :func:`stats_values` decodes them into QueueInfo's values;
- the metric families (asynqpy/metrics.py ``families``) and the console queue page's line
  (:func:`console_rows`, web/templates/queue.html).

What stays off the table, and why: a row is a setting stored in one conf field (per queue, and
per tenant where it has one) with a setter and a getter of its own. The limits (``set_limits``:
three fields set together, a fresh bucket and a worker woken; no QueueInfo values), pause (a key of
its own, set by pause.lua/unpause.lua, which wake the workers) and the event stream's cap
(``set_events``: set across queues with on/off/active switches; its field shares the hash with the
stream's count) keep their own shapes: moving them would change their methods and commands.

A new queue setting is a row here, its QueueInfo fields (core/inspector/inspection.py) and its Lua (the rule
that reads the conf field; a producer admission rule is one step of lua/includes/admit.lua):
docs/internals-scripts.md "Queue settings and the producer entry".
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ..model.errors import InvalidArgumentError
from ..model.options import validate_tenant
from .broker import Call
from .keys import queue_keys
from .twin import Steps, planned

_EMPTY = inspect.Parameter.empty


@dataclass(frozen=True)
class Param:
    """One input of a setting: a keyword of its Inspector setter (and of ``set_tenant`` for a
    per-tenant setting) and of its command: the first one is the command's optional positional
    argument (``metavar``; left out: the setting is shown; ``--clear``: removed), the others flags
    ``--name`` (``choices``: the texts it takes). ``low``/``high``: an int's bounds (the command
    checks its argument with them; ``encode`` checks every value)."""

    name: str
    annotation: str
    default: Any = _EMPTY
    metavar: str = ""
    choices: tuple[str, ...] = ()
    help: str = ""
    low: int | None = None
    high: int | None = None


@dataclass(frozen=True)
class Stat:
    """A value a setting adds to QueueInfo (its field ``name``), read by the stats script: its
    console ``label`` and element id, and its metric (``metric`` '' = none): a gauge or counter
    labelled by queue and by the values of the ``labels`` stats; a None value has no sample."""

    name: str
    label: str
    element: str
    metric: str = ""
    kind: str = "gauge"
    help: str = ""
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class QueueSetting:
    """One row of the queue settings table (see the module's docstring)."""

    name: str
    conf: str
    """Its field in the queue's conf hash (a tenant's: ``conf:<tenant>``)."""
    counters: tuple[str, ...]
    """Conf fields its Lua counts in (read with it, the queue's only)."""
    params: tuple[Param, ...]
    encode: Callable[..., str | None]
    """The params (by name) -> the stored value (None: removed); InvalidArgumentError when bad."""
    decode: Callable[..., Any]
    """(stored value or None, *counters, tenant) -> the setting's value as the getter returns it."""
    returns: str
    """The value's class, as the setter's and getter's annotations name it."""
    setter: str
    setter_doc: str
    getter: str
    getter_doc: str
    tenant: bool
    """Also per tenant: ``set_tenant(..., <params>)`` and ``getter(queue, tenant)``."""
    command: str
    command_help: str
    describe: Callable[[Any], str]
    """The command's line for a value."""
    summary: Callable[[Any], str | None]
    """The ``queue inspect`` row for a QueueInfo (None: no row)."""
    stats: tuple[Stat, ...]


# -- bounded queues (lua/includes/cap.lua; docs/queues.md "Bounded queues") -------------------------

OVERFLOWS = {"reject": "r", "drop_oldest": "d"}
"""A cap's overflow policies and their code in the conf field (lua/includes/cap.lua)."""
MAX_CAP = 1_000_000_000_000


@dataclass(frozen=True)
class QueueCap:
    """A bound on the pending tasks of a queue, or of one of its ``tenant``'s ('' = the queue's):
    ``max_pending`` (None = no cap) and ``overflow`` ("reject": a producer call beyond it raises
    QueueFullError; "drop_oldest": it is accepted and the oldest pending tasks are archived), with
    the queue's lifetime counts of the tasks ``rejected`` and ``dropped`` (every tenant's
    included). docs/queues.md "Bounded queues"."""

    max_pending: int | None = None
    overflow: str = "reject"
    rejected: int = 0
    dropped: int = 0
    tenant: str = ""


def _cap_encode(max_pending: Any, overflow: Any = "reject") -> str | None:
    if overflow not in OVERFLOWS:
        raise InvalidArgumentError(f"overflow must be 'reject' or 'drop_oldest', got {overflow!r}")
    if max_pending is None:
        return None
    if isinstance(max_pending, bool) or not isinstance(max_pending, int) or not 1 <= max_pending <= MAX_CAP:
        raise InvalidArgumentError(f"max_pending must be an int from 1 to {MAX_CAP} (None: no cap), "
                                   f"got {max_pending!r}")
    return f"{max_pending} {OVERFLOWS[overflow]}"


def parse_cap(cap: bytes | str | None, rejected: Any, dropped: Any, tenant: str = "") -> QueueCap:
    """A cap as stored ('N r|d'; None: none) with the queue's counters."""
    n, _, mode = (cap.decode() if isinstance(cap, bytes) else cap or "").partition(" ")
    return QueueCap(int(n) if n.isdigit() else None, "drop_oldest" if mode == "d" else "reject",
                    int(rejected or 0), int(dropped or 0), tenant)


def _cap_line(c: QueueCap) -> str:
    cap = f"at most {c.max_pending:,} pending, {c.overflow}" if c.max_pending is not None else "no cap"
    return f"{cap} (queue's caps: rejected {c.rejected:,}, dropped {c.dropped:,})"


def _cap_summary(q: Any) -> str | None:
    if q.max_pending is None and not q.rejected and not q.dropped:
        return None
    cap = f"{q.max_pending:,} pending, {q.overflow}" if q.max_pending is not None else "none"
    return f"{cap} · rejected {q.rejected:,} · dropped {q.dropped:,}"


CAP = QueueSetting(
    name="cap", conf="cap", counters=("cap_rejected", "cap_dropped"),
    params=(Param("max_pending", "int | None", metavar="[N]", low=1, high=MAX_CAP),
            Param("overflow", "str", "reject", choices=tuple(OVERFLOWS),
                  help="reject: an enqueue past N fails (QueueFullError); drop_oldest: it is accepted and the oldest "
                       "pending task is archived.")),
    encode=_cap_encode, decode=parse_cap, returns="QueueCap",
    setter="set_queue_cap",
    setter_doc="""Bound the queue's pending tasks (docs/queues.md "Bounded queues"): a producer's enqueue (single,
batch, keyed) that would take them past ``max_pending`` (1 or more; None removes the cap)
raises QueueFullError, storing nothing (``overflow="reject"``), or is accepted while the
oldest pending tasks are archived with the reason "dropped: queue full" and an event
(``overflow="drop_oldest"``). Tasks accepted earlier that become pending later (due,
retried, aggregated, released workflow children, run now) are counted, never refused: the
count may pass the cap. Returns the cap and the queue's counters.""",
    getter="queue_cap",
    getter_doc="""The queue's cap (or ``tenant``'s: set with ``set_tenant(..., max_pending=)``) and the
queue's counts of the tasks rejected and dropped by its caps.""",
    tenant=True,
    command="cap",
    command_help="""Show or set QUEUE's cap: at most N pending tasks (docs/queues.md "Bounded queues").""",
    describe=_cap_line, summary=_cap_summary,
    stats=(Stat("max_pending", "max pending", "cap-max", "asynqpy_queue_max_pending", "gauge",
                "The queue's cap on pending tasks (absent: none; docs/queues.md, Bounded queues).", ("overflow",)),
           Stat("overflow", "overflow", "cap-overflow"),
           Stat("rejected", "rejected", "cap-rejected", "asynqpy_tasks_rejected", "counter",
                "Tasks refused by the queue's caps (QueueFullError)."),
           Stat("dropped", "dropped", "cap-dropped", "asynqpy_tasks_dropped", "counter",
                "Pending tasks archived by the queue's caps (drop_oldest).")),
)

QUEUE_SETTINGS: tuple[QueueSetting, ...] = (CAP,)
"""The queue settings table (see the module's docstring)."""

STATS_FIELDS: tuple[str, ...] = tuple(f for s in QUEUE_SETTINGS for f in (s.conf, *s.counters))
"""The conf fields the stats script reads per queue, in order (lua/stats.lua ``fields``)."""


# -- the calls --------------------------------------------------------------------------------------

def _field(s: QueueSetting, tenant: str) -> str:
    return f"{s.conf}:{validate_tenant(tenant)}" if tenant else s.conf


def set_call(s: QueueSetting, queue: str, values: Mapping[str, Any], tenant: str = "") -> Call[Any]:
    """The command storing (or removing) setting ``s`` of ``queue`` (or of its ``tenant``);
    InvalidArgumentError, before anything is sent, for a bad value."""
    field = _field(s, tenant)
    stored = s.encode(**values)
    k = queue_keys(queue)
    if stored is None:
        return Call(lambda r: r, command=("HDEL", k.conf, field))
    return Call(lambda r: r, command=("HSET", k.conf, field, stored))


def get_call(s: QueueSetting, queue: str, tenant: str = "") -> Call[Any]:
    """The command reading setting ``s`` of ``queue`` (or of its ``tenant``) with its counters."""
    return Call(lambda r: s.decode(*r, tenant),
                command=("HMGET", queue_keys(queue).conf, _field(s, tenant), *s.counters))


def tenant_calls(queue: str, tenant: str, values: Mapping[str, Any]) -> list[Call[Any]]:
    """The commands of ``Inspector.set_tenant``'s ``settings`` keywords: each per-tenant setting
    whose first param is given (its other params default; given alone, they change nothing),
    validated before anything is sent;
    InvalidArgumentError for a keyword no per-tenant setting takes."""
    calls, left = [], dict(values)
    for s in QUEUE_SETTINGS:
        mine = {p.name: left.pop(p.name) for p in s.params if s.tenant and p.name in left}
        if s.params[0].name in mine:  # (its other params alone change nothing)
            calls.append(set_call(s, queue, {p.name: p.default for p in s.params[1:]} | mine, tenant))
    if left:
        raise InvalidArgumentError(f"set_tenant takes no {', '.join(sorted(left))}")
    return calls


def tenant_doc(indent: str) -> str:
    """The lines ``Inspector.set_tenant``'s docstring ends with (each ``indent``-ed): each
    per-tenant setting's keywords."""
    return "".join(f"\n{indent}``{s.params[0].name}=``" + "".join(f" (with ``{p.name}=``)" for p in s.params[1:])
                   + f": the tenant's {s.name}, as :meth:`{s.setter}` for its tasks alone (None removes it;"
                   f" :meth:`{s.getter}` reads it)." for s in QUEUE_SETTINGS if s.tenant)


def stats_values(raw: tuple[Any, ...]) -> dict[str, Any]:
    """The QueueInfo values of the settings from the stats script's reply (in :data:`STATS_FIELDS`
    order): each setting's decoded value, its stats' fields."""
    out: dict[str, Any] = {}
    at = 0
    for s in QUEUE_SETTINGS:
        n = 1 + len(s.counters)
        got = list(raw[at:at + n]) or [None] * n
        value = s.decode(*[None if v is False else v for v in got], "")
        out.update({st.name: getattr(value, st.name) for st in s.stats})
        at += n
    return out


def console_rows(info: Any) -> list[dict[str, Any]]:
    """The console queue page's settings lines (web/templates/queue.html): per setting with a
    ``queue inspect`` row for ``info`` (a QueueInfo), its name and its stats (label, element id,
    value; None shows as "none")."""
    return [{"name": s.name, "stats": [{"label": st.label, "element": st.element,
                                        "value": "none" if getattr(info, st.name) is None else getattr(info, st.name)}
                                       for st in s.stats]}
            for s in QUEUE_SETTINGS if s.summary(info) is not None]


def metric_families(gauge: Any, counter: Any, infos: list[Any]) -> Iterator[Any]:
    """The metric families of the settings' stats over ``infos`` (prometheus_client's metric
    family classes ``gauge`` and ``counter``)."""
    for s in QUEUE_SETTINGS:
        for st in s.stats:
            if not st.metric:
                continue
            family = (gauge if st.kind == "gauge" else counter)(st.metric, st.help, labels=["queue", *st.labels])
            for q in infos:
                v = getattr(q, st.name)
                if v is not None:
                    family.add_metric([q.queue, *[str(getattr(q, x)) for x in st.labels]], v)
            yield family


# -- the Inspector's methods ------------------------------------------------------------------------

def _signature(params: list[inspect.Parameter], returns: str) -> inspect.Signature:
    head = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter("queue", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation="str")]
    return inspect.Signature(head + params, return_annotation=f"Steps[{returns}]")


def _plan(name: str, doc: str, sig: inspect.Signature, body: Callable[..., Steps[Any]]) -> planned[..., Any]:
    def plan(self: Any, *args: Any, **kwargs: Any) -> Steps[Any]:
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        return body(**{k: v for k, v in bound.arguments.items() if k != "self"})

    plan.__name__ = plan.__qualname__ = name
    plan.__doc__ = doc
    setattr(plan, "__signature__", sig)  # noqa: B010
    plan.__annotations__ = {p.name: p.annotation for p in list(sig.parameters.values())[1:]}
    plan.__annotations__["return"] = sig.return_annotation
    return planned(plan)


def _setter(s: QueueSetting) -> planned[..., Any]:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    sig = _signature([inspect.Parameter(p.name, kind, default=p.default, annotation=p.annotation)
                      for p in s.params], s.returns)

    def body(queue: str, **values: Any) -> Steps[Any]:
        yield set_call(s, queue, values)
        return (yield get_call(s, queue))

    return _plan(s.setter, s.setter_doc, sig, body)


def _getter(s: QueueSetting) -> planned[..., Any]:
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    params = [inspect.Parameter("tenant", kind, default="", annotation="str")] if s.tenant else []
    sig = _signature(params, s.returns)

    def body(queue: str, tenant: str = "") -> Steps[Any]:
        return (yield get_call(s, queue, tenant))

    return _plan(s.getter, s.getter_doc, sig, body)


class QueueSettingPlans:
    """The Inspector's setter and getter of each queue setting, made from the table (a base of
    :class:`~asynqpy.core.inspector.plans.InspectorPlans`); the annotations below only tell mypy
    their names (a test checks they match the table)."""

    set_queue_cap: planned[..., QueueCap]
    queue_cap: planned[..., QueueCap]


for _s in QUEUE_SETTINGS:
    setattr(QueueSettingPlans, _s.setter, _setter(_s))
    setattr(QueueSettingPlans, _s.getter, _getter(_s))
