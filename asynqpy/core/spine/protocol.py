"""The wire protocol's version, sans I/O (docs/protocol.md, docs/releases.md).

What a store holds (its keys, the task message's fields, the scripts' contracts, the event stream's
entries and the control messages) is the *protocol*; its version is an integer, stored in the
global key :data:`~asynqpy.core.spine.keys.PROTOCOL` (a STRING, in its own cluster slot: read with a
plain GET, never from a script). This release understands versions :data:`OLDEST_READ` to
:data:`PROTOCOL_VERSION`.

- A store whose key is absent is of version :data:`ABSENT_MEANS` (what every asynqpy wrote before
  the key existed); a writer (a client, a worker, a scheduler) that finds it absent writes that
  version there (``SET NX``: the first writer wins, the others read what it wrote). The stamp
  only ever moves with ``asynqpy upgrade`` (a migration), never as a side effect of a client.
- A newer store than this release understands (or a key that holds no version) is refused with
  :class:`ProtocolVersionError` before anything is written: a client's first call, a worker's
  start and every ``asynqpy`` command stop there (the CLI: one line, exit 2).

The check runs once per client (its first call) and once per worker start, never per task
(``asynqpy.redisio.protocol``).
"""

from __future__ import annotations

from ..model.errors import AsynqpyError
from .keys import PROTOCOL

LIBRARY_VERSION = "0.1.0"
"""This release's version (semantic versioning, docs/releases.md): ``asynqpy --version``, the server
record's ``asynqpy`` field, ``asynqpy.__version__``; pyproject.toml says the same (a test checks)."""
PROTOCOL_VERSION = 1
"""The newest protocol version this release understands and writes."""
OLDEST_READ = 1
"""The oldest protocol version this release reads (an older store: ``asynqpy upgrade`` first)."""
ABSENT_MEANS = 1
"""The version of a store without the key: what a writer that finds it absent stamps."""


class ProtocolVersionError(AsynqpyError):
    """The store's protocol version is one this release does not understand (newer, or older than it
    reads, or not a version at all); nothing was written. ``stored``: the version found (None:
    not a version); ``understood``: (oldest, newest) this release reads."""

    def __init__(self, message: str, stored: int | None) -> None:
        super().__init__(message)
        self.stored = stored
        self.understood = (OLDEST_READ, PROTOCOL_VERSION)


def read_version(raw: object) -> int:
    """The protocol version of a store whose key holds ``raw`` (bytes or str from GET; None:
    absent, i.e. :data:`ABSENT_MEANS`), if this release understands it; else
    :class:`ProtocolVersionError` saying what to do."""
    if raw is None:
        return ABSENT_MEANS
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    if not (text.isascii() and text.isdigit() and 0 < len(text) <= 9 and int(text) > 0):
        raise ProtocolVersionError(
            f"{PROTOCOL} holds {text[:40]!r}, not a protocol version (a positive integer): this is not an asynqpy "
            "store, or it was damaged; nothing was written", None)
    stored = int(text)
    if stored > PROTOCOL_VERSION:
        raise ProtocolVersionError(
            f"this Redis holds asynqpy protocol {stored}, newer than asynqpy {LIBRARY_VERSION} understands "
            f"(protocol {PROTOCOL_VERSION}): upgrade asynqpy here (docs/releases.md); nothing was written", stored)
    if stored < OLDEST_READ:
        raise ProtocolVersionError(
            f"this Redis holds asynqpy protocol {stored}, older than asynqpy {LIBRARY_VERSION} reads (protocol "
            f"{OLDEST_READ} to {PROTOCOL_VERSION}): run asynqpy upgrade first (docs/releases.md); nothing was "
            "written", stored)
    return stored


FIELD_SINCE: dict[str, int] = {}
"""The protocol version that added a message field, for the fields added after version 1 (a new
field goes at the end of the message, docs/releases.md): every other field is of version 1."""

FIELD_MEANINGS: dict[str, str] = {
    "type": "the task type, non-empty: what a worker's mux routes on",
    "payload": "the task's arguments: any msgpack value (bin stays bytes)",
    "enqueued_at_ms": "when it was enqueued (Unix ms)",
    "max_retry": "how many retries after a failed attempt before it is archived",
    "timeout_ms": "an attempt's time limit: -1 = the server's default, 0 = none",
    "deadline_ms": "when an attempt must end at the latest (Unix ms), 0 = none",
    "retention_ms": "how long a completed task is kept (with its result), 0 = deleted at once",
    "unique": "whether it holds a uniqueness lock (the lock key: lock())",
    "retried": "how many times it was retried so far",
    "last_error": "the last failed attempt's error ('' = none)",
    "last_failed_at_ms": "when the last attempt failed (Unix ms), 0 = never",
    "retry_delay_ms": "the delay before a retry: -1 = the server's policy",
    "completed_at_ms": "when it completed (Unix ms), 0 = not completed",
    "result": "its handler's result, once completed (any msgpack value)",
    "traceback": "the last failed attempt's traceback, innermost frames kept ('' = none)",
    "headers": "a map of str to str the producer attached, or nil",
    "reply_to": "the inbox id of the client waiting for its outcome (reply()), '' = none",
    "group": "the aggregation group it waits in, '' = none",
    "unique_key": "the caller's uniqueness key ('' = the type and payload's digest)",
    "priority": "0 (lowest) to 9 (highest), 5 by default",
    "workers": "the names of the workers allowed to run it (a targeted task), nil = any",
    "runs": "how many distinct workers must run it successfully (a targeted task)",
    "after": "the parents it waited on, as [queue, id] pairs (a workflow), nil = none",
    "key": "tasks of a queue with the same key run one at a time, in enqueue order ('' = none)",
    "retry_front": "a retry goes to the front of the pending tasks, not the back",
    "tenant": "the tenant it belongs to: a queue takes turns across tenants ('' = none)",
    "logs": "the lines its attempts logged: [attempt, Unix ms, text] each, nil = none",
    "min_version": "the least worker version that may run it (major*10^8 + minor*10^4 + patch), 0 = any",
}
"""What each message field means (core/model/codec.py ``Message`` says more): the protocol reference's
field table (scripts/protocol_reference.py) joins it to the codec's field table; a field without
a meaning here fails there and in tests/test_protocol_docs.py."""
