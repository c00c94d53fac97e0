"""The transactional outbox's figures (issue 33): relay throughput, commit -> enqueued latency, and
the fault scenario at the issue's size.

    python bench/outbox.py                 # all three (20 000 rows; 20 000 transactions, 20 kills)
    python bench/outbox.py --n 5000 --tx 2000 --kills 5     # smaller
    python bench/outbox.py --skip-faults

- throughput: ``--n`` rows committed first (transactions of 100), then one relay (in this process,
  batches of ``--batch``) drains them into a redis-server: relayed tasks per second (target
  >= 5 000/s), and Redis's cost per task (INFO commandstats: calls and usec, scripts included);
- latency: a relay process (``asynqpy outbox relay``, woken by LISTEN/NOTIFY) runs; ``--samples``
  times, one transaction commits one task and this process polls Redis for it without sleeping:
  p50 / p95 from the commit's return to the task stored (target p50 <= 5 ms);
- faults: tests/faults/outbox_scenario.py with ``--tx`` transactions and ``--kills`` relay kills.

It starts its own PostgreSQL (tests/pgserver.py) and redis-servers on free ports and stops them.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent / "tests" / "faults"))
sys.path.insert(0, str(HERE.parent))
import redis  # noqa: E402
import sqlalchemy as sa  # noqa: E402
from pgserver import PostgresProcess  # noqa: E402
from redisproc import RedisProcess  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from asynqpy.core.spine.keys import queue_keys  # noqa: E402
from asynqpy.outbox import Outbox, Relay  # noqa: E402


def throughput(pg: PostgresProcess, n: int, batch: int) -> dict[str, Any]:
    db = pg.create_database("bench_throughput")
    server = RedisProcess()
    try:
        ob = Outbox(sa.create_engine(db))
        ob.create_table()
        for start in range(0, n, 100):
            with Session(ob.engine) as s, s.begin():
                for i in range(start, min(n, start + 100)):
                    ob.enqueue(s, "noop", i)
        relay = Relay(db, server.url, batch=batch)
        relay.relay_once()  # (connections opened, scripts loaded: not timed)
        r = server.admin()
        r.config_resetstat()
        t0 = time.perf_counter()
        done = 0
        while (sent := relay.relay_once()).rows:
            done += sent.rows
        secs = time.perf_counter() - t0
        stats = r.info("commandstats")
        calls = sum(v["calls"] for v in stats.values())
        usec = sum(v["usec"] for v in stats.values())
        stored = r.hlen(queue_keys("default").tasks)
        assert stored == n, (stored, n)
        return {"rows": done, "seconds": round(secs, 3), "tasks_per_s": round(done / secs),
                "redis_calls_per_task": round(calls / done, 2), "redis_usec_per_task": round(usec / done, 1)}
    finally:
        server.stop()


def latency(pg: PostgresProcess, samples: int) -> dict[str, Any]:
    db = pg.create_database("bench_latency")
    server = RedisProcess()
    ob = Outbox(sa.create_engine(db))
    ob.create_table()
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "outbox", "relay", "--db", db,
                             "--redis-url", server.url, "--poll", "5"], stdout=log, stderr=subprocess.STDOUT)
    try:
        r = redis.Redis.from_url(server.url)
        tasks = queue_keys("default").tasks
        out: list[float] = []
        for i in range(samples + 20):
            with Session(ob.engine) as s:
                with s.begin():
                    id = ob.enqueue(s, "noop", i)
                t0 = time.perf_counter()  # the commit returned
                deadline = t0 + 10
                while not r.hexists(tasks, id):
                    if time.perf_counter() > deadline:
                        raise AssertionError("a task did not arrive within 10 s")
            if i >= 20:  # (the first ones: the relay starting)
                out.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.005)
        out.sort()
        return {"samples": len(out), "p50_ms": round(statistics.median(out), 2),
                "p95_ms": round(out[int(len(out) * 0.95) - 1], 2), "max_ms": round(out[-1], 2)}
    finally:
        proc.terminate()
        proc.wait(10)
        server.stop()


def faults(pg: PostgresProcess, tx: int, kills: int) -> dict[str, Any]:
    import outbox_scenario

    recorder = RedisProcess()
    try:
        with tempfile.TemporaryDirectory(prefix="asynqpy-outbox-faults-") as d:
            out = outbox_scenario.run(tx, kills, recorder, Path(d), pg=pg)
        assert out.report is not None
        return {"line": out.line(), "committed": len(out.committed), "rolled_back": len(out.rolled_back),
                "unknown_commits": len(out.unknown), "completed": out.report.states["c"],
                "audit_errors": out.report.errors[:20], "outbox_problems": out.problems[:20],
                "lease_reruns": out.report.lease_reruns, "seconds": round(out.seconds, 1),
                "ok": not out.report.errors and not out.problems and out.report.states["c"] == len(out.committed)}
    finally:
        recorder.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=20_000, help="rows for the throughput run")
    ap.add_argument("--batch", type=int, default=500, help="the relay's rows per transaction")
    ap.add_argument("--samples", type=int, default=300, help="latency samples")
    ap.add_argument("--tx", type=int, default=20_000, help="transactions of the fault scenario")
    ap.add_argument("--kills", type=int, default=20, help="relay kills of the fault scenario")
    ap.add_argument("--skip-faults", action="store_true")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    pg = PostgresProcess()
    res: dict[str, Any] = {}
    try:
        res["throughput"] = throughput(pg, args.n, args.batch)
        print(f"throughput: {res['throughput']}  (target >= 5000 tasks/s)", flush=True)
        res["latency"] = latency(pg, args.samples)
        print(f"commit -> enqueued: {res['latency']}  (target p50 <= 5 ms)", flush=True)
        if not args.skip_faults:
            res["faults"] = faults(pg, args.tx, args.kills)
            print(f"faults ({args.tx} tx, {args.kills} relay kills, PostgreSQL and Redis restarted once): "
                  f"{res['faults']['line']}; ok={res['faults']['ok']}", flush=True)
    finally:
        pg.stop()
    if args.json:
        args.json.write_text(json.dumps(res, indent=2))


if __name__ == "__main__":
    main()
