"""A/B of asynqpy between source trees on bench/run.py's own workloads (single enqueue, batch
enqueue, drain, drain+write: the same adapter, sizes and measures), interleaved: each round runs
every tree once, in a rotating order (a machine that drifts over a run then favours no tree), on
one redis-server this script starts. Prints each round's figures, then each tree's, sorted.

    git archive 0ceb95d | tar -x -C /tmp/trees/base    # (any commit's tree)
    python bench/ab_run.py /tmp/trees/base . [--rounds 4] [--only single,batch,drain,write] [--n 20000]

Each tree is put first on PYTHONPATH (its ``asynqpy`` and ``lua/``; the interpreter and its
packages are this one's), as bench/ab_worker.py does. Beside the rate: Redis's CPU per task (INFO
cpu) and the script calls' own time per task (commandstats of FCALL/EVALSHA, their inner commands
included), and for the drains the worker's CPU per task.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
import run  # noqa: E402
from redisproc import RedisProcess  # noqa: E402

WORKLOADS = ("single", "batch", "drain", "write")
BASE_ENV = dict(run.ENV)  # (each workload runs with one tree first on PYTHONPATH: run.ENV is set per call)


def _script_us(b: run.Bench, n: int) -> float:
    stats = b.r.info("commandstats")
    return sum(v["usec"] for k, v in stats.items() if k in ("cmdstat_fcall", "cmdstat_evalsha")) / n


def one(b: run.Bench, tree: str, what: str, n: int) -> str:
    """One workload with ``tree``'s asynqpy: its figures as a line."""
    run.ENV = {**BASE_ENV, "PYTHONPATH": os.pathsep.join([tree, BASE_ENV.get("PYTHONPATH", "")])}
    if what in ("single", "batch"):
        b.flush()
        r0 = run.redis_cpu(b.r)
        res = run.call(sys.executable, "asynqpy", "enqueue", b.url, b.board_path, "--n", str(n), "--mode", what)
        return (f"{n / res['seconds']:9,.0f}/s  redis {(run.redis_cpu(b.r) - r0) * 1e6 / n:5.1f} µs/task  "
                f"scripts {_script_us(b, n):5.1f} µs/task")
    d = b.drain(sys.executable, "asynqpy", n, "--concurrency", "10", *(("--redis-write",) if what == "write" else ()))
    return (f"{d['tasks_per_s']:9,.0f}/s  redis {d['redis_cpu_us_per_task']:5.1f} µs/task  scripts "
            f"{_script_us(b, n):5.1f} µs/task  worker {d['worker_cpu_ms_per_task'] * 1000:5.0f} µs/task")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--only", default=",".join(WORKLOADS))
    ap.add_argument("--n", type=int, default=20000)
    a = ap.parse_args()
    trees = [str(Path(t).resolve()) for t in a.trees]
    whats = [w for w in a.only.split(",") if w]
    if any(w not in WORKLOADS for w in whats):
        ap.error(f"--only takes some of {','.join(WORKLOADS)}")
    proc = RedisProcess()
    b = run.Bench(argparse.Namespace(timeout=300, concurrency=10, smoke=False, repeat=1), proc.url)
    lines: dict[tuple[str, str], list[str]] = {}
    try:
        for r in range(a.rounds):
            order = trees[r % len(trees):] + trees[:r % len(trees)]
            for what in whats:
                for tree in order:
                    line = one(b, tree, what, a.n)
                    lines.setdefault((what, tree), []).append(line)
                    print(f"round {r} {what:6s} {tree}: {line}", flush=True)
    finally:
        proc.stop()
    for (what, tree), got in lines.items():
        print(f"\n{what} {tree}:")
        for line in sorted(got, key=lambda s: -float(s.split("/s")[0].replace(",", ""))):
            print("  " + line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
