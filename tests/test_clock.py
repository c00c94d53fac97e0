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


def test_round_trips_that_grow_step_by_step_do_not_drag_the_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """A load that slows every reply a little more each time (Redis answers at once, the reply is
    read late: the whole delay on the way back) must not walk the estimate off by half the last
    round trip: the bar is the best round trip seen, not twice the last one (found by the fault
    audit, tests/faults/audit.py, as runs "started after they completed" under a load of ~20)."""
    monkeypatch.setattr("asynqpy.core.model.clock.time.monotonic", lambda: 0.0)
    c = Manual()  # Redis's clock = this host's clock: the true offset is 0
    c.t += 20
    c.observe(c.t - 10, sent_ms=c.t - 20)  # a 20 ms round trip, symmetric: exact
    assert c.offset_ms == 0
    for rtt in (40, 80, 160, 320):
        c.t += 1000
        c.observe(c.t - rtt + 1, sent_ms=c.t - rtt)  # executed 1 ms after sending, read rtt - 1 ms later
        assert abs(c.offset_ms) <= 10, (rtt, c.offset_ms)
