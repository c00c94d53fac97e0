"""Scenario: a DAG of 1 000 tasks over two queues (random edges, 0-3 parents each, and one fan-in of
100 parents), about 5 % failing for good, served by 4 worker processes SIGKILLed at random while
the producer enqueues parents first and children after (``after=``). Audit: every task ends as its
parents dictate (completed; or archived: its own planned failure, or cancelled because a parent
failed under the default policy, without ever starting; with ``on_parent_failure="run"`` it ran
anyway); no child started before every parent's successful end; every re-run is a lease expiry
(the common audit); nothing is left in the workflow keys (no waiting task, no outbox entry, no
registration or record but of a stored task)."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from audit import Workers, _records, audit, produce, wait_finished
from redisproc import RedisProcess

from asynqpy import Client
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.workflows.records import record_child, record_headers

pytestmark = [pytest.mark.real, pytest.mark.slow]

WORKER_ARGS = ("--concurrency", "10", "--lease", "1.5", "--heartbeat-interval", "0.3", "--shutdown-timeout", "0.5",
               "--queues", "default,wf2")
QUEUES = ("default", "wf2")


def _dag(n: int, seed: int) -> tuple[list[tuple[str, str, dict[str, Any], dict[str, Any]]], dict[str, list[str]],
                                     dict[str, str]]:
    """Nodes in topological order: (queue, id, payload, options); each node's parents; its policy."""
    rnd = random.Random(seed)
    nodes: list[tuple[str, str, dict[str, Any], dict[str, Any]]] = []
    parents: dict[str, list[str]] = {}
    policy: dict[str, str] = {}
    where: dict[str, str] = {}
    for i in range(n):
        id = f"n{i}"
        q = rnd.choice(QUEUES)
        where[id] = q
        if i == n - 1:
            ps = [f"n{j}" for j in rnd.sample(range(n - 1), 100)]  # the fan-in
        else:
            ps = [f"n{j}" for j in rnd.sample(range(i), min(i, rnd.choice([0, 0, 1, 1, 2, 3])))]
        parents[id] = ps
        policy[id] = "run" if rnd.random() < 0.1 else "cancel"
        payload: dict[str, Any] = {"ms": rnd.randint(20, 120)}
        options: dict[str, Any] = {"retention": 3600, "retry_delay": 0.1, "queue": q}
        if rnd.random() < 0.05:
            payload["fail"] = 1
            options["max_retry"] = 0
        if ps:
            options["after"] = [(where[p], p) for p in ps]
            options["on_parent_failure"] = policy[id]
        nodes.append((q, id, payload, options))
    return nodes, parents, policy


def test_a_dag_under_sigkills_runs_each_child_once_after_its_parents(
    redis_url: str, recorder: redis.Redis, recorder_server: RedisProcess, tmp_path: Path
) -> None:
    nodes, parents, policy = _dag(1000, seed=18)
    acked: dict[str, dict[str, int]] = {q: {} for q in QUEUES}
    workers = Workers(redis_url, recorder_server.url, 4, *WORKER_ARGS, log_dir=tmp_path)
    kills = 0
    try:
        with Client(redis_url) as client:
            got: dict[str, int] = {}

            def producer() -> None:
                produce(client, [(id, p, o) for _, id, p, o in nodes], got)

            t = threading.Thread(target=producer)
            t.start()
            rnd = random.Random(3)
            end = time.monotonic() + 60
            while (t.is_alive() or kills < 12) and time.monotonic() < end:
                time.sleep(rnd.uniform(0.2, 0.6))
                workers.replace(rnd.randrange(4), rnd.choice(["kill", "kill", "term-kill"]))
                kills += 1
            t.join(120)
        for q, id, payload, _ in nodes:
            acked[q][id] = payload.get("fail", 0)
        for q in QUEUES:
            wait_finished(redis_url, len(acked[q]), timeout=120, queue=q)
        time.sleep(0.5)  # the last ends' outbox entries are delivered
        reports = {q: audit(redis_url, recorder, acked[q], queue=q) for q in QUEUES}
    finally:
        workers.stop()
    for q, rep in reports.items():
        assert rep.errors == [], (q, rep.errors[:20])
    r = redis.Redis.from_url(redis_url)
    state: dict[str, str] = {}
    for q in QUEUES:
        ids = list(acked[q])
        for id, v in zip(ids, r.hmget(queue_keys(q).tasks, ids)):
            state[id] = v[:1].decode()
    expected: dict[str, str] = {}
    for _, id, payload, _ in nodes:  # topological order: parents first
        failed_parent = any(expected[p] in ("x", "cancelled") for p in parents[id])
        if failed_parent and policy[id] == "cancel":
            expected[id] = "cancelled"
        elif payload.get("fail"):
            expected[id] = "x"
        else:
            expected[id] = "c"
    expected_state = {id: ("x" if e == "cancelled" else e) for id, e in expected.items()}
    wrong = {id: (state[id], expected_state[id]) for id in state if state[id] != expected_state[id]}
    assert wrong == {}, list(wrong.items())[:10]
    starts, ends = _records(recorder, "starts"), _records(recorder, "ends")
    never = [id for id, e in expected.items() if e == "cancelled" and id in starts]
    assert never == [], never[:10]  # a cancelled task never started
    early = []
    for id, ps in parents.items():
        if id not in starts:
            continue
        first = min(t for _, t, _ in starts[id])
        for p in ps:
            if expected[p] == "c" and (p not in ends or first < min(t for _, t, _ in ends[p])):
                early.append((id, p))
    assert early == [], early[:10]
    for q in QUEUES:
        k = queue_keys(q)
        assert r.zcard(k.waiting) == 0
        assert not r.exists(k.outbox) or r.xlen(k.outbox) == 0
        # registrations and records only of tasks still stored (kept for the tree), none of ends
        # delivered twice after a child finished
        # (a deps hash holds each record as fields: header, order, one per edge; all of its child)
        for key, owner in ((k.children, lambda f: f), (k.deps, record_child)):
            stray = [owner(x).decode() for x in r.hkeys(key) if owner(x).decode() not in state]
            assert stray == [], (key, stray[:5])
        bad = [x.decode() for x in record_headers(r.hkeys(k.deps)) if parents.get(x.decode()) == []]
        assert bad == [], bad[:5]
    n = {s: sum(1 for e in expected.values() if e == s) for s in ("c", "x", "cancelled")}
    reruns = sum(rep.lease_reruns for rep in reports.values())
    print(f"\nworkflow SIGKILL scenario: {kills} kills; {len(nodes)} tasks, "
          f"{sum(len(p) for p in parents.values())} edges (a fan-in of 100): {n['c']} completed, {n['x']} failed, "
          f"{n['cancelled']} cancelled by a failed parent; {reruns} re-runs after a lease expiry; no child started "
          "before its parents ended")
