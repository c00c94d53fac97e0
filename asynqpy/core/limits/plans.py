"""A queue's limits, enforced where tasks are handed out (lua/dequeue.lua): at most
``concurrency`` of its tasks active across all workers, and at most ``rate`` task starts per
second (a token bucket holding up to ``burst`` tokens, refilled continuously: a smooth rate with
bursts allowed up to ``burst``; one token per task taken). Stored in the queue's conf hash, so
they change at run time and hold for every worker at once.

Workers held back wait without a stampede. By the concurrency limit: each sleeps on the queue's
wake list (polling every second) and a freed slot leaves one wake-up token (lua/includes/slots.lua),
which draws one worker. By the rate: ONE of them, the rate's waiter, is told when the next token is
due and comes for it; the others sleep on the wake list like the former (lua/dequeue.lua). The
commands per task started stay flat as workers are added (bench/scale_ratelimit.py): the other
workers held back by the rate look again (the fallback, should the waiter not come) at most 4 times
a second in all, each at most once a second.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from ..model.errors import InvalidArgumentError
from ..spine.broker import Call, pending_keys, script_call
from ..spine.keys import limit_keys, queue_keys

_RATE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*$")
_PER = {"s": 1, "sec": 1, "second": 1, "m": 60, "min": 60, "minute": 60, "h": 3600, "hour": 3600}
MAX_RATE = 1_000_000.0
SIGNALS_FREED_SLOT = frozenset({"done", "complete", "archive", "proc_commit"})
"""The scripts that end an active task and wake a worker for the slot it freed (lua/includes/slots.lua:
one wake-up token when the queue has a concurrency limit, is below it and has pending tasks). After
any other outcome (retry, snooze, a run's end) the worker pipelines a ``rewake`` of the queue: a
dequeue held back by the limit leaves no token, so the workers it held back wait for that one."""
BUCKET_FIELDS = ("tokens", "ts", "waiter", "waiter_until", "polls")
"""The conf fields of the rate's state (lua/dequeue.lua): its bucket, the worker it told when
the next token is due (its waiter) with the time its turn lapses, and when the last of the other
held-back workers looks again."""


@dataclass(frozen=True)
class QueueLimits:
    """A queue's limits: ``concurrency`` (None = none), ``rate`` in tasks per second (None =
    none) and its ``burst``."""

    concurrency: int | None = None
    rate: float | None = None
    burst: int | None = None


def parse_rate(value: Any) -> float:
    """Tasks per second from a number or text such as "100/s", "30/m", "500/h"."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"rate must be tasks per second or text such as '100/s', got {value!r}")
    if isinstance(value, (int, float)):
        rate = float(value)
    else:
        m = _RATE.match(str(value))
        if not m:
            raise InvalidArgumentError(f"rate must be tasks per second or text such as '100/s', '30/m', '500/h', "
                                       f"got {value!r}")
        rate = float(m.group(1)) / _PER[m.group(2)]
    if not 0 < rate <= MAX_RATE or not math.isfinite(rate):
        raise InvalidArgumentError(f"rate must be more than 0 and at most {MAX_RATE:g} tasks per second, got {value!r}")
    return rate


def set_calls(queue: str, concurrency: int | None, rate: Any, burst: int | None) -> list[Call[Any]]:
    """The commands setting the given limits (the others stay); a new rate starts a full bucket."""
    k = queue_keys(queue)
    fields: dict[str, Any] = {}
    if concurrency is not None:
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be an int >= 1, got {concurrency!r}")
        fields["concurrency"] = concurrency
    if rate is not None:
        fields["rate"] = repr(parse_rate(rate))
    if burst is not None:
        if isinstance(burst, bool) or not isinstance(burst, int) or burst < 1:
            raise InvalidArgumentError(f"burst must be an int >= 1, got {burst!r}")
        fields["burst"] = burst
    if not fields:
        raise InvalidArgumentError("give concurrency, rate or burst")
    calls: list[Call[Any]] = [Call(lambda r: r, command=("HSET", k.conf, *[x for kv in fields.items() for x in kv]))]
    if rate is not None or burst is not None:
        # a fresh, full bucket, and no waiter told of a token of the old rate
        calls.append(Call(lambda r: r, command=("HDEL", k.conf, *BUCKET_FIELDS)))
    calls.append(rewake_call(queue))
    return calls


def rewake_call(queue: str) -> Call[Any]:
    """A wake token for the queue if it has pending tasks: a worker its old limits held back
    learns the new ones now, not at its next poll (up to 1 s later)."""
    k = queue_keys(queue)
    return script_call("rewake", int, wake=k.wake, **pending_keys(k))


def clear_calls(queue: str) -> list[Call[Any]]:
    """The commands removing every limit of the queue (and waking a worker they held back)."""
    return [Call(lambda r: r, command=("HDEL", queue_keys(queue).conf, "concurrency", "rate", "burst", *BUCKET_FIELDS)),
            rewake_call(queue)]


def get_call(queue: str) -> Call[QueueLimits]:
    """The command reading the queue's limits."""
    def parse(r: list[Any]) -> QueueLimits:
        c, rate, burst = r
        return QueueLimits(int(c) if c is not None else None, float(rate) if rate is not None else None,
                           int(burst) if burst is not None else (1 if rate is not None else None))

    return Call(parse, command=("HMGET", queue_keys(queue).conf, "concurrency", "rate", "burst"))


def acquire_call(name: str, rate: float | None, burst: int, concurrency: int | None, holder: str, hold_ms: int,
                 now: str = "") -> Call[tuple[bool, int]]:
    """Take a place under the named limit: (granted, ms to wait before trying again)."""
    bucket, held = limit_keys(name)
    return script_call("limit_acquire", lambda r: (int(r[0]) == 1, int(r[1])), bucket=bucket, held=held,
                       rate="" if rate is None else repr(rate), burst=burst,
                       limit="" if concurrency is None else concurrency, holder=holder, hold=hold_ms, now=now)


def release_call(name: str, holder: str) -> Call[Any]:
    """Give the holder's slot back."""
    return Call(lambda r: r, command=("ZREM", limit_keys(name)[1], holder))
