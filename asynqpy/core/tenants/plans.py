"""Tenants of a queue (``enqueue(..., tenant=)``; docs/tenants.md): a tenant's settings (weight,
paused, concurrency, rate) and the page of the tenants that have pending tasks, as script calls (lua/set_tenant.lua,
lua/tenants.lua). Sans-I/O: the Inspector's plans run these calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..limits.plans import parse_rate
from ..model.errors import InvalidArgumentError
from ..model.options import validate_tenant
from ..spine.broker import Call, script_call
from ..spine.keys import queue_keys, validate_queue

MAX_WEIGHT = 100
"""The largest weight: a tenant of weight w gets w turns to one of weight 1 (1000 / w a turn,
rounded: within 0.5 % up to 100)."""
MAX_CONCURRENCY = 1_000_000
"""The largest per-tenant concurrency."""
MAX_PAGE = 1000
"""Tenants per page at most."""
MAX_BURST = 1_000_000
"""The largest burst of a tenant's rate."""
PASS_REBASE = 2**48
"""The dequeue rebases the ready ring's passes (each, and the virtual time V, less V) when V reaches
this (lua/includes/priority.lua): they stay exact, and far from any other number's space."""


@dataclass(frozen=True)
class TenantInfo:
    """One tenant of a queue: its pending tasks, its settings (``concurrency`` 0 = no limit;
    ``rate`` tasks a second, 0 = no limit, with bursts of up to ``burst``), its active tasks, and
    whether it takes turns now (``ready``: it has pending tasks, is not paused, is under its
    concurrency and has a token of its rate)."""

    tenant: str
    pending: int
    weight: int = 1
    paused: bool = False
    ready: bool = False
    concurrency: int = 0
    active: int = 0
    rate: float = 0.0
    burst: int = 1


def state_text(ti: TenantInfo, short: bool = False) -> str:
    """What a tenant is doing now, in words, and what holds it back when something does (the CLI's
    "state"): paused, taking turns, no pending task, or held by its concurrency or its rate (its
    own, or the queue's defaults for its tenants: ``TenantInfo`` holds the settings in force).
    ``short``: a table cell's few words ("held: rate")."""
    if ti.paused:
        return "paused"
    if ti.ready:
        return "taking turns"
    if not ti.pending:
        return "no pending task"
    if ti.concurrency and ti.active >= ti.concurrency:
        return "held: concurrency" if short else f"held by its concurrency ({ti.active} of {ti.concurrency} active)"
    if ti.rate:
        return "held: rate" if short else f"held by its rate ({ti.rate:g}/s) until its next task is due"
    return "held" if short else "held back (out of the ready ring: the consistency sweep puts it back)"


def _settings(raw: Any) -> tuple[int, bool, int, float, int]:
    """'weight paused concurrency [rate burst]' (lua/set_tenant.lua)."""
    text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
    if not text:
        return 1, False, 0, 0.0, 1
    parts = text.split(" ")
    limit = int(parts[2]) if len(parts) > 2 and parts[2] else 0
    rate, burst = (float(parts[3]), int(parts[4])) if len(parts) > 4 else (0.0, 1)
    return int(parts[0]), parts[1] == "1", limit, rate, burst


def _rate(rate: Any) -> float:
    """A tenant's rate: tasks a second (a number, or text such as "50/s", "300/m"); 0 = none."""
    if isinstance(rate, (int, float)) and not isinstance(rate, bool) and rate == 0:
        return 0.0
    return parse_rate(rate)


def _burst(burst: Any) -> int:
    if isinstance(burst, bool) or not isinstance(burst, int) or not 1 <= burst <= MAX_BURST:
        raise InvalidArgumentError(f"burst must be an int from 1 to {MAX_BURST}, got {burst!r}")
    return burst


def _check_settings(weight: int | None, paused: bool | None, concurrency: int | None, rate: float | str | None,
                    burst: int | None) -> float | None:
    """Each setting given checked (InvalidArgumentError); the rate in tasks a second (None: not given)."""
    if weight is not None:
        check_weight(weight)
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or not 0 <= concurrency <= MAX_CONCURRENCY):
        raise InvalidArgumentError(f"concurrency must be an int from 0 (no limit) to {MAX_CONCURRENCY}, "
                                   f"got {concurrency!r}")
    if paused is not None and not isinstance(paused, bool):
        raise InvalidArgumentError(f"paused must be True or False, got {paused!r}")
    if burst is not None:
        _burst(burst)
    return None if rate is None else _rate(rate)


def check_weight(weight: object) -> int:
    """A weight: an int from 1 to :data:`MAX_WEIGHT`; InvalidArgumentError otherwise."""
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
        raise InvalidArgumentError(f"weight must be an int from 1 to {MAX_WEIGHT}, got {weight!r}")
    return weight


def set_call(queue: str, tenant: str, weight: int | None = None, paused: bool | None = None,
             clear: bool = False, concurrency: int | None = None, rate: float | str | None = None,
             burst: int | None = None) -> Call[TenantInfo]:
    """The call that changes a tenant's settings (None: unchanged; ``concurrency`` and ``rate`` 0:
    no limit; ``clear``: back to weight 1, running, no limit) and puts it in or out of the ready
    ring accordingly."""
    validate_tenant(tenant)
    return _set_call(queue, tenant, weight, paused, clear, concurrency, rate, burst)


def _set_call(queue: str, tenant: str, weight: int | None, paused: bool | None, clear: bool,
              concurrency: int | None, rate: float | str | None = None,
              burst: int | None = None) -> Call[TenantInfo]:
    """set_call's script call; tenant '' = the queue's defaults."""
    validate_queue(queue)
    per_s = _check_settings(weight, paused, concurrency, rate, burst)
    q = queue_keys(queue)

    def parse(r: list[Any]) -> TenantInfo:
        return TenantInfo(tenant, int(r[2]), int(r[0]), bool(int(r[1])), bool(int(r[3])), int(r[4]), int(r[5]),
                          float(r[6]), int(r[7]))

    return script_call("set_tenant", parse, tq=q.tq, tr=q.tr, tn=q.tn, wake=q.wake, ta=q.ta, tw=q.tw, tenant=tenant,
                       weight="" if weight is None else weight, paused="" if paused is None else int(paused),
                       clear="1" if clear else "0", concurrency="" if concurrency is None else concurrency,
                       rate="" if per_s is None else repr(per_s), burst="" if burst is None else burst)


def defaults_call(queue: str, weight: int | None = None, concurrency: int | None = None,
                  clear: bool = False, rate: float | str | None = None, burst: int | None = None) -> Call[TenantInfo]:
    """The call that changes the queue's defaults for its tenants (every tenant without settings
    of its own): weight, concurrency and rate (None: unchanged; ``clear``: none). Returned as a
    :class:`TenantInfo` named ''."""
    return _set_call(queue, "", weight, None, clear, concurrency, rate, burst)


def page_call(queue: str, after: str = "", count: int = 100) -> Call[list[TenantInfo]]:
    """The call that reads up to ``count`` tenants with pending tasks, in name order, after the
    tenant ``after`` ('' = from the first)."""
    validate_queue(queue)
    if after:
        validate_tenant(after)
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= MAX_PAGE:
        raise InvalidArgumentError(f"count must be an int from 1 to {MAX_PAGE}, got {count!r}")
    q = queue_keys(queue)

    def parse(r: list[Any]) -> list[TenantInfo]:
        out = []
        for i in range(0, len(r), 5):
            name = r[i].decode() if isinstance(r[i], bytes) else str(r[i])
            weight, paused, limit, rate, burst = _settings(r[i + 3])
            ready = r[i + 2] not in (b"", "", None)
            out.append(TenantInfo(name, int(r[i + 1]), weight, paused, ready, limit, int(r[i + 4]), rate, burst))
        return out

    return script_call("tenants", parse, tq=q.tq, tr=q.tr, tn=q.tn, ta=q.ta, after=after, count=count)
