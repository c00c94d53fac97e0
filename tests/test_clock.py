"""The Redis-clock estimate a server keeps (for completed_at, deadlines, daily counter keys) is not
thrown off by a reply that was held up (a pipeline waiting on a failing-over node)."""

from __future__ import annotations

import pytest

from asynqpy.core.model.clock import STALE_S, Clock


class Manual(Clock):
    def __init__(self) -> None:
        super().__init__()
        self.t = 1_000_000

    def local_ms(self) -> int:
        return self.t


def test_offset_from_the_middle_of_the_round_trip_and_slow_replies_ignored(monkeypatch: pytest.MonkeyPatch) -> None:
    c = Manual()
    c.observe(1_000_500)  # no send time: the reply came at once
    assert c.offset_ms == 500
    c.t += 10
    c.observe(1_000_514, sent_ms=c.t - 10)  # 10 ms round trip: Redis's now was at its middle
    assert c.offset_ms == 509
    c.t += 3000
    c.observe(1_001_010 + 509, sent_ms=c.t - 3000)  # held up 3 s (executed right after sending)
    assert c.offset_ms == 509  # ignored: it would put every estimate ~1.5 s off
    c.t += 10
    c.observe(c.t + 520, sent_ms=c.t - 5)  # a fast one is taken
    assert c.offset_ms == 520 + 2
    now = [0.0]
    monkeypatch.setattr("asynqpy.core.model.clock.time.monotonic", lambda: now[0])
    c.observe(c.t + 520, sent_ms=c.t - 4)
    now[0] = STALE_S + 1  # nothing fast for a long time: a slow sample beats none
    c.t += 2000
    c.observe(c.t + 700, sent_ms=c.t - 2000)
    assert c.offset_ms == 700 + 1000
