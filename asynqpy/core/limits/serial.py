"""Keyed serial execution, sans I/O (``enqueue(..., key=...)``; lua/includes/serial.lua): the
janitor's repair of keys whose holder ended without releasing them (deleted, archived or
cancelled by an operator, or removed by hand), so the tasks queued behind them go on."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from ..spine.broker import Broker, Call
from ..spine.keys import queue_keys

STALE = (b"c", b"x", b"b")
"""States of a holder that has ended (or never held the key: a stray 'blocked' id)."""


def sweep_keys(broker: Broker, queue: str, cursor: str, count: int = 100) -> Generator[list[Call[Any]], list[Any],
                                                                                      tuple[str, int]]:
    """One HSCAN step over the queue's held keys: each key whose holder is gone or has ended is
    released (``key_free``, which checks again atomically). Returns (next cursor, '0' = pass done;
    keys released)."""
    q = queue_keys(queue)
    page = (yield [Call(lambda r: r, command=("HSCAN", q.keyheld, cursor, "COUNT", count))])[0]
    if isinstance(page, Exception):
        raise page
    nxt, flat = page[0], page[1]
    pairs = list(flat.items()) if isinstance(flat, dict) else list(zip(flat[::2], flat[1::2]))
    nxt = nxt.decode() if isinstance(nxt, bytes) else str(nxt)
    if not pairs:
        return nxt, 0
    states = (yield [Call(lambda r: r, command=("HMGET", q.tasks, *[h for _, h in pairs]))])[0]
    if isinstance(states, Exception):
        raise states
    stale = [(k, h) for (k, h), v in zip(pairs, states) if v is None or v[:1] in STALE]
    if not stale:
        return nxt, 0
    freed = yield [broker.key_free(queue, k.decode(errors="surrogateescape"), h.decode(errors="surrogateescape"))
                   for k, h in stale]
    return nxt, sum(1 for r in freed if r is True)


def gate_due(broker: Broker, queue: str, keyed: list[tuple[str, str]]) -> Generator[list[Call[Any]], list[Any], int]:
    """The due keyed tasks the forwarder left in place, each ``(id, key)`` as ``forward`` named
    them: ``key_gate`` them in one call (each takes its key, or queues behind it). Returns how
    many were gated. (The server's forwarder sends this call with the queue's next forward:
    worker/forwarder.py.)"""
    done = (yield [broker.key_gate(queue, keyed)])[0] if keyed else []  # (the keys' lists share the queue's slot)
    if isinstance(done, Exception):
        raise done
    return sum(1 for r in done if r is not None)
