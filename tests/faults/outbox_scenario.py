"""The outbox's fault scenario, shared by tests/faults/test_outbox_kill.py (at the suite's size) and
bench/outbox.py (at the issue's: 20 000 transactions, 20 relay kills).

A producer thread runs ``n_tx`` transactions on a PostgreSQL of the scenario's own, each writing
one task into the outbox (``outbox.enqueue``) and committing, or, one in three, rolling back. A
relay process (``asynqpy outbox relay``) is SIGKILLed ``kills`` times at random moments and
started again; PostgreSQL is restarted once (fast shutdown) and redis-server once (a clean stop,
append-only file on); two worker processes run the tasks (tests/faults/fault_workers.py records
every start in the recorder). At the end, with the outbox drained and every task finished:
- every committed transaction's task ran and completed (tests/faults/audit.py: nothing lost,
  no task started twice without a recorded lease expiry);
- no rolled-back transaction's task is in Redis or ever started;
- a transaction whose commit raised (PostgreSQL going down under it: the outcome unknown to the
  producer) ran at most once;
- nothing is left in the outbox.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import sqlalchemy as sa
from audit import ROOT, Report, Workers, audit, wait_finished
from pgserver import PostgresProcess
from redisproc import RedisProcess
from sqlalchemy.orm import Session

from asynqpy.core.spine.keys import queue_keys
from asynqpy.outbox import Outbox

WORKER_ARGS = ("--concurrency", "50", "--lease", "5", "--heartbeat-interval", "0.5", "--shutdown-timeout", "0.5")


@dataclass
class Outcome:
    committed: dict[str, int] = field(default_factory=dict)  # id -> planned failures
    rolled_back: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)  # the commit raised: committed or not
    report: Report | None = None
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        rep = self.report.line() if self.report else "no audit"
        return (f"{len(self.committed)} committed, {len(self.rolled_back)} rolled back, {len(self.unknown)} "
                f"unknown commits; audit: {rep}; outbox problems {len(self.problems)}; {self.seconds:.1f}s")


class _Relay:
    """The relay process, killed and replaced."""

    def __init__(self, db: str, redis_url: str, log_dir: Path) -> None:
        self.db, self.redis_url, self.log_dir, self.started = db, redis_url, log_dir, 0
        self.proc = self._start()

    def _start(self) -> subprocess.Popen[bytes]:
        self.started += 1
        log = open(self.log_dir / f"relay-{self.started}.log", "wb")
        return subprocess.Popen([sys.executable, "-m", "asynqpy.cli.main", "outbox", "relay", "--db", self.db,
                                 "--redis-url", self.redis_url, "--poll", "0.2"], cwd=str(ROOT), stdout=log,
                                stderr=subprocess.STDOUT)

    def running(self) -> bool:
        """Has the current relay process started relaying (its first line written)?"""
        return b"relaying" in (self.log_dir / f"relay-{self.started}.log").read_bytes()

    def wait_running(self, rnd: random.Random) -> None:
        """Until the relay relays, then a random moment of its work (a backlog waits for it)."""
        deadline = time.monotonic() + 30
        while not self.running() and self.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(rnd.uniform(0.0, 0.3))

    def kill_and_restart(self, rnd: random.Random) -> None:
        """SIGKILL the relay at a random moment of its work, start another."""
        self.wait_running(rnd)
        self.proc.kill()
        self.proc.wait(10)
        self.proc = self._start()

    def stop(self) -> int | None:
        """SIGTERM; the relay's exit code (None if it had to be killed)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return None
        return self.proc.returncode


def _produce(ob: Outbox, n_tx: int, out: Outcome, seed: int) -> None:
    rnd = random.Random(seed)
    for i in range(n_tx):
        rollback = i % 3 == 2
        fail = 1 if rnd.random() < 0.1 else 0
        deadline = time.monotonic() + 60
        while True:
            id = None
            try:
                with Session(ob.engine) as s:
                    s.begin()
                    id = ob.enqueue(s, "job", {"ms": rnd.randint(0, 5), "fail": fail}, retention=3600,
                                    retry_delay=0.1)
                    if rollback:
                        s.rollback()
                        out.rolled_back.append(id)
                        break
                    try:
                        s.commit()
                    except sa.exc.DBAPIError:
                        out.unknown.append(id)  # (a new transaction follows: this one's fate is open)
                        raise
                    out.committed[id] = fail
                    break
            except sa.exc.DBAPIError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)  # PostgreSQL is restarting


def run(n_tx: int, kills: int, recorder: RedisProcess, log_dir: Path, seed: int = 7,
        pg: PostgresProcess | None = None) -> Outcome:
    """The scenario (see the module's docstring); what it found."""
    rnd = random.Random(seed)
    own_pg = pg is None
    pg = pg or PostgresProcess()
    server = RedisProcess("--appendonly", "yes", "--appendfsync", "everysec")
    rec = redis.Redis.from_url(recorder.url)
    rec.flushall()
    db = pg.create_database("outbox_faults")
    engine = sa.create_engine(db, pool_pre_ping=True)
    ob = Outbox(engine)
    ob.create_table()
    out = Outcome()
    log_dir.mkdir(parents=True, exist_ok=True)
    workers = Workers(server.url, recorder.url, 2, *WORKER_ARGS, log_dir=log_dir)
    relay = _Relay(db, server.url, log_dir)
    t0 = time.monotonic()
    try:
        producer = threading.Thread(target=_produce, args=(ob, n_tx, out, seed))
        producer.start()
        faults = ["kill"] * kills + ["pg", "redis"]
        rnd.shuffle(faults)
        while producer.is_alive() or faults:
            time.sleep(rnd.uniform(0.0, 0.2))
            if not faults:
                producer.join(0.5)
                continue
            fault = faults.pop()
            if fault == "kill":
                relay.kill_and_restart(rnd)
            elif fault == "pg":
                relay.wait_running(rnd)  # (each fault meets a relay at work)
                pg.stop(keep_dir=True)
                time.sleep(0.3)
                pg.restart()
            else:
                relay.wait_running(rnd)
                server.stop(keep_dir=True)
                time.sleep(0.3)
                server = server.restart()
        producer.join()
        _wait_drained(ob, 120)
        maybe = set(out.unknown) - set(out.committed)
        wait_finished(server.url, len(out.committed) + _stored(server.url, maybe), timeout=120)
        out.report = audit(server.url, rec, out.committed)
        out.problems = _check_rest(server.url, rec, out.rolled_back, maybe)
        code = relay.stop()
        if code != 0:
            out.problems.append(f"the relay did not stop on SIGTERM with exit code 0 (got {code})")
    finally:
        out.seconds = time.monotonic() - t0
        relay.stop()
        workers.stop()
        server.stop()
        engine.dispose()
        if own_pg:
            pg.stop()
    return out


def _wait_drained(ob: Outbox, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with ob.engine.connect() as c:
                left = c.execute(sa.select(sa.func.count()).select_from(ob.table)).scalar_one()
        except sa.exc.DBAPIError:
            left = -1
        if left == 0:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{left} rows left in the outbox after {timeout}s")
        time.sleep(0.1)


def _stored(url: str, ids: set[str]) -> int:
    if not ids:
        return 0
    r = redis.Redis.from_url(url)
    return sum(1 for v in r.hmget(queue_keys("default").tasks, sorted(ids)) if v is not None)


def _check_rest(url: str, rec: redis.Redis, rolled_back: list[str], maybe: set[str]) -> list[str]:
    """Rolled-back tasks never in Redis nor started; unknown commits started at most once each
    (planned failures aside: 1 + retries)."""
    r = redis.Redis.from_url(url)
    problems: list[str] = []
    tasks = queue_keys("default").tasks
    starts: dict[str, int] = {}
    for raw in rec.lrange("starts", 0, -1):
        id = raw.decode().rsplit("|", 3)[0]
        starts[id] = starts.get(id, 0) + 1
    for id, value in zip(rolled_back, r.hmget(tasks, rolled_back) if rolled_back else []):
        if value is not None or starts.get(id):
            problems.append(f"{id}: rolled back, yet enqueued")
    for id in maybe:
        if starts.get(id, 0) > 2:  # (a planned failure makes 2)
            problems.append(f"{id}: commit of unknown outcome, started {starts[id]} times")
    return problems

