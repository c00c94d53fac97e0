"""The stored value of a task, the one place that knows its layout.

A task is one field of its queue's ``t`` hash: ``state char + message``, or for an active task
``'a' + 8-character lease token + message`` (the message is msgpack, with a signing tag when
signed; see :mod:`asynqpy.core.model.codec`). The Lua scripts read the same layout through one include,
``lua/includes/stored.lua`` (tests/test_exit_paths.py checks that no script slices it by hand and
that both sides agree on the token's length).
"""

from __future__ import annotations

from ..model.codec import decode, may_be_keyed, may_be_unique
from ..model.errors import MalformedMessageError

ACTIVE = b"a"
TOKEN_LEN = 8


def state_char(stored: bytes) -> bytes:
    """The state byte (``p a s r x c g``; anything else if written by hand)."""
    return stored[:1]


def is_active(stored: bytes | None) -> bool:
    return bool(stored) and stored[:1] == ACTIVE  # type: ignore[index]


def token_of(stored: bytes) -> bytes:
    """The lease token of an active task's stored value (the bytes as stored)."""
    return stored[1:1 + TOKEN_LEN]


def message_of(stored: bytes) -> bytes:
    """The encoded message: after the state byte, and after the lease token for an active task."""
    return stored[1 + TOKEN_LEN:] if stored[:1] == ACTIVE else stored[1:]


def lock_digest(stored: bytes | None) -> str:
    """The uniqueness digest of a stored task ('' when not unique, gone or malformed)."""
    if not stored:
        return ""
    body = message_of(stored)
    if not may_be_unique(body):
        return ""
    try:
        return decode(body).lock_digest()
    except MalformedMessageError:
        return ""


def key_of(stored: bytes | None) -> str:
    """The key (``enqueue(key=)``) of a stored task ('' when it has none, is gone or malformed)."""
    if not stored:
        return ""
    body = message_of(stored)
    if not may_be_keyed(body):
        return ""
    try:
        return decode(body).key
    except MalformedMessageError:
        return ""
