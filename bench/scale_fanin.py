"""Issue 31, rows "parents of a fan-in" and "keyed batches": the Redis cost of a fan-in's edges as
the number of parents P grows, and of a keyed ``enqueue_many``.

Fan-in (one row per P = 10, 100, 1 000; quick: 10, 100, 300): P parent tasks are enqueued, then
one child waiting on all of them (``enqueue(after=...)``: P ``register_child`` calls and one
``enqueue_after``: "store"), then every parent's end is delivered to the child the way the
propagator delivers it (one ``resolve`` per edge, 100 per pipeline: "resolve"; the last one
releases the child). For each phase: Redis's own time (INFO commandstats usec of the script calls,
which include the commands they ran, after CONFIG RESETSTAT) in ms, in total and per edge, and the
commands Redis ran per edge. The target is a constant cost per edge (the record used to be one
string rewritten per edge: O(P^2)), a 1 000-parent fan-in <= 50 ms of Redis.

Keyed batch (one row, kind "keyed"): ``enqueue_many`` of 1 000 keyed tasks over 100 keys: script
calls per batch, commands and Redis usec per task.

Process inputs vs plain keyed tasks over the same keys: bench/processes.py prints that ratio.

    python bench/scale_fanin.py [--quick]

It starts its own redis-server on a free port. To measure the code before the change, run it with
``PYTHONPATH`` pointing at a checkout of main (the bench uses only what both have).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import redis

from asynqpy import Client
from asynqpy.core.spine.broker import Broker
from asynqpy.core.workflows import records as workflow
from asynqpy.redisio.executor import SyncExecutor

log = logging.getLogger("bench.scale_fanin")

Q = "fanin"
PIPE = 100  # resolve calls per pipeline, as the propagator sends them (its outbox page)


def _stats(r: redis.Redis) -> tuple[int, float]:
    """(commands Redis ran, script-internal ones included; usec of the top-level calls)."""
    s: dict[str, Any] = r.info("commandstats")
    internal = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_config", "cmdstat_info")
    cmds = sum(int(v["calls"]) for k, v in s.items() if k not in internal)
    cmds += sum(int(s[k]["calls"]) for k in ("cmdstat_evalsha", "cmdstat_eval") if k in s)
    # a script's usec includes the commands it ran: count the scripts' and the plain commands'
    # own, not both (plain commands sent outside scripts: the pipelines here send none)
    usec = sum(float(s[k]["usec"]) for k in ("cmdstat_evalsha", "cmdstat_eval") if k in s)
    return cmds, usec


def fan_in(url: str, parents: int) -> dict[str, object]:
    r = redis.Redis.from_url(url)
    r.flushall()
    b, x = Broker(), SyncExecutor(r)
    with Client(url) as c:
        warm = c.enqueue_many([("p", i) for i in range(2)], queue=Q).ids  # the scripts loaded
        c.enqueue("child", None, queue=Q, task_id="warm", after=[(Q, i) for i in warm])
        x.run(b.resolve(Q, "warm", workflow.ref(Q, warm[0]), b"x"))
        ids = c.enqueue_many([("p", i) for i in range(parents)], queue=Q).ids
        r.config_resetstat()
        c.enqueue("child", None, queue=Q, task_id="child", after=[(Q, i) for i in ids],
                  on_parent_failure="run")
        store_cmds, store_us = _stats(r)
    r.config_resetstat()
    t0 = time.perf_counter()
    codes: list[Any] = []
    for start in range(0, parents, PIPE):
        calls = [b.resolve(Q, "child", workflow.ref(Q, id), workflow.end_state("c", b"\x01"))
                 for id in ids[start:start + PIPE]]
        codes += x.run_many(calls)
    took = time.perf_counter() - t0
    cmds, us = _stats(r)
    assert int(codes[-1]) == 1, codes[-3:]  # the last end released the child
    return {"kind": "fan-in", "parents": parents, "store_ms": round(store_us / 1000, 2),
            "store_us_per_edge": round(store_us / parents, 1),
            "store_cmds_per_edge": round(store_cmds / parents, 1), "resolve_ms": round(us / 1000, 2),
            "resolve_us_per_edge": round(us / parents, 1), "resolve_cmds_per_edge": round(cmds / parents, 1),
            "total_ms": round((store_us + us) / 1000, 2), "seconds": round(took, 3)}


def keyed_batch(url: str, n: int = 1000, keys: int = 100) -> dict[str, object]:
    r = redis.Redis.from_url(url)
    r.flushall()
    with Client(url) as c:
        c.enqueue_many([("t", i, {"key": "warm"}) for i in range(2)], queue=Q)  # the scripts loaded
        r.config_resetstat()
        c.enqueue_many([("t", i, {"key": f"k{i % keys}"}) for i in range(n)], queue=Q)
        cmds, us = _stats(r)
    s: dict[str, Any] = r.info("commandstats")
    scripts = sum(int(s[k]["calls"]) for k in ("cmdstat_evalsha", "cmdstat_eval") if k in s)
    return {"kind": "keyed", "tasks": n, "keys": keys, "script_calls": scripts,
            "cmds_per_task": round(cmds / n, 1), "redis_us_per_task": round(us / n, 1)}


def rows(url: str, quick: bool) -> list[dict[str, object]]:
    """One row per fan-in size, then the keyed batch's row."""
    sizes = (10, 100, 300) if quick else (10, 100, 1000)
    out = [fan_in(url, p) for p in sizes]
    out.append(keyed_batch(url))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    quick = "--quick" in sys.argv
    port = _free_port()
    tmp = tempfile.mkdtemp(prefix="scale-fanin-")
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
    fan = [row for row in result if row["kind"] == "fan-in"]
    cols = ["parents", "store_ms", "store_us_per_edge", "store_cmds_per_edge", "resolve_ms", "resolve_us_per_edge", "resolve_cmds_per_edge",
            "total_ms", "seconds"]
    sys.stdout.write("| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
    for row in fan:
        sys.stdout.write("| " + " | ".join(str(row[c]) for c in cols) + " |\n")
    keyed = [row for row in result if row["kind"] == "keyed"]
    cols = ["tasks", "keys", "script_calls", "cmds_per_task", "redis_us_per_task"]
    sys.stdout.write("\nkeyed enqueue_many\n| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n")
    for row in keyed:
        sys.stdout.write("| " + " | ".join(str(row[c]) for c in cols) + " |\n")
    sys.stdout.write("\nprocess inputs vs plain keyed tasks: python bench/processes.py\n")
    if os.environ.get("SCALE_JSON"):
        sys.stdout.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
