"""Benchmark: how late periodic tasks are enqueued after their tick, with several schedulers racing.

    python bench/cron_lateness.py [--schedulers 3] [--entries 5] [--seconds 20]

Starts its own redis-server on a free loopback port, stores ``--entries`` entries firing every
second (half of them as the 6-field cron ``* * * * * *``, half as ``every=1``), and runs
``--schedulers`` ``asynqpy scheduler`` processes for ``--seconds``. Then reads each entry's
history: lateness = Redis's time when the tick's task was enqueued - the tick (ms). Ticks before
every scheduler was up are left out. Also checks that each tick was enqueued exactly once.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Inspector, TaskState  # noqa: E402


def pct(values: list[int], p: float) -> float:
    s = sorted(values)
    return float(s[max(1, math.ceil(p / 100 * len(s))) - 1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--schedulers", type=int, default=3)
    ap.add_argument("--entries", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    cli = shutil.which("asynqpy", path=str(Path(sys.executable).parent))
    if cli is None:
        raise SystemExit("the asynqpy command is not installed next to this Python (pip install '.[cron]')")
    server = RedisProcess()
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with Inspector(server.url) as insp:
            for i in range(a.entries):
                if i % 2:
                    insp.cron_add(f"e{i}", "tick", every=1, queue="cronbench", max_retry=0)
                else:
                    insp.cron_add(f"e{i}", "tick", cron="* * * * * *", queue="cronbench", max_retry=0)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for _ in range(a.schedulers):
            procs.append(subprocess.Popen([cli, "--log-level", "warning", "scheduler", "--redis-url", server.url,
                                           "--refresh", "1"], env=env))
        time.sleep(3)  # every scheduler up
        start_ms = int(time.time() * 1000)
        time.sleep(a.seconds)
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            p.wait(30)
        with Inspector(server.url) as insp:
            infos = insp.scheduler_entries("cronbench")
            pending = insp.list_tasks("cronbench", TaskState.PENDING, page_size=1000)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        server.stop()
    late: list[int] = []
    ticks_seen = 0
    for info in infos:
        fired = sorted(f.tick_ms for f in info.history)
        assert len(fired) == len(set(fired)), f"entry {info.name}: a tick enqueued twice"
        late += [f.late_ms for f in info.history if f.tick_ms >= start_ms]
        ticks_seen += len(info.history)
    ids = [t.id for t in pending]
    assert len(ids) == len(set(ids))
    if not late:
        raise SystemExit("no ticks recorded")
    print(f"{a.schedulers} schedulers, {a.entries} entries every second, {a.seconds:g} s: {len(late)} ticks "
          f"measured, each enqueued once ({len(pending)} tasks queued)")
    print(f"lateness after the tick (ms): p50 {pct(late, 50):.0f}  p99 {pct(late, 99):.0f}  max {max(late)}  "
          f"min {min(late)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
