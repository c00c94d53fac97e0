"""Tenants of a queue (``enqueue(..., tenant=)``; docs/tenants.md): a tenant's settings (weight,
paused) and the page of the tenants that have pending tasks, as script calls (lua/set_tenant-5.lua,
lua/tenants-4.lua). Sans-I/O: the Inspector's plans run these calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .broker import Call, script_call
from .errors import InvalidArgumentError
from .keys import queue_keys, validate_queue
from .options import validate_tenant

MAX_WEIGHT = 100
"""The largest weight: a tenant of weight w gets w turns to one of weight 1 (1000 / w a turn,
rounded: within 0.5 % up to 100)."""
MAX_CONCURRENCY = 1_000_000
"""The largest per-tenant concurrency."""
MAX_PAGE = 1000
"""Tenants per page at most."""


@dataclass(frozen=True)
class TenantInfo:
    """One tenant of a queue: its pending tasks, its settings (``concurrency`` 0 = no limit), its
    active tasks, and whether it is in the queue's ready ring (it has pending tasks, is not paused
    and is under its concurrency: it gets turns)."""

    tenant: str
    pending: int
    weight: int = 1
    paused: bool = False
    ready: bool = False
    concurrency: int = 0
    active: int = 0


def _settings(raw: Any) -> tuple[int, bool, int]:
    text = raw.decode() if isinstance(raw, bytes) else str(raw or "")
    if not text:
        return 1, False, 0
    parts = text.split(" ")
    return int(parts[0]), parts[1] == "1", int(parts[2]) if len(parts) > 2 and parts[2] else 0


def check_weight(weight: object) -> int:
    """A weight: an int from 1 to :data:`MAX_WEIGHT`; InvalidArgumentError otherwise."""
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
        raise InvalidArgumentError(f"weight must be an int from 1 to {MAX_WEIGHT}, got {weight!r}")
    return weight


def set_call(queue: str, tenant: str, weight: int | None = None, paused: bool | None = None,
             clear: bool = False, concurrency: int | None = None) -> Call[TenantInfo]:
    """The call that changes a tenant's settings (None: unchanged; ``concurrency`` 0: no limit;
    ``clear``: back to weight 1, running, no limit) and puts it in or out of the ready ring
    accordingly."""
    validate_tenant(tenant)
    return _set_call(queue, tenant, weight, paused, clear, concurrency)


def _set_call(queue: str, tenant: str, weight: int | None, paused: bool | None, clear: bool,
              concurrency: int | None) -> Call[TenantInfo]:
    """set_call's script call; tenant '' = the queue's defaults."""
    validate_queue(queue)
    if weight is not None:
        check_weight(weight)
    if concurrency is not None and (isinstance(concurrency, bool) or not isinstance(concurrency, int)
                                    or not 0 <= concurrency <= MAX_CONCURRENCY):
        raise InvalidArgumentError(f"concurrency must be an int from 0 (no limit) to {MAX_CONCURRENCY}, "
                                   f"got {concurrency!r}")
    if paused is not None and not isinstance(paused, bool):
        raise InvalidArgumentError(f"paused must be True or False, got {paused!r}")
    q = queue_keys(queue)

    def parse(r: list[Any]) -> TenantInfo:
        return TenantInfo(tenant, int(r[2]), int(r[0]), bool(int(r[1])), bool(int(r[3])), int(r[4]), int(r[5]))

    return script_call("set_tenant", parse, tq=q.tq, tr=q.tr, tn=q.tn, wake=q.wake, ta=q.ta, tenant=tenant,
                       weight="" if weight is None else weight, paused="" if paused is None else int(paused),
                       clear="1" if clear else "0", concurrency="" if concurrency is None else concurrency)


def defaults_call(queue: str, weight: int | None = None, concurrency: int | None = None,
                  clear: bool = False) -> Call[TenantInfo]:
    """The call that changes the queue's defaults for its tenants (every tenant without settings
    of its own): weight and concurrency (None: unchanged; ``clear``: none). Returned as a
    :class:`TenantInfo` named ''."""
    return _set_call(queue, "", weight, None, clear, concurrency)


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
            weight, paused, limit = _settings(r[i + 3])
            out.append(TenantInfo(name, int(r[i + 1]), weight, paused, r[i + 2] not in (b"", "", None), limit,
                                  int(r[i + 4])))
        return out

    return script_call("tenants", parse, tq=q.tq, tr=q.tr, tn=q.tn, ta=q.ta, after=after, count=count)
