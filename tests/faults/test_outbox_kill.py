"""The outbox under faults (tests/faults/outbox_scenario.py), at the suite's size: 1 200
transactions (a third rolled back), the relay SIGKILLed 6 times, PostgreSQL and redis-server each
restarted once (2 000 transactions cost 20 s of the suite's CPU: issue 43's budget; the faults are
as many). The issue's size (20 000 transactions, 20 kills) is bench/outbox.py's."""

from __future__ import annotations

from pathlib import Path

import outbox_scenario
import pytest
from pgserver import PostgresProcess
from redisproc import RedisProcess

pytestmark = [pytest.mark.real, pytest.mark.slow]


def test_outbox_relay_killed_postgres_and_redis_restarted(recorder_server: RedisProcess,
                                                          postgres_server: PostgresProcess, tmp_path: Path) -> None:
    # (the session's PostgreSQL, restarted once on its port: this worker runs no other test meanwhile)
    out = outbox_scenario.run(1200, 6, recorder_server, tmp_path, pg=postgres_server)
    print(f"\noutbox scenario: {out.line()}")
    assert out.report is not None
    assert out.report.errors == [], out.report.errors[:20]
    assert out.problems == [], out.problems[:20]
    assert len(out.committed) >= 780 and len(out.rolled_back) >= 360
    assert out.report.states["c"] == len(out.committed)  # every committed task ran to completion
