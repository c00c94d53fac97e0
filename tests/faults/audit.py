"""The audit every fault scenario ends with, and the pieces the scenarios share: a pool of worker
processes that can be killed and replaced, and a producer that retries until each enqueue is
acknowledged.

The audit reads the Redis under test directly (the key schema of docs/internals-tasks.md) and the
recorder's start/end records, and checks, for every task id a producer saw acknowledged:
- it is still in Redis (nothing lost): completed, archived with a reason, or still queued;
- its stored state agrees with exactly one state container (the hash's state char and
  membership of pending (the list, or the prio zset) / lease / scheduled / retry / archived /
  completed);
- it never started after it had completed;
- it started at most 1 + retried times, and each re-run of a task that was never made to fail
  is explained by a recorded lease expiry (retried > 0 with a "lease" reason).

After a failover (``failover_at``) two more outcomes are documented, so counted, not errors: a
task acknowledged but absent (``lost_ok``: an enqueue the dead master had not yet replicated) and
an attempt started twice, the first time before the failover (a dequeue the dead master had not
replicated: the task was pending again on the promoted replica), or an enqueue the producer sent
again after a NotReplicatedError (its unconfirmed copy ran on a master the failover then erased:
the restarted old master serves its slots for a moment before it learns it is now a replica).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from helpers import sized
from zygote import ForkedProcess, Zygote

from asynqpy import Client
from asynqpy.core.model.codec import decode
from asynqpy.core.model.errors import NotReplicatedError, TaskIdConflictError
from asynqpy.core.spine.keys import SERVERS, queue_keys
from asynqpy.redisio.connection import sync_client

TESTS = Path(__file__).resolve().parent.parent
ROOT = TESTS.parent
CONTAINERS = {"p": "pending", "a": "lease", "s": "scheduled", "r": "retry", "x": "archived", "c": "completed",
              "m": "targeted", "w": "waiting", "b": "blocked"}


@dataclass
class Report:
    """What the audit found (figures for the closing note) and what it found wrong."""

    acked: int = 0
    states: Counter[str] = field(default_factory=Counter)
    starts: int = 0
    reruns: int = 0  # starts beyond the first, over all tasks
    lease_reruns: int = 0  # tasks re-run because a lease expired
    lost: int = 0  # acknowledged enqueues absent after a failover (only counted with lost_ok)
    failover_reruns: int = 0  # attempts started again because a failover lost their dequeue
    errors: list[str] = field(default_factory=list)

    def line(self) -> str:
        s = ", ".join(f"{k} {v}" for k, v in sorted(self.states.items()))
        return (f"acked {self.acked}: {s}; starts {self.starts}, re-runs {self.reruns} "
                f"(lease expiries on {self.lease_reruns} tasks, lost dequeues on {self.failover_reruns}); "
                f"lost {self.lost}; problems {len(self.errors)}")

    def add(self, other: Report) -> None:
        """Merge another queue's report into this one."""
        self.acked += other.acked
        self.states.update(other.states)
        for name in ("starts", "reruns", "lease_reruns", "lost", "failover_reruns"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.errors += other.errors


def _records(rec: redis.Redis, key: str) -> dict[str, list[tuple[int, float, int]]]:
    out: dict[str, list[tuple[int, float, int]]] = defaultdict(list)
    for raw in rec.lrange(key, 0, -1):
        id, attempt, t, pid = raw.decode().rsplit("|", 3)  # (a run's id holds a "|" too)
        out[id].append((int(attempt), float(t), int(pid)))
    return out


def most_at_once(starts: dict[str, list[tuple[int, float, int]]], ends: dict[str, list[tuple[int, float, int]]],
                 ids: set[str] | None = None) -> tuple[int, int]:
    """The most runs (of ``ids``, None = all) overlapping at any moment, and how many runs never
    ended (killed: counted as running to the end, which over-counts, safely)."""
    def mine(d: dict[str, list[tuple[int, float, int]]]) -> list[float]:
        return [t for id, runs in d.items() if ids is None or id in ids for _, t, _ in runs]

    begun, ended = mine(starts), mine(ends)
    running = most = 0
    for _, step in sorted([(t, 1) for t in begun] + [(t, -1) for t in ended]):
        running += step
        most = max(most, running)
    return most, len(begun) - len(ended)


def _rerun_before(runs: list[tuple[int, float, int]], extra: int, before: float) -> bool:
    """Are ``extra`` surplus starts explained by attempts started twice, first before ``before``?"""
    by_attempt: dict[int, list[float]] = defaultdict(list)
    for attempt, t, _ in runs:
        by_attempt[attempt].append(t)
    twice = sum(len(ts) - 1 for ts in by_attempt.values() if len(ts) > 1 and min(ts) < before)
    return twice >= extra


def audit(url: str, rec: redis.Redis, acked: dict[str, int], queue: str = "default",
          drained: bool = True, failover_at: float | None = None, lost_ok: bool = False,
          unconfirmed: set[str] | None = None) -> Report:
    """Audit ``acked`` (task id -> planned failures) in ``queue``. ``drained``: every task must
    have finished (completed, or archived with a reason). ``failover_at`` (Unix time the new
    master took over) and ``lost_ok``: see the module docstring."""
    r = sync_client(url)
    q = queue_keys(queue)
    rep = Report(acked=len(acked))
    starts = _records(rec, "starts")
    members = {
        "pending": {x.decode() for x in r.lrange(q.pending, 0, -1)} | {x.decode() for x in r.zrange(q.prio, 0, -1)},
        **{name: {x.decode() for x in r.zrange(getattr(q, attr), 0, -1)}
           for name, attr in (("lease", "lease"), ("scheduled", "scheduled"), ("retry", "retry"),
                              ("archived", "archived"), ("completed", "completed"), ("targeted", "targeted"),
                              ("waiting", "waiting"), ("blocked", "blocked"))},
    }
    values = r.hmget(q.tasks, list(acked)) if acked else []
    for (id, planned), value in zip(acked.items(), values):
        if value is None:
            if lost_ok:
                rep.lost += 1
            else:
                rep.errors.append(f"{id}: lost (acknowledged, not in Redis)")
            continue
        st = value[:1].decode(errors="replace")
        rep.states[st] += 1
        inside = [name for name, ids in members.items() if id in ids]
        if inside != [CONTAINERS.get(st, "?")]:
            rep.errors.append(f"{id}: state {st!r} but found in {inside}")
        msg = decode(value[9:] if st == "a" else value[1:])
        if drained and st not in "cx":
            rep.errors.append(f"{id}: not finished (state {st!r})")
        if st == "x" and not msg.last_error:
            rep.errors.append(f"{id}: archived without a reason")
        runs = starts.get(id, [])
        rep.starts += len(runs)
        rep.reruns += max(0, len(runs) - 1)
        if st == "c":
            if not runs:
                rep.errors.append(f"{id}: completed but never started")
            late = [t for _, t, _ in runs if t * 1000 > msg.completed_at_ms + 50]
            if late:
                who = ", ".join(f"attempt {a} by pid {pid} at {t * 1000 - msg.completed_at_ms:+.0f} ms"
                                for a, t, pid in sorted(runs, key=lambda x: x[1]))
                rep.errors.append(f"{id}: started after it completed ({len(late)} times, "
                                  f"{max(late) * 1000 - msg.completed_at_ms:.0f} ms after; retried "
                                  f"{msg.retried}, last error {msg.last_error!r}; starts: {who})")
        if len(runs) > 1 + msg.retried:
            if id in (unconfirmed or ()) or (
                    failover_at is not None and _rerun_before(runs, len(runs) - 1 - msg.retried, failover_at)):
                rep.failover_reruns += 1  # a dequeue, or an unconfirmed enqueue, the failover erased
            else:
                rep.errors.append(f"{id}: {len(runs)} starts but only {msg.retried} retries recorded")
        if msg.retried > planned:
            rep.lease_reruns += 1
            if planned == 0 and "lease" not in msg.last_error:
                rep.errors.append(f"{id}: re-run without a recorded lease expiry ({msg.last_error!r})")
    return rep


FORK = os.environ.get("ASYNQPY_FORK_WORKERS", "1") == "1"
"""A storm's replacement workers (:meth:`Workers.replace`) are forked from a zygote that imported
asynqpy once (tests/faults/zygote.py: an interpreter's start cost ~0.6 s of CPU, most of a storm's);
the first workers of a pool, and those a scenario starts itself, are interpreters as before (a
scenario timed against a worker's start, like the frozen worker's, keeps its timing).
``ASYNQPY_FORK_WORKERS=0``: an interpreter for each replacement too."""
LIFE = 2.0
"""A forked worker is killed 2 s after its start at the soonest. A forked worker serves within
~0.1 s of CPU (0.6 s wall under a load of 34, where an interpreter took 12 s): a storm bound in
time killed it as soon as it served, made twice the kills of a storm of interpreters under the
same load (57 instead of 26 in test_kill, with lease expiries on 834 tasks instead of 218) and
spent the CPU the zygote saved. With 2 s test_kill made 39 kills under that load (24 with
interpreters) for less CPU than before (issue 43's budget; every kill still lands on a worker
that serves)."""


class Workers:
    """``n`` ``asynqpy worker`` processes serving ``target`` (fault_workers:mux), each replaceable."""

    def __init__(self, url: str, recorder_url: str, n: int, *args: str, log_dir: Path,
                 target: str = "fault_workers:mux", names: list[str] | None = None, fork_first: bool = True) -> None:
        self.url, self.recorder_url, self.args, self.log_dir, self.target = url, recorder_url, args, log_dir, target
        self.names = names  # worker i runs with --name names[i] (its replacements too)
        log_dir.mkdir(parents=True, exist_ok=True)
        self.env = dict(os.environ, ASYNQPY_RECORDER_URL=recorder_url,
                        PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
        # The first workers are forked too (``fork_first``), but where a scenario times one worker
        # against another's start: those start as interpreters (test_stall's frozen worker)
        # (else made at the first replacement, and not at all in a scenario that replaces none)
        self.zygote = Zygote(self.env, str(ROOT)) if FORK and fork_first else None
        self.procs: list[subprocess.Popen[bytes] | ForkedProcess] = []
        self.born: dict[int, float] = {}  # worker i: when its process started
        self.started = 0
        for i in range(n):
            self.procs.append(self._start(i, fork=fork_first))

    def _start(self, i: int, fork: bool = False) -> subprocess.Popen[bytes] | ForkedProcess:
        self.started += 1
        self.born[i] = time.monotonic()
        path = self.log_dir / f"worker-{self.started}.log"
        cmd = [sys.executable, "-m", "asynqpy.cli.main", "--log-level", "INFO", "worker", self.target,
               "--redis-url", self.url, *self.args, *(("--name", self.names[i]) if self.names else ())]
        if fork and FORK:
            if self.zygote is None:
                self.zygote = Zygote(self.env, str(ROOT))
            return self.zygote.start(["asynqpy", *cmd[3:]], path)
        log = open(path, "wb")
        return subprocess.Popen(cmd, env=self.env, cwd=str(ROOT), stdout=log, stderr=subprocess.STDOUT)

    def replace(self, i: int, how: str) -> None:
        """Stop worker ``i`` by ``how`` ("kill": SIGKILL; "term-kill": SIGTERM, then SIGKILL while
        it shuts down) once it serves (:meth:`wait_serving`), and start a new one in its place."""
        self.wait_serving(i)
        if isinstance(self.procs[i], ForkedProcess):
            time.sleep(max(0.0, self.born[i] + LIFE - time.monotonic()))
        p = self.procs[i]
        if how == "term-kill":
            p.send_signal(signal.SIGTERM)
            time.sleep(random.uniform(0.01, 0.3))
        p.kill()
        p.wait(10)
        self.procs[i] = self._start(i, fork=True)

    def wait_serving(self, i: int, timeout: float = 2.0) -> bool:
        """Wait until worker ``i`` serves (its heartbeat lists it: the server id holds its pid);
        False if it did not within ``timeout`` or Redis does not answer (a scenario that stops
        it). A storm kills a worker that serves: a kill of an interpreter still importing tested
        nothing and cost the suite a start (~0.6 s of CPU) each (issue 43: a loaded run of the
        SIGKILL storm made 80 kills, 28 of them before the worker ran at all). Not longer than 2 s
        (a worker serves within ~1 s on a quiet machine): on a machine under a load of 30 a storm
        of 8 s otherwise made 2 kills."""
        r, mark = sync_client(self.url), f":{self.procs[i].pid}:"
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline and self.procs[i].poll() is None:
                if any(mark in m.decode() for m in r.zrange(SERVERS, 0, -1)):
                    return True
                time.sleep(0.05)
            return False
        except redis.RedisError:
            return False
        finally:
            r.close()

    def logs(self) -> str:
        return "\n".join(f.read_text(errors="replace") for f in sorted(self.log_dir.glob("worker-*.log")))

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.zygote is not None:
            self.zygote.stop()


def produce(client: Client, tasks: list[tuple[str, dict[str, Any], dict[str, Any]]], acked: dict[str, int],
            pause: float = 0.0, patience: float = 30.0, unconfirmed: set[str] | None = None) -> None:
    """Enqueue (id, payload, options) one by one with caller ids, retrying each until Redis
    acknowledges it (a TaskIdConflictError on a retry means an earlier attempt was stored; a
    NotReplicatedError means it was stored on the master but not confirmed by its replicas).
    ``unconfirmed`` collects the ids sent again after an error: the unconfirmed copy may have run
    on a master that a failover then erased, before the copy sent again ran; or it was stored (the
    error came after the write), ran and completed within the pause, and the copy sent again, a new
    enqueue of a finished id, replaced it and ran again (documented: an application's own resend of
    a finished task is a new run)."""
    for id, payload, options in tasks:
        deadline = time.monotonic() + patience
        while True:
            try:
                client.enqueue("job", payload, task_id=id, **options)
                break
            except TaskIdConflictError:
                break
            except (redis.RedisError, OSError, NotReplicatedError):
                if time.monotonic() > deadline:
                    raise
                if unconfirmed is not None:
                    unconfirmed.add(id)
                time.sleep(0.05)
        acked[id] = payload.get("fail", 0)
        if pause:
            time.sleep(pause)


def storm(n: int, pause: float) -> tuple[int, float]:
    """A storm's tasks and the producer's pause between two: ``n`` and ``pause`` in the deep run
    (ASYNQPY_DEEP=1, tests/helpers.py), a quarter of the tasks at four times the pause in CI
    (issue 43's budget). The producer runs as long, so the kills, restarts and stalls timed
    against it are as many; what a task costs (its enqueue, runs and records, ~5 ms of CPU) is
    a quarter."""
    tasks = sized(n // 4, n)
    return tasks, pause * n / tasks


def mixed_tasks(n: int, prefix: str = "t", seed: int = 7) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    """``n`` tasks: most succeed after 0-30 ms; 10 % fail once then succeed (retry after 0.1 s);
    5 % fail with no retries left (archived); about 30 % have a priority other than the default (in
    the prio zset while pending). Completed tasks are kept (retention) for the audit."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        x = rnd.random()
        payload: dict[str, Any] = {"ms": rnd.randint(0, 30)}
        options: dict[str, Any] = {"retention": 3600, "retry_delay": 0.1}
        if x < 0.10:
            payload["fail"] = 1
        elif x < 0.15:
            payload["fail"] = 1
            options["max_retry"] = 0
        if rnd.random() < 0.3:
            options["priority"] = rnd.randrange(10)
        out.append((f"{prefix}{i}", payload, options))
    return out


def wait_finished(url: str, n: int, timeout: float, queue: str = "default", lossy: Any = None) -> None:
    """Wait until ``n`` tasks of ``queue`` are completed or archived. ``lossy``: the ids of those
    tasks when an acknowledged enqueue may have been lost (a master killed before its replica had
    it, without ``wait_replicas``: the audit's ``lost_ok``): a task of them absent from the queue
    counts as ended, else the wait outlasts its timeout for a task that will never run."""
    r = sync_client(url)
    q = queue_keys(queue)
    ids = sorted(lossy) if lossy is not None else []
    deadline = time.monotonic() + timeout
    done = 0
    while True:
        try:
            done = r.zcard(q.completed) + r.zcard(q.archived)
            if ids:
                done += sum(v is None for v in r.hmget(q.tasks, ids))
            if done >= n:
                return
        except redis.ConnectionError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"only {done} of {n} tasks finished within {timeout}s")
        time.sleep(0.05)
