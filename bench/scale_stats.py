"""Benchmark (issue 31, "queues for the Inspector"): ``asynqpy stats`` and one dashboard refresh as
the number of queues grows.

    python bench/scale_stats.py [--quick]

Starts its own redis-server on a free loopback port, creates 10, 100, 1 000 and 10 000 queues
(--quick: up to 1 000), each with one pending task (every tenth queue also a scheduled one and
paused), and at each size measures, best of 3:

- ``info+mem``: :meth:`Inspector.all_queue_info` with the memory reading (the API's default);
- ``info``: the same with ``memory=False``;
- ``dash``: one refresh of the terminal dashboard (``Dash.read_all``: every queue's info and the
  live servers; the best of 3 refreshes in a row, the last one's commands: since this branch the
  memory is read on the first only, every 30 s);
- ``cli stats``: ``asynqpy stats`` as typed (through click's runner: the table rendered).

For each: seconds (wall, and this process's CPU), the commands Redis ran per queue (``INFO
commandstats`` after ``CONFIG RESETSTAT``: script-internal commands included) and the
redis-server's CPU per queue (``INFO cpu``: user + system, its background threads included). On a loaded machine the wall time includes waiting for a CPU; the CPU and Redis µs
columns say what the work is.
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


def redis_calls(r: redis.Redis) -> int:
    """Commands Redis ran since the last CONFIG RESETSTAT (script-internal ones included), INFO
    and CONFIG excluded."""
    return sum(int(v["calls"]) for name, v in r.info("commandstats").items()
               if name not in ("cmdstat_info", "cmdstat_config|resetstat", "cmdstat_config"))


def redis_cpu(r: redis.Redis) -> float:
    """The redis-server's CPU seconds so far (user + system, INFO cpu)."""
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(r: redis.Redis, fn: Callable[[], Any], repeat: int = 3) -> tuple[float, float, int, float]:
    """Best seconds (wall, and this process's CPU) of ``repeat`` runs of ``fn``, and the commands
    and Redis CPU seconds of the last one."""
    best = cpu = float("inf")
    cmds, rcpu = 0, 0.0
    for _ in range(repeat):
        r.config_resetstat()
        r0 = redis_cpu(r)
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
        rcpu = redis_cpu(r) - r0
        cmds = redis_calls(r)
    return best, cpu, cmds, rcpu


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


def _cli_stats(url: str) -> Callable[[], Any]:
    """``asynqpy stats`` as typed (table rendered to a string; output checked)."""
    from click.testing import CliRunner

    from asynqpy.cli.main import main as cli

    def run() -> None:
        res = CliRunner().invoke(cli, ["stats", "--redis-url", url])
        assert res.exit_code == 0, res.output

    return run


def rows(url: str, quick: bool) -> list[dict[str, object]]:
    """One row per number of queues: seconds, commands and Redis µs of ``all_queue_info`` (with
    the memory reading: the API's default), without it, one dashboard refresh and ``asynqpy
    stats`` as typed."""
    r = redis.Redis.from_url(url)
    out: list[dict[str, object]] = []
    have = 0
    with Inspector(url) as insp:
        dash = Dash(insp, refresh=2.0, label="bench")
        for n in QUICK_SIZES if quick else SIZES:
            fill(url, have, n)
            have = n
            row: dict[str, object] = {"queues": n}
            for name, fn in (("info+mem", lambda: insp.all_queue_info(memory=True)),
                             ("info", lambda: insp.all_queue_info(memory=False)),
                             ("dash", dash.read_all), ("cli stats", _cli_stats(url))):
                secs, cpu, cmds, rcpu = measure(r, fn)
                row[f"{name} s"] = round(secs, 3)
                row[f"{name} CPU s"] = round(cpu, 3)
                row[f"{name} cmds/q"] = round(cmds / n, 1)
                row[f"{name} Redis CPU µs/q"] = round(rcpu * 1e6 / n, 1)
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
