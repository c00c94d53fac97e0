"""Time sources. Production code lets Redis decide "now" inside scripts (immune to clock skew
between hosts); tests inject a :class:`FakeClock` to move time by hand."""

from __future__ import annotations

import time
from datetime import date, datetime, timezone

DRIFT_MS_PER_S = 0.1
"""How far two clocks may drift apart per second (100 ppm, well above a quartz clock's): the
bounds an older sample set on the offset widen by this much a second."""


class Clock:
    """The real clock. ``script_now()`` is '' so scripts read Redis's own clock (TIME).

    ``offset_ms`` is the last measured difference between the Redis clock and this host's clock;
    the server updates it from script replies and uses it for local reckoning (daily counter keys,
    time left until a task's deadline), so a host whose clock is off still agrees with Redis.
    """

    def __init__(self) -> None:
        self.offset_ms = 0
        self._lo = self._hi = 0.0  # the bounds the samples set on the offset (none yet: _at < 0)
        self._at = -1.0  # when they were last narrowed (monotonic)

    def local_ms(self) -> int:
        return int(time.time() * 1000)

    def now_ms(self) -> int:
        """Best estimate of the Redis server's time, in Unix milliseconds."""
        return self.local_ms() + self.offset_ms

    def observe(self, redis_now_ms: int, sent_ms: int | None = None) -> None:
        """Record a time Redis reported (a script's "now"). ``sent_ms``: this host's time when the
        call was sent (None: the reply came at once). Redis read its clock somewhere between the
        send and the reply, so the sample bounds the offset: ``redis_now - received <= offset <=
        redis_now - sent``. The estimate is the middle of what all samples agree on (their bounds
        intersected, widened by :data:`DRIFT_MS_PER_S` as they age): a reply held up on its way
        back (a busy event loop, a node failing over, a restart) bounds the offset loosely and so
        moves nothing the fast ones have settled (taking the middle of each round trip instead,
        a slow one put completed_at ~100 ms before its run's own start: tests/test_clock.py,
        found by the fault audit under a load of ~20). Samples that agree with none of the
        bounds kept (a clock stepped) start the bounds over."""
        recv = self.local_ms()
        sent = recv if sent_ms is None else min(sent_ms, recv)
        lo, hi = float(redis_now_ms - recv - 1), float(redis_now_ms - sent + 1)  # (+-1: whole ms)
        now = time.monotonic()
        if self._at >= 0:
            slack = DRIFT_MS_PER_S * (now - self._at)
            old_lo, old_hi = self._lo - slack, self._hi + slack
            if lo <= old_hi and hi >= old_lo:  # they agree: keep what both say
                lo, hi = max(lo, old_lo), min(hi, old_hi)
        self._lo, self._hi, self._at = lo, hi, now
        self.offset_ms = round((lo + hi) / 2)

    def script_now(self) -> str:
        return ""

    def today(self) -> date:
        return datetime.fromtimestamp(self.now_ms() / 1000, tz=timezone.utc).date()


class FakeClock(Clock):
    """A clock tests set and advance by hand; scripts are told its time instead of reading TIME."""

    def __init__(self, start_ms: int | None = None) -> None:
        super().__init__()
        self.t = int(time.time() * 1000) if start_ms is None else start_ms

    def local_ms(self) -> int:
        return self.t

    def observe(self, redis_now_ms: int, sent_ms: int | None = None) -> None:
        pass

    def advance(self, seconds: float) -> None:
        self.t += int(seconds * 1000)

    def script_now(self) -> str:
        return str(self.t)
