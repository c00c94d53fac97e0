"""Benchmark: Inspector.search over a large queue: tasks scanned per second and the longest Redis call.

    python bench/search.py [--tasks 1000000] [--budget 2000] [--json FILE]

Starts its own redis-server on a free loopback port (no persistence), fills queue ``big`` with
``--tasks`` pending tasks (payload ``{"user": {"id": n % 1000, "plan": "pro"|"free"}, "note": ...}``,
one in 1 000 with a tenant), then runs each search below to the end of the queue and reports, per
search: the matches, the wall time, tasks scanned per second (the queue's size / wall; and / Redis's CPU
time, which a loaded machine does not inflate), Redis's CPU per script call (about ``--budget``
tasks each), and the longest single call (SLOWLOG, threshold 100 µs: while one script runs Redis
serves no other client; the target is < 10 ms; on a loaded machine it includes the time Redis
was descheduled: compare with the CPU per call). Stops the server at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import redis

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector  # noqa: E402
from asynqpy.core.spine.keys import queue_keys  # noqa: E402

Q = "big"


def fill(url: str, n: int) -> None:
    t = time.perf_counter()
    with Client(url) as c:
        for start in range(0, n, 50_000):
            c.enqueue_many([("email:send", {"user": {"id": i % 1000, "plan": "pro" if i % 7 == 0 else "free"},
                                            "note": f"order {i}"}, {"tenant": "acme"} if i % 1000 == 0 else {})
                            for i in range(start, min(n, start + 50_000))], queue=Q)
    r = redis.Redis.from_url(url)
    print(f"filled {n:,} tasks in {time.perf_counter() - t:.1f} s: used_memory {r.info('memory')['used_memory_human']}",
          flush=True)


def _cpu(r: redis.Redis) -> float:
    """Redis's main thread's CPU seconds so far (INFO cpu): what the scripts cost, whatever the load."""
    info = r.info("cpu")
    main = [info.get("used_cpu_user_main_thread"), info.get("used_cpu_sys_main_thread")]
    if None in main:
        main = [info["used_cpu_user"], info["used_cpu_sys"]]
    return float(main[0]) + float(main[1])


def run(url: str, label: str, budget: int, **cond: Any) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    r.config_set("slowlog-log-slower-than", 100)
    r.slowlog_reset()
    r.config_set("slowlog-max-len", 100_000)
    insp = Inspector(url)
    total = r.hlen(queue_keys(Q).tasks)
    cpu0 = _cpu(r)
    t = time.perf_counter()
    count = insp.search_count(Q, budget=budget, **cond) if cond.pop("_count", False) else \
        sum(1 for _ in insp.search(Q, budget=budget, **cond))
    wall = time.perf_counter() - t
    cpu = _cpu(r) - cpu0
    slow = [e for e in r.slowlog_get(100_000) if e["command"][:7].upper() in (b"EVALSHA", b"FCALL")]
    longest = max((e["duration"] for e in slow), default=0) / 1000
    calls = total / budget
    row = {"search": label, "matches": count, "wall_s": round(wall, 3), "tasks_per_s": round(total / wall),
           "redis_cpu_tasks_per_s": round(total / cpu), "calls": round(calls),
           "redis_cpu_ms_per_call": round(cpu / calls * 1000, 2), "longest_call_ms": round(longest, 2)}
    print(f"{label:44} {count:>9,} {wall:>8.2f} s {total / wall:>12,.0f}/s {total / cpu:>12,.0f}/s "
          f"{cpu / calls * 1000:>8.2f} ms {longest:>8.2f} ms", flush=True)
    insp.close()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--budget", type=int, default=2000, help="tasks a script call looks at")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    args = ap.parse_args()
    server = RedisProcess()
    try:
        fill(server.url, args.tasks)
        print(f"\n{'search (to the end of the queue)':44} {'matches':>9} {'wall':>10} {'scanned/wall':>14} "
              f"{'scanned/cpu':>14} {'cpu/call':>11} {'longest':>11}")
        b = args.budget
        rows = [
            run(server.url, "count, no condition", b, _count=True),
            run(server.url, "count, type (in place)", b, _count=True, type="email:send"),
            run(server.url, "count, payload user.id == 7", b, _count=True, payload={"user.id": 7}),
            run(server.url, "list, payload user.id == 7 and plan == 'pro'", b,
                payload={"user.id": 7, "user.plan": "pro"}),
            run(server.url, "list, tenant acme", b, tenant="acme"),
            run(server.url, "list, text 'order 12345'", b, text="order 12345"),
        ]
        if args.json:
            Path(args.json).write_text(json.dumps({"tasks": args.tasks, "budget": b, "rows": rows}, indent=1))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
