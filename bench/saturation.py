"""One queue at the limit of its Redis core, and queues spread over a Cluster past one core.

Needs a machine with more cores than worker processes (see ../shared/reference/many-core.md for
running it on a lent 16-core machine); on a 2-core machine the figures show the client side, not
Redis's limit (use ``bench/redis_cost.py``'s ceiling there).

Single Redis (``--procs 1,2,4,8,12``): for each mode and each K, the measured Redis is flushed and
prefilled with N tasks (not timed), then K worker processes (concurrency 20 each) drain it. Each
handler INCRs a counter on a second Redis, so completions are counted without touching the
measured one. Modes:

    on       asynqpy, the queue's event stream on (the default)
    off      asynqpy, the event stream off (``Inspector.set_events(queue, 0)``)
    bare     a list of ids: K processes of 20 coroutines each, BRPOP from the measured Redis then
             INCR the counter (no lease, no record, no retry: the floor any queue pays)

Columns: steady tasks/s (between 10 % and 90 % of N done), Redis CPU µs per task over the same
window (``INFO cpu`` user + sys), Redis commands per task (``INFO commandstats`` after
``CONFIG RESETSTAT``, script-internal ones included), and for asynqpy its ratio to the bare loop.

Cluster (``--cluster``): a 3-master Cluster without replicas, one queue per master (their hash
tags chosen to land on three different masters), ``--cluster-procs`` workers spread evenly over
the queues, each worker serving one queue; the same drain, with each master's share of the tasks
and its CPU per task, and the aggregate rate beside one queue on the same Cluster with the same
number of workers.

    python bench/saturation.py [--n N] [--procs 1,2,4,8,12] [--modes on,off,bare]
                               [--cluster] [--cluster-procs 12] [--json PATH]

Starts its own redis-servers (``redis-server`` on PATH; ``redis-cli`` too for the Cluster).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))
from redisproc import RedisCluster, RedisProcess  # noqa: E402

log = logging.getLogger("bench.saturation")
CONCURRENCY = 20
BATCH = 1000


# ---------------------------------------------------------------- worker processes

def _worker_asynq(url: str, counter: str, queue: str) -> None:
    """One asynqpy worker process: drains ``queue``; each handler INCRs the counter."""
    import redis.asyncio as aredis

    from asynqpy import ServeMux, Server, Task

    mux = ServeMux()
    box: dict[str, Any] = {}

    @mux.handle("t")
    async def t(task: Task) -> None:
        c = box.get("c")
        if c is None:
            c = box["c"] = aredis.Redis.from_url(counter, max_connections=CONCURRENCY * 2)
        await c.incr("n")

    Server(url, queues=[queue], concurrency=CONCURRENCY).run(mux)


def _worker_bare(url: str, counter: str) -> None:
    """One bare-loop process: 20 coroutines of BRPOP then INCR, until SIGTERM."""
    import redis.asyncio as aredis

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        src = aredis.Redis.from_url(url, max_connections=CONCURRENCY + 2)
        dst = aredis.Redis.from_url(counter, max_connections=CONCURRENCY + 2)

        async def loop() -> None:
            while not stop.is_set():
                if await src.brpop(["bare"], 1) is not None:
                    await dst.incr("n")

        await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))

    asyncio.run(main())


# ---------------------------------------------------------------- measuring

def _cpu(r: redis.Redis) -> float:
    c = r.info("cpu")
    return float(c["used_cpu_user"]) + float(c["used_cpu_sys"])


def _calls(r: redis.Redis) -> int:
    stats = r.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config"))


def _prefill(url: str, mode: str, n: int, queue: str) -> None:
    if mode == "bare":
        r = redis.Redis.from_url(url)
        for start in range(0, n, BATCH):
            r.lpush("bare", *range(start, min(n, start + BATCH)))
        return
    from asynqpy import Client
    with Client(url) as c:
        for start in range(0, n, BATCH):
            c.enqueue_many([("t", i) for i in range(start, min(n, start + BATCH))], queue=queue)


def _spawn(mode: str, url: str, counter: str, queue: str) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, __file__, "worker", mode, url, counter, queue]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 10
    for p in procs:
        try:
            p.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def drain(nodes: list[redis.Redis], counter: redis.Redis, n: int,
          starts: list[tuple[str, str]], mode: str, counter_url: str,
          timeout: float = 240) -> dict[str, Any]:
    """Start one worker per entry of ``starts`` (url, queue) and time the drain of ``n`` tasks.
    ``nodes``: the Redis servers measured (one, or a Cluster's masters)."""
    counter.set("n", 0)
    for r in nodes:
        r.config_resetstat()
    begun = [_cpu(r) for r in nodes]
    procs = [_spawn(mode, url, counter_url, q) for url, q in starts]
    t0 = time.monotonic()
    lo, hi = n // 10, n - n // 10
    mark: dict[str, tuple[float, int, list[float]]] = {}
    try:
        while True:
            done = int(counter.get("n") or 0)
            now = time.monotonic()
            for name, at in (("lo", lo), ("hi", hi)):
                if name not in mark and done >= at:
                    mark[name] = (now, done, [_cpu(r) for r in nodes])
            if done >= n:
                break
            if now - t0 > timeout:
                raise RuntimeError(f"{mode}: {done}/{n} tasks done after {timeout} s")
            time.sleep(0.01)
        total = time.monotonic() - t0
        calls = [_calls(r) for r in nodes]
    finally:
        _stop(procs)
    (t_lo, n_lo, c_lo), (t_hi, n_hi, c_hi) = mark["lo"], mark["hi"]
    if t_hi <= t_lo:  # both marks in one poll (a small n drained between two reads): from the start
        t_lo, n_lo, c_lo = t0, 0, begun
    tasks = n_hi - n_lo
    cpu = [b - a for a, b in zip(c_lo, c_hi)]
    return {"rate": tasks / (t_hi - t_lo), "seconds": total,
            "cpu_us": [c * 1e6 / tasks for c in cpu], "cpu_share": [c / (t_hi - t_lo) for c in cpu],
            "cmds": [c / n for c in calls]}


def single(n_max: int, procs: list[int], modes: list[str], per_proc: int) -> list[dict[str, Any]]:
    """The single-Redis table: each mode at each number of worker processes."""
    measured, counter = RedisProcess(), RedisProcess()
    rows: list[dict[str, Any]] = []
    try:
        r, c = measured.admin(), counter.admin()
        for k in procs:
            n = min(n_max, per_proc * k)
            for mode in modes:
                r.flushall()
                if mode == "off":
                    from asynqpy import Inspector
                    with Inspector(measured.url) as insp:
                        insp.set_events("sat", 0)
                _prefill(measured.url, mode, n, "sat")
                m = drain([r], c, n, [(measured.url, "sat")] * k, "bare" if mode == "bare" else "asynq",
                          counter.url)
                row = {"procs": k, "mode": mode, "n": n, "rate": round(m["rate"]), "seconds": round(m["seconds"], 2),
                       "cpu_us": round(m["cpu_us"][0], 2), "redis_core": round(m["cpu_share"][0], 3),
                       "cmds": round(m["cmds"][0], 2)}
                rows.append(row)
                log.info("%s", row)
    finally:
        measured.stop()
        counter.stop()
    return rows


def _queues_per_master(cluster: RedisCluster, count: int) -> list[str]:
    """``count`` queue names whose hash tags land on ``count`` different masters."""
    owners: dict[int, str] = {}
    masters = cluster.masters()
    for i in range(10_000):
        name = f"sat{i}"
        port = cluster.owner(f"{{{name}}}").port
        if port not in owners:
            owners[port] = name
        if len(owners) == min(count, len(masters)):
            break
    return list(owners.values())


def cluster_rows(n_per_queue: int, procs: int) -> list[dict[str, Any]]:
    """Three masters: one queue on one master vs three queues on three masters, same workers."""
    cluster = RedisCluster(masters=3, replicas=0)
    counter = RedisProcess()
    rows: list[dict[str, Any]] = []
    try:
        masters = cluster.masters()
        nodes = [m.admin() for m in masters]
        c = counter.admin()
        queues = _queues_per_master(cluster, 3)
        for layout in ([queues[0]], queues):
            cluster.flush()
            n = n_per_queue * len(layout)
            for q in layout:
                _prefill(cluster.url, "on", n_per_queue, q)
            starts = [(cluster.url, layout[i % len(layout)]) for i in range(procs)]
            m = drain(nodes, c, n, starts, "asynq", counter.url)
            row = {"queues": len(layout), "procs": procs, "n": n, "rate": round(m["rate"]),
                   "seconds": round(m["seconds"], 2),
                   "master_core": [round(x, 3) for x in m["cpu_share"]],
                   "master_cmds": [round(x, 2) for x in m["cmds"]],
                   "cpu_us_total": round(sum(m["cpu_us"]), 2)}
            rows.append(row)
            log.info("%s", row)
    finally:
        counter.stop()
        cluster.stop()
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    bare = {r["procs"]: r["rate"] for r in rows if r["mode"] == "bare"}
    out = [f"{'procs':>5} {'mode':>5} {'tasks/s':>9} {'× bare':>7} {'Redis µs/task':>14} {'Redis core':>11} "
           f"{'cmds/task':>10}"]
    for r in rows:
        ratio = f"{r['rate'] / bare[r['procs']]:.2f}" if r["procs"] in bare and r["mode"] != "bare" else "-"
        out.append(f"{r['procs']:>5} {r['mode']:>5} {r['rate']:>9,} {ratio:>7} {r['cpu_us']:>14.1f} "
                   f"{r['redis_core']:>11.2f} {r['cmds']:>10.2f}")
    return "\n".join(out)


def cluster_table(rows: list[dict[str, Any]]) -> str:
    out = [f"{'queues':>6} {'procs':>5} {'tasks/s':>9} {'each master: share of a core':>30} {'Redis µs/task':>14}"]
    for r in rows:
        shares = " ".join(f"{x:.2f}" for x in r["master_core"])
        out.append(f"{r['queues']:>6} {r['procs']:>5} {r['rate']:>9,} {shares:>30} {r['cpu_us_total']:>14.1f}")
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        mode, url, counter, queue = sys.argv[2:6]
        logging.basicConfig(level=logging.WARNING)
        if mode == "bare":
            _worker_bare(url, counter)
        else:
            _worker_asynq(url, counter, queue)
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000, help="tasks per run at most")
    ap.add_argument("--per-proc", type=int, default=40_000, help="tasks per worker process (N = min(n, this × K))")
    ap.add_argument("--procs", default="1,2,4,8,12")
    ap.add_argument("--modes", default="bare,on,off")
    ap.add_argument("--cluster", action="store_true", help="also the 3-master Cluster rows")
    ap.add_argument("--only-cluster", action="store_true")
    ap.add_argument("--cluster-procs", type=int, default=12)
    ap.add_argument("--json", help="write the rows there")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result: dict[str, Any] = {"cores": os.cpu_count()}
    if not args.only_cluster:
        rows = single(args.n, [int(k) for k in args.procs.split(",")], args.modes.split(","), args.per_proc)
        result["single"] = rows
        print(table(rows), flush=True)
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
    if args.cluster or args.only_cluster:
        crows = cluster_rows(min(args.n, args.per_proc * args.cluster_procs) // 3, args.cluster_procs)
        result["cluster"] = crows
        print(cluster_table(crows), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
