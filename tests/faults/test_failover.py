"""Scenario: a Redis Cluster master killed (SIGKILL) mid-load; its replica takes over.

A cluster of its own: 3 masters + 3 replicas, node timeout 1 s, ``cluster-require-full-coverage
no`` (while one master is down, the others keep serving). Three producers, one per queue, each
queue on another master, enqueue tasks with caller-chosen ids while three worker processes run
them; the master owning the first queue is killed once a third of the tasks are in. Its replica is
promoted (~2 s); producers and workers carry on by themselves; the dead node is restarted (it
rejoins as the new master's replica) and the audit runs per queue. The other queues must have
kept being served while the first one's master was down.

Replication is asynchronous: the dead master may have acknowledged writes its replica never got.
What that may do, so what the audit counts instead of failing on:
- an enqueue lost: the task is absent. Only without ``wait_replicas``: with it an enqueue is
  acknowledged once the replica has it, so nothing acknowledged may be missing;
- a dequeue lost: the task is pending again on the new master and that attempt runs a second time
  (the first run's late write is refused);
- a completion (or a retry/archive) lost: the task is active again with its old lease, which
  expires; the recoverer re-runs it as a retry ("lease expired"), as after a worker crash.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
import redis
from audit import Report, Workers, audit, mixed_tasks, produce, storm, wait_finished
from redisproc import RedisCluster, RedisProcess

from asynqpy import Client, Inspector
from asynqpy.core.spine.keys import queue_keys

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

QUEUES = ["reports", "critical", "low"]  # one per master (slots 5152, 8090, 15214)
WORKER_ARGS = ("--queues", ",".join(QUEUES), "--concurrency", "20", "--lease", "5", "--heartbeat-interval", "0.5",
               "--shutdown-timeout", "0.5")
N, PAUSE = storm(3000, 0.003)
"""Tasks over the three queues (3 000 in the deep run, 750 in CI at four times the pause: the
producers run as long, the master dies at the same point of the load)."""


def _ends_between(rec: redis.Redis, ids: set[str], start: float, end: float) -> int:
    """How many runs of ``ids`` ended between ``start`` and ``end`` (Unix time)."""
    n = 0
    for raw in rec.lrange("ends", 0, -1):
        id, _, t, _ = raw.decode().split("|")
        n += id in ids and start < float(t) < end
    return n


@pytest.mark.parametrize("wait_replicas", [1, 0], ids=["wait", "nowait"])
def test_master_killed_mid_load(wait_replicas: int, recorder: redis.Redis, recorder_server: RedisProcess,
                                tmp_path: Path) -> None:
    cluster = RedisCluster(masters=3, replicas=1, node_timeout=1000, full_coverage=False)
    victim = QUEUES[0]
    old = cluster.owner(queue_keys(victim).tasks)
    tasks = {q: [(id, p, {**o, "queue": q}) for id, p, o in mixed_tasks(N // 3, prefix=f"{q}-", seed=i)]
             for i, q in enumerate(QUEUES)}
    acked: dict[str, dict[str, int]] = {q: {} for q in QUEUES}
    unconfirmed: set[str] = set()  # enqueues sent again after NotReplicatedError (see produce)
    restarted: RedisProcess | None = None
    workers = Workers(cluster.url, recorder_server.url, 3, *WORKER_ARGS, log_dir=tmp_path)
    clients = [Client(cluster.url, wait_replicas=wait_replicas, wait_timeout=2.0) for _ in QUEUES]
    try:
        producers = [threading.Thread(target=produce, args=(c, tasks[q], acked[q]), kwargs={"pause": PAUSE, "unconfirmed": unconfirmed})
                     for c, q in zip(clients, QUEUES)]
        t0 = time.monotonic()
        for p in producers:
            p.start()
        deadline = time.monotonic() + 30
        while len(acked[victim]) < N // 9 and time.monotonic() < deadline:
            time.sleep(0.01)
        # the workers are serving every queue before the kill (on a busy machine their processes
        # start late: a kill before then would find nothing of the other queues running to measure)
        while time.monotonic() < deadline and not all(
                _ends_between(recorder, set(acked[q]), 0, time.time() + 1) for q in QUEUES):
            time.sleep(0.05)
        ins = Inspector(cluster.url)
        at_kill = ins.stats(victim)
        ins.close()
        old.crash()
        killed_at, kill_offset = time.time(), time.monotonic() - t0
        new = cluster.wait_failover(old, queue_keys(victim).tasks)
        promoted_at = time.time()
        # the new master has no replica left: bring the dead node back, it rejoins as one (until
        # it is in sync, an enqueue with wait_replicas raises NotReplicatedError and is retried)
        restarted = old.restart()
        for p in producers:
            p.join(60)
            assert not p.is_alive()
        for q in QUEUES:
            wait_finished(cluster.url, len(acked[q]), timeout=40, queue=q,
                          lossy=acked[q] if q == victim and not wait_replicas else None)
        rep, expiries = Report(), []
        for q in QUEUES:
            one = audit(cluster.url, recorder, acked[q], q, failover_at=promoted_at if q == victim else None,
                        lost_ok=q == victim and not wait_replicas, unconfirmed=unconfirmed)
            expiries.append(f"{q} {one.lease_reruns}")
            rep.add(one)
        # while the first queue's master was down
        others = _ends_between(recorder, set(acked[QUEUES[1]]) | set(acked[QUEUES[2]]), killed_at, promoted_at)
    finally:
        for c in clients:
            c.close()
        workers.stop()
        cluster.stop()
        if restarted is not None:
            restarted.stop()
    print(f"\nfailover scenario (wait_replicas={wait_replicas}): master :{old.port} killed {kill_offset:.1f}s in "
          f"({sum(map(len, acked.values()))} acked; {victim}: {at_kill.pending} pending, {at_kill.active} active), "
          f"replica :{new.port} serving {promoted_at - killed_at:.1f}s later, other queues ran {others} tasks "
          f"meanwhile; {rep.line()}; lease expiries per queue: {', '.join(expiries)}")
    assert all(len(acked[q]) == N // 3 for q in QUEUES)
    assert rep.errors == [], rep.errors[:20]
    if wait_replicas:
        assert rep.lost == 0
    assert rep.states["c"] + rep.states["x"] + rep.lost == N
    assert others > 0, "the other masters' queues stalled while one master was down"
