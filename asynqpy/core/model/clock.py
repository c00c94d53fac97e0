"""Time sources. Production code lets Redis decide "now" inside scripts (immune to clock skew
between hosts); tests inject a :class:`FakeClock` to move time by hand."""

from __future__ import annotations

import time
from datetime import date, datetime, timezone

SLOW_RTT_MS = 20
"""A round trip up to this long (or no longer than the one the offset comes from) always updates
the offset: its error is at most half its round trip."""
STALE_S = 10.0
"""After this long without an accepted sample, a slow round trip is accepted too."""


class Clock:
    """The real clock. ``script_now()`` is '' so scripts read Redis's own clock (TIME).

    ``offset_ms`` is the last measured difference between the Redis clock and this host's clock;
    the server updates it from script replies and uses it for local reckoning (daily counter keys,
    time left until a task's deadline), so a host whose clock is off still agrees with Redis.
    """

    def __init__(self) -> None:
        self.offset_ms = 0
        self._rtt_ms = -1  # round trip of the sample offset_ms comes from (-1: none yet)
        self._at = 0.0  # when that sample was taken (monotonic)

    def local_ms(self) -> int:
        return int(time.time() * 1000)

    def now_ms(self) -> int:
        """Best estimate of the Redis server's time, in Unix milliseconds."""
        return self.local_ms() + self.offset_ms

    def observe(self, redis_now_ms: int, sent_ms: int | None = None) -> None:
        """Record a time Redis reported (a script's "now"). ``sent_ms``: this host's time when the
        call was sent, when its reply may have been held up (pipelined, or sent while a node failed
        over): the offset is then taken at the middle of the round trip, and a round trip slower
        than both SLOW_RTT_MS and the one the current offset comes from is ignored for up to
        STALE_S seconds (a reply held up for seconds would put every local reckoning seconds off).
        Slower samples never ratchet the bar up (accepting up to twice the last one did: under a
        load that grew the round trips step by step, 20 -> 40 -> 80 -> 160 ms, each was taken and
        the offset drifted by half the last, so a completed_at could read ~100 ms before the run's
        own start; tests/test_clock.py)."""
        recv = self.local_ms()
        rtt = 0 if sent_ms is None else max(0, recv - sent_ms)
        now = time.monotonic()
        if self._rtt_ms >= 0 and rtt > max(SLOW_RTT_MS, self._rtt_ms) and now - self._at < STALE_S:
            return
        self.offset_ms = redis_now_ms - (recv - rtt // 2)
        self._rtt_ms, self._at = rtt, now

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
