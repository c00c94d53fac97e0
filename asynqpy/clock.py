"""Time sources. Production code lets Redis decide "now" inside scripts (immune to clock skew
between hosts); tests inject a :class:`FakeClock` to move time by hand."""

from __future__ import annotations

import time
from datetime import date, datetime, timezone


class Clock:
    """The real clock. ``script_now()`` is '' so scripts read Redis's own clock (TIME).

    ``offset_ms`` is the last measured difference between the Redis clock and this host's clock;
    the server updates it from script replies and uses it for local reckoning (daily counter keys,
    time left until a task's deadline), so a host whose clock is off still agrees with Redis.
    """

    def __init__(self) -> None:
        self.offset_ms = 0

    def local_ms(self) -> int:
        return int(time.time() * 1000)

    def now_ms(self) -> int:
        """Best estimate of the Redis server's time, in Unix milliseconds."""
        return self.local_ms() + self.offset_ms

    def observe(self, redis_now_ms: int) -> None:
        """Record a time Redis reported (a script's "now")."""
        self.offset_ms = redis_now_ms - self.local_ms()

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

    def observe(self, redis_now_ms: int) -> None:
        pass

    def advance(self, seconds: float) -> None:
        self.t += int(seconds * 1000)

    def script_now(self) -> str:
        return str(self.t)
