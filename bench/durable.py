"""Durable functions (docs/durable.md): the figures of issue 46.

    python bench/durable.py [--steps 200] [--short 10000] [--replay 1000] [--sleeping 1000]
    python bench/durable.py --breakdown 3000     # only: a run's fixed cost and a step's
    python bench/durable.py --wake 100000        # only: 10^5 runs asleep, 10^4 due in one second

Starts its own redis-server on a free loopback port and one in-process worker. Prints:
- a step's cost: the worker's round trips (its connections' sends, its idle loops included) for a
  run of ``--steps`` steps and one of twice as many, the difference divided by ``--steps``; and the
  wall time per step the same way (noisy on a loaded machine: say the load with it);
- the worker CPU a replay of a run with ``--replay`` completed steps costs (the function run from
  the top against its history, the events decoded as the input's read does, no I/O): what an input
  of such a run pays before it goes on;
- ``--short`` short runs (3 steps each) against as many plain tasks (one handler call each): the
  rate of each, from the worker's start to the last completion, all of them queued first, and
  what each costs whatever the load: the worker's round trips, its CPU and Redis's CPU (INFO cpu);
  the ratio in wall time and in CPU (worker + Redis); with ``--scripts``, Redis's time an item in
  each script (the SLOWLOG of every command during each drain: it costs Redis some time itself);
- ``--breakdown N`` (alone): N runs of no step, then N of 6 steps, the same way as ``--short``:
  the worker's and Redis's CPU a run with no step costs (an input's fixed cost) and, from the
  difference, a step's;
- the replay layer's own CPU (``--layer`` runs of 0, 3 and 6 steps, no Redis and no worker around
  it: ``Managed.process`` on an init input, 50 at a time, the checkpoints answered together once a
  turn of the loop): what of a run's worker CPU is the function's replay, the rest being the
  process input's path (fetch, read, commit, stream) and the checkpoints' round trips;
- the bytes a sleeping run holds beyond its history (``--sleeping`` runs asleep: every hash field,
  zset member and list item of the queue that names a run or its timer input, counted as the bytes
  of its name and value, a zset's score as 8; Redis's own overhead per entry is not counted).
- ``--results`` runs (200) waiting for a signal, a client awaiting each one's result: the reads
  of a run the waiting client sends a second while nothing happens (2 s), then, the signals sent,
  the time from each function's return to its ``client.result`` returning (p50, p99, max);
- ``--wake N`` (alone): N runs asleep, ``--due`` of them (10 000) due evenly within ``--window``
  seconds (1), the rest in an hour: the timers' lateness (due time to leaving the scheduled zset,
  Redis's clock, polled every ~2 ms: the target's figure; and, without polling, from the time of
  each timer's 'enqueued' stream entry: Redis's clock when the forward moved it) and the runs'
  (due time to their code after the sleep running, the host's clock: bounded by one worker's
  rate): p50, p99, max; and the worker's full collections in the window (their longest pause).
Issue 46's targets: a step <= 2 round trips, a replay of 1 000 steps <= 20 ms of CPU, short runs at
>= 1/3 the rate of plain tasks, <= 500 B a sleeping run beyond its history, 10^4 of 10^5 sleeping
runs due in one second woken with p99 lateness <= 50 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import IO, Any

import msgpack
import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import AsyncClient, Client, Durable, Input, Inspector, Process, ServeMux, Server, Task  # noqa: E402
from asynqpy.core.durable.function import DurableFunction  # noqa: E402
from asynqpy.core.processes.model import CHECKPOINT, Event  # noqa: E402
from asynqpy.core.spine.keys import queue_keys  # noqa: E402

Q = "db"
mux = ServeMux()
done = {"runs": 0, "tasks": 0}


def one(k: int) -> int:
    return k


@mux.durable(name="steps", queue=Q)
async def steps(ctx: Durable, n: int) -> int:
    total = 0
    for k in range(n):
        total += await ctx.step(f"s{k}", one, k)
    return total


async def add(k: int) -> int:
    return k + 1


@mux.durable(name="short", queue=Q)
async def short(ctx: Durable) -> int:
    a = await ctx.step("a", add, 0)
    b = await ctx.step("b", add, a)
    c = await ctx.step("c", add, b)
    done["runs"] += 1
    return c


@mux.durable(name="nsteps", queue=Q)
async def nsteps(ctx: Durable, n: int) -> int:
    total = 0
    for k in range(n):
        total = await ctx.step(f"s{k}", add, total)
    done["runs"] += 1
    return total


@mux.durable(name="sleeper", queue=Q)
async def sleeper(ctx: Durable) -> None:
    await ctx.sleep(3600)


ASLEEP: set[str] = set()  # runs of ``waker`` that reached their sleep (a replay adds its id again)
WOKE: dict[str, float] = {}  # run id -> the host's time its code after the sleep first ran


@mux.durable(name="waker", queue=Q)
async def waker(ctx: Durable, due_ms: int) -> None:
    ASLEEP.add(ctx.run_id)
    await ctx.sleep_until(datetime.fromtimestamp(due_ms / 1000, timezone.utc))
    WOKE.setdefault(ctx.run_id, time.time())


GATED: set[str] = set()  # runs of ``gate`` waiting for their signal
ENDED: dict[str, float] = {}  # run id -> the host's time its function returned


@mux.durable(name="gate", queue=Q)
async def gate(ctx: Durable) -> str:
    GATED.add(ctx.run_id)
    await ctx.wait_for("go")
    ENDED.setdefault(ctx.run_id, time.time())
    return ctx.run_id


@mux.handle("plain")
async def plain(task: Task) -> None:
    done["tasks"] += 1


SENT = [0]


def _count_round_trips() -> None:
    """Count the sends of every asyncio connection (the worker's: the bench's client is a sync
    one): a send is a round trip (a pipeline or a script call is one send)."""
    from redis.asyncio.connection import AbstractConnection

    send = AbstractConnection.send_packed_command
    if getattr(send, "counted", False):
        return

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        SENT[0] += 1
        await send(self, command, check_health)

    counted.counted = True  # type: ignore[attr-defined]
    AbstractConnection.send_packed_command = counted  # type: ignore[method-assign]


async def step_cost(url: str, n: int) -> None:
    _count_round_trips()
    server = Server(url, queues=[Q], shutdown_timeout=1)
    worker = asyncio.create_task(server.arun(mux))
    with Client(url) as client:
        warm = client.start(steps, 1)  # (the worker's start-up out of the count)
        await asyncio.to_thread(client.result, warm, timeout=60)
        rt = {}
        for k in (n, 2 * n):
            before, t0 = SENT[0], time.perf_counter()
            run = client.start(steps, k)
            assert await asyncio.to_thread(client.result, run, timeout=600) == sum(range(k))
            rt[k] = (SENT[0] - before, time.perf_counter() - t0)
    server.stop()
    await worker
    (a, wa), (b, wb) = rt[n], rt[2 * n]
    print(f"a step: {(b - a) / n:.2f} round trips of the worker (runs of {n} and {2 * n} steps: {a} and {b} in all), "
          f"{(wb - wa) / n * 1000:.2f} ms (load {os.getloadavg()[0]:.1f})")


async def replay_cpu(n: int) -> None:
    fn: DurableFunction = steps
    events = [{"k": "start", "a": [n + 1]}] + [{"k": "step", "i": k + 1, "n": f"s{k}", "v": k, "a": 1} for k in range(n)]
    at = datetime.now(timezone.utc)
    packed = [msgpack.packb(e) for e in events]
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()  # (the events decoded as an input's read does, then the replay)
        history = [Event(i + 1, at, "x", "call", msgpack.unpackb(b)) for i, b in enumerate(packed)]
        p = Process("r", fn.type, "running", {"status": "running"}, len(history), history)
        step = await fn.process(p, Input("timeout", None, "t", 1))
        best = min(best, time.process_time() - t0)
    assert step.events and step.events[-1]["k"] == "step"  # it replayed n steps, then ran the next one
    print(f"replay of {n} completed steps: {best * 1000:.1f} ms of CPU (target <= 20 ms)")


async def layer_cpu(n: int) -> None:
    """The replay layer's own CPU (no Redis, no worker around it): ``n`` runs of 0, 3 and 6 steps
    (``nsteps``), 50 at a time, each an init input of ``Managed.process``, its checkpoints answered
    together once a turn of the loop (as the worker's ``_Checkpoints`` batches them)."""
    queued: list[asyncio.Future[bool]] = []

    def answer() -> None:
        batch = queued[:]
        queued.clear()
        for f in batch:
            f.set_result(False)  # (written, no other input waits: the run goes on)

    async def checkpoint(events: Any) -> bool:
        loop = asyncio.get_running_loop()
        if not queued:
            loop.call_soon(answer)
        queued.append(loop.create_future())
        return await queued[-1]

    async def runs(k: int) -> float:
        gate = asyncio.Semaphore(50)

        async def one(i: int) -> Any:
            async with gate:
                token = CHECKPOINT.set(checkpoint)
                try:
                    return await nsteps.process(Process(f"r{i}", nsteps.type, "starting", {"status": "starting"}, 0),
                                                Input("init", [k], f"t{i}", 1))
                finally:
                    CHECKPOINT.reset(token)

        t0 = time.process_time()
        got = await asyncio.gather(*(one(i) for i in range(n)))
        assert got[-1].state["result"] == k, got[-1].state
        return (time.process_time() - t0) / n * 1e6

    done_before = done["runs"]
    best = {k: min([await runs(k) for _ in range(3)]) for k in (0, 3, 6)}
    done["runs"] = done_before
    print(f"the replay layer alone (no Redis; {n} runs, best of 3): a run of 0 steps {best[0]:.1f} us of CPU, "
          f"of 3 steps {best[3]:.1f} us; a step {(best[6] - best[0]) / 6:.1f} us")


def _redis_cpu(r: redis.Redis) -> float:
    """The redis-server's CPU seconds so far (user + system: INFO cpu)."""
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def _drain(url: str, key: str, n: int, r: redis.Redis) -> tuple[float, float, float, float]:
    """From a worker's start to ``n`` completions of ``key``: (seconds, the worker's round trips,
    this process's CPU seconds, i.e. the worker's: the client is idle meanwhile, Redis's CPU seconds)."""
    server = Server(url, queues=[Q], shutdown_timeout=1, concurrency=50)
    sent, cpu, rcpu = SENT[0], time.process_time(), _redis_cpu(r)
    t0 = time.perf_counter()
    worker = asyncio.create_task(server.arun(mux))
    while done[key] < n:
        await asyncio.sleep(0.01)
    took = time.perf_counter() - t0
    got = (took, SENT[0] - sent, time.process_time() - cpu, _redis_cpu(r) - rcpu)
    server.stop()
    await worker
    return got


def _scripts(r: redis.Redis, n: int, what: str) -> str:
    """Redis's time in each script (and command) an item, from the SLOWLOG of the drain (every
    command logged: ``--scripts``; a script's time includes the commands it calls, logged too)."""
    took: dict[str, int] = {}
    for e in r.slowlog_get(1_000_000):
        words = (e["command"].decode(errors="replace") if isinstance(e["command"], bytes) else str(e["command"])).split()
        if words and words[0].upper() in ("FCALL", "FCALL_RO", "EVALSHA") and len(words) > 1:
            name = words[1].removeprefix("asynqpy_").rsplit("_", 1)[0]
            took[name] = took.get(name, 0) + int(e["duration"])
    top = sorted(took.items(), key=lambda kv: -kv[1])[:6]
    return f"Redis's time a {what}, by script (SLOWLOG): " + ", ".join(f"{k} {v / n:.1f} us" for k, v in top)


async def short_runs(url: str, r: redis.Redis, n: int, scripts: bool = False) -> None:
    _count_round_trips()
    logged: list[str] = []
    if scripts:
        r.config_set("slowlog-max-len", 1_000_000)
    async with AsyncClient(url) as client:
        for k in range(0, n, 500):
            await asyncio.gather(*(client.start(short, id=f"short-{i}") for i in range(k, min(n, k + 500))))
        if scripts:
            r.slowlog_reset()
            r.config_set("slowlog-log-slower-than", 0)
        runs = await _drain(url, "runs", n, r)
        if scripts:
            r.config_set("slowlog-log-slower-than", 10_000)
            logged.append(_scripts(r, n, "run"))
        for k in range(0, n, 500):
            await asyncio.gather(*(client.enqueue("plain", i, queue=Q) for i in range(k, min(n, k + 500))))
        if scripts:
            r.slowlog_reset()
            r.config_set("slowlog-log-slower-than", 0)
        tasks = await _drain(url, "tasks", n, r)
        if scripts:
            r.config_set("slowlog-log-slower-than", 10_000)
            logged.append(_scripts(r, n, "task"))
    for line in logged:
        print(line)
    for what, (took, sent, cpu, rcpu) in (("short runs (3 steps)", runs), ("plain tasks", tasks)):
        print(f"{n} {what}: {n / took:.0f}/s; each: {sent / n:.2f} round trips of the worker, "
              f"{cpu / n * 1000:.3f} ms of worker CPU, {rcpu / n * 1000:.3f} ms of Redis CPU")
    print(f"ratio runs/plain tasks: {tasks[0] / runs[0]:.2f} in wall time (load {os.getloadavg()[0]:.1f}), "
          f"{(tasks[2] + tasks[3]) / (runs[2] + runs[3]):.2f} in CPU (worker + Redis; target >= 0.33)")


async def breakdown(url: str, r: redis.Redis, n: int) -> None:
    """A run's fixed cost (no step) and a step's (the difference with runs of 6 steps)."""
    _count_round_trips()
    cost: dict[int, tuple[float, float]] = {}
    for steps_per_run in (0, 6):
        r.flushdb()
        done["runs"] = 0
        async with AsyncClient(url) as client:
            for k in range(0, n, 500):
                await asyncio.gather(*(client.start(nsteps, steps_per_run, id=f"b{steps_per_run}-{i}")
                                       for i in range(k, min(n, k + 500))))
        took, _, cpu, rcpu = await _drain(url, "runs", n, r)
        cost[steps_per_run] = (cpu / n * 1000, rcpu / n * 1000)
        print(f"{n} runs of {steps_per_run} steps: {n / took:.0f}/s; each {cost[steps_per_run][0]:.3f} ms of worker CPU, "
              f"{cost[steps_per_run][1]:.3f} ms of Redis CPU")
    (w0, r0), (w6, r6) = cost[0], cost[6]
    print(f"a run's fixed cost: {w0:.3f} ms worker + {r0:.3f} ms Redis; a step: {(w6 - w0) / 6:.3f} ms worker + "
          f"{(r6 - r0) / 6:.3f} ms Redis (load {os.getloadavg()[0]:.1f})")


async def result_waits(url: str, n: int, idle: float) -> None:
    """``n`` runs waiting for a signal, a client waiting for each one's result (one AsyncClient):
    the runs' reads the waiting client sends in ``idle`` seconds of nothing happening, then, the
    signals sent, the time from each function's return to its ``client.result`` returning."""
    server = Server(url, queues=[Q], shutdown_timeout=1, concurrency=50)
    worker = asyncio.create_task(server.arun(mux))
    async with AsyncClient(url) as client, AsyncClient(url) as sender:
        reads = [0]
        real = client.broker.proc_read

        def counted(*args: Any, **kw: Any) -> Any:
            reads[0] += 1
            return real(*args, **kw)

        client.broker.proc_read = counted  # type: ignore[method-assign]
        runs = await asyncio.gather(*(client.start(gate, id=f"gate-{i}") for i in range(n)))
        while len(GATED) < n:
            await asyncio.sleep(0.01)
        returned: dict[str, float] = {}

        async def wait(run: Any) -> None:
            await client.result(run, timeout=120)
            returned[run.id] = time.time()

        waits = asyncio.gather(*(wait(run) for run in runs))
        await asyncio.sleep(0.5)  # (the waits begun)
        before = reads[0]
        await asyncio.sleep(idle)
        quiet = reads[0] - before
        for k in range(0, n, 50):  # (50 at a time: each signal's read takes a pooled connection)
            await asyncio.gather(*(sender.signal(run, "go", timeout=None) for run in runs[k:k + 50]))
        await waits
    server.stop()
    await worker
    lat = sorted((returned[r] - ENDED[r]) * 1000 for r in returned)
    print(f"{n} runs' results awaited: {quiet / n / idle:.2f} reads of a run a second while nothing happens; "
          f"from the function's return to client.result's: p50 {lat[len(lat) // 2]:.1f} ms, "
          f"p99 {lat[int(len(lat) * 0.99) - 1]:.1f} ms, max {lat[-1]:.1f} ms (load {os.getloadavg()[0]:.1f})")


def _bytes_naming(r: redis.Redis, base: str, names: set[bytes]) -> int:
    """The bytes of every entry of the queue's keys that names one of ``names`` (hist excluded)."""
    total = 0
    for key in r.scan_iter(match=(base + "*").encode()):
        if key.endswith(b":hist"):
            continue
        kind = r.type(key)
        if kind == b"hash":
            for f, v in r.hscan_iter(key):
                if f in names or any(n in v for n in names if len(v) < 4096):
                    total += len(f) + len(v)
        elif kind == b"zset":
            total += sum(len(m) + 8 for m, _ in r.zscan_iter(key) if any(n in m for n in names))
        elif kind == b"list":
            total += sum(len(m) for m in r.lrange(key, 0, -1) if m in names)
    return total


async def sleeping(url: str, r: redis.Redis, n: int) -> None:
    q = queue_keys(Q)
    server = Server(url, queues=[Q], shutdown_timeout=1, concurrency=50)
    worker = asyncio.create_task(server.arun(mux))
    async with AsyncClient(url) as client:
        ids = [f"sleep-{i}" for i in range(n)]
        await asyncio.gather(*(client.start(sleeper, id=i) for i in ids))
        while sum(1 for _, v in r.hscan_iter(q.proc) if b"sleeping" in v) < n:
            await asyncio.sleep(0.05)
    server.stop()
    await worker
    names = {i.encode() for i in ids}
    timers = {v[5] for v in (_record(r.hget(q.proc, i)) for i in ids) if v}
    hist = sum(len(f) + len(v) for f, v in r.hscan_iter(q.hist) if f.split(b":")[0] in names)
    held = _bytes_naming(r, q.base, names | timers)
    print(f"{n} sleeping runs: {held / n:.0f} B a run beyond its history ({hist / n:.0f} B of history; "
          f"target <= 500 B)")


async def wakeups(url: str, n: int, due: int, window: float) -> None:
    """``n`` runs asleep, ``due`` of them due within ``window`` s (evenly), the rest in an hour:
    each due run's lateness, from its due time to its code after the sleep running."""
    gc.freeze()  # (the worker freezes its heap as `asynqpy worker` does: at its start and once warm)
    server = Server(url, queues=[Q], shutdown_timeout=1, concurrency=50, freeze_heap=True)
    worker = asyncio.create_task(server.arun(mux))
    async with AsyncClient(url) as client:
        t0, far = time.monotonic(), int((time.time() + 3600) * 1000)
        for k in range(0, n - due, 500):
            await asyncio.gather(*(client.start(waker, far, id=f"far-{i}") for i in range(k, min(n - due, k + 500))))
        while len(ASLEEP) < n - due:
            await asyncio.sleep(0.05)
        rate = (n - due) / max(1e-3, time.monotonic() - t0)  # runs asleep a second (started and run)
        first_ms = int((time.time() + 3 + 2 * due / rate) * 1000)  # (all due runs asleep before the first is due)
        dues = {f"due-{i}": first_ms + int(window * 1000 * i / max(1, due - 1)) for i in range(due)}
        items = list(dues.items())
        for k in range(0, due, 500):
            await asyncio.gather(*(client.start(waker, d, id=i) for i, d in items[k:k + 500]))
        while len(ASLEEP) < n:
            await asyncio.sleep(0.05)
        asleep_at = time.time() * 1000
        with Inspector(url) as insp:  # (the stream keeps every timer's 'enqueued' of the window: moved())
            insp.set_events(Q, 1_000_000)
        pauses: list[float] = []  # the worker's full collections from here on (ms; worker/heap.py)
        gc.callbacks.append(_pauses(pauses))
        with tempfile.TemporaryFile() as out:
            watch = _watch_timers(url, first_ms, first_ms + int(window * 1000), out)
            while len(WOKE) < due and time.time() * 1000 < first_ms + window * 1000 + 60_000:
                await asyncio.sleep(0.05)
            await asyncio.to_thread(watch.wait)
            out.seek(0)
            polls = [(int(a), int(b)) for a, b in (line.split() for line in out.read().splitlines())]
    server.stop()
    await worker
    if asleep_at > first_ms:
        print(f"wake-ups: the due runs were not all asleep before the first was due ({asleep_at - first_ms:.0f} ms "
              f"after): no figure")
        return
    ordered = sorted(dues.values())
    fired, k = [], 0  # the timers leave the scheduled zset in due order (forward.lua: by score)
    for t, left in polls:
        while k < due - left:
            fired.append(t - ordered[k])
            k += 1
    late = sorted((WOKE[i] * 1000 - d) for i, d in dues.items() if i in WOKE)
    moved = [t - d for t, d in zip(_moved(url, first_ms - 1000), ordered)]
    tenths = [fired[k * len(fired) // 10:(k + 1) * len(fired) // 10] for k in range(10)]  # (in due order)
    gaps = [b[0] - a[0] for a, b in zip(polls, polls[1:])]  # (a poll's own precision)

    def p(x: list[float], q: float) -> float:
        return sorted(x)[min(len(x) - 1, int(q * len(x)))] if x else float("nan")

    print(f"{n} runs asleep, {due} due within {window:g} s (started at {rate:.0f} runs/s, load "
          f"{os.getloadavg()[0]:.1f}):\n  timers fired (left the scheduled zset, polled every ~2 ms): {len(fired)}, "
          f"lateness p50 {p(fired, 0.5):.1f} ms, p99 {p(fired, 0.99):.1f} ms, max {p(fired, 1):.1f} ms "
          f"(target p99 <= 50 ms; polls {p(gaps, 0.5):.0f} ms apart at p50, {p(gaps, 1):.0f} at most)\n  runs resumed (their code after the sleep ran; one worker process): {len(late)}, "
          f"lateness p50 {p(late, 0.5):.1f} ms, p99 {p(late, 0.99):.1f} ms, max {p(late, 1):.1f} ms")
    print("  timers by tenth of the window, p50/max ms: " + ", ".join(f"{p(t, 0.5):.0f}/{p(t, 1):.0f}" for t in tenths))
    print(f"  full collections of the worker's heap from the window's start: {len(pauses)}, longest "
          f"{max(pauses, default=0):.1f} ms (the heap frozen once warm: ServerOptions.freeze_heap)")
    print(f"  timers moved to pending (their 'enqueued' events: the stream entry's time, Redis's clock at the move, "
          f"no poll): {len(moved)}, lateness p50 {p(moved, 0.5):.1f} ms, p99 {p(moved, 0.99):.1f} ms, "
          f"max {p(moved, 1):.1f} ms")


def _pauses(out: list[float]) -> Callable[[str, dict[str, Any]], None]:
    """A gc callback appending each full collection's duration (ms) to ``out``."""
    started = [0.0]

    def callback(phase: str, info: dict[str, Any]) -> None:
        if info["generation"] == 2:
            if phase == "start":
                started[0] = time.perf_counter()
            else:
                out.append((time.perf_counter() - started[0]) * 1000)

    return callback


def _moved(url: str, since_ms: int) -> list[int]:
    """The times (ms, Redis's clock: each stream entry's id) the waker runs' timers moved to pending
    from ``since_ms`` on, in order: one per task its 'enqueued' entry names (an entry of a batch
    names many, ``ids``)."""
    r, out, start = redis.Redis.from_url(url), [], f"{since_ms}-0"
    while True:
        rows = r.xrange(queue_keys(Q).events, start, "+", count=5000)
        for eid, f in rows:
            if f.get(b"e") == b"enqueued" and f.get(b"type") == b"process:durable.waker":
                out += [int(eid.split(b"-")[0])] * len((f.get(b"ids") or f.get(b"id", b"")).split())
        if len(rows) < 5000:
            return out
        start = "(" + rows[-1][0].decode()


_WATCH = """
import sys, time, redis
url, key, lo, hi = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
r = redis.Redis.from_url(url)
while True:
    with r.pipeline(transaction=True) as pipe:
        t, left = pipe.time().zcount(key, lo, hi).execute()
    now = t[0] * 1000 + t[1] // 1000
    print(now, left)
    if left == 0 or now > hi + 60_000:
        break
    time.sleep(0.002)
"""


def _watch_timers(url: str, lo: int, hi: int, out: IO[bytes]) -> subprocess.Popen[bytes]:
    """A process of its own (not a thread sharing the worker's GIL, whose turns would stretch the
    polls and count as lateness): every ~2 ms, Redis's time and how many of the due runs' timers
    are still in the scheduled zset (scores lo..hi), until none is or a minute after ``hi``; one
    line ``ms left`` a poll in ``out`` (a file: a pipe would fill up and stop it)."""
    key = queue_keys(Q).scheduled
    return subprocess.Popen([sys.executable, "-c", _WATCH, url, key, str(lo), str(hi)],
                            stdout=out)


def _record(raw: bytes | None) -> list[bytes]:
    from asynqpy.core.workflows.records import rec_unpack
    return rec_unpack(raw) if raw else []


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--short", type=int, default=10000)
    ap.add_argument("--replay", type=int, default=1000)
    ap.add_argument("--sleeping", type=int, default=1000)
    ap.add_argument("--layer", type=int, default=3000, help="runs of the replay layer alone (no Redis)")
    ap.add_argument("--scripts", action="store_true", help="with --short: Redis's time by script (SLOWLOG)")
    ap.add_argument("--breakdown", type=int, default=0, help="only: runs of 0 and 6 steps, N of each")
    ap.add_argument("--wake", type=int, default=0, help="only: N runs asleep, --due of them due in --window s")
    ap.add_argument("--results", type=int, default=200, help="runs whose results a client awaits")
    ap.add_argument("--due", type=int, default=10_000)
    ap.add_argument("--window", type=float, default=1.0)
    a = ap.parse_args()
    if a.wake:
        proc = RedisProcess()
        try:
            asyncio.run(wakeups(proc.url, a.wake, min(a.due, a.wake), a.window))
        finally:
            proc.stop()
        return
    if a.breakdown:
        proc = RedisProcess()
        try:
            asyncio.run(breakdown(proc.url, redis.Redis.from_url(proc.url), a.breakdown))
        finally:
            proc.stop()
        return
    asyncio.run(replay_cpu(a.replay))
    asyncio.run(layer_cpu(a.layer))
    proc = RedisProcess()
    r = redis.Redis.from_url(proc.url)
    try:
        asyncio.run(step_cost(proc.url, a.steps))
        r.flushdb()
        asyncio.run(short_runs(proc.url, r, a.short, a.scripts))
        r.flushdb()
        asyncio.run(sleeping(proc.url, r, a.sleeping))
        r.flushdb()
        asyncio.run(result_waits(proc.url, a.results, 2.0))
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
