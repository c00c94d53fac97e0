"""Redis's own cost per task, from INFO commandstats and INFO cpu (after CONFIG RESETSTAT), with
the queue's lifecycle event stream on (the default) and off, for each kind of work:

    enqueue      Client.enqueue, one call per task
    batch        Client.enqueue_many, 1 000 tasks a call
    drain        dequeue + done of no-op tasks (one in-process worker, concurrency 20)
    retry        each task fails once (retry_delay 0), then succeeds: dequeue, retry, forward,
                 dequeue, done
    keyed        tasks with key= (100 keys): enqueue_keyed, dequeue, done with the key's release
    workflow     a parent and a child waiting on it (after=): the parent's end tells the child
    process      durable process inputs (100 processes): dequeue (with each input's process read,
                 lua/includes/dq_procs), proc_commit

and beside them a bare loop (a list of task ids: one LPUSH a task to enqueue, a worker loop of
BRPOP to drain), measured the same way. Columns: trips/task (the round trips: Redis's read events,
INFO stats total_reads_processed, one per request or pipeline a client sends), scripts (script
calls a task), cmds/task (every command Redis ran, script-internal ones included), script µs/task
(commandstats usec of FCALL/EVALSHA/EVAL: the scripts, their inner commands included), cpu µs/task (INFO
cpu: user + system time of redis-server over the measured phase, networking included: what bounds
one queue on one core) and the ceiling = 10^6 / cpu µs: the
tasks/s one Redis core could carry for this work alone (drain = the steady state of a queue).

    python bench/redis_cost.py [--quick] [--n N] [--reps R] [--only drain,keyed]

Starts its own redis-server on a free loopback port (no persistence).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Input, Inspector, Process, ServeMux, Server, Step, Task  # noqa: E402
from asynqpy.core.processes.model import input_payload, key_of  # noqa: E402

log = logging.getLogger("bench.redis_cost")
Q = "rc"


class Meter:
    """Redis's counters around a measured phase: CONFIG RESETSTAT and the cpu time at start,
    the commandstats and the cpu time at stop."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self.cpu0 = 0.0

    def _cpu(self) -> float:
        c = self.r.info("cpu")
        return float(c["used_cpu_user"]) + float(c["used_cpu_sys"])

    def _reads(self) -> int:
        return int(self.r.info("stats").get("total_reads_processed", 0))

    def start(self) -> None:
        self.r.config_resetstat()
        self.cpu0 = self._cpu()
        self.reads0 = self._reads()

    def stop(self, n: int) -> dict[str, float]:
        cpu = self._cpu() - self.cpu0
        stats = self.r.info("commandstats")
        calls = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_info", "cmdstat_config"))
        script = sum(v["usec"] for k, v in stats.items() if k in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval"))
        xadd = stats.get("cmdstat_xadd", {}).get("calls", 0)
        evals = sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval"))
        reads = self._reads() - self.reads0 - 2  # (the INFO calls of this meter)
        return {"cmds": calls / n, "script_us": script / n, "cpu_us": cpu * 1e6 / n, "xadd": xadd / n,
                "scripts": evals / n, "trips": reads / n}


def _mux(target: int, done: asyncio.Event, fail_first: bool = False) -> ServeMux:
    mux = ServeMux()
    count = [0]

    def hit() -> None:
        count[0] += 1
        if count[0] == target:
            done.set()

    @mux.handle("t")
    async def t(task: Task) -> None:
        if fail_first and task.retry_count == 0:
            raise RuntimeError("once")
        hit()

    @mux.process("acct")
    async def acct(p: Process, i: Input) -> Step:
        if i.kind == "init":
            return Step(state={"n": 0})
        hit()
        return Step(events=[i.args], state={"n": p.state["n"] + 1})

    return mux


async def _drain(url: str, meter: Meter, n: int, fill: Callable[[], None], fail_first: bool = False) -> dict[str, float]:
    """Fill the queue (not measured), then drain it with one in-process worker (measured)."""
    fill()
    done = asyncio.Event()
    meter.start()
    server = Server(url, queues=[Q], concurrency=20)
    running = asyncio.create_task(server.arun(_mux(n, done, fail_first)))
    await asyncio.wait_for(done.wait(), 600)
    server.stop()
    await running
    return meter.stop(n)


async def _settle(url: str) -> None:
    """Run the queue's tasks until none is pending or active (not measured)."""
    server = Server(url, queues=[Q], concurrency=20)
    running = asyncio.create_task(server.arun(_mux(-1, asyncio.Event())))
    with Inspector(url) as insp:
        for _ in range(1200):
            info = insp.queue_info(Q)
            if info.pending == 0 and info.active == 0:
                break
            await asyncio.sleep(0.05)
    server.stop()
    await running


def workload(name: str, url: str, n: int, events: bool) -> dict[str, float]:
    r = redis.Redis.from_url(url)
    r.flushall()
    if not events:
        with Inspector(url) as insp:
            insp.set_events(Q, 0)
    meter = Meter(r)
    if name == "enqueue":
        with Client(url) as c:
            c.enqueue("t", 0, queue=Q)  # scripts loaded, connection made
            meter.start()
            for i in range(n):
                c.enqueue("t", i, queue=Q)
            return meter.stop(n)
    if name == "batch":
        with Client(url) as c:
            c.enqueue("t", 0, queue=Q)
            meter.start()
            for start in range(0, n, 1000):
                c.enqueue_many([("t", i) for i in range(start, min(n, start + 1000))], queue=Q)
            return meter.stop(n)

    def fill_plain() -> None:
        with Client(url) as c:
            for start in range(0, n, 1000):
                c.enqueue_many([("t", i) for i in range(start, min(n, start + 1000))], queue=Q)

    if name == "drain":
        return asyncio.run(_drain(url, meter, n, fill_plain))
    if name == "retry":
        def fill_retry() -> None:
            with Client(url) as c:
                for start in range(0, n, 1000):
                    c.enqueue_many([("t", i, {"retry_delay": 0}) for i in range(start, min(n, start + 1000))],
                                   queue=Q)
        return asyncio.run(_drain(url, meter, n, fill_retry, fail_first=True))
    if name == "keyed":
        def fill_keyed() -> None:
            with Client(url) as c:
                for start in range(0, n, 1000):
                    c.enqueue_many([("t", i, {"key": f"k{i % 100}"}) for i in range(start, min(n, start + 1000))],
                                   queue=Q)
        return asyncio.run(_drain(url, meter, n, fill_keyed))
    if name == "workflow":  # n/2 parents, a child each: per task = per parent or child
        def fill_flow() -> None:
            with Client(url) as c:
                for i in range(n // 2):
                    p = c.enqueue("t", i, queue=Q)
                    c.enqueue("t", i, queue=Q, after=[p])
        return asyncio.run(_drain(url, meter, n // 2 * 2, fill_flow))
    if name == "process":  # inputs of 100 processes (their inits run first, not measured)
        procs = 100
        with Client(url) as c:
            for i in range(procs):
                c.start_process("acct", f"a{i}", queue=Q)
        asyncio.run(_settle(url))

        def fill_inputs() -> None:
            with Client(url) as c:
                for start in range(0, n, 1000):
                    c.enqueue_many([("process:acct", input_payload(f"a{i % procs}", "call", i),
                                     {"key": key_of(f"a{i % procs}")}) for i in range(start, min(n, start + 1000))],
                                   queue=Q)
        return asyncio.run(_drain(url, meter, n, fill_inputs))
    raise ValueError(name)


def bare(url: str, n: int, kind: str) -> dict[str, float]:
    """The bare loop: ``enqueue`` = one LPUSH of a task's id per task (measured); ``drain`` = a
    list filled with pipelined LPUSHes (not measured), then a worker loop of BRPOP (measured)."""
    r = redis.Redis.from_url(url)
    r.flushall()
    meter = Meter(r)
    if kind == "enqueue":
        meter.start()
        for i in range(n):
            r.lpush("bare", i)
        return meter.stop(n)
    for start in range(0, n, 1000):
        r.lpush("bare", *range(start, min(n, start + 1000)))
    meter.start()
    got = 0
    while got < n:
        if r.brpop(["bare"], 1) is not None:
            got += 1
    return meter.stop(n)


KINDS = ("enqueue", "batch", "drain", "retry", "keyed", "workflow", "process")


def _best(runs: list[dict[str, float]]) -> dict[str, float]:
    """The least of each figure over the runs (a shared machine only ever adds time)."""
    return {k: min(r[k] for r in runs) for k in runs[0]}


def _row(work: str, events: str, m: dict[str, float]) -> dict[str, object]:
    return {"work": work, "events": events, **{k: round(v, 2) for k, v in m.items()},
            "ceiling": round(1e6 / m["cpu_us"]) if m["cpu_us"] else 0}


def rows(url: str, quick: bool, n: int = 0, reps: int = 0, kinds: tuple[str, ...] = KINDS) -> list[dict[str, object]]:
    """One row per kind of work and events setting (on and off measured alternately, ``reps``
    times, the least kept), and the bare loop's (its enqueue and its drain)."""
    n = n or (2000 if quick else 5000)
    reps = reps or (1 if quick else 3)
    out: list[dict[str, object]] = []
    for kind in kinds:
        got: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for _ in range(reps):
            for events in (True, False):
                got[events].append(workload(kind, url, n, events))
        for events in (True, False):
            out.append(_row(kind, "on" if events else "off", _best(got[events])))
            log.info("%s", out[-1])
    for kind in ("enqueue", "drain"):
        out.append(_row(f"bare ({kind})", "-", _best([bare(url, n, kind) for _ in range(reps)])))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="2 000 tasks a row (default 10 000)")
    ap.add_argument("--n", type=int, default=0, help="tasks a row (default 5 000, --quick 2 000)")
    ap.add_argument("--reps", type=int, default=0, help="runs of each row, the least kept (default 3, --quick 1)")
    ap.add_argument("--only", default="", help="comma-separated kinds of work (default all)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("asynqpy").setLevel(logging.CRITICAL)  # (the retry row's handler errors)
    server = RedisProcess()
    try:
        table = rows(server.url, args.quick, args.n, args.reps,
                     tuple(args.only.split(",")) if args.only else KINDS)
    finally:
        server.stop()
    head = (f"{'work':<16}{'events':>7}{'trips/task':>11}{'scripts':>9}{'cmds/task':>11}{'xadd/task':>11}"
            f"{'script µs':>11}{'cpu µs':>9}{'ceiling/s':>11}")
    sys.stdout.write(head + "\n")
    for row in table:
        sys.stdout.write(f"{row['work']!s:<16}{row['events']!s:>7}{row['trips']:>11.2f}{row['scripts']:>9.2f}"
                         f"{row['cmds']:>11.2f}{row['xadd']:>11.2f}"
                         f"{row['script_us']:>11.1f}{row['cpu_us']:>9.1f}{row['ceiling']:>11,}\n")


if __name__ == "__main__":
    main()
