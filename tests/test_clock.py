"""The Redis-clock estimate a server keeps (for completed_at, deadlines, daily counter keys) is not
thrown off by a reply that was held up (a pipeline waiting on a failing-over node)."""

from __future__ import annotations

import pytest

from asynqpy.core.model.clock import Clock


class Manual(Clock):
    def __init__(self) -> None:
        super().__init__()
        self.t = 1_000_000

    def local_ms(self) -> int:
        return self.t


def test_the_offset_is_what_every_sample_agrees_on(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr("asynqpy.core.model.clock.time.monotonic", lambda: now[0])
    c = Manual()
    c.observe(1_000_500)  # no send time: the reply came at once
    assert c.offset_ms == 500
    c.t += 10
    c.observe(1_000_514, sent_ms=c.t - 10)  # 10 ms round trip: 504..514 (disagrees with 500: a new start)
    assert c.offset_ms == 509
    c.t += 3000
    c.observe(1_001_010 + 509, sent_ms=c.t - 3000)  # held up 3 s on the way back: -2491..509
    assert 504 <= c.offset_ms <= 509  # it narrows nothing the fast one did not: no 1.5 s error
    c.t += 10
    c.observe(c.t + 520, sent_ms=c.t - 5)  # 520..525 agrees with nothing kept: Redis's clock stepped
    assert c.offset_ms == 522
    c.t += 10
    c.observe(c.t + 523, sent_ms=c.t - 4)  # 522..528 (whole ms: +-1) agrees: 522..526
    assert c.offset_ms == 524
    now[0] = 3600.0  # an hour later the bounds have widened by 360 ms (drift), to about 163..885
    c.t += 2000
    c.observe(c.t + 300, sent_ms=c.t - 2000)  # a slow sample (299..2301) narrows them: 299..885
    assert c.offset_ms == 592


def test_a_reply_read_late_after_an_outage_does_not_move_the_offset(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fault audit's "started after it completed" (tests/faults/test_restart.py, load ~24): after
    a Redis restart (no sample for seconds), the first reply was read ~150 ms late by a busy event
    loop; taken at the middle of its round trip, it put completed_at ~70 ms before the run's start."""
    now = [0.0]
    monkeypatch.setattr("asynqpy.core.model.clock.time.monotonic", lambda: now[0])
    c = Manual()  # Redis's clock = this host's clock: the true offset is 0
    for _ in range(3):
        c.t += 500
        c.observe(c.t - 2, sent_ms=c.t - 4)
    assert c.offset_ms == 0
    now[0] += 30.0  # the outage
    c.t += 30_000
    c.observe(c.t - 150, sent_ms=c.t - 152)  # executed 2 ms after sending, read 150 ms later
    assert abs(c.offset_ms) <= 3


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
