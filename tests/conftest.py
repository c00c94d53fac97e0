"""Test fixtures: fakeredis for fast unit tests, a real redis-server and a real Redis Cluster
(3 masters) started by the test session on free loopback ports and stopped at its end; a Cluster
with a replica per master only where a test of replication asks for one."""

from __future__ import annotations

import functools
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fakeredis
import pytest
import redis
from hypothesis import settings
from hypothesis.internal.conjecture import engine as hypothesis_engine

sys.path.insert(0, str(Path(__file__).parent))
from pgserver import PostgresProcess
from pgserver import available as postgres_available
from redisproc import RedisCluster, RedisProcess

from asynqpy.redisio.connection import async_client, sync_client
from asynqpy.redisio.memory import install as compile_scripts_once

pytest_plugins = ["otel_spans"]  # the tracing tests' ``spans`` fixture (tests/otel_spans.py)

compile_scripts_once()  # fakeredis compiles each script once, as Redis does (asynqpy/redisio/memory.py)

# redis-py (8.x) reads its own version from the installed package's metadata (importlib.metadata:
# a scan of sys.path and an email-header parse, ~0.8 ms) for every client made without a driver_info;
# asynqpy's clients give it once (asynqpy/redisio/connection.py), the tests' own clients (redis.Redis,
# fakeredis) did not: ~5 per test. Read once here: the same version, the same CLIENT SETINFO.
redis.utils.get_lib_version = functools.cache(redis.utils.get_lib_version)


def _command_table_once() -> None:
    """redis-py's cluster clients send COMMAND as they start and parse the ~240 commands' reply
    (their key positions: ~10 ms of CPU, half of what starting a client costs); the tests start
    several per cluster test. Every server of a test process is the same redis-server, so each
    client kind's table is read once per process and copied into each new client's parser."""
    from redis._parsers.commands import CommandsParser

    first = CommandsParser.initialize
    table: dict[str, Any] = {}

    def initialize(self: Any, r: Any) -> None:
        if not table:
            first(self, r)
            table.update(self.commands)
        self.commands = dict(table)

    CommandsParser.initialize = initialize

    from redis._parsers.commands import AsyncCommandsParser

    first_async = AsyncCommandsParser.initialize
    table_async: dict[str, Any] = {}

    async def initialize_async(self: Any, node: Any = None) -> None:
        if not table_async:
            await first_async(self, node)
            table_async.update(self.commands)
        elif node:
            self.node = node
        self.commands = dict(table_async)

    AsyncCommandsParser.initialize = initialize_async


_command_table_once()

# Every interpreter the tests start (workers, CLI runs, bench adapters) imports less: redis-py's own
# import of the OpenTelemetry SDK's metrics, ~0.12 s of CPU per process, finds no SDK there
# (tests/childsite/sitecustomize.py says why that changes nothing the tests check; ASYNQPY_CHILDSITE=0:
# as before, to compare)
if os.environ.get("ASYNQPY_CHILDSITE", "1") == "1":
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(Path(__file__).parent / "childsite"), os.environ.get("PYTHONPATH", "")) if p)

# Property tests (hypothesis): no example database written to the worktree; a failure prints the
# @reproduce_failure blob to replay it. Shrinking a failure stops after 20 s (hypothesis allows
# 300 s and has no public setting for it), so the shrunk example is reported within a test's bound.
settings.register_profile("asynqpy", database=None, print_blob=True, deadline=None)
settings.load_profile("asynqpy")
hypothesis_engine.MAX_SHRINKING_SECONDS = 20

REQUIRE_REAL = os.environ.get("ASYNQPY_REQUIRE_REAL") == "1"
FAST = os.environ.get("ASYNQPY_FAST") == "1"
"""The fast tier (``bash scripts/test --fast``): fakeredis only; nothing real is started."""


def _weight(item: pytest.Item) -> int:
    """0 for the long tests (marked slow or cluster), 1 for those on redis-server, 2 for the rest."""
    if item.get_closest_marker("slow") or item.get_closest_marker("cluster"):
        return 0
    param = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
    return 1 if item.get_closest_marker("real") or param in ("real", "cluster") else 2


HEAVY_LANES = 2
"""Under pytest-xdist, the tests marked slow (worker processes killed and restarted, a cluster
failing over, a browser, benchmarks: each loads the machine and some wait on leases and
heartbeats) run in this many lanes, one test at a time in each (``xdist_group`` heavy-0,
heavy-1: with ``--dist loadgroup`` a group runs in one worker); the other workers run the rest.
More of them at once on a 2-core machine only starved each other's processes. A slow test marked
``one_process`` (a long hypothesis run: one process busy on the CPU, nothing waiting on leases)
runs beside the others instead: in a lane it only lengthened the lanes, the suite's longest path."""


def _lane_unit(item: pytest.Item) -> str:
    """What goes to one lane whole: a test module whose tests share a module-scoped fixture (its
    set-up, a worker killed at every point, runs once, not once per lane: ~14 s of wall time and
    ~6 s of CPU each), else the test alone."""
    defs = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    shared = any(d.scope in ("module", "package", "class") for ds in defs.values() for d in ds)
    return item.nodeid.split("::")[0] if shared else item.nodeid


def _lane_cost(unit: list[pytest.Item]) -> float:
    """What a lane's unit of slow tests weighs: sqrt(n) for n tests (a module's tests share their
    set-up; most are short), or more where a test says so (``@pytest.mark.slow(cost=3)``: about
    three times a typical slow test's ~13 s in CI). Without the costs, the three longest tests (the
    bench smoke, the wheel, the schedulers killed: ~87 s) fell in one lane, ~100 s of the longest
    tests more than the other, and that lane ended the run."""
    marked = [float(m.kwargs.get("cost", 1)) for m in (i.get_closest_marker("slow") for i in unit) if m]
    return max([len(unit) ** 0.5, *marked])


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In the fast tier, leave out what needs a real server, a browser or many processes: tests
    marked real, cluster or slow, and the redis-server and cluster cases of ``backend``.

    Under pytest-xdist (``-n N``), the long tests come first (a stable sort, the same in every
    worker, as xdist requires): the scheduler hands them out first, so none starts last and keeps
    one worker busy while the others are done; the slow ones go to :data:`HEAVY_LANES` lanes."""
    if hasattr(config, "workerinput"):
        items.sort(key=_weight)
        heavy = [item for item in items if item.get_closest_marker("slow") and not item.get_closest_marker("one_process")]
        units: dict[str, list[pytest.Item]] = {}
        for item in heavy:
            units.setdefault(_lane_unit(item), []).append(item)
        load = [0.0] * HEAVY_LANES  # each unit to the lane with the least so far, the costliest first
        for unit in sorted(units.values(), key=_lane_cost, reverse=True):  # (a stable sort: the same everywhere)
            lane = load.index(min(load))
            load[lane] += _lane_cost(unit)
            for item in unit:
                item.add_marker(pytest.mark.xdist_group(f"heavy-{lane}"))
    if not FAST:
        return
    keep, drop = [], []
    for item in items:
        param = getattr(getattr(item, "callspec", None), "params", {}).get("backend")
        marked = any(item.get_closest_marker(m) for m in ("real", "cluster", "slow"))
        (drop if marked or param in ("real", "cluster") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under ``--dist loadgroup``, a test xdist was asked to group must carry its group in its node
    id (how xdist's scheduler sees it). pytest 9.2 made node ids structured and xdist 3.8's renaming
    silently did nothing (pytest-xdist#1386): the lanes were gone and every worker took the slow
    tests at once, a run only slower. Such a test fails here, saying why (a worker's own error would
    only show as xdist's internal error; pyproject.toml holds pytest below 9.2 until xdist follows)."""
    config = session.config
    if not hasattr(config, "workerinput") or not config.getvalue("loadgroup"):
        return
    for item in session.items:
        mark = item.get_closest_marker("xdist_group")
        if mark and not item.nodeid.endswith(f"@{mark.args[0]}"):
            why = (f"pytest-xdist did not put {item.nodeid} in its group {mark.args[0]}: this pytest "
                   f"({pytest.__version__}) and pytest-xdist do not work together under --dist loadgroup")
            item.runtest = functools.partial(pytest.fail, why, pytrace=False)  # type: ignore[method-assign]


def _cpu_seconds() -> float:
    """User + system CPU of this process and of its children it has waited for (the worker
    processes, relays and interpreters a test starts and stops; not the session's servers)."""
    import resource

    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


_cpu_start = pytest.StashKey[float]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    item.stash[_cpu_start] = _cpu_seconds()


_cpu_by_test: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "cpu_s" and report.when == "call":
            _cpu_by_test[report.nodeid] = float(value)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """With ``--durations``: also the tests that cost the most CPU (``--durations`` of them), and
    the CPU of all, per file and in total (the suite's budget on a 2-core machine is CPU)."""
    n = config.getoption("durations", None)
    if not n or not _cpu_by_test:
        return
    tr = terminalreporter
    tr.write_sep("=", f"most CPU (setup and call: this process and the children it waited for; {len(_cpu_by_test)} tests)")
    for nodeid, cpu in sorted(_cpu_by_test.items(), key=lambda kv: -kv[1])[:n]:
        tr.write_line(f"{cpu:8.1f}s cpu {nodeid}")
    files: dict[str, float] = {}
    for nodeid, cpu in _cpu_by_test.items():
        files[nodeid.split("::")[0]] = files.get(nodeid.split("::")[0], 0.0) + cpu
    tr.write_line("per file: " + ", ".join(f"{f.removeprefix('tests/')} {c:.0f}s"
                                           for f, c in sorted(files.items(), key=lambda kv: -kv[1])[:n]))
    tr.write_line(f"total: {sum(_cpu_by_test.values()):.0f}s cpu")


_CPU_LOG = os.environ.get("ASYNQPY_TEST_CPU_LOG")
"""A folder: each test process appends a line per test phase (setup, call, teardown) to a file of
its own there: the node id, the phase, its CPU seconds (this process and the children it waited
for) and its wall seconds. How the budget's figures per block were measured
(docs/internals-testing.md); ``python tests/cpulog.py FOLDER`` sums them."""
_phase_cpu = pytest.StashKey[float]()


def _log_phase(item: pytest.Item, when: str, wall: float) -> None:
    if not _CPU_LOG:
        return
    now = _cpu_seconds()
    start = item.stash.get(_phase_cpu, item.stash.get(_cpu_start, now))
    item.stash[_phase_cpu] = now
    worker = getattr(item.config, "workerinput", {}).get("workerid", "main")
    with open(os.path.join(_CPU_LOG, f"{worker}-{os.getpid()}.tsv"), "a", encoding="utf-8") as f:
        f.write(f"{item.nodeid}\t{when}\t{now - start:.3f}\t{wall:.3f}\n")


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Under pytest-xdist, a report goes to the main process through execnet, which refuses a
    string that is not UTF-8: a lone surrogate, as a log line of a test on non-UTF-8 task ids
    carries, crashed the worker. Such characters are written as escapes (\\udcff) instead."""
    outcome: Any = yield
    report = outcome.get_result()
    _log_phase(item, call.when, report.duration)
    # the test's CPU, setup and call (pytest_terminal_summary); not its teardown: the last test of a
    # process tears the session's servers down, and their whole CPU would count as that test's
    if call.when == "call" and _cpu_start in item.stash:
        report.user_properties.append(("cpu_s", round(_cpu_seconds() - item.stash[_cpu_start], 2)))
    if not hasattr(item.config, "workerinput"):
        return
    report.sections = [(name, _utf8(text)) for name, text in report.sections]
    if report.longrepr is not None:
        try:
            str(report.longrepr).encode("utf-8")
        except UnicodeEncodeError:
            report.longrepr = _utf8(str(report.longrepr))


def _need_redis() -> None:
    if FAST:
        pytest.skip("the fast tier runs on fakeredis only (bash scripts/test runs every tier)")
    if shutil.which("redis-server") is None:
        if REQUIRE_REAL:
            pytest.fail("redis-server is required (ASYNQPY_REQUIRE_REAL=1) but not installed")
        pytest.skip("redis-server not installed")


IDLE_HZ = 1
IDLE_QUIET = ("--hz", str(IDLE_HZ))
"""The shared servers' background tasks run once a second instead of 10 times (Redis's ``hz``):
idle, a worker's redis-server and 3-node Cluster took ~1.4 % of a core (~25 s of CPU over a
run of the suite's 4 workers), ~0.25 % with it. What ``hz`` paces is not what the tests read:
an expired key is gone for every command that reads it (lazy expiry), blocked commands time out
on their own timers, and the Cluster's failure detection is not used there (its node timeout is
Redis's default 15 s: a node busy for a second under a loaded run is not failed; the failover
tests start their own Clusters). The Cluster's nodes take it once they have joined
(``RedisCluster(idle_hz=)``): a join moves at the cron's pace."""


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisProcess]:
    _need_redis()
    proc = RedisProcess(*IDLE_QUIET)
    yield proc
    proc.stop()


@pytest.fixture
def redis_url(redis_server: RedisProcess) -> str:
    """URL of the session's real redis-server, flushed for this test."""
    redis.Redis.from_url(redis_server.url).flushall()
    return redis_server.url


@pytest.fixture(scope="session")
def cluster_server() -> Iterator[RedisCluster]:
    _need_redis()
    c = RedisCluster(masters=3, replicas=0, node_timeout=15_000, idle_hz=IDLE_HZ)
    yield c
    c.stop()


@pytest.fixture(scope="session")
def replicated_cluster() -> Iterator[RedisCluster]:
    """A 3-master Cluster with a replica per master, for the tests of ``wait_replicas`` on a
    cluster, started in the worker process that runs one. The shared ``cluster_server`` has no
    replicas: a Cluster node costs ~0.35 % of a core while idle (its cron and its bus), and the
    three replicas of each worker's Cluster came to ~15 s of CPU over the suite."""
    _need_redis()
    c = RedisCluster(masters=3, replicas=1)
    yield c
    c.stop()


_collections = iter(range(1 << 30))


def _collect_garbage() -> None:
    """Collect the cycles a test left: a cluster client some test did not close logs "Unclosed
    RedisCluster client" (asyncio, level ERROR) when collected, which happened in whatever test ran
    next on that process, and failed one that counts its warnings (under xdist's order).

    The objects that survive are then frozen (``gc.freeze``): the next collection scans only what
    was made since, not the whole heap of the session (a full collection after each of the ~300
    cluster tests took ~50 ms each). A frozen object is still freed when its last reference goes,
    but a frozen cycle never is: the Redis clients a test leaves open (their sockets), alive when
    frozen and dropped later, stayed open for good, and a process that ran ~950 tests (the suite
    on 3 workers) passed 1 024 descriptors (``select`` refused one). So every 16th time the heap is
    thawed first and collected whole (~1 s of CPU a run): one process running 300 of the tests in
    a row held 25-57 descriptors, where one had grown to 224 over 700 tests before."""
    import gc

    if next(_collections) % 16 == 15:
        gc.unfreeze()
    gc.collect()
    gc.freeze()


def _need_postgres() -> None:
    """Skip a test that needs PostgreSQL where it is not installed, except where the suite must
    run every test (CI=true, or ASYNQPY_REQUIRE_REAL=1 as scripts/test sets): there it fails."""
    if FAST:
        pytest.skip("the fast tier starts no real server (bash scripts/test runs every tier)")
    if not postgres_available():
        if REQUIRE_REAL or os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL (initdb, postgres) is required but not installed: apt-get install postgresql")
        pytest.skip("PostgreSQL not installed (apt-get install postgresql: initdb and postgres)")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresProcess]:
    """A throw-away PostgreSQL (tests/pgserver.py) for the session (one per xdist worker, on the
    worker's own ports), stopped and removed at its end."""
    _need_postgres()
    proc = PostgresProcess()
    yield proc
    proc.stop()


_pg_databases = iter(range(1 << 30))


@pytest.fixture
def pg_url(postgres_server: PostgresProcess) -> str:
    """The SQLAlchemy URL (psycopg 3) of a database of its own for this test, on the session's
    PostgreSQL (created from template0: ~0.1 s)."""
    return postgres_server.create_database(f"t{next(_pg_databases)}")


@pytest.fixture
def cluster_url(cluster_server: RedisCluster) -> Iterator[str]:
    cluster_server.flush()
    yield cluster_server.url
    _collect_garbage()


class Backend:
    """A pair of sync/async clients on one Redis: fakeredis, the real server or the real cluster
    (through asynqpy's own ``redis+cluster://`` URL handling)."""

    def __init__(self, kind: str, url: str | None) -> None:
        self.kind = kind
        self.url = url
        if kind == "fake":
            self._server = fakeredis.FakeServer()
            self.sync: Any = fakeredis.FakeRedis(server=self._server)
        elif kind == "cluster":
            self.sync = sync_client(url)
        else:
            self.sync = redis.Redis.from_url(url)  # type: ignore[arg-type]
            self.sync.flushall()

    def new_async(self) -> Any:
        if self.kind == "fake":
            return fakeredis.FakeAsyncRedis(server=self._server)
        if self.kind == "cluster":
            return async_client(self.url)
        import redis.asyncio as aredis

        return aredis.Redis.from_url(self.url)  # type: ignore[arg-type]


@pytest.fixture(params=["fake", "real", pytest.param("cluster", marks=pytest.mark.cluster)])
def backend(request: pytest.FixtureRequest) -> Backend:
    """Runs a test on fakeredis[lua], on the real redis-server and on the real Redis Cluster."""
    if request.param == "real":
        server = request.getfixturevalue("redis_server")
        return Backend("real", server.url)
    if request.param == "cluster":
        return Backend("cluster", request.getfixturevalue("cluster_url"))  # (collects garbage after)
    return Backend("fake", None)


class TimeBoundExceeded(Exception):
    """A test ran past its time bound. Not a TimeoutError: that is an OSError, which redis-py
    takes for a broken connection and retries, so an alarm firing during a Redis call was lost."""


@pytest.fixture(autouse=True)
def _bounded_in_time(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test is bounded in time: 60 s, or 240 s for tests marked slow/cluster. The bound
    catches hangs, not a busy machine: while the machine has more runnable processes than CPUs
    (load average, as under pytest-xdist or beside other jobs), the bound is stretched, 30 s at a
    time, up to 4 times its length; a test that hangs still fails, later."""
    import signal
    import time

    slow = request.node.get_closest_marker("slow") or request.node.get_closest_marker("cluster")
    limit = 240 if slow else 60
    start = time.monotonic()

    def on_alarm(signum: int, frame: Any) -> None:
        elapsed = time.monotonic() - start
        busy = os.getloadavg()[0] > (os.cpu_count() or 1)
        if busy and limit - 1 <= elapsed <= 4 * limit - 30:  # (not an alarm a test set shorter)
            signal.alarm(30)
            return
        raise TimeBoundExceeded(f"test exceeded its {limit}s time bound (ran {elapsed:.0f}s)")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(limit)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
