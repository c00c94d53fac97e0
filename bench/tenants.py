"""Many tenants on one queue (issue 32): fairness across backlogged tenants, a quiet tenant's wait
behind a noisy one, and the queue's throughput. Stage 0 of the design (docs/internals-tenants.md,
"Tenants and queues by pattern"): it measures the queue as it is, where tasks are handed out in
FIFO order whoever sent them; once ``enqueue(..., tenant=)`` exists it passes it, and the same
figures show the fair dispatch.

    python bench/tenants.py [--quick] [--rate | --quiet | --dispatch | --limit]

Starts its own redis-server on a free loopback port; one in-process server (concurrency 10).

- ``fairness``: T tenants each enqueue a burst of M tasks, one tenant after the other (as a
  tenant's batch job would); handlers sleep 1 ms. Over the first ``window`` seconds of the drain,
  tasks done per tenant; Jain's index (Σx)² / (T·Σx²) (1.0 = equal shares; the target is ≥ 0.98)
  and how many tenants got any task at all.
- ``quiet``: tenant A has N tasks queued (handlers sleep 5 ms, every slot busy); tenant B
  enqueues one task: B's wait until its handler starts, in task durations (the target is ≤ 2),
  and how many of A's tasks started between B's enqueue and B's start (the dispatch's part: B is
  the next pick, so at most the batch of a dequeue already under way, 10). ``--quiet`` adds the
  worker's cycle with 5 ms tasks: the time between two batches of starts, with and without tenants.
  ``--quiet`` runs it alone at 5 ms and at 20 ms: the worker's fixed cost per cycle (the done
  write, the next dequeue's round trip, the loop's turns: a few ms on a 2-core VM) weighs four
  times more against 5 ms tasks. Its tail: ``behind_a_batch``, the trials where a dequeue of A's
  was in flight as B's enqueue landed (B waits that batch out) and their waits;
  ``over_2_durations``, the trials over the target and how long B's own enqueue took in each (a
  stall of the machine shows in it too); ``idle ping``: a PING after 5 ms asleep, this machine's
  wake-up from idle, which each 5 ms cycle meets.
- ``throughput``: tasks/s of a drain of plain no-op tasks, with the tenant option and without
  (the target is ≥ 0.9×).
- ``weights``: two backlogged tenants of weights 3 and 1: the ratio of tasks done (target 3 ± 5 %).
- ``tenant rate``: a backlogged tenant with a rate of 50/s beside one without, two servers: its
  tasks started a second (target 50 ± 2) and the other's. ``python bench/tenants.py --rate``
  runs this row alone.
- ``dispatch``: the dequeue script alone at 10, 1 000 and 10⁵ tenants: Redis commands and µs per
  task, dequeues per second (the target: flat in tenants, within 10 %). ``--dispatch``: 10 and
  10⁵ tenants call by call in turns in one Redis (the machine's drift cancels), then three rounds
  of separate runs (each tenant count with Redis's caches to itself), the best and the median.
- ``tenant limit`` (``--limit``): a tenant limited to 3 tasks at once beside an unlimited one, 4
  worker processes of concurrency 10, 20 ms tasks: the most of its tasks ever running at once, as
  its handlers count them (the target: never above 3), and both tenants' tasks a second.
- ``memory``: bytes per tenant with work, and the tenant keys left once drained (target: none).

``rows(url, quick)`` is what ``bench/scale.py`` could call; ``main()`` prints a table.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE.parent))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, ServeMux, Server, Task  # noqa: E402
from asynqpy.core.model.errors import InvalidArgumentError  # noqa: E402

Q = "tn"
CONCURRENCY = 10


def tenant_option(url: str) -> bool:
    """Whether this asynqpy has ``tenant=`` (else the figures are the FIFO baseline)."""
    with Client(url) as c:
        try:
            c.enqueue("probe", None, queue="tn-probe", tenant="x")
        except InvalidArgumentError:
            return False
    return True


def _enqueue(c: Client, tenant: str, payloads: list[Any], tenants: bool) -> None:
    items = [("t", {"tenant": tenant, "i": p}) for p in payloads]
    for start in range(0, len(items), 1000):
        if tenants:
            c.enqueue_many(items[start:start + 1000], queue=Q, tenant=tenant)
        else:
            c.enqueue_many(items[start:start + 1000], queue=Q)


async def _drain(url: str, mux: ServeMux, done: asyncio.Event, timeout: float = 120) -> None:
    server = Server(url, queues=[Q], concurrency=CONCURRENCY)
    running = asyncio.create_task(server.arun(mux))
    try:
        await asyncio.wait_for(done.wait(), timeout)
    finally:
        server.stop()
        await running


def _done_per_tenant(url: str, window: float) -> dict[str, int]:
    """Drain the queue (handlers sleep 1 ms): the tasks done per tenant over the first ``window`` s."""
    counts: dict[str, int] = {}
    mux = ServeMux()
    done = asyncio.Event()
    start: list[float] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        if not start:
            start.append(time.monotonic())
        if time.monotonic() - start[0] <= window:
            counts[task.payload["tenant"]] = counts.get(task.payload["tenant"], 0) + 1
        else:
            done.set()
        await asyncio.sleep(0.001)

    asyncio.run(_drain(url, mux, done))
    return counts


def fairness(url: str, tenants: int, per_tenant: int, window: float, with_tenant: bool) -> dict[str, object]:
    import redis

    redis.Redis.from_url(url).flushall()
    with Client(url) as c:
        for t in range(tenants):
            _enqueue(c, f"t{t}", list(range(per_tenant)), with_tenant)
    counts = _done_per_tenant(url, window)
    xs = [counts.get(f"t{i}", 0) for i in range(tenants)]
    total = sum(xs)
    jain = total * total / (tenants * sum(x * x for x in xs)) if total else 0.0
    return {"figure": "fairness", "tenants": tenants, "window_s": window, "done": total,
            "tenants_served": sum(1 for x in xs if x), "jain": round(jain, 3)}


def weights(url: str, per_tenant: int, window: float) -> dict[str, object]:
    """Two backlogged tenants of weights 3 and 1: the ratio of their tasks done over the window
    (the target: 3 within 5 %). Both must stay backlogged for the whole window (at ~4 000 tasks/s
    on this VM the heavier one takes 30 000 in 10 s): once one runs dry the other runs alone."""
    import redis

    from asynqpy import Inspector

    redis.Redis.from_url(url).flushall()
    with Client(url) as c:
        for t in ("w3", "w1"):
            _enqueue(c, t, list(range(per_tenant)), True)
    with Inspector(url) as insp:
        insp.set_tenant(Q, "w3", weight=3)
    counts = _done_per_tenant(url, window)
    ratio = counts.get("w3", 0) / max(counts.get("w1", 0), 1)
    return {"figure": "weights", "weights": "3:1", "window_s": window, "done": sum(counts.values()),
            "ratio": round(ratio, 3), "off_by_pct": round(abs(ratio - 3) / 3 * 100, 2)}


def rate(url: str, per_s: float, window: float) -> dict[str, object]:
    """A tenant of rate ``per_s`` (burst 1) backlogged beside one without a rate, served by two
    servers (20 slots): its tasks started a second over ``window`` (target: 50 +- 2 at 50/s), and
    the other tenant's, which takes the turns the rate leaves."""
    import redis

    from asynqpy import Inspector

    redis.Redis.from_url(url).flushall()
    with Client(url) as c:
        _enqueue(c, "rated", list(range(int(per_s * window * 3))), True)
        _enqueue(c, "free", list(range(20_000)), True)
    with Inspector(url) as insp:
        insp.set_tenant(Q, "rated", rate=per_s)
    starts: dict[str, list[float]] = {"rated": [], "free": []}
    mux = ServeMux()
    done = asyncio.Event()

    @mux.handle("t")
    async def t(task: Task) -> None:
        now = time.monotonic()
        starts[task.payload["tenant"]].append(now)
        if now - starts["rated"][0] > window if starts["rated"] else False:
            done.set()
        await asyncio.sleep(0.005)

    async def main() -> None:
        servers = [Server(url, queues=[Q], concurrency=CONCURRENCY) for _ in range(2)]
        running = [asyncio.create_task(s.arun(mux)) for s in servers]
        try:
            await asyncio.wait_for(done.wait(), window + 30)
        finally:
            for s in servers:
                s.stop()
            await asyncio.gather(*running)

    asyncio.run(main())
    t0 = starts["rated"][0]
    rated = [x for x in starts["rated"] if x - t0 <= window]
    free = [x for x in starts["free"] if t0 <= x <= t0 + window]
    return {"figure": "tenant rate", "rate_set": f"{per_s:g}/s", "window_s": window,
            "rated_per_s": round((len(rated) - 1) / window, 2), "other_per_s": round(len(free) / window, 1)}


def _quiet_trial(url: str, noisy: int, duration: float, with_tenant: bool) -> tuple[float, int, float]:
    """One trial: B's wait (s) behind A's ``noisy`` queued tasks, how many of A's tasks started
    between B's enqueue and B's start (B is the next pick: at most the batch of a dequeue already
    under way when B's enqueue landed), and how long B's enqueue call took (s)."""
    import redis

    redis.Redis.from_url(url).flushall()
    with Client(url) as c:
        _enqueue(c, "A", list(range(noisy)), with_tenant)
    mux = ServeMux()
    done = asyncio.Event()
    sent: list[float] = []
    waits: list[float] = []

    ahead = [0]

    @mux.handle("t")
    async def t(task: Task) -> None:
        if task.payload["tenant"] == "B":
            waits.append(time.monotonic() - sent[0])
            done.set()
        elif sent and not done.is_set():
            ahead[0] += 1
        await asyncio.sleep(duration)

    async def main() -> None:
        server = Server(url, queues=[Q], concurrency=CONCURRENCY)
        running = asyncio.create_task(server.arun(mux))
        with Client(url) as c:
            c.enqueue("warm", None, queue="tn-warm")  # (connected, scripts loaded: not part of B's wait)
            await asyncio.sleep(0.5)  # every slot busy with A's tasks
            sent.append(time.monotonic())
            # (on the server's own loop, one round trip: from a thread it measured worse, the
            # thread and the loop taking turns at the GIL on this 2-core VM)
            _enqueue(c, "B", [0], with_tenant)
            sent.append(time.monotonic())
        try:
            await asyncio.wait_for(done.wait(), 300)
        finally:
            server.stop()
            await running

    asyncio.run(main())
    return waits[0], ahead[0], sent[1] - sent[0]


def cycle(url: str, with_tenant: bool, n: int = 3000, duration: float = 0.005) -> dict[str, object]:
    """The worker's own cycle, which sets the quiet tenant's wait with short tasks: one server of
    concurrency 10 running ``n`` tasks of ``duration`` (one tenant, or none): tasks a second and
    the time between two batches of starts (the slots free together, one dequeue refills them)."""
    import redis

    redis.Redis.from_url(url).flushall()
    with Client(url) as c:
        _enqueue(c, "A", list(range(n)), with_tenant)
    mux = ServeMux()
    starts: list[float] = []
    done = asyncio.Event()

    @mux.handle("t")
    async def t(task: Task) -> None:
        starts.append(time.monotonic())
        await asyncio.sleep(duration)
        if len(starts) >= n:
            done.set()

    asyncio.run(_drain(url, mux, done))
    span = starts[-1] - starts[100]
    gaps = sorted(b - a for a, b in zip(starts[100:], starts[101:]))
    return {"figure": "worker cycle", "tenant_option": with_tenant, "task_ms": duration * 1000,
            "tasks_per_s": round((n - 101) / span), "ms_per_10_tasks": round(span / (n - 101) * 10_000, 2),
            "batch_gap_p99_ms": round(gaps[int(0.99 * (len(gaps) - 1))] * 1000, 2)}


def quiet(url: str, noisy: int, trials: int, with_tenant: bool, duration: float = 0.005) -> dict[str, object]:
    got = [_quiet_trial(url, noisy, duration, with_tenant) for _ in range(trials)]
    waits = sorted(w for w, _, _ in got)
    ahead = sorted(a for _, a, _ in got)
    at = min(len(waits) - 1, int(round(0.99 * (len(waits) - 1))))
    p99 = waits[at]
    behind = sorted(w for w, a, _ in got if a)  # (a dequeue of A's was in flight when B's enqueue landed)
    over = [(w, e) for w, _, e in got if w > 2 * duration]
    return {"figure": "quiet", "noisy_backlog": noisy, "trials": trials,
            "wait_p50_s": round(statistics.median(waits), 4), "wait_p99_s": round(p99, 4),
            "wait_max_s": round(max(waits), 4), "task_ms": duration * 1000,
            "p99_in_durations": round(p99 / duration, 2), "a_started_ahead_p99": ahead[at],
            "a_started_ahead_max": ahead[-1],
            "behind_a_batch": f"{len(behind)} trials, {behind[0] / duration:.2f}-{behind[-1] / duration:.2f} durations"
            if behind else "0 trials",
            "over_2_durations": len(over),
            "their_enqueue_ms": ",".join(f"{e * 1000:.1f}" for _, e in sorted(over)) or "-"}


def idle_ping(url: str, idle: float = 0.005, seconds: float = 10.0) -> dict[str, object]:
    """This machine's wake-up from idle, which a quiet tenant's tail meets at 5 ms tasks: a PING
    after ``idle`` s of sleep, again and again for ``seconds`` (both processes idle between)."""
    import redis

    r = redis.Redis.from_url(url)
    r.ping()
    rts: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        time.sleep(idle)
        t0 = time.perf_counter()
        r.ping()
        rts.append(time.perf_counter() - t0)
    rts.sort()
    return {"figure": "idle ping", "idle_ms": idle * 1000, "pings": len(rts),
            "p50_ms": round(rts[len(rts) // 2] * 1000, 2), "p99_ms": round(rts[int(0.99 * (len(rts) - 1))] * 1000, 2),
            "max_ms": round(rts[-1] * 1000, 2)}


def throughput(url: str, n: int, with_tenant: bool) -> dict[str, object]:
    import redis

    redis.Redis.from_url(url).flushall()
    with Client(url) as c:
        _enqueue(c, "t0", list(range(n)), with_tenant)
    mux = ServeMux()
    done = asyncio.Event()
    seen = [0]
    stamps: list[float] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        seen[0] += 1
        if seen[0] in (1, n):
            stamps.append(time.monotonic())
        if seen[0] == n:
            done.set()

    asyncio.run(_drain(url, mux, done))
    return {"figure": "throughput", "tenant_option": with_tenant, "tasks": n,
            "tasks_per_s": round((n - 1) / (stamps[-1] - stamps[0]))}


def dispatch(url: str, tenants: int, tasks: int, batch: int = 10, finish: bool = False) -> dict[str, object]:
    """The dequeue script alone at ``tenants`` tenants (``tasks`` spread evenly): Redis commands
    and µs of Redis per task taken (INFO commandstats, script-internal commands included), and
    the raw dequeue rate of one client taking ``batch`` at a time. The claim: flat in tenants.
    ``finish``: each batch is acknowledged (one ``done`` call) before the next dequeue, as a
    worker does, so the running tasks stay ``batch`` (not every task taken so far: held, ``ta``
    and the tenants' counts grow to the whole backlog, which no deployment runs at once); the
    figures are then per task of the whole cycle, dequeue and done."""
    import redis

    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    r = redis.Redis.from_url(url)
    r.flushall()
    with Client(url) as c:
        items = [("t", i, {"tenant": f"t{i % tenants}"}) for i in range(tasks)]
        for start in range(0, tasks, 1000):
            c.enqueue_many(items[start:start + 1000], queue=Q)
    ex, b = SyncExecutor(r), Broker()
    r.config_resetstat()
    taken, t0, held = 0, time.perf_counter(), []
    while taken < tasks:
        got = ex.run(b.dequeue(Q, batch, 600_000, "bench001")).tasks
        if not got:
            break
        taken += len(got)
        if finish:
            _finish(ex, b, got)
        else:
            held += got
    took = time.perf_counter() - t0
    stats = r.info("commandstats")
    _finish(ex, b, held)
    calls = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info"))
    usec = stats.get("cmdstat_evalsha", {}).get("usec", 0)
    q = f"asynqpy:{{{Q}}}:"
    return {"figure": "dispatch+done" if finish else "dispatch", "tenants": tenants, "tasks": taken, "batch": batch,
            "cmds_per_task": round(calls / max(taken, 1), 2), "redis_us_per_task": round(usec / max(taken, 1), 2),
            "dequeued_per_s": round(taken / took), "tenant_keys_left": sum(r.exists(q + k) for k in ("tq", "tr", "tn"))}


def dispatch_ab(url: str, tasks: int = 200_000, batch: int = 10, finish: bool = False) -> dict[str, object]:
    """The dequeue at 10 and at ``tasks // 2`` tenants in one Redis, call by call in turns (each
    pair in the other order the next time), each call timed by the client: what the machine's
    neighbours do meanwhile falls on both alike, so the ratio is the code's. Both queues' data
    share Redis's caches (the 10 tenants' queue pays for the other's misses too: separate runs,
    :func:`dispatch_rounds`, show that part). ``finish``: each batch is acknowledged before the
    queue's next dequeue (untimed), as a worker does."""
    import redis

    from asynqpy.core.model.codec import decode
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    r = redis.Redis.from_url(url)
    r.flushall()
    queues = {"tn-few": 10, "tn-many": tasks // 2}
    with Client(url) as c:
        for q, n in queues.items():
            items = [("t", i, {"tenant": f"t{i % n}"}) for i in range(tasks)]
            for start in range(0, tasks, 1000):
                c.enqueue_many(items[start:start + 1000], queue=q)
    ex, b = SyncExecutor(r), Broker()
    spent = dict.fromkeys(queues, 0.0)
    taken = dict.fromkeys(queues, 0)
    order, turn = list(queues), 0
    while any(taken[q] < tasks for q in queues):
        turn += 1
        for q in order if turn % 2 else order[::-1]:
            if taken[q] >= tasks:
                continue
            t0 = time.perf_counter()
            got = ex.run(b.dequeue(q, batch, 600_000, "bench001")).tasks
            spent[q] += time.perf_counter() - t0
            taken[q] = taken[q] + len(got) if got else tasks
            if finish and got:
                ex.run_many([b.done(q, id, "bench001", decode(m)) for id, m in got])
    r.flushall()
    few, many = spent["tn-few"], spent["tn-many"]
    return {"figure": "dispatch_ab+done" if finish else "dispatch_ab", "tasks": tasks, "batch": batch,
            "us_per_task_10": round(few / tasks * 1e6, 2), "us_per_task_100000": round(many / tasks * 1e6, 2),
            "throughput_ratio": round(few / many, 3)}


def dispatch_rounds(url: str, rounds: int, tasks: int = 200_000) -> list[dict[str, object]]:
    """:func:`dispatch` at 10 and ``tasks // 2`` tenants, ``rounds`` times each, interleaved (a
    run on a shared machine swings with its neighbours: the best of several says what the code
    costs, the median what a run may see), every task held (the worst case for the tenant
    bookkeeping: every task taken stays counted); then, per tenant count, the best and the median
    Redis µs per task and dequeues a second, and the ratios of 10^5 tenants to 10."""
    runs: dict[int, list[dict[str, object]]] = {10: [], tasks // 2: []}
    out: list[dict[str, object]] = []
    for _ in range(rounds):
        for t in runs:
            row = dispatch(url, t, tasks)
            runs[t].append(row)
            out.append(row)
    few, many = (runs[t] for t in runs)

    def best(rows: list[dict[str, object]], key: str, low: bool) -> float:
        vals = [float(str(r[key])) for r in rows]
        return min(vals) if low else max(vals)

    def med(rows: list[dict[str, object]], key: str) -> float:
        return float(statistics.median(float(str(r[key])) for r in rows))

    for label, pick in (("best", lambda rows, k, low: best(rows, k, low)), ("median", lambda rows, k, low: med(rows, k))):
        us = (pick(few, "redis_us_per_task", True), pick(many, "redis_us_per_task", True))
        rate = (pick(few, "dequeued_per_s", False), pick(many, "dequeued_per_s", False))
        out.append({"figure": f"dispatch_{label}", "rounds": rounds, "us_10": round(us[0], 2),
                    "us_100000": round(us[1], 2), "us_ratio": round(us[1] / us[0], 3),
                    "per_s_10": round(rate[0]), "per_s_100000": round(rate[1]),
                    "throughput_ratio": round(rate[1] / rate[0], 3)})
    return out


def _limit_process(url: str, seconds: float) -> None:
    """One worker process of :func:`tenant_limit`: a Server of concurrency 10; each handler counts
    the tasks of its tenant running (INCR at its start, DECR at its end) and records the count it
    saw at its start."""
    import redis.asyncio as aredis

    logging.getLogger("asynqpy").setLevel(logging.ERROR)
    mux = ServeMux()

    async def main() -> None:
        r = aredis.Redis.from_url(url)

        @mux.handle("t")
        async def t(task: Task) -> None:
            tenant = task.payload["tenant"]
            seen = await r.incr(f"bench:running:{tenant}")
            await r.rpush(f"bench:seen:{tenant}", seen)
            try:
                await asyncio.sleep(0.02)
            finally:
                await r.decr(f"bench:running:{tenant}")

        server = Server(url, queues=[Q], concurrency=CONCURRENCY, shutdown_timeout=1)
        run = asyncio.create_task(server.arun(mux))
        await asyncio.sleep(seconds)
        server.stop()
        await run
        await r.aclose()

    asyncio.run(main())


def tenant_limit(url: str, limit: int = 3, procs: int = 4, seconds: float = 6.0) -> dict[str, object]:
    """A tenant limited to ``limit`` tasks at once beside an unlimited one, served by ``procs``
    worker processes: the most of the limited tenant's tasks its handlers saw running at once,
    and the tasks a second of each tenant over the window."""
    import multiprocessing

    import redis

    from asynqpy import Inspector

    r = redis.Redis.from_url(url)
    r.flushall()
    with Inspector(url) as insp, Client(url) as c:
        insp.set_tenant(Q, "capped", concurrency=limit)
        for tenant in ("capped", "free"):
            c.enqueue_many([("t", {"tenant": tenant, "n": i}) for i in range(3000)], queue=Q, tenant=tenant)
    spawn = multiprocessing.get_context("spawn")
    workers = [spawn.Process(target=_limit_process, args=(url, seconds + 4)) for _ in range(procs)]
    for w in workers:
        w.start()
    with Inspector(url) as insp:
        deadline = time.monotonic() + 30
        while len(insp.servers()) < procs and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1)
        first = {t: r.llen(f"bench:seen:{t}") for t in ("capped", "free")}
        time.sleep(seconds)
        last = {t: r.llen(f"bench:seen:{t}") for t in ("capped", "free")}
    for w in workers:
        w.join(60)
    seen = [int(x) for x in r.lrange("bench:seen:capped", 0, -1)]
    return {"figure": "tenant limit", "limit": limit, "worker_processes": procs, "task_ms": 20,
            "capped_started": len(seen), "most_at_once": max(seen, default=0),
            "capped_per_s": round((last["capped"] - first["capped"]) / seconds, 1),
            "free_per_s": round((last["free"] - first["free"]) / seconds, 1),
            "ceiling_capped_per_s": round(limit / 0.02)}


def _finish(ex: Any, b: Any, held: list[tuple[str, bytes]]) -> None:
    """End the dequeued tasks (done): their tenant slots are freed, so nothing is left."""
    from asynqpy.core.model.codec import decode

    for start in range(0, len(held), 500):
        ex.run_many([b.done(Q, id, "bench001", decode(m)) for id, m in held[start:start + 500]])


def memory(url: str, tenants: int) -> dict[str, object]:
    """Bytes per tenant with work (one pending task each, against as many tasks without a
    tenant) and what is left once the work is done (the target: nothing)."""
    import redis

    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    r = redis.Redis.from_url(url)
    used = []
    for with_tenant in (False, True):
        r.flushall()
        base = int(r.info("memory")["used_memory"])
        with Client(url) as c:
            items = [("t", i, {"tenant": f"tenant-{i:06d}"} if with_tenant else {}) for i in range(tenants)]
            for start in range(0, tenants, 1000):
                c.enqueue_many(items[start:start + 1000], queue=Q)
        used.append(int(r.info("memory")["used_memory"]) - base)
    ex, b = SyncExecutor(r), Broker()
    while got := ex.run(b.dequeue(Q, 100, 600_000, "bench001")).tasks:
        _finish(ex, b, got)
    q = f"asynqpy:{{{Q}}}:"
    return {"figure": "memory", "tenants": tenants, "bytes_per_tenant_with_work": round((used[1] - used[0]) / tenants),
            "tenant_keys_left_after_drain": sum(r.exists(q + k) for k in ("tq", "tr", "tn"))}


def rows(url: str, quick: bool) -> list[dict[str, object]]:
    with_tenant = tenant_option(url)
    out = [fairness(url, 100, 100 if quick else 500, 2.0 if quick else 10.0, with_tenant),
           quiet(url, 2_000 if quick else 10_000, 5 if quick else 100, with_tenant),
           throughput(url, 5_000 if quick else 20_000, False)]
    if with_tenant:
        out.append(throughput(url, 5_000 if quick else 20_000, True))
        out.append(weights(url, 10_000 if quick else 60_000, 2.0 if quick else 10.0))
        out.append(rate(url, 50.0, 3.0 if quick else 10.0))
        n = 20_000 if quick else 200_000
        out += [dispatch(url, t, n) for t in (10, 1_000, n // 2)]
        out.append(memory(url, 10_000 if quick else 100_000))
    for row in out:
        row["dispatch"] = "tenants" if with_tenant else "FIFO (no tenant= yet)"
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rate", action="store_true", help="only the tenant rate row")
    ap.add_argument("--quiet", action="store_true",
                    help="only the quiet tenant rows (5 and 20 ms tasks), and the worker's cycle with 5 ms tasks")
    ap.add_argument("--limit", action="store_true",
                    help="only the tenant concurrency row: a limit of 3 across 4 worker processes")
    ap.add_argument("--dispatch", action="store_true",
                    help="only dispatch at 10 and 10^5 tenants: call by call in turns in one Redis (held, and "
                         "with each batch done), then three rounds of separate runs, the best and the median of "
                         "each and their ratios (one run swings by up to 30 %% on a shared VM)")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    rp = RedisProcess()
    try:
        if args.rate:
            only = [rate(rp.url, 50.0, 10.0)]
        elif args.quiet:
            only = [quiet(rp.url, 10_000, 100, True, d) for d in (0.005, 0.02)]
            only += [cycle(rp.url, t) for t in (True, False)] + [idle_ping(rp.url)]
        elif args.dispatch:
            only = [dispatch_ab(rp.url), dispatch_ab(rp.url, finish=True), *dispatch_rounds(rp.url, 3)]
        elif args.limit:
            only = [tenant_limit(rp.url)]
        for row in (only if args.rate or args.quiet or args.dispatch or args.limit else rows(rp.url, args.quick)):
            print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    finally:
        rp.stop()


if __name__ == "__main__":
    main()
