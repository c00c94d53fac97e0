"""Issue 31, row "workers x tasks": the Redis cost of one ``reconcile_interval`` of the janitor's
consistency sweep as workers and tasks grow.

For each size (workers W x tasks T in one queue) it fills the queue with T pending tasks, records
the queue's last sweep as long past (a sweep is due), starts W janitors (each on its own
connection, in one process: the janitor's loop as a server runs it, ``clean_once`` and the wait it
returns) and runs them until the interval's sweeping is over: the shared sweep ended (or, on code
before the change, every janitor's own sweep ended). It reports the commands Redis ran in that
time (INFO commandstats, script-internal commands included, after CONFIG RESETSTAT), Redis's own
CPU time for them (usec), the HSCAN steps, how long it took, and the p50/p99 of a PING sent every
2 ms from another process meanwhile. ``start_cmds`` is what W janitors starting on a queue just
swept cost in their first second (a sweep at start or not).

    python bench/scale_janitor.py [--quick]   # quick: 1, 8 workers x 10^4, 10^5 tasks; full: and 10^6

It starts its own redis-server on a free port. To measure the code before the change, run it with
``PYTHONPATH`` pointing at a checkout of main (the bench itself only uses what both have).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import redis
import redis.asyncio as aredis

from asynqpy.core.model.clock import Clock
from asynqpy.core.model.codec import Message, encode
from asynqpy.core.spine.keys import queue_keys
from asynqpy.worker.context import Context
from asynqpy.worker.janitor import Janitor, JanitorParams
from asynqpy.worker.settings import ServerOptions

log = logging.getLogger("bench.scale_janitor")

Q = "sweep"
K = queue_keys(Q)
SWEEP = K.base + "sweep"  # the shared sweep's record (spelled out: the code before the change has no such key)
INTERVAL = 300.0  # reconcile_interval: only one interval's sweeping is measured
PINGER = r"""
import sys, time, signal, redis
r = redis.Redis(port=int(sys.argv[1])); lat = []; stop = []
signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
print("ready", flush=True)
while not stop:
    t = time.perf_counter(); r.ping(); lat.append(time.perf_counter() - t); time.sleep(0.002)
lat.sort(); n = len(lat)
print(n, lat[n // 2] * 1000 if n else 0, lat[min(n - 1, int(n * 0.99))] * 1000 if n else 0)
"""


def _fill(r: redis.Redis, tasks: int) -> None:
    """``tasks`` pending tasks (their hash entries and the pending list), in pipelined batches."""
    stored = b"p" + encode(Message("noop", {"n": 1}))
    batch = 5000
    for start in range(0, tasks, batch):
        ids = [f"task-{i:08d}" for i in range(start, min(tasks, start + batch))]
        p = r.pipeline(transaction=False)
        p.hset(K.tasks, mapping=dict.fromkeys(ids, stored))
        p.lpush(K.pending, *ids)
        p.execute()


def _sweeping(r: redis.Redis) -> bool:
    return any(k.startswith(b"c:") for k in r.hkeys(SWEEP))


def _stats(r: redis.Redis) -> tuple[int, int, int]:
    """(commands, usec, hscan calls) since the last CONFIG RESETSTAT, all commands."""
    info: dict[str, Any] = r.info("commandstats")
    calls = sum(int(v["calls"]) for v in info.values())
    usec = sum(int(v["usec"]) for v in info.values())
    hscan = int(info.get("cmdstat_hscan", {}).get("calls", 0))
    return calls, usec, hscan


async def _run(url: str, workers: int, stop: Any, limit: float) -> float:
    """W janitors, each looping as a server's janitor loop does, until ``stop()``; returns seconds."""
    params = JanitorParams.of(ServerOptions(queues={Q: 1}, reconcile_interval=INTERVAL).validate())
    conns = [aredis.Redis.from_url(url) for _ in range(workers)]
    janitors = [Janitor(Context(c, Clock()), params) for c in conns]
    done = asyncio.Event()

    async def loop(j: Janitor) -> None:
        while not done.is_set():
            wait = await j.clean_once()
            try:
                await asyncio.wait_for(done.wait(), min(wait, 1.0))
            except asyncio.TimeoutError:
                pass

    started = time.perf_counter()
    tasks = [asyncio.create_task(loop(j)) for j in janitors]
    try:
        while time.perf_counter() - started < limit:
            await asyncio.sleep(0.05)
            if stop(janitors):
                break
        return time.perf_counter() - started
    finally:
        done.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        for c in conns:
            await c.aclose()


def _swept(r: redis.Redis) -> Any:
    """The interval's sweeping is over: on the shared sweep, its record says it ended; on the code
    before the change (a sweep per janitor, started at once), every janitor's own has ended."""
    def stop(janitors: list[Janitor]) -> bool:
        if hasattr(janitors[0], "_cursors"):  # before: per-janitor cursors, swept at start
            return all(not j._cursors and j._next_sweep > 0 for j in janitors)  # type: ignore[attr-defined]
        return not _sweeping(r) and float(r.hget(SWEEP, "last") or 0) > 1
    return stop


def one(url: str, port: int, workers: int, tasks: int) -> dict[str, object]:
    r = redis.Redis.from_url(url)
    r.flushall()
    _fill(r, tasks)
    r.hset(SWEEP, "last", 1)  # the last sweep was long ago: one is due now
    pinger = subprocess.Popen([sys.executable, "-c", PINGER, str(port)], stdout=subprocess.PIPE, text=True)
    assert pinger.stdout is not None and pinger.stdout.readline().strip() == "ready"
    r.config_resetstat()
    seconds = asyncio.run(_run(url, workers, _swept(r), limit=600.0))
    calls, usec, hscan = _stats(r)
    pinger.send_signal(signal.SIGTERM)
    out, _ = pinger.communicate(timeout=30)
    n_ping, p50, p99 = out.split()
    # the start on a queue swept just now: what W janitors cost in their first second
    r.delete(SWEEP)
    r.hset(SWEEP, "last", int(r.time()[0]) * 1000)
    r.config_resetstat()
    asyncio.run(_run(url, workers, lambda js: False, limit=1.0))
    start_cmds = _stats(r)[0]
    calls -= min(calls, int(n_ping))  # PINGs are not the sweep's
    return {"workers": workers, "tasks": tasks, "cmds": calls, "redis_ms": round(usec / 1000, 1),
            "hscan": hscan, "seconds": round(seconds, 2), "cmds_per_task": round(calls / tasks, 3),
            "redis_us_per_task": round(usec / tasks, 3), "ping_p50_ms": round(float(p50), 3),
            "ping_p99_ms": round(float(p99), 3), "start_cmds": start_cmds}


def rows(url: str, quick: bool) -> list[dict[str, object]]:
    """One row per size (workers x tasks): the cost of one interval's sweeping."""
    port = redis.Redis.from_url(url).connection_pool.connection_kwargs.get("port", 6379)
    sizes = [10**4, 10**5] + ([] if quick else [10**6])
    out = []
    for tasks in sizes:
        for workers in (1, 8):
            row = one(url, int(port), workers, tasks)
            log.info("%s", row)
            out.append(row)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("asynqpy").setLevel(logging.ERROR)
    quick = "--quick" in sys.argv
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="scale-janitor-")
    server = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no",
                               "--daemonize", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        result = rows(f"redis://127.0.0.1:{port}/0", quick)
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    cols = ["workers", "tasks", "cmds", "redis_ms", "hscan", "seconds", "cmds_per_task", "redis_us_per_task",
            "ping_p50_ms", "ping_p99_ms", "start_cmds"]
    sys.stdout.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
    for row in result:
        sys.stdout.write("| " + " | ".join(str(row[c]) for c in cols) + " |\n")
    if os.environ.get("SCALE_JSON"):
        sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
