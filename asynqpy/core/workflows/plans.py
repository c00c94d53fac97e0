"""Workflow plans, sans I/O: the round trips of enqueueing a task with ``after=`` and of delivering
parents' ends to their children (the propagator). Each plan is a generator that yields the calls
of one round trip (run pipelined) and receives their replies, driven by the sync and async
executors (:func:`asynqpy.redisio.executor.run_plan` / ``arun_plan``). Every step is one script in
one slot and may be repeated after a crash (docs/internals-features.md, "Workflows across slots")."""

from __future__ import annotations

import logging
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

from ..model import codec
from ..model.errors import InvalidArgumentError, MalformedMessageError, TaskNotFoundError
from ..model.options import Prepared
from ..model.task import TaskState
from ..security.signing import Refused, Verified, trust_gate
from ..spine.broker import Acted, Broker, Call, Finished, Registered, Resolved, id_arg
from ..spine.keys import queue_keys, validate_queue
from ..spine.stored import message_of
from .records import end_state, ref, refs

Plan = Generator[list[Call[Any]], list[Any], Any]
log = logging.getLogger("asynqpy.workflows")



def _raise_first(replies: list[Any]) -> None:
    for r in replies:
        if isinstance(r, Exception):
            raise r


def _stored(queue: str, id: str) -> Call[bytes | None]:
    return Call(lambda r: r, command=("HGET", queue_keys(queue).tasks, id_arg(id)))


def _cancelled(msg: codec.Message, parent: tuple[str, str], outcome: str, now_ms: int) -> codec.Message:
    how = {"x": "archived", "d": "deleted"}.get(outcome, "failed")
    return msg.with_(last_error=f"cancelled: parent {parent[0]}/{parent[1]} was {how} (on_parent_failure='cancel')",
                     last_failed_at_ms=now_ms)


def _fail_waiting(broker: Broker, queue: str, id: str, stored: bytes, parent: tuple[str, str],
                  outcome: str) -> Call[int]:
    """The call archiving a waiting child that a failed parent cancels. Its message is read from
    Redis, so it is rewritten through the trust gate: re-signed only if it verifies; a child that
    fails verification (unsigned, forged, malformed) is archived unsigned, its last error saying so."""
    gate = trust_gate(broker.signer, queue, id, message_of(stored))
    if isinstance(gate, Refused):
        log.error("task %s in queue %s refused (%s); archiving it unsigned", id, queue, gate.reason)
    msg = _cancelled(gate.msg, parent, outcome, broker.clock.now_ms())
    new = gate.store(msg)
    error = msg.last_error if isinstance(gate, Verified) else f"{gate.reason}; {msg.last_error}"
    return broker.fail_waiting(queue, id, stored, new, error)


def enqueue_after(broker: Broker, p: Prepared) -> Plan:
    """Store a task that waits on parents: register it with each parent (in each parent's slot),
    then store it (its own slot) with what the registration learnt (parents already ended). If a
    parent had already failed and its policy is cancel, archive it at once. Returns the state it
    is stored in. Raises TaskNotFoundError for a parent that does not exist (nothing is stored)."""
    parents = [(q, i) for q, i in p.msg.after or []]
    replies = yield [broker.register_child(q, i, p.queue, p.id) for q, i in parents]
    _raise_first(replies)
    ends: list[tuple[bytes, bytes]] = []
    failed: tuple[str, str, str] | None = None
    for (q, i), (code, data) in zip(parents, replies):
        if code is Registered.GONE:
            raise TaskNotFoundError(f"after=: no task {i!r} in queue {q!r} (deleted, or it completed without "
                                    "retention: its result is gone)")
        if code is Registered.NOT_A_PARENT:
            raise InvalidArgumentError(f"after=: task {i!r} of queue {q!r} is in an aggregation group or targeted "
                                       "(workers=/runs=): it cannot be a parent")
        if code is Registered.COMPLETED:
            result = codec.decode(data).result
            ends.append((ref(q, i), end_state("c", b"" if result is None else codec.encode_payload(result))))
        elif code is Registered.ARCHIVED:
            ends.append((ref(q, i), b"x"))
            failed = failed or (q, i, "x")
        else:
            ends.append((ref(q, i), b""))
    cancelled = None
    if p.policy == "c":  # archived by the same script if a parent has failed already (one step)
        now = broker.clock.now_ms()
        cancelled = (_cancelled(p.msg, (failed[0], failed[1]), failed[2], now) if failed else
                     p.msg.with_(last_error="cancelled: a parent was archived or deleted before this task was "
                                            "stored (on_parent_failure='cancel')", last_failed_at_ms=now))
    state = (yield [broker.enqueue_after(p.queue, p.id, p.msg, p.policy, ends, p.data, not p.generated_id,
                                         p.delay_ms, cancelled)])[0]
    if isinstance(state, Exception):
        raise state
    return state


def propagate(broker: Broker, queue: str, count: int = 100) -> Plan:
    """Deliver the oldest ``count`` parents' ends of ``queue``'s outbox to their children
    (``resolve`` in each child's slot), archive the children a failed parent cancels, then
    forget the entries. Returns (entries handled, queues whose outbox got new entries: cancelled
    children with children of their own). A crash or an error anywhere leaves the entries for the
    next pass, which repeats every step harmlessly."""
    entries = (yield [broker.outbox_read(queue, count)])[0]
    if isinstance(entries, Exception):
        raise entries
    if not entries:
        return 0, set()
    calls, meta = _deliveries(broker, queue, entries)
    replies = yield calls
    _raise_first(replies)
    cancel = [m for m, r in zip(meta, replies) if r is Resolved.CANCEL]
    woke = (yield from _cancel_children(broker, cancel)) if cancel else set()
    yield [broker.outbox_delete(queue, [i for i, _ in entries])]
    return len(entries), woke


_Delivery = tuple[str, str, tuple[str, str], str]
"""A parent's end delivered to one child: (child queue, child id, (parent queue, parent id), outcome)."""


def _deliveries(broker: Broker, queue: str, entries: list[Any]) -> tuple[list[Call[Any]], list[_Delivery]]:
    """The ``resolve`` call of each child of each outbox entry, with what each call delivers."""
    calls: list[Call[Any]] = []
    meta: list[_Delivery] = []
    for _, f in entries:
        parent = f[b"p"].decode(errors="surrogateescape")
        outcome = f[b"o"].decode()
        state = end_state(outcome, f.get(b"r", b""))
        pref = ref(queue, parent)
        for cq, cid in refs(f[b"k"]):
            calls.append(broker.resolve(cq, cid, pref, state))
            meta.append((cq, cid, (queue, parent), outcome))
    return calls, meta


def _cancel_children(broker: Broker, cancel: list[_Delivery]) -> Plan:
    """Archive the children a failed parent cancels (those still waiting when read: the others
    have been acted on meanwhile). Returns the queues whose outbox got new entries."""
    stored = yield [_stored(cq, cid) for cq, cid, _, _ in cancel]
    _raise_first(stored)
    fails = [(cq, _fail_waiting(broker, cq, cid, value, parent, outcome))
             for (cq, cid, parent, outcome), value in zip(cancel, stored)
             if isinstance(value, bytes) and value[:1] == b"w"]
    if not fails:
        return set()
    done = yield [c for _, c in fails]
    _raise_first([r for r in done if not (isinstance(r, int) and r == Acted.CHANGED)])
    return {q for (q, _), r in zip(fails, done) if isinstance(r, Finished) and r.told}


@dataclass
class WorkflowNode:
    """One task of a workflow tree (:meth:`asynqpy.Inspector.workflow`): where it is, its type
    and state ("gone" when its data is no longer stored: deleted, or finished without retention),
    and the tasks waiting on it. A task reached a second time (a DAG, not a tree) is listed again
    with ``repeated`` True and its children left out."""

    queue: str
    id: str
    type: str
    state: str
    children: list[WorkflowNode] = field(default_factory=list)
    repeated: bool = False

    def walk(self) -> Iterator[tuple[int, WorkflowNode]]:
        """Every node with its depth, depth-first (the order a tree is printed in)."""
        stack = [(0, self)]
        while stack:
            depth, node = stack.pop()
            yield depth, node
            stack.extend((depth + 1, c) for c in reversed(node.children))


def _node(queue: str, id: str, stored: Any) -> tuple[WorkflowNode, list[list[str]]]:
    if not isinstance(stored, bytes):
        return WorkflowNode(queue, id, "", "gone"), []
    try:
        msg = codec.decode(message_of(stored))
        type_, after = msg.type, list(msg.after or [])
    except MalformedMessageError:
        type_, after = "(malformed)", []
    try:
        state = TaskState.from_code(stored[:1].decode()).value
    except (KeyError, UnicodeDecodeError):
        state = "?"
    return WorkflowNode(queue, id, type_, state), after


def tree(queue: str, id: str, limit: int = 1000) -> Plan:
    """The workflow a task belongs to, from its roots (the tasks it descends from that wait on
    nothing: found by following ``after``) down through every registered child, at most
    ``limit`` tasks. Returns the list of root :class:`WorkflowNode`. Raises TaskNotFoundError if
    the task is not stored."""
    validate_queue(queue)
    first = (yield [_stored(queue, id)])[0]
    if isinstance(first, Exception):
        raise first
    if first is None:
        raise TaskNotFoundError(f"task {id!r} not found in queue {queue!r}")
    roots = yield from _roots(queue, id, first, limit)
    return (yield from _descend(roots, limit))


def _roots(queue: str, id: str, stored: bytes, limit: int) -> Plan:
    """Up: the ancestors of a task that wait on nothing (itself if it waits on nothing), found
    level by level through ``after``, at most ``limit`` tasks looked at."""
    roots: list[tuple[str, str]] = []
    seen = {(queue, id)}
    frontier: list[tuple[str, str, Any]] = [(queue, id, stored)]
    while frontier and len(seen) < limit:
        nxt: list[tuple[str, str]] = []
        for q, i, value in frontier:
            _, after = _node(q, i, value)
            if not after:
                roots.append((q, i))
            for pq, pid in after:
                if (pq, pid) not in seen:
                    seen.add((pq, pid))
                    nxt.append((pq, pid))
        if not nxt:
            break
        got = yield [_stored(q, i) for q, i in nxt]
        frontier = [(q, i, s if not isinstance(s, Exception) else None) for (q, i), s in zip(nxt, got)]
    return roots


def _descend(roots: list[tuple[str, str]], limit: int) -> Plan:
    """Down: each node and the children registered with it, level by level from ``roots``, at
    most ``limit`` distinct tasks. A task reached again is listed as ``repeated``, without its
    children. Returns the root nodes."""
    nodes: dict[tuple[str, str], WorkflowNode] = {}
    top: list[WorkflowNode] = []
    level: list[tuple[str, str, WorkflowNode | None]] = [(q, i, None) for q, i in roots]
    while level and len(nodes) < limit:
        replies = yield [c for q, i, _ in level for c in (_stored(q, i), _children(q, i))]
        nxt: list[tuple[str, str, WorkflowNode | None]] = []
        for k, (q, i, parent) in enumerate(level):
            node, kids = _visit(nodes, q, i, replies[2 * k], replies[2 * k + 1])
            nxt += [(cq, cid, node) for cq, cid in kids]
            (parent.children if parent is not None else top).append(node)
        level = nxt[: max(0, limit - len(nodes))]
    return top


def _visit(nodes: dict[tuple[str, str], WorkflowNode], queue: str, id: str, stored: Any,
           kids: Any) -> tuple[WorkflowNode, list[tuple[str, str]]]:
    """The node of a task reached going down, and the children to visit under it (none for a
    task already visited: it is listed again as ``repeated``)."""
    seen = nodes.get((queue, id))
    if seen is not None:
        return WorkflowNode(queue, id, seen.type, seen.state, repeated=True), []
    node, _ = _node(queue, id, stored)
    nodes[(queue, id)] = node
    return node, list(kids) if isinstance(kids, list) else []


def _children(queue: str, id: str) -> Call[list[tuple[str, str]]]:
    return Call(lambda r: refs(r) if r else [],
                command=("HGET", queue_keys(queue).children, id_arg(id)))
