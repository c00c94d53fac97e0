"""The rolling upgrade from the previous release (releases.toml's newest, built from its commit into a
venv of its own: tests/release.py) to the current code, and the rollback, on a real redis-server.

Old and new producers enqueue tasks of every kind (pending, scheduled, retried, archived, keyed,
tenants', grouped, waiting on a parent, unique with a priority, held for a newer worker version,
durable processes) while old workers are replaced by new ones one at a time, under load (the
first stopped with SIGTERM, a graceful stop; the second killed, SIGKILL: its tasks run again after
their lease); then the rollback: an old worker comes back, new producers go on, the new workers
leave. Then nothing is lost (every task ran, or was archived, or went into exactly one aggregate),
no attempt of a task ran twice (a lease expiry counts as a failed attempt: the killed worker's
tasks run again as their next attempt, and end as they would have), and every worker stopped
exited 0 with no traceback in its log but the deliberate failures'. Last, a store stamped with a newer protocol (what a
future ``asynqpy upgrade`` leaves) is refused by the old release, clearly (exit 2).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from release import build, has_commit, releases

from asynqpy import Inspector
from asynqpy.cli.main import main as cli
from asynqpy.core.spine.keys import PROTOCOL

pytestmark = [pytest.mark.real, pytest.mark.slow]

APP = textwrap.dedent('''
    """Handlers every worker of the test runs, old release or new: public API only."""
    import asyncio, os, sys
    import redis
    from asynqpy import Input, Process, ServeMux, Server, Step

    URL, TAG, VERSION = os.environ["RU_URL"], os.environ["RU_TAG"], os.environ["RU_VERSION"]
    r = redis.Redis.from_url(URL)
    mux = ServeMux()

    @mux.handle("ru:work")
    async def work(task):
        r.rpush("ru:runs", f"{task.id} {task.retry_count} {TAG}")
        await asyncio.sleep(task.payload.get("sleep", 0.01))
        if task.payload.get("fail") or (task.payload.get("fail_first") and task.retry_count == 0):
            raise RuntimeError("this attempt fails (on purpose)")
        return TAG

    @mux.handle("ru:digest")
    async def digest(task):
        r.rpush("ru:runs", f"{task.id} {task.retry_count} {TAG}")
        r.rpush("ru:digested", *[f"{i} {task.id}" for i in task.payload["ids"]])

    def aggregate(group, tasks):
        return "ru:digest", {"ids": [t.id for t in tasks]}

    @mux.process("ru-proc")
    def proc(p: Process, i: Input):
        if i.kind == "init":
            return Step(state={"n": i.args["n"], "by": TAG})
        return Step(response=(p.state or {}).get("n"))

    Server(URL, queues={"ru": 1}, concurrency=4, name=TAG, version=VERSION, shutdown_timeout=8, lease=2,
           heartbeat_interval=0.5,
           group_aggregator=aggregate, group_grace_period=0.3, group_max_delay=2).run(mux)
''')

PRODUCE = textwrap.dedent('''
    """A producer (old release or new): N tasks of every kind, a little at a time; writes what it
    expects of each to OUT (a JSON list of [id, kind])."""
    import json, sys, time
    from asynqpy import Client

    url, tag, n, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    want = []
    with Client(url) as c:
        for i in range(n):
            kind = i % 10
            o = {"queue": "ru", "retention": 600}  # (kept once completed: the test reads its end)
            payload = {"i": i}
            if kind == 0:
                payload["sleep"] = 0.3  # (likely running when a worker is stopped or killed)
            elif kind == 1:
                o["process_in"] = 1.5
            elif kind == 2:
                payload["fail_first"], o["retry_delay"] = True, 0.3
            elif kind == 3:
                payload["fail"], o["max_retry"] = True, 0
            elif kind == 4:
                o["key"] = f"k{i % 3}"
            elif kind == 5:
                o["tenant"] = f"t{i % 3}"
            elif kind == 6:
                o["group"] = f"g-{tag}-{i % 2}"
            elif kind == 7:
                parent = c.enqueue("ru:work", {"parent": i}, queue="ru", retention=600)  # (done before its child)
                want.append([parent.id, 0])
                o["after"] = [parent]
            elif kind == 8:
                o["priority"], o["unique_key"] = 9, f"u-{tag}-{i}"
            elif kind == 9:
                o["min_worker_version"] = "2.0"
            want.append([c.enqueue("ru:work", payload, **o).id, kind])
            if kind == 0:
                pid = f"p-{tag}-{i}"
                assert c.start_process("ru-proc", pid, {"n": i}, queue="ru")
                want.append([pid, "process"])
            time.sleep(0.02)
    with open(out, "w") as f:
        json.dump(want, f)
''')

ONCE = {0, 1, 4, 5, 7, 8, 9}
"""Kinds that run once and complete (2: fails once, then completes; 3: archived; 6: aggregated)."""


class Fleet:
    """The processes of the test: workers and producers of either release."""

    def __init__(self, tmp: Path, url: str, old_python: Path) -> None:
        self.tmp, self.url, self.old = tmp, url, old_python
        (tmp / "app.py").write_text(APP)
        (tmp / "produce.py").write_text(PRODUCE)
        self.workers: dict[str, subprocess.Popen[bytes]] = {}
        self.expected: list[Path] = []
        self.killed: set[str] = set()
        self.producers: list[subprocess.Popen[bytes]] = []

    def python(self, release: str) -> str:
        return str(self.old) if release == "old" else sys.executable

    def worker(self, tag: str, release: str, version: str) -> None:
        env = {**os.environ, "RU_URL": self.url, "RU_TAG": tag, "RU_VERSION": version}
        with open(self.tmp / f"{tag}.log", "wb") as log:  # (the child writes to its own copy)
            self.workers[tag] = subprocess.Popen([self.python(release), str(self.tmp / "app.py")], cwd=self.tmp,
                                                 env=env, stdout=log, stderr=subprocess.STDOUT)

    def produce(self, tag: str, release: str, n: int) -> subprocess.Popen[bytes]:
        out = self.tmp / f"want-{tag}.json"
        self.expected.append(out)
        proc = subprocess.Popen([self.python(release), str(self.tmp / "produce.py"), self.url, tag, str(n), str(out)],
                                cwd=self.tmp)
        self.producers.append(proc)
        return proc

    def up(self, insp: Inspector, *tags: str, timeout: float = 60) -> None:
        """Wait until the workers ``tags`` are registered (their heartbeat's record is in Redis)."""
        deadline = time.monotonic() + timeout
        while not set(tags) <= {s.name for s in insp.servers()}:
            for tag in tags:
                assert self.workers[tag].poll() is None, self.log(tag)
            assert time.monotonic() < deadline, f"workers {tags} did not come up"
            time.sleep(0.1)

    def stop(self, *tags: str) -> None:
        """A graceful stop (SIGTERM), as a deploy does, of the workers ``tags`` at once; each must
        exit 0, with no traceback in its log but those of the deliberate failures."""
        for tag in tags:
            assert self.workers[tag].poll() is None, f"worker {tag} died before its stop:\n{self.log(tag)}"
            self.workers[tag].send_signal(signal.SIGTERM)
        for tag in tags:
            proc = self.workers[tag]
            assert proc.wait(30) == 0, f"worker {tag} exited {proc.returncode}:\n{self.log(tag)}"
            log = (self.tmp / f"{tag}.log").read_text(errors="replace")
            assert log.count("Traceback (most recent call last)") == log.count(
                "\nRuntimeError: this attempt fails (on purpose)\n"), log[-5000:]
            assert "malformed" not in log, log[-5000:]

    def kill(self, tag: str) -> None:
        """A worker killed (SIGKILL): its tasks run again once their leases expire."""
        assert self.workers[tag].poll() is None, f"worker {tag} died before its kill:\n{self.log(tag)}"
        self.killed.add(tag)
        self.workers[tag].kill()
        self.workers[tag].wait()

    def log(self, tag: str) -> str:
        return (self.tmp / f"{tag}.log").read_text(errors="replace")[-3000:]

    def close(self) -> None:
        for proc in [*self.workers.values(), *self.producers]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _problems(r: Any, insp: Inspector, want: list[list[Any]], killed: set[str]) -> list[str]:
    """What is not as it must be yet: each task's attempts (each attempt ran once: a lease expiry
    counts as a failed attempt, so what a killed worker ran runs again as the next attempt), how
    each ended (the attempts it was meant to take; where a worker of ``killed`` ran one: completed,
    or archived if meant to fail), the archive, the aggregates (each task in one), the processes,
    and the queue drained."""
    lines = [line.decode().split() for line in r.lrange("ru:runs", 0, -1)]
    attempts = Counter((task_id, retry) for task_id, retry, _ in lines)
    # Touched: a task a killed worker ran, or one whose lease expired (the killed worker may have
    # taken it and died before its handler's first line wrote the run, or taken a task too new for
    # it and died before giving it back: an attempt that ends in a lease expiry without a run)
    touched = {task_id for task_id, _, tag in lines if tag in killed}
    touched |= {e.task_id for e in insp.events("ru") if e.event == "lease_expired"}
    twice = [a for a, n in attempts.items() if n > 1]
    ran: dict[str, set[int]] = defaultdict(set)
    for task_id, retry in attempts:
        ran[task_id].add(int(retry))
    digested = Counter(task_id for task_id, _ in {tuple(i.decode().split()) for i in r.lrange("ru:digested", 0, -1)})
    archived = {t.id for t in insp.list_tasks("ru", "archived", page_size=1000)}
    completed = {t.id for page in range(1, 4) for t in insp.list_tasks("ru", "completed", page, page_size=1000)}
    out = [f"ran twice: {twice[:5]}"] if twice else []
    for task_id, kind in want:
        if kind == "process":
            p = insp.process("ru", task_id)
            ok = p.status not in ("starting", "error") and (p.state or {}).get("n") is not None
        elif task_id in touched:
            ok = task_id in (archived if kind == 3 else completed)
        else:
            tries = ran.get(task_id, set())
            ok = {2: tries == {0, 1}, 3: tries == {0} and task_id in archived,
                  6: not tries and digested[task_id] == 1}.get(kind, tries == {0})
        if not ok:
            out.append(f"{kind} {task_id}: ran {sorted(ran.get(task_id, ()))}, digested {digested[task_id]}")
    info = insp.queue_info("ru")
    left = {k: getattr(info, k) for k in ("pending", "active", "scheduled", "retry", "aggregating", "waiting",
                                           "blocked") if getattr(info, k)}
    unexpected = archived - {task_id for task_id, kind in want if kind == 3}
    out += [f"archived, though it should not be: {sorted(unexpected)[:5]}"] if unexpected else []
    return out + ([f"left in the queue: {left}"] if left else [])


def _keys(r: Any) -> tuple[set[bytes], set[bytes]]:
    """Every key of the store, and those of them without a TTL."""
    keys = set(r.scan_iter(count=1000))
    return keys, {k for k in keys if r.pttl(k) == -1}


def _settle(r: Any, insp: Inspector, fleet: Fleet, timeout: float = 60) -> list[list[Any]]:
    want = [w for path in fleet.expected for w in json.loads(path.read_text())]
    deadline = time.monotonic() + timeout
    while (problems := _problems(r, insp, want, fleet.killed)) and time.monotonic() < deadline:
        assert not any(p.startswith("ran twice") for p in problems), problems
        time.sleep(0.2)
    assert not problems, problems[:10]
    return want


@pytest.mark.slow(cost=1.5)  # (its lane's weight: tests/conftest.py _lane_cost)
def test_rolling_upgrade_from_the_previous_release_and_back(redis_url: str, tmp_path: Path) -> None:
    head = subprocess.run(["git", "-C", str(Path(__file__).parent), "rev-parse", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    earlier = [r for r in releases() if r.commit != head]  # (on a release's own commit: the one before)
    if not earlier:
        pytest.skip("releases.toml records no release before this commit: nothing to upgrade from")
    previous = earlier[-1]
    if not has_commit(previous.commit):
        pytest.skip(f"this clone lacks release {previous.version}'s commit {previous.commit[:12]} (releases.toml): "
                    "a shallow clone or a tarball; fetch it (git fetch --unshallow) to run the upgrade test")
    fleet = Fleet(tmp_path, redis_url, build(previous))
    r = redis.Redis.from_url(redis_url)
    try:
        with Inspector(redis_url) as insp:
            # 1. The previous release runs: two old workers, an old producer and a new one.
            fleet.worker("old-1", "old", "1.0")
            fleet.worker("old-2", "old", "1.0")
            producers = [fleet.produce("p-old", "old", 60), fleet.produce("p-new", "new", 60)]
            fleet.up(insp, "old-1", "old-2")
            # 2. The rolling upgrade, under load: each old worker replaced by a new one, one at a time;
            # the second one killed (a deploy that does not wait): its tasks run again after its lease.
            # (the new ones start together, and each old one leaves once its replacement serves)
            fleet.worker("new-1", "new", "2.0")
            fleet.worker("new-2", "new", "2.0")
            fleet.up(insp, "new-1")
            fleet.stop("old-1")
            fleet.up(insp, "new-2")
            fleet.kill("old-2")
            fleet.worker("old-3", "old", "2.0")  # the rollback's (step 3), starting meanwhile
            assert [p.wait(60) for p in producers] == [0, 0]
            want = _settle(r, insp, fleet)
            by = Counter(line.decode().split()[2] for line in r.lrange("ru:runs", 0, -1))
            assert by["old-1"] + by["old-2"] and by["new-1"] + by["new-2"], by  # both releases ran tasks
            # the store needs no migration from the previous release: asynqpy upgrade says so
            res = CliRunner().invoke(cli, ["upgrade", "--redis-url", redis_url])
            assert res.exit_code == 0 and "nothing to migrate" in res.stdout, res.output
            assert r.get(PROTOCOL) == str(previous.protocol).encode()
            # 3. The rollback: an old worker back, new producers on, the new workers gone.
            fleet.up(insp, "old-3")
            producers = [fleet.produce("p-new-2", "new", 40), fleet.produce("p-old-2", "old", 20)]
            fleet.stop("new-1", "new-2")
            assert [p.wait(60) for p in producers] == [0, 0]
            want = _settle(r, insp, fleet)
            late = {w[0] for w in json.loads((tmp_path / "want-p-new-2.json").read_text())}
            assert any(line.decode().split()[0] in late and line.decode().split()[2] == "old-3"
                       for line in r.lrange("ru:runs", 0, -1))  # the old release ran the new producer's
            fleet.stop("old-3")
            assert len(want) > 150
            held = {w[0] for w in want if w[1] == 9}
            assert not [line for line in r.lrange("ru:runs", 0, -1) if line.decode().split()[0] in held
                        and line.decode().split()[2] in ("old-1", "old-2")], "a version-1.0 worker ran a held task"

        # 4. A store a later release migrated: the old release refuses it, touching nothing.
        r.set(PROTOCOL, str(previous.protocol + 1))
        before, lasting = _keys(r)
        res = subprocess.run([str(fleet.old), "-m", "asynqpy.cli.main", "enqueue", "ru:work", "--queue", "ru",
                              "--redis-url", redis_url], capture_output=True, text=True, cwd=tmp_path, timeout=60)
        assert res.returncode == 2 and f"protocol {previous.protocol + 1}, newer than asynqpy" in res.stderr, res
        after, kept = _keys(r)
        # (no key added, none without a TTL removed; a key with one, as the killed worker's heartbeat
        # record, may expire meanwhile: a dbsize compared at this point failed once that way)
        assert after <= before and kept == lasting
    finally:
        fleet.close()
        r.delete(PROTOCOL)
