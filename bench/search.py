"""Benchmark: Inspector.search over a large queue: tasks scanned per second and the longest Redis call.

    python bench/search.py [--tasks 1000000] [--budget 1000] [--json FILE]

Starts its own redis-server on a free loopback port (no persistence), fills queue ``big`` with
``--tasks`` pending tasks (payload ``{"user": {"id": n % 1000, "plan": "pro"|"free"}, "note": ...}``,
one in 1 000 with a tenant), then runs each search below to the end of the queue and reports, per
search: the matches, the wall time, tasks scanned per second (the queue's size / wall; and / Redis's CPU
time, which a loaded machine does not inflate), Redis's CPU per script call (about ``--budget``
tasks each), and the longest single call (SLOWLOG, threshold 100 µs: while one script runs Redis
serves no other client; the target is < 10 ms; on a loaded machine it includes the time Redis
was descheduled: compare with the CPU per call). Stops the server at the end.

Redis's own figures (INFO commandstats, FCALL/EVALSHA): its time per script call and per scanned task
(``usec``: measured by Redis around each command; on a loaded machine it still includes the time
Redis was descheduled inside a call, less than the wall does), and what they make a rate.

    python bench/search.py --instr [--tasks 20000]

``--instr``: the load-independent figure: redis-server runs under ``valgrind --tool=callgrind``
(valgrind installed), each search's instructions are counted (the counts zeroed before it, dumped
after it), and printed per scanned task and per script call.
"""

from __future__ import annotations

import argparse
import json
import os
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


def fill(url: str, n: int, timeout: float | None = None) -> None:
    t = time.perf_counter()
    with Client(redis.Redis.from_url(url, socket_timeout=timeout) if timeout else url) as c:
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


SCRIPTS = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval")


def _scripts(r: redis.Redis) -> tuple[int, int]:
    """(calls, usec) of the script commands so far (INFO commandstats)."""
    stats = r.info("commandstats")
    return (sum(int(stats[k]["calls"]) for k in SCRIPTS if k in stats),
            sum(int(stats[k]["usec"]) for k in SCRIPTS if k in stats))


def _longest_ms(r: redis.Redis) -> float:
    """The longest script call in the SLOWLOG (threshold 100 µs), in ms."""
    slow = [e for e in r.slowlog_get(100_000)
            if bytes(e["command"]).split(b" ", 1)[0].upper() in (b"EVALSHA", b"FCALL", b"EVAL")]
    return max((e["duration"] for e in slow), default=0) / 1000


def run(url: str, label: str, budget: int, **cond: Any) -> dict[str, Any]:
    r = redis.Redis.from_url(url)
    r.config_set("slowlog-log-slower-than", 100)
    r.slowlog_reset()
    r.config_set("slowlog-max-len", 100_000)
    insp = Inspector(url)
    total = r.hlen(queue_keys(Q).tasks)
    cpu0, (calls0, usec0) = _cpu(r), _scripts(r)
    t = time.perf_counter()
    count = insp.search_count(Q, budget=budget, **cond) if cond.pop("_count", False) else \
        sum(1 for _ in insp.search(Q, budget=budget, **cond))
    wall = time.perf_counter() - t
    cpu = _cpu(r) - cpu0
    calls1, usec1 = _scripts(r)
    calls, usec = max(1, calls1 - calls0), usec1 - usec0
    longest = _longest_ms(r)
    row = {"search": label, "matches": count, "wall_s": round(wall, 3), "tasks_per_s": round(total / wall),
           "redis_cpu_tasks_per_s": round(total / cpu), "calls": calls,
           "redis_cpu_ms_per_call": round(cpu / calls * 1000, 2), "script_us_per_task": round(usec / total, 3),
           "script_tasks_per_s": round(total / usec * 1e6), "script_ms_per_call": round(usec / calls / 1000, 2),
           "longest_call_ms": round(longest, 2)}
    print(f"{label:44} {count:>9,} {wall:>8.2f} s {total / wall:>12,.0f}/s {total / cpu:>12,.0f}/s "
          f"{cpu / calls * 1000:>8.2f} ms {usec / total:>8.3f} µs {total / usec * 1e6:>12,.0f}/s "
          f"{usec / calls / 1000:>8.2f} ms {longest:>8.2f} ms", flush=True)
    insp.close()
    return row


SEARCHES: list[tuple[str, dict[str, Any]]] = [
    ("count, no condition", {"_count": True}),
    ("count, type (in place)", {"_count": True, "type": "email:send"}),
    ("count, payload user.id == 7", {"_count": True, "payload": {"user.id": 7}}),
    ("list, payload user.id == 7 and plan == 'pro'", {"payload": {"user.id": 7, "user.plan": "pro"}}),
    ("list, tenant acme", {"tenant": "acme"}),
    ("list, text 'order 12345'", {"text": "order 12345"}),
]


def instr(n: int, budget: int) -> None:
    """Redis's instructions per scanned task and per call of each search (callgrind)."""
    import shutil
    import subprocess
    import tempfile

    from redis_instr import _free_port, _instructions

    from asynqpy.core.spine.scripts import load_scripts

    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind (callgrind) is not installed")
    port, tmp = _free_port(), Path(tempfile.mkdtemp(prefix="search-instr-"))
    out = tmp / "callgrind.out"
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
                             "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                             "--dir", str(tmp), "--lua-time-limit", "0"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    r = redis.Redis.from_url(url, socket_timeout=600)
    try:
        for _ in range(600):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        fill(url, n, timeout=600)
        for script in load_scripts().values():  # (loaded before: compiling them is not a search's cost)
            r.execute_command("FUNCTION", "LOAD", "REPLACE", script.library)
        print(f"\nRedis instructions (callgrind; {n:,} tasks, budget {budget})")
        print("| search (to the end of the queue) | matches | instructions per scanned task | per script call |")
        print("|---|---|---|---|")
        for label, cond in SEARCHES:
            cond = dict(cond)
            insp = Inspector(redis.Redis.from_url(url, socket_timeout=600))
            calls0, _ = _scripts(r)
            for f in tmp.glob("callgrind.out*"):
                f.unlink()
            subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True, capture_output=True)
            count = insp.search_count(Q, budget=budget, **cond) if cond.pop("_count", False) else \
                sum(1 for _ in insp.search(Q, budget=budget, **cond))
            subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True, capture_output=True)
            calls = _scripts(r)[0] - calls0
            ir = _instructions(out)
            print(f"| {label} | {count:,} | {ir / n:,.0f} | {ir / max(1, calls) / 1e6:,.2f} M |", flush=True)
            insp.close()
    finally:
        proc.terminate()
        proc.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", type=int, default=1_000_000)
    ap.add_argument("--budget", type=int, default=1000, help="tasks a script call looks at")
    ap.add_argument("--json", default=None, help="also write the figures to this file")
    ap.add_argument("--instr", action="store_true", help="count Redis's instructions with callgrind instead")
    args = ap.parse_args()
    if args.instr:
        instr(args.tasks if args.tasks != 1_000_000 else 20_000, args.budget)
        return
    server = RedisProcess()
    try:
        fill(server.url, args.tasks)
        print(f"\n{'search (to the end of the queue)':44} {'matches':>9} {'wall':>10} {'scanned/wall':>14} "
              f"{'scanned/cpu':>14} {'cpu/call':>11} {'script/task':>11} {'scanned/script':>14} "
              f"{'script/call':>11} {'longest':>11}")
        print(f"(load average {os.getloadavg()[0]:.1f} at the start)")
        b = args.budget
        rows = [run(server.url, label, b, **cond) for label, cond in SEARCHES]
        if args.json:
            Path(args.json).write_text(json.dumps({"tasks": args.tasks, "budget": b, "rows": rows}, indent=1))
    finally:
        server.stop()


if __name__ == "__main__":
    main()
