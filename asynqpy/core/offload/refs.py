"""The claim check's sans-I/O part (docs/offload.md).

A payload (or result) whose encoding is over the store's threshold is written to a blob store and
the message carries a **reference** in its place: a msgpack extension value of its own type code
(:data:`EXT_CODE`, distinct from the encryption envelope's), whose data is the blob's name (UTF-8).
Nothing else in a message has that type, so a reference never means anything else and a payload
never looks like one. The blob holds exactly what the message would have held: the payload's
msgpack encoding (with encryption on, the encoded envelope: encrypt, then offload).

A blob's name is ``<queue>/<task id, percent-quoted>/<nonce><kind>`` (kind ``p`` a payload, ``r`` a
result): the orphan sweep reads the task it belongs to from its name, and a new task that reuses
an id never shares a blob with the old one (the nonce). ``lua/includes/offload.lua`` reads the
reference in place (the exit duty) and must agree with :func:`ref_of`.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple
from urllib.parse import quote, unquote

import msgpack

from ..model.errors import MalformedMessageError

EXT_CODE = 70
"""The msgpack extension type of an offload reference (the encryption envelope's is 69)."""

PAYLOAD = "p"
RESULT = "r"

DEFAULT_THRESHOLD = 256 * 1024
"""Payloads encoded larger than this (bytes) go to the blob store, unless the store says otherwise."""

DEFAULT_GRACE = 3600.0
"""How old (seconds) a blob with no task must be before the orphan sweep removes it: longer than
any enqueue takes between storing its blob and writing its task."""


def blob_name(queue: str, task_id: str, kind: str = PAYLOAD) -> str:
    """A new blob's name for the ``kind`` (:data:`PAYLOAD` or :data:`RESULT`) of a task."""
    return f"{queue}/{quote(task_id, safe='')}/{os.urandom(12).hex()}{kind}"


class BlobName(NamedTuple):
    """A blob's name read back: its queue and task id."""

    queue: str
    task_id: str


def parse_name(name: str) -> BlobName | None:
    """The queue and task of a blob's name; None for a name this module did not make."""
    parts = name.split("/")
    if len(parts) != 3 or not parts[0] or not parts[1] or len(parts[2]) != 25 or parts[2][-1] not in (PAYLOAD, RESULT):
        return None
    return BlobName(parts[0], unquote(parts[1]))


def make_ref(name: str) -> msgpack.ExtType:
    """The reference a message carries in place of the value stored as blob ``name``."""
    return msgpack.ExtType(EXT_CODE, name.encode())


def is_ref(value: Any) -> bool:
    """Is ``value`` an offload reference?"""
    return type(value) is msgpack.ExtType and value.code == EXT_CODE


def ref_of(value: Any) -> str:
    """The blob name of a reference (MalformedMessageError when it is not one)."""
    if not is_ref(value):
        raise MalformedMessageError("not an offload reference")
    try:
        return bytes(value.data).decode()
    except UnicodeDecodeError:
        raise MalformedMessageError("an offload reference with an undecodable name") from None


def encode(value: Any) -> bytes:
    """A value as the message would have carried it (the blob's content)."""
    from ..model.codec import encode_payload

    return encode_payload(value)


def decode(data: bytes) -> Any:
    """A blob's content back as the value it was (MalformedMessageError for anything else)."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several unrelated types on garbage
        raise MalformedMessageError(f"undecodable blob: {exc}") from None


def referenced(msg: Any) -> set[str]:
    """The blob names a stored message refers to (its payload's and its result's)."""
    return {ref_of(v) for v in (msg.payload, msg.result) if is_ref(v)}


def is_orphan(name: str, age: float, grace: float, stored: Any) -> bool:
    """Does the orphan sweep remove blob ``name`` (``age`` seconds old)? ``stored``: the message of
    the task its name names (None: no such task). A blob younger than ``grace`` is kept: its task
    may not be written yet (an enqueue between storing the blob and writing the task)."""
    if age < grace:
        return False
    return stored is None or name not in referenced(stored)


class Offloaded(NamedTuple):
    """An offloaded payload as a reader without its blob shows it (the Inspector with no blob
    store, or a blob that is missing): the blob's name, and whether the store said it is gone."""

    name: str
    missing: bool = False


def read_value(store: Any, value: Any) -> Any:
    """A stored value as its reader shows it: a reference's blob read from ``store`` (an
    :class:`Offloaded` when there is no store or no such blob), anything else itself."""
    if not is_ref(value):
        return value
    name = ref_of(value)
    if store is None:
        return Offloaded(name)
    from ..model.errors import BlobNotFoundError

    try:
        return decode(store.get(name))
    except (BlobNotFoundError, MalformedMessageError):
        return Offloaded(name, missing=True)


def reveal(store: Any, answer: Any) -> Any:
    """An Inspector's answer with the offloaded payloads of its TaskInfo (one, or a list) read
    from ``store``. (The store is called in the caller's thread.)"""
    from dataclasses import replace

    from ..model.task import TaskInfo

    if type(answer) is TaskInfo:
        return replace(answer, payload=read_value(store, answer.payload)) if is_ref(answer.payload) else answer
    if type(answer) is list and any(type(a) is TaskInfo and is_ref(a.payload) for a in answer):
        return [reveal(store, a) for a in answer]
    return answer
