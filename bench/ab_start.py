"""A/B of a worker's start between two source trees (e.g. a ``git archive`` of main into /tmp):
spawn -> the handler of a task already queued starts, for each tree's asynqpy adapter
(bench/peers/asynqpy_.py) and the bare BRPOP loop, interleaved round by round (a machine that
drifts over a run then favours neither). Prints p50/min/max per way and each tree against the
bare loop (issue 31's target: first task <= 1.5x the bare loop's).

    python bench/ab_start.py /tmp/trees/base /path/to/new [--rounds 8] [--python PY]

Each tree is put first on PYTHONPATH; PY must have asynqpy's dependencies but not asynqpy itself
(not an editable install, which would shadow the trees). Modules are compiled and kept, as a pip
install has them (PYTHONDONTWRITEBYTECODE is dropped); one start per way is not counted.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))
from common import new_board  # noqa: E402
from redisproc import RedisProcess  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("--rounds", type=int, default=8)
    p.add_argument("--python", default=sys.executable)
    a = p.parse_args()
    ways = {"base": a.base, "new": a.new, "bare": a.new}
    srv = RedisProcess()
    r = redis.Redis.from_url(srv.url)
    board_path = f"/dev/shm/asynqpy-ab-start-{os.getpid()}"
    env0 = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def one(way: str) -> float:
        r.flushall()
        board = new_board(board_path, 1)
        tree = ways[way]
        adapter = f"{tree}/bench/peers/{'bare.py' if way == 'bare' else 'asynqpy_.py'}"
        env = dict(env0, PYTHONPATH=tree)
        cmd = [a.python, adapter]
        subprocess.run([*cmd, "enqueue", "--url", srv.url, "--board", board_path, "--n", "1"], env=env, check=True,
                       capture_output=True, cwd=f"{tree}/bench/peers")
        t0 = time.perf_counter()
        w = subprocess.Popen([*cmd, "worker", "--url", srv.url, "--board", board_path], env=env,
                             cwd=f"{tree}/bench/peers", stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            while board.count() < 1:
                if time.perf_counter() - t0 > 60 or w.poll() is not None:
                    raise SystemExit(f"{way}: no first task")
                time.sleep(0.0002)
            return (time.perf_counter() - t0) * 1000
        finally:
            os.killpg(w.pid, signal.SIGTERM)
            w.wait()
            board.close()

    try:
        res: dict[str, list[float]] = {k: [] for k in ways}
        for k in range(a.rounds + 1):
            for way in ways:
                ms = one(way)
                if k:
                    res[way].append(ms)
        for way, v in res.items():
            print(f"{way:5} p50 {statistics.median(v):7.0f} ms  min {min(v):7.0f}  max {max(v):7.0f}  (n={len(v)})")
        bare = statistics.median(res["bare"])
        print(f"against the bare loop (p50): base {statistics.median(res['base']) / bare:.2f}x, "
              f"new {statistics.median(res['new']) / bare:.2f}x")
    finally:
        srv.stop()
        os.unlink(board_path)


if __name__ == "__main__":
    main()
