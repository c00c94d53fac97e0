"""The benchmark suite's CI smoke run: asynqpy and the bare loop at tiny sizes, every workload."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import run_group

ROOT = Path(__file__).resolve().parent.parent

pytestmark = [pytest.mark.real, pytest.mark.slow]


@pytest.mark.slow(cost=3)  # (its lane's weight: tests/conftest.py _lane_cost)
def test_bench_smoke(tmp_path: Path, redis_server: object) -> None:
    out = run_group([sys.executable, str(ROOT / "bench" / "run.py"), "--smoke", "--output", str(tmp_path)], 200)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    res = json.loads((tmp_path / "latest.json").read_text())
    a = res["peers"]["asynqpy"]
    for key in ("single_enqueue_per_s", "batch_enqueue_per_s", "memory_bytes_per_task", "idle_cmds_per_s"):
        assert isinstance(a[key], float) and a[key] >= 0, (key, a[key])
    for key in ("drain", "pickup", "scheduled"):
        assert "error" not in a[key], (key, a[key])
    assert a["drain"]["tasks_per_s"] > 0 and a["pickup"]["p50_ms"] > 0 and a["scheduled"]["max_ms"] > 0
    extras = res["asynqpy_extras"]
    assert {"drain_2_processes", "drain_c100_sleep10ms", "depth_100"} <= set(extras)  # (the smoke's one of each)
    assert "| asynqpy" in out.stdout and "| bare" in out.stdout


def test_saturation_smoke(tmp_path: Path) -> None:
    """bench/saturation.py at a tiny size: one worker process of each kind drains, the table and
    the JSON carry a rate and Redis's cost per task (the figures: a machine with more cores)."""
    out = run_group([sys.executable, str(ROOT / "bench" / "saturation.py"), "--n", "300", "--procs", "1",
                     "--modes", "bare,on", "--json", str(tmp_path / "sat.json")], 120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    rows = json.loads((tmp_path / "sat.json").read_text())["single"]
    assert [(r["procs"], r["mode"]) for r in rows] == [(1, "bare"), (1, "on")]
    assert all(r["rate"] > 0 and r["cpu_us"] > 0 and r["cmds"] >= 1 for r in rows), rows
    assert "× bare" in out.stdout and "   on " in out.stdout


@pytest.mark.parametrize("args, lines", [
    (["--steps", "5", "--short", "20", "--replay", "10", "--sleeping", "5", "--results", "5", "--layer", "50",
      "--scripts"],
     ["a step: ", "replay of 10 completed steps: ", "the replay layer alone ", "20 short runs (3 steps): ",
      "ratio runs/plain tasks: ", "Redis's time a run, by script (SLOWLOG): ", "proc_commit ", "a run beyond its history",
      "results awaited: "]),
    (["--breakdown", "20"], ["20 runs of 6 steps: ", "a run's fixed cost: "]),
    (["--wake", "300", "--due", "100", "--window", "0.2"], ["timers fired ", "runs resumed "]),
], ids=["figures", "breakdown", "wake"])
def test_durable_bench_smoke(args: list[str], lines: list[str]) -> None:
    """bench/durable.py (issue 46's figures) at tiny sizes: each mode runs and prints each of its
    figures (their values are a machine's: docs/durable.md)."""
    out = run_group([sys.executable, str(ROOT / "bench" / "durable.py"), *args], 120)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    missing = [line for line in lines if line not in out.stdout]
    assert not missing, (missing, out.stdout[-2000:])


def test_a_timed_out_benchmark_leaves_no_process_behind(tmp_path: Path) -> None:
    """run_group's timeout kills the command's children too (a benchmark's redis-server and workers
    outlived subprocess.run's timeout, which kills the command alone)."""
    pidfile = tmp_path / "child.pid"
    with pytest.raises(subprocess.TimeoutExpired):
        run_group(["bash", "-c", f"sleep 60 & echo $! > {pidfile}; wait"], 1.0)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists() and \
            Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z":
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
