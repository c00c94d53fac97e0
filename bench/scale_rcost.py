"""Issue 31, one queue at the limit of its Redis core: Redis's own cost per task of a drained
queue (the dequeue script, the batched done script, and the rest: reading and answering the
calls), by the number of tasks one call carries (1, 5, 20, 100), with the event stream on (the
default). The worker's batches at saturation are 14-20 tasks (concurrency 20 a process:
``python bench/script_cost.py`` measures them); the fixed cost of a call is spread over them.

    python bench/scale_rcost.py [--quick]

Figures per task (bench/script_cost.py ``phases``, CONFIG RESETSTAT then INFO commandstats and INFO
cpu around each phase, the least of the runs kept): ``deq_us`` and ``done_us`` (the scripts' usec,
their inner commands included), ``cmds`` (every command Redis ran, the scripts' own included),
``cpu_us`` (redis-server's user + system time over both phases: the figure that bounds one queue
on one core) and ``ceiling`` = 10^6 / cpu_us (tasks/s one core could carry for this alone).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from redisproc import RedisProcess  # noqa: E402
from script_cost import phases  # noqa: E402

BATCHES = (1, 5, 20, 100)


def rows(url: str, quick: bool) -> list[dict[str, object]]:
    """One row per batch size: the dequeue's and the done's Redis cost per task."""
    n, reps = (2000, 1) if quick else (10000, 3)
    out: list[dict[str, object]] = []
    for batch in BATCHES:
        got = [phases(url, n, batch, True) for _ in range(reps)]
        deq = min(g[0]["script"] for g in got)
        done = min(g[1]["script"] for g in got)
        cpu = min(g[0]["cpu"] + g[1]["cpu"] for g in got)
        cmds = min(sum(v for k, v in g[0].items() if k.startswith("n:")) + g[0]["calls"]
                   + sum(v for k, v in g[1].items() if k.startswith("n:")) + g[1]["calls"] for g in got)
        out.append({"batch": batch, "deq_us": round(deq, 2), "done_us": round(done, 2), "cmds": round(cmds, 2),
                    "cpu_us": round(cpu, 2), "ceiling": round(1e6 / cpu) if cpu > 0 else 0})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 000 tasks a batch size, one run (default 10 000, 3)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    server = RedisProcess()
    try:
        table = rows(server.url, args.quick)
    finally:
        server.stop()
    sys.stdout.write(f"{'batch':>6}{'deq µs':>9}{'done µs':>9}{'cmds':>7}{'cpu µs':>9}{'ceiling/s':>11}\n")
    for row in table:
        sys.stdout.write(f"{row['batch']:>6}{row['deq_us']:>9.2f}{row['done_us']:>9.2f}{row['cmds']:>7.2f}"
                         f"{row['cpu_us']:>9.2f}{row['ceiling']:>11,}\n")


if __name__ == "__main__":
    main()
