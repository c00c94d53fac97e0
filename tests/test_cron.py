"""Periodic tasks: entries and their ticks (cron with DST, intervals), which tick is due, and
schedulers racing (clocks skewed by seconds) that still enqueue each tick exactly once; the
Inspector's entry actions. On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from asynqpy import EntryNotFoundError, Inspector, InvalidArgumentError, TaskState
from asynqpy.core.cron.entries import Entry, decode_entry, due_tick, due_ticks, encode_entry, make_entry, tick_task_id
from asynqpy.core.model.clock import Clock
from asynqpy.core.spine.broker import Broker
from asynqpy.redisio.executor import AsyncExecutor
from asynqpy.worker.cron import SchedulerParams, Scheduling


def ms(*args: int, tz: str = "UTC") -> int:
    return int(datetime(*args, tzinfo=ZoneInfo(tz)).timestamp() * 1000)  # type: ignore[misc]


def local(tick: int, tz: str) -> str:
    return datetime.fromtimestamp(tick / 1000, tz=ZoneInfo(tz)).strftime("%Y-%m-%d %H:%M %Z")


def ticks(e: Entry, start: int, n: int) -> list[int]:
    out, t = [], start
    for _ in range(n):
        nxt = e.first_after(t)
        assert nxt is not None
        out.append(nxt)
        t = nxt
    return out


# -- entries and ticks (no Redis) -------------------------------------------------------------------


@pytest.mark.parametrize("tz", ["Europe/Berlin", "America/New_York"])
def test_a_daily_0230_entry_runs_once_on_dst_days(tz: str) -> None:
    """Spring forward (02:30 does not exist): once, right after the change; fall back (02:30 comes
    twice): once. Forward and backward iteration agree."""
    e = make_entry("nightly", "report", cron="30 2 * * *", tz=tz)
    spring = {"Europe/Berlin": (2026, 3, 29), "America/New_York": (2026, 3, 8)}[tz]
    fall = {"Europe/Berlin": (2026, 10, 25), "America/New_York": (2026, 11, 1)}[tz]
    for day, expected in ((spring, "03:00"), (fall, "02:30")):
        first = datetime(*day, 12, tzinfo=ZoneInfo(tz)) - timedelta(days=1)
        got = ticks(e, int(first.timestamp() * 1000), 3)
        days = [local(t, tz) for t in got]
        assert [x[:10] for x in days] == [(first + timedelta(days=i)).strftime("%Y-%m-%d") for i in (1, 2, 3)], \
            days  # one run per day
        assert days[0][11:16] == expected and days[1][11:16] == "02:30", days
        for t in got:  # the latest tick at or before a tick is that tick, and just before it the previous one
            assert e.latest_at_or_before(t) == t
        assert e.latest_at_or_before(got[1] - 1) == got[0]


def test_interval_and_seconds_ticks() -> None:
    every = make_entry("hb", "ping", every=30)
    assert ticks(every, 1_000, 3) == [30_000, 60_000, 90_000]  # aligned to the epoch: every scheduler agrees
    assert every.latest_at_or_before(59_999) == 30_000
    secs = make_entry("fast", "ping", cron="*/10 * * * * *")  # 6 fields: seconds first
    start = ms(2026, 1, 1, 5, 0)
    assert ticks(secs, start, 2) == [start + 10_000, start + 20_000]
    assert secs.spec() == "*/10 * * * * *" and every.spec() == "every 30s"
    assert make_entry("x", "t", cron="0 * * * *", tz="Asia/Tokyo").spec() == "0 * * * * (Asia/Tokyo)"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"cron": "61 * * * *"}, "cron: Bad minute in '61 * * * *'"),
    ({"cron": "* * *"}, "cron: Wrong number of fields"),
    ({"cron": "* * * * *", "tz": "Mars/Base"}, "tz: unknown time zone 'Mars/Base'"),
    ({"every": 0.5}, "every must be a number of seconds >= 1"),
    ({"every": 10**20}, "every must be at most 100 years"),
    ({"every": 100 * 365 * 24 * 3600 + 1}, "every must be at most 100 years"),
    ({}, "either cron='...' or every=seconds"),
    ({"every": 5, "cron": "* * * * *"}, "either cron='...' or every=seconds"),
    ({"every": 5, "missed": "all"}, "missed must be one of skip, last"),
    ({"every": 5, "tmeout": 3}, "did you mean 'timeout'?"),
    ({"every": 5, "max_retry": -1}, "max_retry must be an int >= 0"),
    ({"every": 5, "queue": "a b"}, "invalid queue name"),
])
def test_bad_entries_name_what_is_wrong(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message.replace("(", r"\(").replace("*", r"\*")
                       .replace("?", r"\?").replace("[", r"\[")):
        make_entry("n", "t", **kwargs)
    with pytest.raises(InvalidArgumentError, match="entry name"):
        make_entry("a b", "t", every=5)


def test_due_tick_policies() -> None:
    e = make_entry("m", "t", every=60, created_ms=0)
    assert due_tick(e, 0, 120_500) == 120_000  # the latest tick, just passed
    assert due_tick(e, 120_000, 150_000) is None  # fired already
    assert due_tick(e, 60_000, 150_000, grace_ms=10_000) is None  # more than the grace late: missed, skipped
    last = make_entry("m", "t", every=60, missed="last", created_ms=0)
    assert due_tick(last, 60_000, 150_000, grace_ms=10_000) == 120_000  # the latest missed tick, once
    assert due_tick(last, 600_000, 10 * 60_000 + 5) is None
    second = make_entry("s", "t", every=1, created_ms=0)
    assert due_ticks(second, 10_000, 13_500) == [11_000, 12_000, 13_000]  # late ticks all run, oldest first
    assert due_ticks(second, 10_000, 100_500, grace_ms=2_000) == [99_000, 100_000]  # older ones were missed
    fresh = make_entry("m", "t", every=60, created_ms=120_100)
    assert due_tick(fresh, 0, 120_200) is None  # ticks before the entry existed never fire
    assert decode_entry("default", "m", encode_entry(last)) == last


# -- against Redis ------------------------------------------------------------------------------------


class SkewedClock(Clock):
    """A host whose clock is off by ``skew_ms``: it learns Redis's time from replies."""

    def __init__(self, skew_ms: int) -> None:
        super().__init__()
        self.skew_ms = skew_ms

    def local_ms(self) -> int:
        return int(time.time() * 1000) + self.skew_ms


def test_racing_schedulers_with_skewed_clocks_enqueue_each_tick_once(backend: Any) -> None:
    """Three schedulers (clocks -5 s, 0, +5 s) share one entry firing every second: each tick is
    enqueued once, never before its time by Redis's clock, none is skipped."""
    entry = make_entry("every-second", "beat", {"n": 1}, every=1, queue="cq", max_retry=2)

    async def main() -> list[Scheduling]:
        stop = asyncio.Event()
        loops = [Scheduling(AsyncExecutor(backend.new_async()), Broker(clock), clock,
                            SchedulerParams((entry,), refresh=0.5), stop)
                 for clock in (SkewedClock(-5000), Clock(), SkewedClock(5000))]
        runs = [asyncio.create_task(lp.run()) for lp in loops]
        await asyncio.sleep(4.2)
        stop.set()
        await asyncio.wait_for(asyncio.gather(*runs), 10)
        return loops

    loops = asyncio.run(main())
    before = datetime.now(timezone.utc)  # (next_tick is after the read's now, not after a later one)
    with Inspector(backend.sync) as insp:
        (info,) = insp.scheduler_entries("cq")
        tasks = insp.list_tasks("cq", TaskState.PENDING, page_size=100)
    fired = sorted(info.history, key=lambda f: f.tick_ms)
    assert len(fired) >= 3 and sum(lp.fired for lp in loops) == len(fired)
    assert len({f.tick_ms for f in fired}) == len(fired)  # each tick once
    assert [b.tick_ms - a.tick_ms for a, b in zip(fired, fired[1:])] == [1000] * (len(fired) - 1)  # none skipped
    assert all(0 <= f.late_ms < 1000 for f in fired), [f.late_ms for f in fired]  # never early by Redis's clock
    assert sorted(t.id for t in tasks) == sorted(tick_task_id("every-second", f.tick_ms) for f in fired)
    assert all(t.type == "beat" and t.payload == {"n": 1} and t.max_retry == 2 for t in tasks)
    assert info.last_task_id == tick_task_id("every-second", fired[-1].tick_ms)
    assert info.next_tick is not None and info.next_tick > before.replace(microsecond=0)


def test_inspector_actions_on_entries(backend: Any) -> None:
    with Inspector(backend.sync) as insp:
        e = insp.cron_add("nightly", "report", {"k": 1}, cron="0 3 * * *", tz="Europe/Berlin", queue="iq")
        assert [i.name for i in insp.scheduler_entries()] == ["nightly"] and e.created_ms > 0
        insp.cron_pause("nightly", "iq")
        (info,) = insp.scheduler_entries("iq")
        assert info.paused and info.next_tick is None
        id = insp.cron_run_now("nightly", "iq")  # runs even while paused: an operator's decision
        assert insp.task_info("iq", id).payload == {"k": 1}
        (info,) = insp.scheduler_entries("iq")
        assert info.last_task_id == id and info.history[0].tick_ms == 0
        insp.cron_resume("nightly", "iq")
        (info,) = insp.scheduler_entries("iq")
        assert not info.paused and info.next_tick is not None and info.next_tick.astimezone(
            ZoneInfo("Europe/Berlin")).hour == 3
        for action in (insp.cron_pause, insp.cron_resume, insp.cron_remove, insp.cron_run_now):
            with pytest.raises(EntryNotFoundError, match="no scheduler entry 'nope' in queue 'iq'"):
                action("nope", "iq")
        insp.cron_remove("nightly", "iq")
        assert insp.scheduler_entries() == []
        assert insp.task_info("iq", id).state is TaskState.PENDING  # what it enqueued stays


def test_an_every_beyond_100_years_is_refused_and_a_stored_one_is_listed(backend: Any) -> None:
    """every= had no upper bound: cron_add stored every=1e20 and every listing of the entries then
    raised OverflowError (cron ls, the console's /scheduler). It is refused, nothing stored; one
    stored before (or by hand) is listed, with its next tick as the latest datetime, and never fires."""
    from asynqpy.core.spine.keys import queue_keys

    with Inspector(backend.sync) as insp:
        insp.cron_add("fine", "t", every=60, queue="cq")
        with pytest.raises(InvalidArgumentError, match="every must be at most 100 years"):
            insp.cron_add("far", "t", every=10**20, queue="cq")
        assert [i.name for i in insp.scheduler_entries()] == ["fine"]
        far = Entry("far", "t", None, "cq", every=1e20, created_ms=1)  # as an earlier version stored it
        k = queue_keys("cq")
        backend.sync.hset(k.cron, "far", encode_entry(far))
        backend.sync.lpush(k.cron_history("far"), f"{10**22} cron:far:x {10**22}", "0 cron:far:now:1 5000")
        infos = {i.name: i for i in insp.scheduler_entries()}
        assert sorted(infos) == ["far", "fine"] and infos["fine"].next_tick is not None
        assert infos["far"].next_tick == datetime.max.replace(tzinfo=timezone.utc)
        assert infos["far"].entry.spec() == "every 1e+20s"
        assert [f.task_id for f in infos["far"].history] == ["cron:far:now:1"]  # the unreadable tick is left out
        now = int(time.time() * 1000)
        assert due_ticks(far, 0, now) == [] and due_ticks(replace(far, missed="last"), 0, now) == []


def test_a_changed_or_removed_entry_stops_firing_its_old_definition(backend: Any) -> None:
    """A scheduler planned from a definition an operator changed since writes nothing for it
    (it reloads); one removed fires no more."""
    from asynqpy.core.cron import entries as cron

    with Inspector(backend.sync) as insp:
        old = insp.cron_add("e", "t", every=1, queue="xq")
        b = Broker()
        stale = cron.encode_entry(old)
        insp.cron_add("e", "t2", every=1, queue="xq")  # changed meanwhile
        _, call = cron.fire_call(b, old, stale, 1000, 2000)
        code, _ = insp._exec.run(call)
        assert code == cron.CHANGED
        insp.cron_remove("e", "xq")
        code, _ = insp._exec.run(call)
        assert code == cron.GONE
        assert insp.list_tasks("xq", TaskState.PENDING) == []


# -- the command line, workers with --scheduler, and the App ------------------------------------------


def cli(*args: str) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.real
def test_cron_commands(redis_url: str) -> None:
    u = ("--redis-url", redis_url)
    code, out, err = cli("cron", "add", "nightly", "report", "--cron", "30 2 * * *", "--tz", "Europe/Berlin",
                         "--payload", '{"k": 1}', "--max-retry", "2", *u)
    assert code == 0 and "entry nightly (30 2 * * * (Europe/Berlin)) enqueues report to default" in out, err
    code, out, _ = cli("cron", "add", "hb", "ping", "--every", "5", "-q", "ops", *u)
    assert code == 0 and "every 5s" in out
    code, out, _ = cli("cron", "ls", *u)
    assert code == 0 and "nightly" in out and "hb" in out and "report" in out
    assert cli("cron", "pause", "hb", "-q", "ops", *u)[:2] == (0, "paused entry hb\n")
    code, out, _ = cli("cron", "ls", "--json", *u)
    listed = {e["name"]: e for e in json.loads(out)}
    assert listed["hb"]["paused"] and listed["nightly"]["payload"] == {"k": 1}
    assert listed["nightly"]["options"] == {"max_retry": 2} and listed["nightly"]["next_tick"].endswith("01:30:00+00:00")
    code, out, _ = cli("cron", "run-now", "nightly", *u)
    assert code == 0 and out.startswith("entry nightly: enqueued cron:nightly:now:")
    code, out, _ = cli("cron", "history", "nightly", *u)
    assert code == 0 and "(run now)" in out
    assert cli("cron", "resume", "hb", "-q", "ops", *u)[0] == 0
    assert cli("cron", "rm", "hb", "-q", "ops", *u)[:2] == (0, "removed entry hb\n")
    for args, message in [
        (("add", "x", "t", "--cron", "61 * * * *"), "asynqpy: error: cron: Bad minute in '61 * * * *'"),
        (("add", "x", "t", "--cron", "* * * * *", "--tz", "Nowhere/Land"), "asynqpy: error: tz: unknown time zone"),
        (("add", "x", "t"), "asynqpy: error: give --cron EXPR or --every SECONDS (one of them)"),
        (("add", "x", "t", "--every", "5", "--payload", "{oops"), "asynqpy: error: --payload is not JSON"),
        (("add", "x", "t", "--every", "1e20"), "asynqpy: error: every must be at most 100 years"),
        (("pause", "nope"), "asynqpy: error: no scheduler entry 'nope' in any queue"),
        (("pause", "nope", "-q", "default"), "asynqpy: error: no scheduler entry 'nope' in queue 'default'"),
        (("rm", "nope"), "asynqpy: error: no scheduler entry 'nope' in any queue"),
        (("rm", "nope", "-q", "default"), "asynqpy: error: no scheduler entry 'nope' in queue 'default'"),
        (("history", "nope"), "asynqpy: error: no scheduler entry 'nope' in any queue"),
        (("history", "nope", "-q", "default"), "asynqpy: error: no scheduler entry 'nope' in queue 'default'"),
    ]:
        code, _, err = cli("cron", *args, *u)
        assert code == 2 and err.startswith(message) and err.count("\n") == 1, (args, err)
    with Inspector(redis_url) as insp:  # the refusals changed nothing
        assert [i.name for i in insp.scheduler_entries()] == ["nightly"]
    import redis

    from asynqpy.core.spine.keys import queue_keys

    far = Entry("far", "t", None, "default", every=1e20, created_ms=1)  # stored before every= was bounded
    redis.Redis.from_url(redis_url).hset(queue_keys("default").cron, "far", encode_entry(far))
    code, out, err = cli("cron", "ls", *u)
    assert code == 0 and "far" in out and "every 1e+20s" in out and "nightly" in out, err
    code, out, err = cli("cron", "ls", "--json", *u)
    assert code == 0 and {e["name"]: e for e in json.loads(out)}["far"]["next_tick"].startswith("9999-12-31"), err


@pytest.mark.real
def test_a_worker_with_scheduler_runs_entries_and_an_apps_periodic_tasks(redis_url: str, tmp_path: Any) -> None:
    """`asynqpy worker --scheduler` enqueues stored entries' tasks; an App's periodic tasks run in
    its workers without the flag, called with the arguments they were declared with."""
    from helpers import start_worker, wait_sync

    (tmp_path / "periodic_app.py").write_text(
        "import redis\n"
        "from asynqpy import App, Task\n"
        f"app = App({redis_url!r})\n"
        f"r = redis.Redis.from_url({redis_url!r})\n"
        "@app.task\n"
        "def tick(label: str, n: int = 0) -> None:\n"
        "    r.rpush('ran', f'{label}:{n}')\n"
        "app.periodic(tick, every=1, kwargs={'label': 'app', 'n': 7}, name='app-every-second')\n"
        "@app.mux.handle('stored')\n"
        "def stored(task: Task) -> None:\n"
        "    r.rpush('ran', 'stored')\n")
    with Inspector(redis_url) as insp:
        insp.cron_add("from-cli", "stored", every=1)
    w = start_worker(redis_url, "periodic_app:app", "--scheduler", env={"PYTHONPATH": str(tmp_path)})
    try:
        import redis

        r = redis.Redis.from_url(redis_url)
        wait_sync(lambda: {b"app:7", b"stored"} <= set(r.lrange("ran", 0, -1)), 20)
    finally:
        w.terminate()
        w.wait(20)
    with Inspector(redis_url) as insp:
        names = {i.name: i for i in insp.scheduler_entries()}
    assert set(names) == {"from-cli", "app-every-second"}
    assert names["app-every-second"].entry.task_type == "periodic_app.tick"


def test_bad_periodic_declarations(backend: Any) -> None:
    from asynqpy import App, Scheduler

    app = App(backend.sync)

    @app.task
    def job(x: int) -> None:
        pass

    with pytest.raises(InvalidArgumentError, match="missing a required argument: 'x'"):
        app.periodic(job, every=5)
    with pytest.raises(InvalidArgumentError, match="unique cannot apply to a periodic task"):
        app.periodic(job.using(unique=60), every=5, args=(1,))
    app.periodic(job, every=5, args=(1,))
    with pytest.raises(Exception, match="two scheduler entries are named"):
        app.periodic(job, every=10, args=(2,))
    s = Scheduler(backend.sync)
    s.register("a", "t", every=5)
    with pytest.raises(Exception, match="two scheduler entries are named 'a'"):
        s.register("a", "t", every=6)
    with pytest.raises(InvalidArgumentError, match="refresh must be"):
        Scheduler(backend.sync, refresh=0)
    for name in ("refresh", "grace"):  # a time a scheduler computes with: bounded as every duration
        with pytest.raises(InvalidArgumentError, match=f"{name} must be .* at most 100 years"):
            Scheduler(backend.sync, **{name: 10**20})


def test_removing_a_queue_with_entries(backend: Any) -> None:
    """A queue with scheduler entries is not empty: removing it needs force, which removes them
    (no scheduler may fill the removed queue again)."""
    from asynqpy import QueueNotEmptyError

    with Inspector(backend.sync) as insp:
        insp.cron_add("a", "t", every=60, queue="rq")
        insp.cron_run_now("a", "rq")
        insp.delete_all("rq", "pending")
        with pytest.raises(QueueNotEmptyError, match="queue 'rq' has 1 scheduler entry \\(a\\)"):
            insp.remove_queue("rq")
        assert [i.name for i in insp.scheduler_entries("rq")] == ["a"]  # refused: nothing changed
        insp.remove_queue("rq", force=True)
        assert insp.scheduler_entries() == [] and "rq" not in insp.queues()


def test_a_restarted_scheduler_keeps_its_unchanged_entries(backend: Any) -> None:
    """Registering the same entry again (a restart) keeps its creation time and state; a changed
    one starts afresh. A payload with tuples (stored as lists) counts as unchanged."""
    from asynqpy.core.cron import entries as cron

    async def register(entry: Entry, now: int) -> list[Entry]:
        ex = AsyncExecutor(backend.new_async())
        plan = cron.register_plan([entry], now)
        calls = next(plan)
        try:
            while True:
                calls = plan.send(await ex.run_many(calls))
        except StopIteration as stop:
            return stop.value  # type: ignore[no-any-return]

    e = make_entry("r", "t", {"k": (1, 2)}, every=5, queue="sq")
    (first,) = asyncio.run(register(e, 1000))
    (again,) = asyncio.run(register(e, 9000))
    assert first.created_ms == again.created_ms == 1000
    (changed,) = asyncio.run(register(make_entry("r", "t", {"k": (1, 3)}, every=5, queue="sq"), 9000))
    assert changed.created_ms == 9000


@pytest.mark.real
def test_names_that_are_not_text_are_refused(redis_url: str) -> None:
    """An entry or group name with a lone surrogate (not encodable) is a typed error, exit 2."""
    for args in (("cron", "pause", "\ud800"), ("cron", "rm", "\ud800"), ("cron", "run-now", "\ud800"),
                 ("task", "ls", "-q", "q", "--state", "aggregating", "--group", "\ud800")):
        code, _, err = cli(*args, "--redis-url", redis_url)
        assert code == 2 and err.startswith("asynqpy: error: ") and err.count("\n") == 1, (args, err)


def test_the_scheduler_command_refuses_bad_input() -> None:
    """`asynqpy scheduler` runs until stopped (tests/test_cron.py runs it in a worker and in
    bench/cron_lateness.py); bad input ends it at once with one line and exit code 2."""
    for args, message in [(("--redis-url", "bogus://x"), "asynqpy: error: "),
                          (("--refresh", "0"), "Invalid value for '--refresh'")]:
        code, _, err = cli("scheduler", *args)
        assert code == 2 and message in err, (args, err)


# -- entries declared by an App are owned by it ---------------------------------------------------


def _start_app_worker(backend: Any, app: Any) -> None:
    """What a worker of ``app`` does with its entries at start, as :class:`Server` wires it (the
    server's options, from ``app.server()``), without firing them (fire=False ends the loop)."""
    o = app.server().options
    params = SchedulerParams(tuple(o.scheduler_entries), owner=o.scheduler_owner, fire=False)
    clock = Clock()
    loop = Scheduling(AsyncExecutor(backend.new_async()), Broker(clock), clock, params, asyncio.Event())
    asyncio.run(asyncio.wait_for(loop.run(), 10))


def test_an_apps_stale_periodic_entries_are_removed_when_its_worker_starts(backend: Any) -> None:
    """Renaming, moving or deleting an ``app.periodic(...)`` entry left the old one firing forever
    (with a handler that no longer exists, filling retries). The App owns the entries it declares:
    a starting worker removes those it no longer declares; an operator's entries (CLI, Inspector),
    another App's, and the declared ones (with their state) stay."""
    from asynqpy import App

    def v1() -> Any:
        app = App(backend.sync, name="shop")

        @app.task(name="shop.report", queue="pq")
        def report() -> None: ...

        @app.task(name="shop.cleanup", queue="pq2")
        def cleanup() -> None: ...

        app.periodic(report, every=60, name="report")
        app.periodic(cleanup, every=60, name="cleanup")
        return app

    other = App(backend.sync, name="billing")

    @other.task(name="billing.invoice", queue="pq")
    def invoice() -> None: ...

    other.periodic(invoice, every=60, name="invoice")
    with Inspector(backend.sync) as insp:
        insp.cron_add("manual", "ops.ping", every=60, queue="pq")  # an operator's: no owner
        _start_app_worker(backend, other)
        _start_app_worker(backend, v1())
        before = {(i.queue, i.name): i.entry for i in insp.scheduler_entries()}
        assert set(before) == {("pq", "manual"), ("pq", "invoice"), ("pq", "report"), ("pq2", "cleanup")}
        assert before[("pq", "report")].owner == "app:shop" and before[("pq", "manual")].owner == ""
        insp.cron_pause("report", "pq")

        v2 = App(backend.sync, name="shop")  # the next release: cleanup (of another queue) deleted, one added

        @v2.task(name="shop.report", queue="pq")
        def report() -> None: ...

        v2.periodic(report, every=60, name="report")
        v2.periodic(report, every=3600, name="hourly-report")  # a new one
        _start_app_worker(backend, v2)
        after = {(i.queue, i.name): i for i in insp.scheduler_entries()}
        assert set(after) == {("pq", "manual"), ("pq", "invoice"), ("pq", "report"), ("pq", "hourly-report")}
        assert after[("pq", "report")].paused  # unchanged: it keeps its state
        assert after[("pq", "report")].entry.created_ms == before[("pq", "report")].created_ms

        v3 = App(backend.sync, name="shop")  # every periodic task deleted: its worker still prunes
        _start_app_worker(backend, v3)
        assert {(i.queue, i.name) for i in insp.scheduler_entries()} == {("pq", "manual"), ("pq", "invoice")}


def test_an_entry_stored_before_owners_is_adopted_with_its_state(backend: Any) -> None:
    """An entry stored without an owner (by an older version) with the definition an App now
    declares becomes the App's, keeping its creation time (its next tick is not lost)."""
    from asynqpy import App

    with Inspector(backend.sync) as insp:
        insp.cron_add("nightly", "shop.nightly", {}, every=60, queue="aq")  # as stored before entries had owners
        (old,) = insp.scheduler_entries("aq")
        app = App(backend.sync, name="shop")

        @app.task(name="shop.nightly", queue="aq")
        def nightly() -> None: ...

        app.periodic(nightly, every=60, name="nightly")
        _start_app_worker(backend, app)
        (new,) = insp.scheduler_entries("aq")
        assert old.entry.owner == "" and new.entry.owner == "app:shop"
        assert new.entry.created_ms == old.entry.created_ms


def test_app_names() -> None:
    from asynqpy import App

    assert App("redis://localhost:1/0").name == __name__  # the module that makes it
    assert App("redis://localhost:1/0", name="shop").owner == "app:shop"
    assert App("redis://localhost:1/0", name="shop").server().options.scheduler_owner == "app:shop"
    with pytest.raises(InvalidArgumentError, match="app name"):
        App("redis://localhost:1/0", name="a\nb")


@pytest.mark.real
def test_a_renamed_periodic_task_stops_firing_after_a_worker_restart(redis_url: str, tmp_path: Any) -> None:
    """End to end through `asynqpy worker module:app`: the entry of the old name is removed when
    the new code's worker starts, and only the new name fires."""
    import redis
    from helpers import start_worker, wait_sync

    def write(entry_name: str) -> None:
        (tmp_path / "renamed_app.py").write_text(
            "import redis\n"
            "from asynqpy import App\n"
            f"app = App({redis_url!r})\n"
            f"r = redis.Redis.from_url({redis_url!r})\n"
            "@app.task\n"
            "def tick() -> None:\n"
            f"    r.rpush('ran', {entry_name!r})\n"
            f"app.periodic(tick, every=1, name={entry_name!r})\n")

    r = redis.Redis.from_url(redis_url)
    with Inspector(redis_url) as insp:
        insp.cron_add("from-cli", "ops.ping", every=3600)
        for name in ("old-name", "new-name"):
            write(name)
            w = start_worker(redis_url, "renamed_app:app", env={"PYTHONPATH": str(tmp_path)})
            try:
                wait_sync(lambda: name.encode() in r.lrange("ran", 0, -1), 20)
            finally:
                w.terminate()
                w.wait(20)
            names = {i.name: i.entry.owner for i in insp.scheduler_entries()}
            assert names == {"from-cli": "", name: "app:renamed_app"}, names
# -- signed entries --------------------------------------------------------------------------------

KEY, OTHER_KEY = b"k" * 32, b"x" * 32


def test_a_keyed_scheduler_fires_only_entries_signed_with_its_keys(backend: Any, caplog: Any) -> None:
    """Entries written by a keyless party (or signed with another key) are not fired by a keyed
    scheduler: logged once, shown as such by a keyed Inspector; a signed entry's ticks arrive
    signed. A keyed run-now refuses an entry that does not verify (it would sign its task)."""
    from asynqpy.core.model.codec import decode
    from asynqpy.core.model.errors import SignatureError
    from asynqpy.core.security.signing import Signer
    from asynqpy.core.spine.keys import queue_keys

    keyless, keyed, other = Inspector(backend.sync), Inspector(backend.sync, signing_key=KEY), \
        Inspector(backend.sync, signing_key=OTHER_KEY)
    keyless.cron_add("planted", "evil", {"cmd": "x"}, every=1, queue="sq")
    other.cron_add("foreign", "evil", every=1, queue="sq")
    keyed.cron_add("ours", "beat", every=1, queue="sq")

    async def main() -> Scheduling:
        stop = asyncio.Event()
        clock = Clock()
        loop = Scheduling(AsyncExecutor(backend.new_async()), Broker(clock, Signer(KEY)), clock,
                          SchedulerParams((), refresh=0.2), stop)
        run = asyncio.create_task(loop.run())
        deadline = time.monotonic() + 10
        while loop.fired < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        stop.set()
        await asyncio.wait_for(run, 10)
        return loop

    loop = asyncio.run(main())
    tasks = keyless.list_tasks("sq", TaskState.PENDING, page_size=100)
    assert loop.fired >= 2 and {t.type for t in tasks} == {"beat"}  # nothing of the unsigned entries
    for t in tasks:  # the ticks are signed tasks
        Signer(KEY).open("sq", t.id, backend.sync.hget(queue_keys("sq").tasks, t.id)[1:])
    refusals = [r.getMessage() for r in caplog.records if "is not fired" in r.getMessage()]
    assert len(refusals) == 2, refusals  # once per entry, not at every reload
    shown = {i.name: (i.signature, i.next_tick) for i in keyed.scheduler_entries("sq")}
    assert shown["ours"][0] == "verified" and shown["ours"][1] is not None
    assert shown["planted"] == ("bad signature: the entry is not signed", None)
    assert shown["foreign"] == ("bad signature: the tag matches none of the signing keys", None)
    assert {i.name: i.signature for i in keyless.scheduler_entries("sq")} == {
        "ours": "signed", "foreign": "signed", "planted": "unsigned"}
    with pytest.raises(SignatureError, match="not run"):
        keyed.cron_run_now("planted", "sq")
    id = keyed.cron_run_now("ours", "sq")
    assert decode(Signer(KEY).open("sq", id, backend.sync.hget(queue_keys("sq").tasks, id)[1:])).type == "beat"


def test_a_keyed_scheduler_signs_its_own_unchanged_entries_again(backend: Any) -> None:
    """An entry declared in code and stored unsigned (before signing was turned on, or planted
    under its name) is written again, signed, by a scheduler with keys; a signed one is left."""
    from asynqpy.core.cron.entries import entry_signature, register_plan
    from asynqpy.core.security.signing import Signer
    from asynqpy.core.spine.keys import queue_keys
    from asynqpy.redisio.executor import SyncExecutor, run_plan

    entry = make_entry("beat", "ping", every=60, queue="rq")
    ex, key = SyncExecutor(backend.sync), queue_keys("rq").cron
    (unsigned,) = run_plan(ex, register_plan([entry], 1000))
    assert entry_signature(Signer(KEY), "rq", "beat", backend.sync.hget(key, "beat")).startswith("bad signature")
    (signed,) = run_plan(ex, register_plan([entry], 2000, Signer(KEY)))
    assert entry_signature(Signer(KEY), "rq", "beat", backend.sync.hget(key, "beat")) == "verified"
    assert signed.created_ms == 2000 and unsigned.created_ms == 1000
    (again,) = run_plan(ex, register_plan([entry], 3000, Signer(KEY)))
    assert again.created_ms == 2000  # unchanged and verified: kept as it is
    assert decode_entry("rq", "beat", backend.sync.hget(key, "beat")) == again  # a tagged entry still decodes


@pytest.mark.real
def test_cron_commands_sign_and_show_entries_with_a_key_file(redis_url: str, tmp_path: Any) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(KEY + b"\n")
    u, k = ("--redis-url", redis_url), ("--signing-key-file", str(key_file))
    assert cli("cron", "add", "ours", "ping", "--every", "60", *k, *u)[0] == 0
    assert cli("cron", "add", "planted", "evil", "--every", "60", *u)[0] == 0
    code, out, _ = cli("cron", "ls", "--json", *k, *u)
    assert {e["name"]: e["signature"] for e in json.loads(out)} == {
        "ours": "verified", "planted": "bad signature: the entry is not signed"}
    code, out, _ = cli("cron", "ls", *k, *u)
    assert code == 0 and "not fired: bad signature" in out
    code, out, _ = cli("cron", "ls", *u)
    assert code == 0 and "unsigned" in out  # keyless: an unsigned entry among signed ones
    code, _, err = cli("cron", "run-now", "planted", *k, *u)
    assert code == 2 and "is not run: bad signature" in err and err.count("\n") == 1
    code, out, _ = cli("cron", "run-now", "ours", *k, *u)
    assert code == 0 and "enqueued cron:ours:now:" in out
