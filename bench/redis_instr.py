"""Redis's own instructions per task of a worker's drain, counted with callgrind: a count that does
not depend on the machine's load (a shared VM's CPU times vary by tens of percent between runs).

    python bench/redis_instr.py [--n 3000] [--kind drain|tenant|keyed|keyed_tenant|process|durable] [--events on|off]

Starts redis-server under ``valgrind --tool=callgrind`` on a free loopback port (valgrind must be
installed), fills one queue with N no-op tasks (``tenant``: all of one tenant, the tenant option's cost beside ``drain``; ``keyed``: over 100 keys
(``keyed_tenant``: and of one tenant); ``process``: call inputs
of 100 durable processes, started first; ``durable``: runs of a durable function of 3 steps, per run;
``bare``: a list of ids, LPUSHed), then zeroes the counts and drains it with one in-process
worker of concurrency 20 (``bare``: a loop of one BRPOP per task; the measured phase; every script
loaded before), and prints Redis's instructions per task (Ir, every
instruction redis-server ran: networking, scripts, commands), the round trips (INFO stats
total_reads_processed) and script calls per task. Under callgrind Redis is ~50× slower, so the
worker's batches fill its free slots: the regime of a queue at the limit of its Redis core
(docs/internals-costs.md, "One queue at the limit of its Redis core"). To compare two source trees,
run it with each (PYTHONPATH=<tree>) in turn; to compare FCALL (the default, Redis Functions) with
EVALSHA, run it with ``ASYNQPY_SCRIPT_CALLS=evalsha`` too (redisio/replies.py FUNCTIONS).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import redis

from asynqpy import Client, Durable, Input, Inspector, Process, ServeMux, Server, Step, Task
from asynqpy.core.processes.model import input_payload, key_of
from asynqpy.core.spine.scripts import load_scripts

Q = "ri"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mux(target: int, done: asyncio.Event) -> ServeMux:
    mux = ServeMux()
    count = [0]

    def hit() -> None:
        count[0] += 1
        if count[0] == target:
            done.set()

    @mux.handle("t")
    async def t(task: Task) -> None:
        hit()

    async def add(k: int) -> int:
        return k + 1

    @mux.durable(name="short", queue=Q)
    async def short(ctx: Durable) -> int:  # (bench/durable.py's short run: 3 steps)
        k = 0
        for name in "abc":
            k = await ctx.step(name, add, k)
        hit()
        return k

    @mux.process("acct")
    async def acct(p: Process, i: Input) -> Step:
        if i.kind == "init":
            return Step(state={"n": 0})
        hit()
        return Step(events=[i.args], state={"n": p.state["n"] + 1})

    return mux


def _task(kind: str, i: int) -> tuple[object, ...]:
    if kind in ("drain", "tenant"):
        return ("t", i)
    if kind in ("keyed", "keyed_tenant"):
        return ("t", i, {"key": f"k{i % 100}"})
    return ("process:acct", input_payload(f"p{i % 100}", "call", i), {"key": key_of(f"p{i % 100}")})


def _fill(url: str, kind: str, n: int) -> None:
    if kind == "durable":
        with Client(url) as c:
            for i in range(n):
                c.start("short", id=f"r{i}", queue=Q)
        return
    with Client(url) as c:
        for start in range(0, n, 1000):
            items = [_task(kind, i) for i in range(start, min(n, start + 1000))]
            if kind in ("tenant", "keyed_tenant"):  # (one tenant: the option's own cost, as bench/tenants.py's cycle)
                c.enqueue_many(items, queue=Q, tenant="A")  # type: ignore[arg-type]
            else:
                c.enqueue_many(items, queue=Q)  # type: ignore[arg-type]


async def _drain(url: str, n: int) -> None:
    done = asyncio.Event()
    server = Server(url, queues=[Q], concurrency=20)
    running = asyncio.create_task(server.arun(_mux(n, done)))
    await asyncio.wait_for(done.wait(), 1800)
    server.stop()
    await running


async def _settle(url: str) -> None:
    """Run the processes' init inputs (not measured)."""
    server = Server(url, queues=[Q], concurrency=20)
    running = asyncio.create_task(server.arun(_mux(-1, asyncio.Event())))
    with Inspector(url) as insp:
        for _ in range(6000):
            info = insp.queue_info(Q)
            if info.pending == 0 and info.active == 0:
                break
            await asyncio.sleep(0.05)
    server.stop()
    await running


def _instructions(out: Path) -> int:
    """The Ir total of the callgrind dumps written since the counts were zeroed."""
    total = 0
    for f in out.parent.glob(out.name + "*"):
        m = re.search(r"^summary:\s+(\d+)", f.read_text(errors="replace"), re.MULTILINE)
        if m:
            total = max(total, int(m.group(1)))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--kind", choices=("drain", "tenant", "keyed", "keyed_tenant", "process", "durable", "bare"), default="drain")
    ap.add_argument("--events", choices=("on", "off"), default="on")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("asynqpy").setLevel(logging.CRITICAL)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("valgrind (callgrind) is not installed")
    port = _free_port()
    tmp = Path(tempfile.mkdtemp(prefix="redis-instr-"))
    out = tmp / "callgrind.out"
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--collect-atstart=yes",
                             "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp), "--lua-time-limit", "0"],  # (slow scripts: no BUSY)
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    r = redis.Redis.from_url(url, socket_timeout=300)  # (Redis under callgrind on a loaded machine: slow)
    try:
        for _ in range(600):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        if args.events == "off":
            with Inspector(url) as insp:
                insp.set_events(Q, 0)
        if args.kind == "process":
            with Client(url) as c:
                for p in range(100):
                    c.start_process("acct", f"p{p}", None, queue=Q)
            asyncio.run(_settle(url))
        if args.kind == "bare":  # the bare loop: LPUSH a task, one BRPOP per task to drain
            for start in range(0, args.n, 1000):
                r.lpush("bare", *range(start, min(args.n, start + 1000)))
        else:
            _fill(url, args.kind, args.n)
        for script in load_scripts().values():  # (loaded before: compiling them is not a task's cost)
            r.script_load(script.source)
            r.execute_command("FUNCTION", "LOAD", "REPLACE", script.library)  # (the libraries: FCALL)
        r.config_resetstat()
        subprocess.run(["callgrind_control", "--zero", str(proc.pid)], check=True, capture_output=True)
        if args.kind == "bare":
            got = 0
            while got < args.n:
                got += r.brpop(["bare"], 1) is not None
        else:
            asyncio.run(_drain(url, args.n))
        stats = r.info("commandstats")
        reads = int(r.info("stats")["total_reads_processed"])
        subprocess.run(["callgrind_control", "--dump", str(proc.pid)], check=True, capture_output=True)
        scripts = sum(v["calls"] for k, v in stats.items() if k in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall"))
        ir = _instructions(out)
        print(f"{args.kind} events {args.events}: {ir / args.n / 1000:,.1f} k instructions per task, "
              f"{reads / args.n:.3f} round trips per task, {scripts / args.n:.3f} script calls per task "
              f"(n={args.n}, one worker of concurrency 20)")
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
