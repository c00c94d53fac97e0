"""Workflows, sans I/O: the records the workflow scripts keep (``lua/includes/flow.lua``), parent
references, and the policies for a failed parent.

A child task names its parents with ``after=``; each edge travels through idempotent steps, each
one script in one slot (docs/internals-features.md, "Workflows across slots"): register with the parent
(``register_child``), store the child (``enqueue_after``), the parent's end written to its queue's
outbox by its finishing script, delivered to the child by a propagator (``resolve``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgpack

from ..model.errors import InvalidArgumentError

POLICIES = {"cancel": "c", "run": "r", "ignore": "i"}
"""``on_parent_failure`` values and their code in the child's record: when a parent is archived
or deleted, ``cancel`` archives the child (and so, by their own policies, its descendants); ``run``
runs it once every parent ended (the failed parent's result is None); ``ignore`` does the same
and leaves the failed parent out of ``parent_results``."""
DEFAULT_POLICY = "cancel"
MAX_PARENTS = 1000
"""Most parents one task may wait on (each edge is one field of its record: a parent's end costs
the same whatever the number of parents; the record is read whole when the child runs)."""
OUTCOMES = {"c": "completed", "x": "archived", "d": "deleted", "": "waiting"}


def rec_pack(items: list[bytes]) -> bytes:
    """``items`` as one string, each '<length>:<bytes>' (lua/includes/flow.lua's rec_pack)."""
    return b"".join(b"%d:%s" % (len(v), v) for v in items)


def rec_unpack(data: bytes) -> list[bytes]:
    """The items of a :func:`rec_pack` string (ValueError: not one, as lua/includes/flow.lua's
    rec_unpack refuses it: an item without its length, or cut short)."""
    out: list[bytes] = []
    i, n = 0, len(data)
    while i < n:
        c = data.index(b":", i)
        size = int(data[i:c])
        if size < 0 or c + 1 + size > n:
            raise ValueError(f"not a record: an item cut short at byte {i}")
        out.append(data[c + 1:c + 1 + size])
        i = c + 1 + size
    return out


def ref(queue: str, id: str) -> bytes:
    """A task's reference in workflow records: rec_pack{queue, id}."""
    try:
        return rec_pack([queue.encode(), id.encode(errors="surrogateescape")])
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"a task id is a string of text, got {id!r}") from None


def unref(data: bytes) -> tuple[str, str]:
    """(queue, id) of a :func:`ref`."""
    q, i = rec_unpack(data)
    return q.decode(), i.decode(errors="surrogateescape")


def refs(data: bytes) -> list[tuple[str, str]]:
    """The (queue, id) of every ref in a children entry (rec_pack of refs)."""
    return [unref(r) for r in rec_unpack(data)]


@dataclass(frozen=True)
class ParentEnd:
    """How one parent of a task ended, as its record holds it: ``state`` "completed", "archived",
    "deleted" or "waiting" (not ended yet); ``result`` a completed parent's result."""

    queue: str
    id: str
    state: str
    result: Any = None


@dataclass(frozen=True)
class Record:
    """A child's record (``deps`` hash): its policy ("cancel", "run", "ignore"; "" for an end
    kept before the child was stored), parents not ended yet, and each parent's end in order."""

    policy: str
    outstanding: int
    parents: list[ParentEnd]

    def results(self) -> list[Any]:
        """The parents' results in order, as the handler gets them (``ignore``: failed parents
        left out; ``run``: their place holds None)."""
        return [p.result for p in self.parents if not (self.policy == "ignore" and p.state in ("archived", "deleted"))]


def record_child(field: bytes) -> bytes:
    """The child id a field of a deps hash belongs to (lua/includes/flow.lua: the header is the
    id, a NUL byte in front of one that starts with NUL; edge fields are NUL 'e' rec_pack{id, ref},
    the order field NUL 'o' id)."""
    if field[:1] != b"\0":
        return field
    kind = field[1:2]
    if kind == b"\0":
        return field[1:]
    if kind == b"e":
        return rec_unpack(field[2:])[0]
    return field[2:]


def record_headers(fields: list[bytes]) -> list[bytes]:
    """The child ids whose header is among ``fields`` (a deps hash's field names)."""
    return [record_child(f) for f in fields if f[:1] != b"\0" or f[1:2] == b"\0"]


def parse_record(data: bytes | None) -> Record | None:
    """A child's record as the ``flow_read`` script returns it (one string: {policy, outstanding,
    since, due, ref1, state1, ...})."""
    if not data:
        return None
    items = rec_unpack(data)
    codes = {v: k for k, v in POLICIES.items()}
    parents = []
    for i in range(4, len(items) - 1, 2):
        q, id = unref(items[i])
        st = items[i + 1]
        result = None
        if st[:1] == b"c" and len(st) > 1:
            result = msgpack.unpackb(st[1:], raw=False, strict_map_key=False)
        parents.append(ParentEnd(q, id, OUTCOMES.get(st[:1].decode(), "?"), result))
    outstanding = int(items[1]) if items[1] else 0
    return Record(codes.get(items[0].decode(), ""), outstanding, parents)


def end_state(outcome: str, result: bytes = b"") -> bytes:
    """A parent's end as a record state: b'c' + result, b'x' or b'd'."""
    return outcome.encode() + (result if outcome == "c" else b"")


def policy_code(policy: object) -> str:
    if policy not in POLICIES:
        raise InvalidArgumentError(f"on_parent_failure must be one of {', '.join(POLICIES)}, got {policy!r}")
    return POLICIES[policy]
