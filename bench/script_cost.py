"""Where Redis's time per task of a drained queue goes: the dequeue script, the done script, and
the rest (networking, command dispatch), at batch sizes 1, 5, 20 and 100, with the queue's event
stream on and off; inside each script, the µs per task of each command it runs and of the Lua
around them; and the batch sizes a worker actually sends when its queue is backlogged.

    python bench/script_cost.py [--n N] [--reps R] [--batches 1,5,20,100] [--procs K]

Phases (each measured alone: CONFIG RESETSTAT, then INFO commandstats and INFO cpu at its end):
the queue is filled with N no-op tasks (not measured); ``dequeue`` takes them all, B per call
(Broker.dequeue, one synchronous client: a round trip per call); ``done`` acknowledges them, B per
call (Broker.done_many, as the worker's writer does), while IN_FLIGHT other leases are held (the
lease zset of a queue at saturation is a skiplist, not a small listpack). Columns, µs per task: ``script`` (EVALSHA
usec: the script, its inner commands included), ``inner`` (the commands the script ran:
commandstats of everything else), ``lua`` = script - inner (the interpreter: argument handling,
string copies, tables, function calls), ``cpu`` (INFO cpu of the phase: user + system time of
redis-server, networking included) and ``rest`` = cpu - script (reading, parsing and answering
the calls: what a round trip costs). The least of R runs is kept (a shared machine only adds).

The second table splits the scripts' inner commands per task at one batch size. The third runs a
real worker (``--procs`` server processes of concurrency 20, a backlogged queue of no-op tasks)
and reports how many tasks its dequeue and done calls carried (mean and distribution).

Starts its own redis-server on a free loopback port (no persistence). Set ASYNQPY_LUA_DIR to a
scratch copy of lua/ to time a variant of the scripts (never commit such a copy).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import multiprocessing as mp
import secrets
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector, ServeMux, Server, Task  # noqa: E402
from asynqpy.core import broker as broker_mod  # noqa: E402
from asynqpy.core import codec  # noqa: E402
from asynqpy.core.spine.broker import Broker, Call, Done  # noqa: E402
from asynqpy.redisio.executor import SyncExecutor  # noqa: E402

log = logging.getLogger("bench.script_cost")
Q = "sc"
LEASE_MS = 60000
SKIP = ("cmdstat_info", "cmdstat_config")
IN_FLIGHT = 240  # leases held by other workers during the phases (the lease zset's size at saturation)


class Phase:
    """Redis's counters over one phase: commandstats (calls, usec per command) and cpu time."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.cpu0 = 0.0

    def _cpu(self) -> float:
        c = self.r.info("cpu")
        return float(c["used_cpu_user"]) + float(c["used_cpu_sys"])

    def start(self) -> None:
        self.r.config_resetstat()
        self.cpu0 = self._cpu()

    def stop(self, n: int) -> dict[str, float]:
        """Per task: script, inner, lua, cpu, rest (µs), calls (script calls), and 'cmd:<name>' µs."""
        cpu = (self._cpu() - self.cpu0) * 1e6
        stats = self.r.info("commandstats")
        script = sum(v["usec"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))
        calls = sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval"))
        inner = {k[len("cmdstat_"):]: v for k, v in stats.items()
                 if not k.startswith(SKIP) and k not in ("cmdstat_evalsha", "cmdstat_eval")}
        inner_us = sum(v["usec"] for v in inner.values())
        out = {"script": script / n, "inner": inner_us / n, "lua": (script - inner_us) / n, "cpu": cpu / n,
               "rest": (cpu - script) / n, "calls": calls / n}
        for name, v in inner.items():
            out["cmd:" + name] = v["usec"] / n
            out["n:" + name] = v["calls"] / n
        return out


def _fill(url: str, n: int, events: bool) -> None:
    r = redis.Redis.from_url(url)
    r.flushall()
    if not events:
        with Inspector(url) as insp:
            insp.set_events(Q, 0)
    with Client(url) as c:
        for start in range(0, n, 1000):
            c.enqueue_many([("t", i) for i in range(start, min(n, start + 1000))], queue=Q)


def phases(url: str, n: int, batch: int, events: bool) -> tuple[dict[str, float], dict[str, float]]:
    """Dequeue then acknowledge ``n`` tasks, ``batch`` per call; each phase's figures."""
    _fill(url, n, events)
    r = redis.Redis.from_url(url)
    ex = SyncExecutor(redis.Redis.from_url(url))
    b = Broker()
    ph = Phase(r)
    ex.run(b.dequeue(Q, 0, LEASE_MS, "00000000"))  # (scripts loaded, connection made: not measured)
    # the other workers' leases: a queue at saturation holds a few hundred (12 processes of 20)
    r.zadd(f"asynqpy:{{{Q}}}:lease", {f"other-{i}": 9e12 for i in range(IN_FLIGHT)})
    ph.start()
    taken: list[tuple[str, str, bytes]] = []
    while True:
        token = secrets.token_hex(4)
        got = ex.run(b.dequeue(Q, batch, LEASE_MS, token))
        taken += [(i, token, m) for i, m in got.tasks]
        if got.remaining == 0 or not got.tasks:
            break
    deq = ph.stop(len(taken))
    items = [Done(i, t, codec.decode(m), progressed=False) for i, t, m in taken]
    ex.run(b.done_many(Q, items[:1]))  # (loaded)
    items = items[1:]
    ph.start()
    for i in range(0, len(items), batch):
        ex.run(b.done_many(Q, items[i:i + batch]))
    done = ph.stop(len(items))
    ex.close()
    return deq, done


def _least(runs: list[dict[str, float]]) -> dict[str, float]:
    keys = set().union(*runs)
    return {k: min(r.get(k, 0.0) for r in runs) for k in keys}


def profile(url: str, n: int, reps: int, batches: list[int], events_on: tuple[bool, ...] = (True, False)
            ) -> list[dict[str, Any]]:
    """One row per (events, batch): the dequeue's and the done's figures per task."""
    out: list[dict[str, Any]] = []
    for events in events_on:
        for batch in batches:
            got = [phases(url, n, batch, events) for _ in range(reps)]
            out.append({"events": events, "batch": batch, "deq": _least([g[0] for g in got]),
                        "done": _least([g[1] for g in got])})
    return out


# -- the batch sizes a real worker sends -------------------------------------------------------------------

def _record(sizes: Any) -> None:
    """Wrap Broker.dequeue and Broker.done_many so that each call's number of tasks is recorded."""
    deq, done_many = Broker.dequeue, Broker.done_many

    def dequeue(self: Broker, queue: str, count: int, *a: Any, **k: Any) -> Call[Any]:
        c = deq(self, queue, count, *a, **k)

        def parse(reply: Any) -> Any:
            res = c.parse(reply)
            if res.tasks:
                sizes["dequeue"][len(res.tasks)] += 1
            else:
                sizes["empty"][count] += 1
            return res
        return Call(parse, c.script, c.keys, c.args)

    def many(self: Broker, queue: str, items: Any) -> Call[Any]:
        sizes["done"][len(items)] += 1
        return done_many(self, queue, items)

    broker_mod.Broker.dequeue = dequeue  # type: ignore[method-assign]
    broker_mod.Broker.done_many = many  # type: ignore[method-assign]


def _serve(url: str, n: int, out: Any) -> None:
    """One server process (concurrency 20): serves until the queue is drained; puts its counters."""
    sizes: dict[str, Counter[int]] = {"dequeue": Counter(), "done": Counter(), "empty": Counter()}
    _record(sizes)
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        return None

    async def run() -> None:
        server = Server(url, queues=[Q], concurrency=20)
        running = asyncio.create_task(server.arun(mux))
        r = redis.asyncio.Redis.from_url(url)
        while int(await r.get("sc:started") or 0) < 1 or await r.llen(f"asynqpy:{{{Q}}}:pending") > 0:
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)
        server.stop()
        await running
        await r.aclose()

    asyncio.run(run())
    out.put({k: dict(v) for k, v in sizes.items()})


def worker_batches(url: str, n: int, procs: int) -> dict[str, Counter[int]]:
    """Fill the queue with ``n`` tasks, drain it with ``procs`` server processes."""
    _fill(url, n, True)
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    ps = [ctx.Process(target=_serve, args=(url, n, out)) for _ in range(procs)]
    for p in ps:
        p.start()
    redis.Redis.from_url(url).set("sc:started", 1)
    total: dict[str, Counter[int]] = {"dequeue": Counter(), "done": Counter(), "empty": Counter()}
    for _ in ps:
        for k, v in out.get(timeout=600).items():
            total[k].update(v)
    for p in ps:
        p.join()
    return total


def _dist(c: Counter[int]) -> str:
    calls = sum(c.values())
    tasks = sum(k * v for k, v in c.items())
    if not calls:
        return "-"
    top = ", ".join(f"{k}:{v}" for k, v in sorted(c.items(), key=lambda kv: -kv[1])[:6])
    return f"{calls} calls, {tasks / calls:.1f} tasks/call (size:calls {top})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=10000, help="tasks a run (default 10 000)")
    ap.add_argument("--reps", type=int, default=2, help="runs of each row, the least kept (default 2)")
    ap.add_argument("--batches", default="1,5,20,100", help="batch sizes (default 1,5,20,100)")
    ap.add_argument("--inner", type=int, default=20, help="the batch size of the inner-commands table")
    ap.add_argument("--procs", type=int, default=2, help="server processes of the worker-batch run (0 = skip)")
    ap.add_argument("--events", choices=("both", "on", "off"), default="both", help="event stream settings measured")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("asynqpy").setLevel(logging.CRITICAL)
    batches = [int(b) for b in args.batches.split(",")]
    server = RedisProcess()
    w = sys.stdout.write
    try:
        events = {"both": (True, False), "on": (True,), "off": (False,)}[args.events]
        table = profile(server.url, args.n, args.reps, sorted(set(batches) | {args.inner}), events)
        w("Redis µs per task (script = lua + inner commands; rest = cpu - script: networking, dispatch)\n")
        w(f"{'events':>6}{'batch':>6} | {'deq script':>10}{'lua':>6}{'inner':>6}{'cpu':>6} |"
          f" {'done script':>11}{'lua':>6}{'inner':>6}{'cpu':>6} | {'scripts':>7}{'rest':>6}{'cpu':>6}\n")
        for row in table:
            if row["batch"] not in batches:
                continue
            d, e = row["deq"], row["done"]
            w(f"{'on' if row['events'] else 'off':>6}{row['batch']:>6} | {d['script']:>10.2f}{d['lua']:>6.2f}"
              f"{d['inner']:>6.2f}{d['cpu']:>6.2f} | {e['script']:>11.2f}{e['lua']:>6.2f}{e['inner']:>6.2f}"
              f"{e['cpu']:>6.2f} | {d['script'] + e['script']:>7.2f}{d['rest'] + e['rest']:>6.2f}"
              f"{d['cpu'] + e['cpu']:>6.2f}\n")
        for row in table:
            if row["batch"] != args.inner:
                continue
            w(f"\ninner commands at batch {args.inner}, events {'on' if row['events'] else 'off'}:"
              " µs per task (calls per task)\n")
            for phase in ("deq", "done"):
                m = row[phase]
                cmds = sorted((k[4:] for k in m if k.startswith("cmd:")), key=lambda c: -m["cmd:" + c])
                w(f"  {phase:<5} lua {m['lua']:.2f}; " + ", ".join(
                    f"{c} {m['cmd:' + c]:.2f} ({m['n:' + c]:.2f})" for c in cmds if m["n:" + c] > 0) + "\n")
        if args.procs:
            got = worker_batches(server.url, args.n * 2, args.procs)
            w(f"\nworker batches ({args.procs} server process(es) of concurrency 20, backlogged queue):\n")
            w(f"  dequeue: {_dist(got['dequeue'])}\n  done:    {_dist(got['done'])}\n"
              f"  empty dequeues: {sum(got['empty'].values())}\n")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
