"""Benchmark (issue 31, "queues for the Inspector"): ``asynqpy stats`` and one dashboard refresh as
the number of queues grows.

    python bench/scale_stats.py [--quick]

Starts its own redis-server on a free loopback port, creates 10, 100, 1 000 and 10 000 queues
(--quick: up to 1 000), each with one pending task (every tenth queue also a scheduled one and
paused), and at each size measures, best of 3:

- ``stats``: :meth:`Inspector.all_queue_info` as ``asynqpy stats`` calls it (the queues and their
  counts; the memory reading where the Inspector reads it by default);
- ``stats+mem``: the same with ``memory=True`` (what ``asynqpy stats --memory`` reads);
- ``dash``: one refresh of the terminal dashboard (``Dash.read_all``: every queue's info and the
  live servers).

For each: seconds, and the commands Redis ran (``INFO commandstats`` after ``CONFIG RESETSTAT``:
script-internal commands included) in total and per queue, and the Redis µs per queue.
``rows(url, quick)`` is what ``bench/scale.py`` calls.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from asynqpy import Client, Inspector  # noqa: E402
from asynqpy.cli.dash import Dash  # noqa: E402

SIZES = (10, 100, 1_000, 10_000)
QUICK_SIZES = (10, 100, 1_000)


def redis_work(r: redis.Redis) -> tuple[int, int]:
    """(commands, µs) Redis ran since the last CONFIG RESETSTAT, INFO and CONFIG excluded."""
    stats = r.info("commandstats")
    calls = usec = 0
    for name, v in stats.items():
        if name in ("cmdstat_info", "cmdstat_config"):
            continue
        calls += int(v["calls"])
        usec += int(v["usec"])
    return calls, usec


def measure(r: redis.Redis, fn: Callable[[], Any], repeat: int = 3) -> tuple[float, int, int]:
    """Best seconds of ``repeat`` runs of ``fn``, and the commands and Redis µs of the last one."""
    best = float("inf")
    cmds = usec = 0
    for _ in range(repeat):
        r.config_resetstat()
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
        cmds, usec = redis_work(r)
    return best, cmds, usec


def fill(url: str, have: int, want: int) -> None:
    """Create queues ``have`` .. ``want - 1``: one pending task each; every tenth queue also a
    scheduled task, and paused."""
    with Client(url) as c, Inspector(url) as insp:
        for i in range(have, want):
            q = f"q{i:05d}"
            c.enqueue("t", i, queue=q)
            if i % 10 == 0:
                c.enqueue("t", "later", queue=q, process_in=3600)
                insp.pause(q)


def _stats_call(insp: Inspector, memory: bool | None) -> Callable[[], Any]:
    if memory is None:
        return insp.all_queue_info
    return lambda: insp.all_queue_info(memory=memory)


def rows(url: str, quick: bool) -> list[dict[str, object]]:
    """One row per number of queues: seconds, commands and Redis µs of ``stats`` (as ``asynqpy
    stats`` reads), ``stats`` with memory, and one dashboard refresh."""
    r = redis.Redis.from_url(url)
    out: list[dict[str, object]] = []
    have = 0
    with Inspector(url) as insp:
        dash = Dash(insp, refresh=2.0, label="bench")
        for n in QUICK_SIZES if quick else SIZES:
            fill(url, have, n)
            have = n
            row: dict[str, object] = {"queues": n}
            for name, fn in (("stats", _stats_call(insp, None)), ("stats+mem", _stats_call(insp, True)),
                             ("dash", dash.read_all)):
                secs, cmds, usec = measure(r, fn)
                row[f"{name} s"] = round(secs, 4)
                row[f"{name} cmds"] = cmds
                row[f"{name} cmds/queue"] = round(cmds / n, 1)
                row[f"{name} Redis µs/queue"] = round(usec / n, 1)
            out.append(row)
    r.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="up to 1 000 queues")
    ap.add_argument("--url", default="", help="a Redis to use (FLUSHed first) instead of starting one")
    a = ap.parse_args()
    server = None
    url = a.url
    if not url:
        from redisproc import RedisProcess

        server = RedisProcess()
        url = server.url
    else:
        redis.Redis.from_url(url).flushdb()
    try:
        table = rows(url, a.quick)
    finally:
        if server is not None:
            server.stop()
    cols = list(table[0])
    print("  ".join(f"{c:>14}" for c in cols))
    for row in table:
        print("  ".join(f"{row[c]!s:>14}" for c in cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
