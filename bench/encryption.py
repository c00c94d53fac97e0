"""What encryption costs (docs/encryption.md "Cost"): single ``Client.enqueue`` and a drain of N
no-op tasks by one worker process, each without and with a key ring, interleaved round by round,
on a redis-server this starts. Prints per way the median wall rate and
the median CPU per task of the process doing the work (user + sys: the figure a loaded machine
blurs least), and what encryption costs each: the issue's target is at most 15 % of the throughput,
a cost per task of at most +17.6 % (1 / 0.85). One process runs
every round, the plain and the encrypted way alternating (their order swapped each round), with
imports, scripts and the cipher warmed up before any timing: the two ways meet the same load.

    python bench/encryption.py [--n 3000] [--rounds 5] [--json FILE]
    python bench/encryption.py --instr [--n 1000] [--repeat 3] [--only drain]   # with callgrind

``--instr``: the figure the load moves least (a loaded VM's CPU times vary by tens of percent between
runs): each way runs in a process under ``valgrind --tool=callgrind`` twice, with 300 and 300 + N
tasks (enqueued by it; or drained by it, enqueued beforehand by this process), and the difference
of the two counts divided by N is the instructions per task (start-up, imports and warm-up cancel).
The drain's worker freezes its start-up heap (``gc.freeze()``) before it serves, as ``asynqpy
worker`` does (``--no-freeze``: as a Server embedded in an application keeps it); the drain ends on
an event the n-th handler sets, not a poll (under callgrind a poll's instructions grow with the
wall time, and the encrypted drain's is the longer). The drain's count still moves ~2 % between
quiet runs (how its dequeues and acknowledgements batch) and more beside other jobs (a run beside
the fast tier counted ~5 % less for the encrypted drain): count on a quiet machine, ``--repeat``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

CHILD = r'''
import asyncio, json, sys, time
import redis
from asynqpy import Client, KeyRing, ServeMux, Server
url, n, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ring = KeyRing({"k1": b"\x11" * 32})
payload = {"user_id": 42, "email": "ann@example.com", "items": [1, 2, 3], "note": "x" * 100}
r = redis.Redis.from_url(url)
clients = {False: Client(url), True: Client(url, encryption=ring)}
for c in clients.values():
    c.enqueue("warmup", payload, queue="warm")  # (imports, scripts, the cipher: before any timing)
ring.open(ring.seal(1, b"p"), b"p")
if sys.argv[4] == "1":
    import gc
    gc.freeze()  # (as `asynqpy worker` does before it serves: cli/main.py)
out = {"enqueue": {False: [], True: []}, "drain": {False: [], True: []}}


def enqueue(enc, count):
    c = clients[enc]
    t, c0 = time.perf_counter(), time.process_time()
    for i in range(count):
        c.enqueue("noop", payload, queue="bench")
    return count / (time.perf_counter() - t), (time.process_time() - c0) / count * 1e6


async def drain(enc):
    mux, done, finished = ServeMux(), [0], asyncio.Event()

    @mux.handle("noop")
    async def noop(task):
        done[0] += 1
        if done[0] == n:
            finished.set()
        return {"ok": task.payload["user_id"]}

    s = Server(url, queues=["bench"], encryption=ring if enc else None, concurrency=50, shutdown_timeout=1)
    t, c0 = time.perf_counter(), time.process_time()
    run = asyncio.create_task(s.arun(mux))
    await finished.wait()  # (not a poll: its CPU would count as the worker's)
    w, c = time.perf_counter() - t, time.process_time() - c0
    s.stop()
    await run
    return n / w, c / n * 1e6


for i in range(rounds):
    for enc in ((False, True) if i % 2 == 0 else (True, False)):  # the order alternates between rounds
        r.flushall()
        out["enqueue"][enc].append(enqueue(enc, n))  # these n tasks are then drained
        out["drain"][enc].append(asyncio.run(drain(enc)))
print(json.dumps({k: {str(e): v for e, v in d.items()} for k, d in out.items()}))
'''


INSTR_CHILD = r'''
import asyncio, sys
from asynqpy import Client, KeyRing, ServeMux, Server
url, n, what, encrypted, freeze = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4] == "1", sys.argv[5] == "1"
ring = KeyRing({"k1": b"\x11" * 32}) if encrypted else None
payload = {"user_id": 42, "email": "ann@example.com", "items": [1, 2, 3], "note": "x" * 100}
if what == "enqueue":
    c = Client(url, encryption=ring)
    for i in range(n):
        c.enqueue("noop", payload, queue="bench")
else:
    mux, done, finished = ServeMux(), [0], None

    @mux.handle("noop")
    async def noop(task):
        done[0] += 1
        if done[0] == n:
            finished.set()
        return {"ok": task.payload["user_id"]}

    # (under callgrind the worker runs ~50 times slower, so its timed work (the heartbeat, the
    # recoverer, the janitor, the event loop's watchdog ticking 8 times a second) ran ~50 times as
    # often per task as natively, and more in the slower way: at minutes (the watchdog off) none of
    # it runs while the tasks drain, and the count is the tasks' own)
    TIMED_LOOPS_AT_MINUTES = dict(lease=900, heartbeat_interval=600, recover_interval=600, janitor_interval=600,
                                  block_warning=None)

    async def main():
        global finished
        finished = asyncio.Event()  # (no polling: under callgrind a poll's instructions grow with the wall time)
        s = Server(url, queues=["bench"], encryption=ring, concurrency=50, shutdown_timeout=1,
                   **TIMED_LOOPS_AT_MINUTES)
        if freeze:
            import gc
            gc.freeze()  # (as `asynqpy worker` does before it serves: cli/main.py)
        run = asyncio.create_task(s.arun(mux))
        await finished.wait()
        s.stop()
        await run
    asyncio.run(main())
'''


def _instructions(url: str, n: int, what: str, encrypted: bool, tmp: str, freeze: bool) -> int:
    """Instructions callgrind counts for one process enqueueing (draining) ``n`` tasks."""
    if what == "drain":
        from asynqpy import Client, KeyRing

        ring = KeyRing({"k1": b"\x11" * 32}) if encrypted else None
        payload = {"user_id": 42, "email": "ann@example.com", "items": [1, 2, 3], "note": "x" * 100}
        with Client(url, encryption=ring) as c:
            c.enqueue_many([("noop", payload)] * n, queue="bench")
    out = f"{tmp}/cg.{what}.{int(encrypted)}.{n}"
    subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, "-c",
                    INSTR_CHILD, url, str(n), what, "1" if encrypted else "0", "1" if freeze else "0"], capture_output=True, text=True,
                   timeout=1800, check=True)
    for line in Path(out).read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split()[1])
    raise RuntimeError("no totals in the callgrind output")


def instr(n: int, freeze: bool, repeat: int = 1, whats: tuple[str, ...] = ("enqueue", "drain")) -> None:
    import tempfile

    srv = RedisProcess()
    rows = []
    try:
        r = redis.Redis.from_url(srv.url)
        for enc in ("0", "1"):  # natively first: the modules' bytecode is written before any count
            subprocess.run([sys.executable, "-c", INSTR_CHILD, srv.url, "1", "enqueue", enc, "0"], check=True,
                           capture_output=True, timeout=120)
        with tempfile.TemporaryDirectory() as tmp:
            for what in whats:
                runs: dict[bool, list[float]] = {False: [], True: []}
                for _ in range(repeat):  # (the two ways alternating, so a change of load meets both)
                    for enc in (False, True):
                        counts = []
                        for size in (300, 300 + n):
                            r.flushall()
                            counts.append(_instructions(srv.url, size, what, enc, tmp, freeze))
                        runs[enc].append((counts[1] - counts[0]) / n)
                per = {enc: statistics.median(v) for enc, v in runs.items()}
                over = (per[True] - per[False]) / per[False] * 100
                rate = (per[False] / per[True] - 1) * 100  # (throughput goes as 1 / instructions a task)
                spread = "" if repeat == 1 else " (" + "; ".join(
                    f"{a:,.0f} / {b:,.0f}: {(b - a) / a * 100:+.1f} %" for a, b in zip(runs[False], runs[True])) + ")"
                rows.append(f"| {what} | {per[False]:,.0f} | {per[True]:,.0f} | {over:+.1f} % | {rate:+.1f} % |{spread}")
    finally:
        srv.stop()
    print(f"instructions per task (callgrind, the client or worker process; n={n}; median of {repeat}; the worker's heap "
          f"{'frozen after start-up, as `asynqpy worker` does' if freeze else 'not frozen'})")
    print("| workload | plain | encrypted | instructions | throughput (target: -15 % at most) |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", default="")
    p.add_argument("--instr", action="store_true", help="count instructions per task with callgrind instead")
    p.add_argument("--repeat", type=int, default=1,
                   help="--instr: count each way this many times and report the median (the drain's count moves "
                        "~2 %% between quiet runs: how its batches fall)")
    p.add_argument("--only", choices=("enqueue", "drain"), default="", help="--instr: one workload")
    p.add_argument("--no-freeze", action="store_true",
                   help="the drain's worker keeps its start-up heap in the collector (a Server embedded in an app)")
    a = p.parse_args()
    if a.instr:
        instr(a.n, not a.no_freeze, max(1, a.repeat), (a.only,) if a.only else ("enqueue", "drain"))
        return
    srv = RedisProcess()
    try:
        res = subprocess.run([sys.executable, "-c", CHILD, srv.url, str(a.n), str(a.rounds), "0" if a.no_freeze else "1"],
                             capture_output=True,
                             text=True, timeout=1800, env=dict(os.environ), check=True)
    finally:
        srv.stop()
    raw = json.loads(res.stdout.strip().splitlines()[-1])
    got = {(what, enc == "True"): [tuple(x) for x in v] for what, d in raw.items() for enc, v in d.items()}
    rows, report = [], {}
    for what in ("enqueue", "drain"):
        plain, sealed = got[(what, False)], got[(what, True)]
        cpu0, cpu1 = statistics.median(c for _, c in plain), statistics.median(c for _, c in sealed)
        rate0, rate1 = statistics.median(x for x, _ in plain), statistics.median(x for x, _ in sealed)
        over = (cpu1 - cpu0) / cpu0 * 100
        report[what] = {"plain_per_s": rate0, "encrypted_per_s": rate1, "plain_cpu_us": cpu0,
                        "encrypted_cpu_us": cpu1, "cpu_overhead_pct": over,
                        "rate_overhead_pct": (rate0 - rate1) / rate0 * 100}
        rows.append(f"| {what} | {rate0:,.0f}/s | {rate1:,.0f}/s | {cpu0:.1f} µs | {cpu1:.1f} µs | {over:+.1f} % |")
    print(f"n={a.n} rounds={a.rounds} load={os.getloadavg()[0]:.1f}")
    print("| workload | plain | encrypted | CPU/task plain | CPU/task encrypted | CPU overhead |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    if a.json:
        Path(a.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
