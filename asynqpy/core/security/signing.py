"""Optional HMAC signing of stored messages, so workers run only tasks made by holders of a key.

A signed stored message is the encoded message (a msgpack array) followed by a tag: one msgpack
``bin`` object holding HMAC-SHA256(key, ``b"asynqpy1:" + netstring(queue) + netstring(id) +
message``), where ``netstring(x) = b"%d:%s," % (len(x), x)`` over UTF-8 bytes. Binding the queue
and the id means a signed message copied to another task id or queue no longer verifies. Lua
scripts move a message between states without touching its bytes, so the tag travels with it;
messages a worker rewrites (retry, completion with a result, archive) are signed again.

Key rotation: a :class:`Signer` holds a list of keys; it signs with the first and accepts a tag
made by any of them. Unsigned deployments pay nothing: no tag is written, and
:func:`asynqpy.codec.decode` only looks for one when msgpack reports trailing bytes.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ..model import codec
from ..model.codec import Message
from ..model.errors import InvalidArgumentError, MalformedMessageError, SignatureError

MIN_KEY_BYTES = 16
"""Shortest accepted key (a 32-byte random key, e.g. ``openssl rand -hex 32``, is recommended)."""

SigningKeys = bytes | bytearray | Iterable[bytes | bytearray]


def _keys(keys: object) -> tuple[bytes, ...]:
    if isinstance(keys, (bytes, bytearray)):
        keys = [keys]
    elif isinstance(keys, str) or not isinstance(keys, Iterable):
        raise InvalidArgumentError(
            f"signing_key must be bytes or a list of bytes (the first signs), got {type(keys).__name__}"
            + (" (encode the string, e.g. key.encode())" if isinstance(keys, str) else ""))
    out = []
    for k in keys:
        if not isinstance(k, (bytes, bytearray)):
            raise InvalidArgumentError(f"a signing key must be bytes, got {type(k).__name__}")
        if len(k) < MIN_KEY_BYTES:
            raise InvalidArgumentError(f"a signing key must be at least {MIN_KEY_BYTES} bytes, got {len(k)}")
        out.append(bytes(k))
    if not out:
        raise InvalidArgumentError("signing_key is an empty list")
    return tuple(out)


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


class _Hmac:
    """HMAC-SHA256 with one key, its padded-key hash states computed once (RFC 2104): a tag then
    costs two hash-state copies, a quarter of what a one-shot ``hmac.digest`` spends on key setup."""

    __slots__ = ("inner", "outer")

    def __init__(self, key: bytes) -> None:
        if len(key) > 64:  # the SHA-256 block size
            key = hashlib.sha256(key).digest()
        key = key.ljust(64, b"\0")
        self.inner, self.outer = hashlib.sha256(key.translate(_IPAD)), hashlib.sha256(key.translate(_OPAD))

    def tag(self, queue: str, id: str, data: bytes, domain: bytes = b"asynqpy1:") -> bytes:
        """The tag of ``data`` stored as task ``id`` of ``queue`` (``domain`` :data:`ENTRY_DOMAIN`:
        as scheduler entry ``id``; the domains keep a tag of one kind from verifying as the other)."""
        q, i = queue.encode(), id.encode(errors="surrogateescape")  # an id read from Redis as it was
        h = self.inner.copy()
        h.update(b"%s%d:%s,%d:%s," % (domain, len(q), q, len(i), i))
        h.update(data)
        o = self.outer.copy()
        o.update(h.digest())
        return o.digest()


class Signer:
    """Signs and verifies stored messages with HMAC-SHA256. ``keys``: one key (bytes) or a list;
    the first signs, every one verifies (rotation: put the new key first, drop the old one once
    no message signed with it is left)."""

    __slots__ = ("keys", "_macs")

    def __init__(self, keys: SigningKeys) -> None:
        self.keys = _keys(keys)
        self._macs = [_Hmac(k) for k in self.keys]

    def seal(self, queue: str, id: str, data: bytes) -> bytes:
        """``data`` (an encoded message) with its tag appended."""
        return data + codec.TAG_PREFIX + self._macs[0].tag(queue, id, data)

    def open(self, queue: str, id: str, value: bytes, domain: bytes = b"asynqpy1:") -> bytes:
        """The encoded message of a sealed ``value``; :class:`SignatureError` when the tag is
        missing or made with none of the keys."""
        what = "entry" if domain == ENTRY_DOMAIN else "message"
        if not has_tag(value):
            raise SignatureError(f"bad signature: the {what} is not signed")
        data, tag = value[:-codec.TAG_LEN], value[-32:]
        for mac in self._macs:
            if hmac.compare_digest(mac.tag(queue, id, data, domain), tag):
                return data
        raise SignatureError("bad signature: the tag matches none of the signing keys")

    def tag(self, queue: str, id: str, data: bytes, domain: bytes) -> bytes:
        """The tag (HMAC-SHA256 with the first key) of ``data`` stored as ``id`` of ``queue`` in
        ``domain`` (what kind of value: :data:`HISTORY_DOMAIN` for a durable run's events)."""
        return self._macs[0].tag(queue, id, data, domain)

    def verifies(self, queue: str, id: str, data: bytes, tag: bytes, domain: bytes) -> bool:
        """Whether ``tag`` is the tag of ``data`` (as :meth:`tag` made it) under one of the keys."""
        return isinstance(tag, bytes) and any(hmac.compare_digest(mac.tag(queue, id, data, domain), tag)
                                              for mac in self._macs)

    def seal_entry(self, queue: str, name: str, data: bytes) -> bytes:
        """A scheduler entry's stored definition ``data`` with its tag (bound to queue and name)."""
        return data + codec.TAG_PREFIX + self._macs[0].tag(queue, name, data, ENTRY_DOMAIN)

    def open_entry(self, queue: str, name: str, value: bytes) -> bytes:
        """The definition of a sealed entry ``value``; :class:`SignatureError` as :meth:`open`."""
        return self.open(queue, name, value, ENTRY_DOMAIN)


ENTRY_DOMAIN = b"asynqpy-cron1:"
"""What a scheduler entry's tag covers before its queue and name (a task's: ``asynqpy1:``)."""
HISTORY_DOMAIN = b"asynqpy-hist1:"
"""What a durable run's history event's tag covers before its queue and ``<run id>:<event number>``
(core/durable/signed.py)."""


def has_tag(value: bytes) -> bool:
    """Does ``value`` end with what looks like a tag (checked or not)?"""
    return len(value) > codec.TAG_LEN and value[-codec.TAG_LEN:-32] == codec.TAG_PREFIX


def open_message(signer: Signer | None, queue: str, id: str, value: bytes) -> Message:
    """Decode a stored message, verifying its tag first when there is a ``signer``. Raises
    :class:`SignatureError` or :class:`~asynqpy.errors.MalformedMessageError`."""
    return codec.decode(value if signer is None else signer.open(queue, id, value))


def run_message(signer: Signer | None, queue: str, id: str, value: bytes) -> tuple[Message, str]:
    """A dequeued task's message and, for a run of a targeted task (id '<task id>|<worker>',
    carrying its task's message, signed under the task's id), the task's id; else ''. Raises as
    :func:`open_message`."""
    if "|" in id:
        task_id = id.rpartition("|")[0]
        try:
            msg = open_message(signer, queue, task_id, value)
        except SignatureError:
            pass  # an ordinary task whose id holds '|'
        else:
            if msg.workers is not None or msg.runs > 1:
                return msg, task_id
    return open_message(signer, queue, id, value), ""


@dataclass(frozen=True)
class Verified:
    """A stored message that passed :func:`trust_gate`: ``msg`` is what it says, and
    :meth:`store` seals a rewrite of it again (with the reader's first key; unsigned for a keyless
    reader)."""

    queue: str
    id: str
    msg: Message
    signer: Signer | None

    def store(self, msg: Message) -> bytes:
        """The encoded ``msg`` (a rewrite of this task's message) with its tag."""
        data = codec.encode(msg)
        return data if self.signer is None else self.signer.seal(self.queue, self.id, data)


@dataclass(frozen=True)
class Refused:
    """A stored message that failed :func:`trust_gate` (``error``: a :class:`SignatureError`, or a
    :class:`~asynqpy.errors.MalformedMessageError`). ``msg``: its fields read without trusting
    them (:func:`asynqpy.core.model.codec.untrusted`), for display and for the record archived in its
    place; :meth:`store` never signs."""

    queue: str
    id: str
    msg: Message
    error: SignatureError | MalformedMessageError

    @property
    def reason(self) -> str:
        return str(self.error)

    def store(self, msg: Message) -> bytes:
        """The encoded ``msg`` WITHOUT a tag, its last error led by why the message was refused
        (so it stays refused: running it again from the archive is refused again)."""
        why = self.reason if msg.last_error in ("", self.reason) else f"{self.reason}; {msg.last_error}"
        return codec.encode(msg.with_(last_error=why))


def trust_gate(signer: Signer | None, queue: str, id: str, data: bytes) -> Verified | Refused:
    """The one way to read a stored message that is going to be written again: verify it (the tag,
    with ``signer``; its encoding), then allow re-sealing only what verified. The rule it keeps:
    nothing re-signs a message it has not verified; a message that fails is stored unsigned (a
    worker archives it so; the Inspector refuses to edit it). ``data``: the stored message (tag
    included, state and lease token not). A keyless reader (``signer`` None) verifies only the
    encoding, and rewrites a message unsigned."""
    try:
        msg = open_message(signer, queue, id, data)
    except (SignatureError, MalformedMessageError) as exc:
        return Refused(queue, id, codec.untrusted(data, str(exc), 0), exc)
    return Verified(queue, id, msg, signer)


def make_signer(keys: SigningKeys | None) -> Signer | None:
    """A :class:`Signer` for ``keys``, None for None."""
    return None if keys is None else Signer(keys)


def load_keys(path: str | Path) -> list[bytes]:
    """Read signing keys from a file: one key per line (the line's bytes without surrounding
    whitespace, e.g. the hex text of ``openssl rand -hex 32``), the first one signs; blank lines and
    lines starting with ``#`` are skipped. This is what ``--signing-key-file`` reads."""
    try:
        text = Path(path).read_bytes()
    except (OSError, ValueError) as exc:  # (ValueError: a path with a NUL byte)
        raise InvalidArgumentError(f"cannot read signing key file {str(path)!r}: "
                                   f"{getattr(exc, 'strerror', None) or exc}") from None
    keys = [line.strip() for line in text.splitlines()]
    keys = [k for k in keys if k and not k.startswith(b"#")]
    if not keys:
        raise InvalidArgumentError(f"signing key file {str(path)!r} holds no key")
    return list(_keys(keys))
