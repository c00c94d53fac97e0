"""Benchmark: does inspecting and bulk-controlling a queue of 1 000 000 pending tasks stall Redis?

    python bench/inspection.py [--pending 1000000] [--json bench/results/inspect.json]

Starts its own redis-server on a free loopback port (no persistence), fills queue ``big`` with
``--pending`` pending tasks plus scheduled, retry, archived and active ones, then runs each
Inspector call below and reports, per call:

- wall: the call's wall time (client side, all its round trips);
- longest command: the longest single command Redis executed during the call, from SLOWLOG
  (``slowlog-log-slower-than`` 100 µs, so shorter ones are not listed: "< 0.1 ms"); a script is
  shown by its name. While one command runs, Redis serves no other client: this is the stall;
- scripts, median: how many script calls took over 100 µs, and their median duration (a bulk
  operation's batches of 1000 tasks);
- ping max: the slowest PING round trip seen meanwhile by another client (a separate process
  pinging every 2 ms), i.e. what other clients of this Redis experienced.

On a small VM where the benchmark client, Redis and the pinger share the cores, the maxima include
moments where the OS ran something else (a descheduled Redis looks like a slow command): compare
them with the medians.

Stops the server at the end. Figures go to stdout and, with --json, to a file.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector  # noqa: E402
from asynqpy.core.model.codec import Message  # noqa: E402
from asynqpy.core.spine.broker import Broker  # noqa: E402
from asynqpy.redisio.executor import SyncExecutor  # noqa: E402
from asynqpy.redisio.scripts import load_scripts  # noqa: E402

Q = "big"
SLOW_US = 100
MAX_PHASES = 64


def prober(url: str, phase: Any, maxes: Any, stop: Any) -> None:
    """Another client: PING every 2 ms, keep the slowest round trip per phase."""
    r = redis.Redis.from_url(url)
    while not stop.is_set():
        t = time.perf_counter()
        r.ping()
        d = time.perf_counter() - t
        p = phase.value
        if d > maxes[p]:
            maxes[p] = d
        time.sleep(0.002)


class Bench:
    def __init__(self, url: str) -> None:
        self.r = redis.Redis.from_url(url)
        self.r.config_set("slowlog-log-slower-than", SLOW_US)
        self.r.config_set("slowlog-max-len", 100_000)
        self.scripts = {s.sha: s.name for s in load_scripts().values()}
        self.rows: list[dict[str, Any]] = []
        self.phase = mp.Value("i", 0)
        self.maxes = mp.Array("d", MAX_PHASES)
        self.stop = mp.Event()
        self.proc = mp.get_context("fork").Process(target=prober, args=(url, self.phase, self.maxes, self.stop))
        self.proc.start()

    def close(self) -> None:
        self.stop.set()
        self.proc.join(5)

    def _name(self, cmd: list[bytes]) -> str:
        name = cmd[0].decode().upper()
        if name in ("EVALSHA", "EVAL") and len(cmd) > 1:
            if name == "EVALSHA":
                return f"{self.scripts.get(cmd[1].decode(), '?')} script"
            # SLOWLOG keeps the first 128 bytes of an argument: know EVAL's source by its start
            found = [s.name for s in load_scripts().values() if s.source.encode()[:100] == cmd[1][:100]]
            return f"{found[0] if found else '?'} script"
        return name

    def run(self, label: str, fn: Callable[[], Any]) -> Any:
        i = len(self.rows) + 1
        self.r.slowlog_reset()
        self.phase.value = i
        t = time.perf_counter()
        result = fn()
        wall = time.perf_counter() - t
        time.sleep(0.02)  # let the prober finish its last ping of this phase
        self.phase.value = 0
        log = [e for e in self.r.execute_command("SLOWLOG", "GET", 100_000) if e[3][0].upper() != b"SLOWLOG"]
        top = max(log, key=lambda e: e[2], default=None)  # [id, when, duration us, command, ...]
        scripts = sorted(e[2] for e in log if e[3][0].upper() in (b"EVALSHA", b"EVAL"))
        row = {
            "call": label, "wall_s": round(wall, 4), "result": result if isinstance(result, (int, str)) else None,
            "longest_ms": round(top[2] / 1000, 3) if top else None,
            "longest_cmd": self._name(top[3]) if top else None,
            "slow_cmds": len(log), "ping_max_ms": round(self.maxes[i] * 1000, 3),
            "scripts_over_100us": len(scripts),
            "script_median_ms": round(scripts[len(scripts) // 2] / 1000, 3) if scripts else None,
        }
        self.rows.append(row)
        longest = f"{row['longest_ms']:8.3f} ms {row['longest_cmd']}" if top else f"   < {SLOW_US / 1000} ms"
        med = f"{len(scripts):5} x {row['script_median_ms']:6.3f} ms" if scripts else f"{'-':>16}"
        print(f"{label:40} {wall:8.3f} s {longest:32} {med} {row['ping_max_ms']:8.3f} ms", flush=True)
        return result


def fill(url: str, pending: int) -> None:
    """``pending`` pending tasks and: 20 000 scheduled, 3 000 retry, 2 000 archived, 1 000 active."""
    t = time.perf_counter()
    extra = 6_000
    with Client(url) as c:
        for start in range(0, pending + extra, 100_000):
            n = min(100_000, pending + extra - start)
            c.enqueue_many([("email:send", {"user": start + i}) for i in range(n)], queue=Q)
        c.enqueue_many([("report", {"n": i}, {"process_in": 3600 + i}) for i in range(20_000)], queue=Q)
    r = redis.Redis.from_url(url)
    b, x = Broker(), SyncExecutor(r)
    taken = x.run(b.dequeue(Q, 5_000, 3_600_000, "tokbench")).tasks
    calls: list[Any] = []
    for n, (id, _) in enumerate(taken):
        m = Message("email:send", {"user": n}, last_error="boom", retried=1)
        calls.append(b.retry(Q, id, "tokbench", m, 3_600_000) if n < 3_000
                     else b.archive(Q, id, "tokbench", m, 10_000, 90 * 86_400_000))
    x.run_many(calls)
    x.run(b.dequeue(Q, 1_000, 3_600_000, "tokactv"))
    print(f"filled in {time.perf_counter() - t:.1f} s: used_memory {r.info('memory')['used_memory_human']}",
          flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()
    server = RedisProcess()
    bench = None
    try:
        fill(server.url, args.pending)
        bench = Bench(server.url)
        insp = Inspector(server.url)
        info = insp.queue_info(Q)
        print(f"queue {Q}: pending {info.pending}, active {info.active}, scheduled {info.scheduled}, "
              f"retry {info.retry}, archived {info.archived}; memory ~{(info.memory_bytes or 0) / 2**20:.0f} MiB\n")
        print(f"{'call':40} {'wall':>10} {'longest Redis command':32} {'scripts, median':>16} {'ping max':>11}")
        b = bench.run
        n = info.pending
        b("queue_info", lambda: insp.queue_info(Q).pending)
        b("all_queue_info", lambda: len(insp.all_queue_info()))
        b("list_tasks pending page 1 (30)", lambda: len(insp.list_tasks(Q, "pending")))
        b(f"list_tasks pending middle (offset {n // 2})",
          lambda: len(insp.list_tasks(Q, "pending", page=n // 2 // 30 + 1)))
        b("list_tasks pending last page", lambda: len(insp.list_tasks(Q, "pending", page=(n + 29) // 30)))
        b("list_tasks pending 1000 at the middle", lambda: len(insp.list_tasks(Q, "pending", n // 2 // 1000, 1000)))
        b("list_tasks scheduled page 500 (30)", lambda: len(insp.list_tasks(Q, "scheduled", page=500)))
        b("list_tasks active / retry / archived", lambda: sum(len(insp.list_tasks(Q, s)) for s in
                                                              ("active", "retry", "archived")))
        middle = insp.redis.lindex(f"asynqpy:{{{Q}}}:pending", n // 2).decode()
        b("task_info", lambda: insp.task_info(Q, middle).state.value)
        b("delete_task pending, middle of the list", lambda: insp.delete_task(Q, middle))
        newest = insp.list_tasks(Q, "pending", page=(n + 29) // 30)[-1].id
        b("archive_task pending, newest", lambda: insp.archive_task(Q, newest))
        b("run_all retry", lambda: insp.run_all(Q, "retry"))
        b("archive_all scheduled", lambda: insp.archive_all(Q, "scheduled"))
        b("archive_all pending", lambda: insp.archive_all(Q, "pending"))
        b("queue_info (all archived)", lambda: insp.queue_info(Q).archived)
        b("run_all archived", lambda: insp.run_all(Q, "archived"))
        b("delete_all pending", lambda: insp.delete_all(Q, "pending"))
        insp.close()
        if args.json:
            meta = {"python": platform.python_version(), "redis": bench.r.info()["redis_version"],
                    "machine": platform.machine(), "pending": args.pending, "slowlog_us": SLOW_US}
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps({"meta": meta, "rows": bench.rows}, indent=2))
    finally:
        if bench is not None:
            bench.close()
        server.stop()


if __name__ == "__main__":
    main()
