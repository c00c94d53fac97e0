"""A worker of many queues (issue 31, "queues per worker"): the queue order's semantics (strict,
weighted: a weighted sample drawn in O(K log K), the first choice in O(K)), the per-queue chores'
schedule (:class:`~asynqpy.worker.queues.Cadence`), and, counted in Redis commands on a real
server, that an idle worker's commands do not grow with its queues, that a trickle of tasks over
many queues costs about what it costs over one, and that starting over K one-task queues takes one
dequeue per task (it was O(K^2)). Sizes and timings are in bench/scale_manyqueues.py."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

import redis
from helpers import serving, until
from redisproc import RedisProcess

from asynqpy import AsyncClient, ServeMux, Task, TaskState
from asynqpy.worker.queues import Cadence, QueueOrder


def test_weighted_order_is_a_weighted_sample_and_strict_is_by_weight() -> None:
    random.seed(3)
    order = QueueOrder({"a": 6, "b": 3, "c": 1}, False)
    firsts = Counter(order.order()[0] for _ in range(3000))
    assert 1650 < firsts["a"] < 1950 and 750 < firsts["b"] < 1050 and 200 < firsts["c"] < 400, firsts
    assert sorted(order.order()) == ["a", "b", "c"]  # a permutation: every queue once
    drawn = Counter(order.first() for _ in range(3000))  # the first choice alone, same odds
    assert 1650 < drawn["a"] < 1950 and 200 < drawn["c"] < 400, drawn
    assert Counter(order.first(["b", "c"]) for _ in range(2000))["b"] > 1400  # among some: 3:1
    strict = QueueOrder({"low": 1, "high": 5, "mid": 3}, True)
    assert strict.order() == ["high", "mid", "low"] and strict.first(["low", "mid"]) == "mid"
    strict.owed = "low"  # a token taken: its queue first this once
    assert strict.order()[0] == "low" and strict.order()[0] == "high"


def test_candidates_are_the_queues_known_to_have_tasks() -> None:
    from asynqpy.core.spine.broker import Dequeued

    order = QueueOrder({"a": 1, "b": 5, "c": 2}, True)
    assert order.candidates(0.0) == []  # nothing known: the idle wait's token says which
    order.took("a", Dequeued(now_ms=0, remaining=3, wait_ms=0, tasks=[]), 0.0)
    order.owed = "c"
    assert order.candidates(0.0) == ["c", "a"] and order.backlog == {"a", "c"}
    order.took("b", Dequeued(now_ms=0, remaining=2, wait_ms=0, tasks=[]), 0.0)
    assert order.candidates(0.0) == ["b", "c", "a"]  # strict: by weight, the owed one among them
    order.took("b", Dequeued(now_ms=0, remaining=0, wait_ms=0, tasks=[]), 0.0)
    order.took("a", Dequeued(now_ms=0, remaining=1, wait_ms=500, slot_bound=False, tasks=[]), 0.0)
    assert order.candidates(0.1) == ["c"]  # b drained; a held back by its rate limit until 0.5
    assert order.candidates(0.6) == ["c", "a"]


def test_cadence_spreads_cold_checks_and_keeps_due_times() -> None:
    random.seed(1)
    few = Cadence(["a", "b"], base=10.0, rate=0.5)
    assert sorted(few.due(0.0)) == ["a", "b"] and few.due(0.0) == []  # every queue once at start
    few.idle("a", 0.0)
    few.at("b", 3.0)
    assert few.next_in(0.0) == 3.0 and few.due(3.0) == ["b"] and few.due(9.9) == []
    assert few.due(10.0) == ["a"]  # a few queues: a cold check every base seconds, as before
    many = Cadence([f"q{i}" for i in range(1000)], base=10.0, rate=0.5)
    assert many.cold_period == 2000.0  # 1000 queues at 0.5 checks/s
    for q in many.due(0.0):
        many.idle(q, 0.0)
    looked = sum(len(many.due(t)) for t in range(1, 3001))
    assert 0.3 * 3000 < looked < 0.7 * 3000  # ~0.5 a second, whatever the number of queues
    many.now("q7", 3000.5)  # a signal (tick, token): at once
    many.soon("q8", 3000.5)  # this server took tasks of it: within base
    many.soon("q9", 3001.0)  # (the same stretch of base / SOON_GRID: the same pass as q8)
    assert many.due(3000.5) == ["q7"] and many.due(3007.4) == []
    assert sorted(many.due(3010.0)) == ["q8", "q9"]  # within base, both in one pass
    assert "q8" in many.cold  # that look starts with the cold check (its EXISTS)
    many.again(["q7", "q8"], 3011.5)  # a pass over them failed (Redis unreachable): not forgotten
    assert sorted(many.due(3011.5)) == ["q7", "q8"]


def _calls(r: redis.Redis, name: str | None = None) -> int:
    stats = r.info("commandstats")
    if name is not None:
        return int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
    return sum(int(v["calls"]) for k, v in stats.items() if k not in ("cmdstat_config", "cmdstat_info"))


QUICK = dict(idle_timeout=0.2, recover_interval=0.2, janitor_interval=0.2, heartbeat_interval=1.0, lease=5,
             reconcile_interval=0)  # (the consistency sweep, a step per queue at start, is not counted here)


async def first_passes_done(r: redis.Redis, k: int) -> None:
    """Until the server's first pass of each of its three chores (forward, recover, expire/trim)
    is done: one EXISTS a queue each, all queues being cold at start. (A fixed sleep was too short
    on a loaded machine: the start's commands were then counted as the trickle's or the idle's.)"""
    await until(lambda: _calls(r, "exists") >= 3 * k, 10, 0.01)


def test_idle_commands_do_not_grow_with_the_queues(redis_server: RedisProcess) -> None:
    r = redis_server.admin()

    async def idle(k: int) -> int:
        r.flushall()
        r.config_resetstat()
        async with serving(redis_server.url, ServeMux(), queues={f"i{i}": 1 for i in range(k)}, **QUICK):
            await first_passes_done(r, k)
            r.config_resetstat()
            await asyncio.sleep(0.5)
            return _calls(r)

    few, many = asyncio.run(idle(5)), asyncio.run(idle(50))
    # (7 and 10 counted) before: each chore called its script for every queue each 0.2 s: 428 and 2 766
    assert many < 2 * few + 20, (few, many)


def test_a_trickle_over_many_queues_costs_what_it_costs_over_one(redis_server: RedisProcess) -> None:
    r = redis_server.admin()
    mux = ServeMux()
    ran: list[str] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.queue)

    async def trickle(k: int, n: int = 8) -> float:
        r.flushall()
        ran.clear()
        names = [f"t{i}" for i in range(k)]
        client = AsyncClient(redis_server.url)
        r.config_resetstat()
        async with serving(redis_server.url, mux, queues=dict.fromkeys(names, 1), **QUICK):
            await first_passes_done(r, k)
            r.config_resetstat()
            for i in range(n):
                await client.enqueue("t", None, queue=names[(7 * i) % k])
                await until(lambda: len(ran) > i, 5, 0.002)
            calls = _calls(r)
        await client.close()
        return calls / n

    one, fifty = asyncio.run(trickle(1)), asyncio.run(trickle(50))
    assert fifty <= one + 10, (one, fifty)  # 36.6 and 35.9 counted; before: 47 and 693


def test_starting_over_one_task_queues_takes_one_dequeue_a_task(redis_server: RedisProcess) -> None:
    r = redis_server.admin()
    mux = ServeMux()
    ran: list[str] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.queue)

    async def main(k: int) -> dict[str, Any]:
        client = AsyncClient(redis_server.url)
        for i in range(k):
            await client.enqueue("t", None, queue=f"s{i}")
        await client.close()
        r.config_resetstat()
        async with serving(redis_server.url, mux, queues={f"s{i}": 1 for i in range(k)}, concurrency=4, **QUICK):
            await until(lambda: len(ran) == k, 10, 0.005)
            return {"evalsha": _calls(r, "evalsha"), "blpop": _calls(r, "blpop")}

    got = asyncio.run(main(30))
    assert sorted(ran) == sorted(f"s{i}" for i in range(30))
    # a dequeue and a done a task, a few chores (69 counted) and, up to 100 queues, a poll of the
    # other queues' tokens at a fetch (wake_take since issue 45, an LMPOP before: 104 counted with
    # them); before issue 31, each fetch tried every queue not found empty in the last 100 ms:
    # O(K^2) dequeues (189 counted, without the polls)
    assert got["evalsha"] <= 4 * 30 + 10, got


def test_wake_take_takes_up_to_n_tokens_in_the_order_given(backend: Any) -> None:
    """lua/wake_take.lua (issue 45): the tokens of up to n lists in one call, in the order given,
    across its chunks of 1 000 lists and its halving of a chunk; the others left; none: []. (The
    lists share a hash tag here so the Cluster runs it too: a worker calls it on one Redis only.)"""
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    r, ex, b = backend.sync, SyncExecutor(backend.sync), Broker()
    lists = [f"asynqpy:{{wt}}:l{i}" for i in range(2500)]
    held = [3, 4, 999, 1000, 1001, 1777, 2499]
    for i in held:
        r.lpush(lists[i], "1")
    assert ex.run(b.wake_take(lists, 4)) == [3, 4, 999, 1000]
    assert [i for i in held if r.exists(lists[i])] == [1001, 1777, 2499]  # not taken: still there
    assert ex.run(b.wake_take(list(reversed(lists)), 2)) == [0, 722]  # (the order given: 2499, 1777)
    assert ex.run(b.wake_take(lists, 10)) == [1001]
    assert ex.run(b.wake_take(lists, 10)) == [] and not any(r.exists(k) for k in lists[:20])


def test_wake_take_dense_and_sparse_lists_match_a_plain_scan(backend: Any) -> None:
    """lua/wake_take.lua pops a dense stretch list by list and halves a sparse one (issue 45):
    whatever the density, it takes what a plain scan in the order given would, the first n lists
    holding a token, and leaves the others' tokens."""
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    r, ex, b = backend.sync, SyncExecutor(backend.sync), Broker()
    rnd = random.Random(45)
    lists = [f"asynqpy:{{wt}}:d{i}" for i in range(2300)]
    for density, n in ((0.9, 700), (0.5, 40), (0.3, 5000), (0.02, 7), (0.002, 3)):
        r.delete(*lists)
        held = [i for i in range(len(lists)) if rnd.random() < density]
        pipe = r.pipeline(transaction=False)
        for i in held:
            pipe.lpush(lists[i], "1")
        pipe.execute()
        order = list(range(len(lists)))
        rnd.shuffle(order)
        given = [lists[i] for i in order]
        has = set(held)
        expected = [pos for pos, i in enumerate(order) if i in has][:n]
        assert ex.run(b.wake_take(given, n)) == expected, density
        left = {order[pos] for pos in expected}
        assert sum(r.exists(lists[i]) for i in held) == len(held) - len(left), density
    r.delete(*lists)


def test_starting_over_one_task_queues_names_the_wake_lists_o_k_times(redis_server: RedisProcess,
                                                                       monkeypatch: Any) -> None:
    """Issue 45: a server of K queues takes the tokens of up to max(free slots, K / TAKE_SHARE)
    queues a poll, so starting over K one-task queues names each wake list a bounded number of
    times whatever K (about 2 x TAKE_SHARE lists a task), where it took one token per BLPOP
    naming all 2K lists (2K a task: O(K^2) in all; 263 s at 10^4 queues). The polls paced by time
    (POLL_LISTS_PER_S) are slowed so that a loaded machine's slowness does not add to the count."""
    from asynqpy.core.spine.broker import Broker
    from asynqpy.worker import fetcher

    monkeypatch.setattr(fetcher, "POLL_LISTS_PER_S", 100.0)
    named: list[int] = []
    take = Broker.wake_take

    def counted(self: Broker, lists: Any, n: int) -> Any:
        named.append(len(lists))
        return take(self, lists, n)

    monkeypatch.setattr(Broker, "wake_take", counted)
    r = redis_server.admin()
    mux = ServeMux()
    ran: list[str] = []

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.queue)

    k = 320

    async def main() -> int:
        client = AsyncClient(redis_server.url)
        for i in range(k):
            await client.enqueue("t", None, queue=f"n{i}")
        await client.close()
        r.config_resetstat()
        async with serving(redis_server.url, mux, queues={f"n{i}": 1 for i in range(k)}, concurrency=4, **QUICK):
            await until(lambda: len(ran) == k, 30, 0.005)
            return _calls(r, "blpop")

    blpops = asyncio.run(main())
    assert sorted(ran) == sorted(f"n{i}" for i in range(k))
    per_task = (sum(named) + blpops * 2 * k) / k
    assert per_task <= 4 * fetcher.TAKE_SHARE, (per_task, len(named), blpops)  # before: 2K = 640


def test_the_scan_puts_each_queue_in_the_backlog_in_turn() -> None:
    """Issue 42 (defects 2, 10): a server fetching by token dequeues each queue at least every
    max(base, K / SCAN_PER_S) s whatever the tokens say: one queue after the other, each once a
    round, a queue found empty a moment ago included; never a burst after a long busy spell."""
    from asynqpy.worker.queues import SCAN_PER_S

    names = [f"q{i}" for i in range(8)]
    order = QueueOrder(dict.fromkeys(names, 1), False)
    assert order.fresh == set(names) and order.scan_in(0.0) == float("inf")  # not scanning yet
    order.scan_from(1.0, 0.0)
    every = max(1.0, 8 / SCAN_PER_S) / 8
    assert order.candidates(every / 2) == []  # nothing due yet
    seen = []
    for i in range(1, 17):
        now = i * every + i * 1e-3
        order.empty["q3"] = now  # (found empty a moment ago: the scan looks all the same)
        got = order.candidates(now)
        assert len(got) == 1 and abs(order.scan_in(now) - every) < 1e-5
        seen += got
        order.backlog.clear()
    assert sorted(seen) == sorted(names * 2)
    assert len(order.candidates(1000.0)) == 1  # long busy: one queue, not all those it missed


def _token_lost(backend: Any, queue: str) -> None:
    """The wake token of ``queue`` is gone (popped by a read whose reply was lost)."""
    from asynqpy.core.spine.keys import queue_keys

    backend.sync.delete(queue_keys(queue).wake)


def test_a_queue_whose_wake_token_was_lost_is_still_served(backend: Any, monkeypatch: Any) -> None:
    """Issue 42 (defect 10): a server of more than 4 queues fetching by wake token runs the tasks of
    a queue whose token was lost (the BLPOP/LMPOP that popped it lost its reply, or the server
    died before its dequeue): the scan dequeues it. Before, it never did (nothing recreated the
    token). (On the Cluster a server tries every queue: no token is needed.)"""
    from asynqpy import Client, Inspector

    monkeypatch.setattr("asynqpy.worker.queues.SCAN_PER_S", 30.0, raising=False)  # (the test's bound: a round in 0.3 s)
    names = [f"lt{i}" for i in range(6)]
    ran: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            c.enqueue("t", "before start", queue=names[5])
            _token_lost(backend, names[5])  # (a server killed between its pop and its dequeue)
            # (a 1 s beat: live for 3 s after a beat; at 0.2 s the 0.6 s lapsed on a loaded machine and
            # quiet_server found no live server)
            async with serving(backend.new_async(), mux, queues=dict.fromkeys(names, 1), idle_timeout=0.3,
                               heartbeat_interval=1.0) as server:
                await until(lambda: ran == ["before start"])
                await until(lambda: [s.id for s in insp.servers()] == [server.server_id])
                assert await asyncio.to_thread(insp.quiet_server, server.server_id) == "quiet"
                c.enqueue("t", "while serving", queue=names[2])
                _token_lost(backend, names[2])
                assert await asyncio.to_thread(insp.resume_server, server.server_id) == "running"
                await until(lambda: "while serving" in ran)
            assert insp.queue_info(names[2]).pending == insp.queue_info(names[5]).pending == 0

    asyncio.run(main())


def test_a_worker_of_many_queues_takes_back_what_was_held_for_its_version(backend: Any,
                                                                         monkeypatch: Any) -> None:
    """Issue 42 (defect 2): a task an older worker set aside for version 2.0 is taken back by a
    2.0 server of more than 4 queues: held before it started (it looks at the queues new to it
    once: one ZRANGEBYSCORE each), and held while it runs (the scan). No wake token announces either.
    Before, only a dequeue of that queue for another reason took it back: never, here."""
    from asynqpy import Client, Inspector
    from asynqpy.core.deploy.versions import encode_version
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    monkeypatch.setattr("asynqpy.worker.queues.SCAN_PER_S", 30.0, raising=False)
    names = [f"vh{i}" for i in range(6)]
    ex, b = SyncExecutor(backend.sync), Broker()
    ran: list[str] = []
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)

    def set_aside(c: Client, insp: Inspector, payload: str, queue: str) -> None:
        c.enqueue("t", payload, queue=queue, min_worker_version="2.0")
        got = ex.run(b.dequeue(queue, 1, 30_000, "tok00001", "old", encode_version("1.4")))
        assert got.tasks == [] and [t.held for t in insp.list_tasks(queue, TaskState.SCHEDULED)] == ["version"]
        _token_lost(backend, queue)  # (the enqueue's token, which the old worker's own wait popped)

    async def main() -> None:
        with Client(backend.sync) as c, Inspector(backend.sync) as insp:
            set_aside(c, insp, "held before", names[0])
            for q in names[1:]:  # the other queues exist
                c.enqueue("t", f"first in {q}", queue=q)
            async with serving(backend.new_async(), mux, queues=dict.fromkeys(names, 1), idle_timeout=5,
                               heartbeat_interval=1.0, version="2.0") as server:  # (see above)
                await until(lambda: "held before" in ran and len(ran) == 6)
                await until(lambda: [s.id for s in insp.servers()] == [server.server_id])
                assert await asyncio.to_thread(insp.quiet_server, server.server_id) == "quiet"
                set_aside(c, insp, "held while serving", names[4])
                assert await asyncio.to_thread(insp.resume_server, server.server_id) == "running"
                await until(lambda: "held while serving" in ran)
            assert all(insp.queue_info(q).scheduled == 0 for q in names)

    asyncio.run(main())
