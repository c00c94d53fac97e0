"""Benchmark: how long a freshly started worker takes to run its first task (process exec ->
ready -> the handler of a task already queued starts), started ``--runs`` times (default 20).

    python bench/start.py [--runs 20]

It starts its own redis-server on a free loopback port. Before each run one task is queued; the
clock starts just before the process is spawned and stops when the handler marks the shared board
(bench/common.py, polled every 0.2 ms); the worker is then stopped (SIGTERM) and waited for. Three
ways to start, each run interleaved with the others:

- ``asynqpy worker startmux:mux`` (the CLI, as users start it);
- a script that imports asynqpy and calls ``Server(url).run(mux)`` (no CLI);
- the bare BRPOP loop (bench/peers/bare.py), the floor: Python plus redis-py.

A warm-up run of each way comes first (not counted): it writes the compiled modules, as ``pip
install`` does. Prints min / p50 / max in ms per way, and where the import time goes (``python -X importtime``):
redis itself, then what the CLI and the server add on top.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
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

from asynqpy import Client  # noqa: E402

SCRIPT = """
import sys
sys.path.insert(0, {start!r})
from startmux import mux
from asynqpy import Server
Server({url!r}).run(mux)
"""


def one(argv: list[str], env: dict[str, str], board_path: str, timeout: float = 30) -> float:
    """Spawn ``argv`` and return the ms until its first handler marks the board (the task is
    queued by the caller); then stop it."""
    board = new_board(board_path, 1)
    t0 = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while board.count() == 0:
            if proc.poll() is not None:
                raise SystemExit(f"{argv[:3]} exited early: {proc.stderr.read().decode()[-2000:]}")  # type: ignore[union-attr]
            if time.perf_counter() - t0 > timeout:
                raise SystemExit(f"{argv[:3]}: no task started within {timeout}s")
            time.sleep(0.0002)
        took = time.perf_counter() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        board.close()
    return took * 1000


def bare(board_path: str, url: str) -> list[str]:
    return [sys.executable, str(HERE / "peers" / "bare.py"), "worker", "--url", url, "--board", board_path]


def import_profile() -> dict[str, float]:
    """Cumulative import ms of redis, then of what the CLI worker adds on top of it: the CLI
    module and the server (``python -X importtime``, compiled modules cached)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    modules = ["redis", "asynqpy.cli.main", "asynqpy.server"]
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "; ".join(f"import {m}" for m in modules)],
                         capture_output=True, text=True, check=True, env=env).stderr
    found: dict[str, float] = {}
    for line in out.splitlines():
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \| (\S+)$", line)  # top level only
        if m and m.group(2) in modules:
            found[m.group(2)] = int(m.group(1)) / 1000
    return found


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", type=int, default=20)
    a = p.parse_args()
    cli = shutil.which("asynqpy", path=str(Path(sys.executable).parent))
    if cli is None:
        raise SystemExit("the asynqpy command is not installed next to this Python (pip install .)")
    server = RedisProcess()
    board_path = f"/dev/shm/asynqpy-start-{os.getpid()}"
    env = {**os.environ, "ASYNQPY_BENCH_BOARD": board_path, "PYTHONPATH": str(HERE)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # as installed: compiled modules are cached (the warm-up run writes them)
    ways = {
        "asynqpy worker (CLI)": [cli, "worker", "startmux:mux", "--redis-url", server.url, "--log-level", "warning"],
        "Server(url).run(mux)": [sys.executable, "-c", SCRIPT.format(start=str(HERE), url=server.url)],
        "bare BRPOP loop": bare(board_path, server.url),
    }
    times: dict[str, list[float]] = {k: [] for k in ways}
    try:
        for run in range(a.runs + 1):  # run 0 warms up (not counted)
            for name, argv in ways.items():
                redis.Redis.from_url(server.url).flushall()
                if name.startswith("bare"):
                    redis.Redis.from_url(server.url).lpush("bare:bench", 0)  # the bare loop's "task"
                else:
                    with Client(server.url) as c:
                        c.enqueue("start", None)
                took = one(argv, env, board_path)
                if run:
                    times[name].append(took)
    finally:
        server.stop()
        try:
            os.unlink(board_path)
        except OSError:
            pass
    print(f"worker start: process exec -> first task's handler started, {a.runs} runs each (ms)")
    for name, ts in times.items():
        print(f"  {name:24} min {min(ts):6.1f}  p50 {statistics.median(ts):6.1f}  max {max(ts):6.1f}")
    prof = [import_profile() for _ in range(5)]
    med = {k: statistics.median(p[k] for p in prof) for k in prof[0]}
    print(f"imports (median of 5, ms): redis {med['redis']:.0f} (redis-py {redis.__version__}, which imports "
          f"its asyncio client too), then asynqpy.cli.main {med['asynqpy.cli.main']:.0f} and asynqpy.server "
          f"{med['asynqpy.server']:.0f} on top")
    return 0


if __name__ == "__main__":
    sys.exit(main())
