"""Optional encryption of what a task carries: its payload, result and logs, a process's state and
a durable function's history (docs/encryption.md).

An encrypted value is stored where the plain value would be, as one msgpack extension object
(type :data:`EXT_CODE`) whose data is the envelope::

    version (1 byte, 1) | key id length (1) | key id | digest length (1) | digest | nonce (12) | ciphertext + tag (16)

sealed with AES-256-GCM (``cryptography``'s ``AESGCM``) over the msgpack encoding of the value.
The associated data binds the envelope's header (its key id: a tenant key's names its tenant)
and what the value is (:data:`PAYLOAD`, :data:`RESULT`, ...), so a ciphertext moved to another
field, or to another tenant's task under tenant keys, no longer opens. Everything else of a
message stays as it was: routing metadata (queue, type, tenant, times, priority, key...) is
readable by Lua and by keyless readers.

A :class:`KeyRing` holds the keys by id, newest last: new values are sealed with the newest, any
of them opens. A ring made with ``tenant_keys=True`` seals the values of a task with a tenant
under that tenant's own data key: random, kept in Redis (``asynqpy:{Q}:tkeys``) sealed with the
ring's newest key, and named in the envelope as ``~<8 hex digits><tenant>``; forgetting the
tenant deletes it (crypto-erasure). The tenant keys' I/O is in :mod:`.keyplans`; a ring only
caches what was loaded.

``cryptography`` is imported when the first value is sealed or opened, not before: the core
install does not need it (``pip install 'asynqpy[crypto]'``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgpack

from ..model import codec
from ..model.errors import (
    DecryptionError,
    EncryptionError,
    InvalidArgumentError,
    KeyNotFoundError,
    MalformedMessageError,
    PayloadError,
)

EXT_CODE = codec.ENCRYPTED_EXT
"""The msgpack extension type of an encrypted value ('E')."""
VERSION = 1
NONCE_LEN = 12
KEY_LEN = 32
TENANT_KEY_TTL = 60.0
"""Seconds a process uses a tenant key it read before reading it again (``tenant forget``
reaches every process within that time)."""
ENV = "ASYNQPY_ENCRYPTION_KEYS"
"""The environment variable workers and the CLI read keys from: a JSON object (key id -> hex key),
or the path of a file holding one."""

PAYLOAD, RESULT, LOGS, STATE, HISTORY, TENANT_KEY = b"p", b"r", b"l", b"s", b"h", b"k"
"""What an encrypted value is (part of its associated data)."""

_KID = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")
_ENCRYPTED = "encrypted"


class Encrypted:
    """What a reader without the key sees in place of an encrypted value: ``str()`` says
    "encrypted" (and under which key); :attr:`ext` is the stored value, untouched."""

    __slots__ = ("ext", "kid", "reason")

    def __init__(self, ext: msgpack.ExtType, kid: str, reason: str = "") -> None:
        self.ext, self.kid, self.reason = ext, kid, reason

    def __repr__(self) -> str:
        return f"<{_ENCRYPTED}: key {self.kid}>"

    def __str__(self) -> str:
        return f"{_ENCRYPTED} (key {self.kid})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Encrypted) and other.ext == self.ext

    def __hash__(self) -> int:
        return hash(self.ext)


def is_sealed(value: Any) -> bool:
    """Is ``value`` an encrypted value as stored (an extension object of :data:`EXT_CODE`)?"""
    return type(value) is msgpack.ExtType and value.code == EXT_CODE


def header(ext: msgpack.ExtType) -> tuple[str, bytes, int]:
    """(key id, digest, where the nonce starts) of an envelope; DecryptionError if it is not one."""
    data = ext.data
    try:
        if data[0] != VERSION:
            raise DecryptionError(f"unknown encryption envelope version {data[0]}")
        n = data[1]
        kid = data[2:2 + n].decode()
        d = data[2 + n]
        digest = data[3 + n:3 + n + d]
        start = 3 + n + d
    except (IndexError, UnicodeDecodeError):
        raise DecryptionError("a truncated or altered encryption envelope") from None
    if len(data) < start + NONCE_LEN + 16:
        raise DecryptionError("a truncated or altered encryption envelope")
    return kid, digest, start


def key_id(value: Any) -> str:
    """The key id an encrypted value names ('' for a value that is not encrypted)."""
    if not is_sealed(value):
        return ""
    try:
        return header(value)[0]
    except DecryptionError:
        return "?"


def tenant_of_kid(kid: str) -> str | None:
    """The tenant a tenant key's id names (``~<8 hex><tenant>``), None for a ring key's id."""
    return kid[9:] if kid.startswith("~") else None


def _aead(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - the extra is part of the test install
        raise InvalidArgumentError("encryption needs the 'cryptography' package: pip install 'asynqpy[crypto]'") \
            from None
    return AESGCM(key)


def _invalid_tag() -> type[Exception]:
    from cryptography.exceptions import InvalidTag  # (loaded with the cipher: a lookup in sys.modules)

    return InvalidTag


def _check_key(kid: Any, key: Any) -> bytes:
    if not isinstance(kid, str) or not _KID.match(kid):
        raise InvalidArgumentError(f"an encryption key id must be 1-64 characters of [A-Za-z0-9_.:-], got {kid!r}")
    if isinstance(key, str):
        try:
            key = bytes.fromhex(key)
        except ValueError:
            raise InvalidArgumentError(f"encryption key {kid!r} is not hex text") from None
    if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_LEN:
        got = f"{len(key)} bytes" if isinstance(key, (bytes, bytearray)) else type(key).__name__
        raise InvalidArgumentError(f"encryption key {kid!r} must be {KEY_LEN} bytes (AES-256), got {got}")
    return bytes(key)


NONCES_AT_ONCE = 64
"""Nonces drawn from ``os.urandom`` in one call (:func:`new_nonce`)."""
_nonces: list[bytes] = []  # drawn, not used yet; each is popped once (list.pop: atomic under the GIL)
os.register_at_fork(after_in_child=_nonces.clear)  # (a forked child never uses its parent's)


def new_nonce() -> bytes:
    """A fresh random 96-bit AES-GCM nonce: random bytes from ``os.urandom``, the operating
    system's CSPRNG, read :data:`NONCES_AT_ONCE` nonces at a time (a system call a value was ~15 %
    of the instructions of sealing a result). A nonce is public, so holding the next ones in memory
    reveals nothing; what must never happen is using one twice: each is popped from the list once,
    and a forked child starts with none (``os.register_at_fork``)."""
    try:
        return _nonces.pop()
    except IndexError:
        data = os.urandom(NONCE_LEN * NONCES_AT_ONCE)
        _nonces.extend(data[i:i + NONCE_LEN] for i in range(NONCE_LEN, len(data), NONCE_LEN))
        return data[:NONCE_LEN]


class KeyRing:
    """Encryption keys by id, the newest last (it seals; every one opens): ``KeyRing({"k1": key})``
    with 32-byte keys (``KeyRing.new_key()``, or ``openssl rand -hex 32`` as hex text). Rotate by
    adding a newer key at the end and running ``asynqpy keys rotate``; drop an old key once
    nothing sealed with it is left. ``tenant_keys``: seal a tenant's tasks under that tenant's own
    key (made on first use, kept in Redis sealed with this ring), which ``asynqpy tenant forget``
    destroys. Give the same ring to the clients, the servers and the Inspector."""

    def __init__(self, keys: Mapping[str, bytes | bytearray | str], *, tenant_keys: bool = False) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise InvalidArgumentError("KeyRing takes a non-empty mapping of key id -> 32-byte key")
        self.keys = {kid: _check_key(kid, key) for kid, key in keys.items()}
        self.newest = list(self.keys)[-1]
        self.tenant_keys = bool(tenant_keys)
        self._aeads: dict[str, Any] = {}
        # the worker's hot path, per envelope head and ``what`` (a ring key's, no digest, nothing
        # bound: a few entries a ring): (cipher, associated data) to open, and what seals
        self._opens: dict[bytes, dict[bytes, tuple[Any, bytes]]] = {PAYLOAD: {}, RESULT: {}}
        self._seals: dict[tuple[str, bytes], tuple[Any, bytes, bytes]] = {}
        self._newest: dict[bytes, tuple[Any, bytes, bytes]] = {}  # what -> the newest key's of _seals
        self._tenants: dict[tuple[str, str], tuple[str, bytes]] = {}  # (queue, tenant) -> (key id, key)
        self._loaded: dict[tuple[str, str], float] = {}  # (queue, tenant) -> when its key was read (monotonic)
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the keys
        return f"KeyRing(ids={list(self.keys)!r}, tenant_keys={self.tenant_keys})"

    @staticmethod
    def new_key() -> bytes:
        """A new random 32-byte key."""
        return os.urandom(KEY_LEN)

    @classmethod
    def from_json(cls, text: str | bytes, *, tenant_keys: bool = False, what: str = "encryption keys") -> KeyRing:
        """A ring from a JSON object of key id -> hex key (newest last)."""
        try:
            obj = json.loads(text)
        except ValueError as exc:
            raise InvalidArgumentError(f"{what}: not a JSON object of key id -> hex key ({exc})") from None
        if not isinstance(obj, dict) or not all(isinstance(v, str) for v in obj.values()):
            raise InvalidArgumentError(f"{what}: not a JSON object of key id -> hex key")
        return cls(obj, tenant_keys=tenant_keys)

    @classmethod
    def from_file(cls, path: str | Path, *, tenant_keys: bool = False) -> KeyRing:
        """A ring from a file holding a JSON object of key id -> hex key (``--encryption-keys``)."""
        try:
            text = Path(path).read_bytes()
        except (OSError, ValueError) as exc:  # (ValueError: a path with a NUL byte)
            raise InvalidArgumentError(f"cannot read encryption key file {str(path)!r}: "
                                       f"{getattr(exc, 'strerror', None) or exc}") from None
        return cls.from_json(text, tenant_keys=tenant_keys, what=f"encryption key file {str(path)!r}")

    @classmethod
    def from_env(cls, *, tenant_keys: bool = False, environ: Mapping[str, str] | None = None) -> KeyRing | None:
        """A ring from ``$ASYNQPY_ENCRYPTION_KEYS`` (a JSON object, or the path of a file holding
        one); None when it is not set."""
        text = (os.environ if environ is None else environ).get(ENV, "").strip()
        if not text:
            return None
        if text.startswith("{"):
            return cls.from_json(text, tenant_keys=tenant_keys, what=f"${ENV}")
        return cls.from_file(text, tenant_keys=tenant_keys)

    # -- sealing and opening ------------------------------------------------------------------

    def _cipher(self, kid: str, key: bytes) -> Any:
        aead = self._aeads.get(kid)
        if aead is None:
            aead = self._aeads[kid] = _aead(key)
        return aead

    def sealing_key(self, queue: str, tenant: str) -> tuple[str, bytes]:
        """(key id, key) that seals a value of a task of ``tenant`` in ``queue``: the tenant's own
        key under ``tenant_keys``, and whenever it is loaded (a worker opened the task's payload
        with it: its result and logs go under the same key, so forgetting the tenant covers them)."""
        if tenant and (self.tenant_keys or (queue, tenant) in self._tenants):
            got = self._tenants.get((queue, tenant))
            if got is None:
                raise KeyNotFoundError(f"tenant {tenant!r} of queue {queue!r} has no key loaded (or it was forgotten)")
            return got
        return self.newest, self.keys[self.newest]

    def needs_tenant_key(self, tenant: str) -> bool:
        return self.tenant_keys and bool(tenant)

    def seal(self, value: Any, what: bytes, queue: str = "", tenant: str = "", digest: bytes = b"") -> msgpack.ExtType:
        """``value`` (any msgpack value) encrypted, as stored. ``what``: :data:`PAYLOAD`, ...;
        ``digest``: a keyed digest kept readable in the envelope (a unique task's lock)."""
        try:
            plain = _packers.packer.pack(value)  # (this thread's packer: packb would build one per call)
        except AttributeError:
            plain = codec.packer().pack(value)  # (its first in this thread)
        except (TypeError, ValueError, OverflowError) as exc:
            raise PayloadError(f"{_WHAT.get(what, 'value')} is not msgpack-serializable: {exc}") from None
        if not digest and not (tenant and (self.tenant_keys or (queue, tenant) in self._tenants)):
            got = self._newest.get(what)  # (the worker's result of every task: no tenant key, no digest)
            if got is not None:
                nonce = new_nonce()
                return _tuple_new(_EXT, (EXT_CODE, got[1] + nonce + got[0].encrypt(nonce, plain, got[2])))
        kid, key = self.sealing_key(queue, tenant)
        return self.seal_with(kid, key, plain, what, digest=digest)

    def seal_with(self, kid: str, key: bytes, plain: bytes, what: bytes, bound: str = "",
                  digest: bytes = b"") -> msgpack.ExtType:
        """``plain`` sealed with ``key`` (named ``kid``); ``bound``: more associated data."""
        fast = not bound and not digest and self.keys.get(kid) == key
        got = self._seals.get((kid, what)) if fast else None
        if got is None:
            k = kid.encode()
            head = bytes((VERSION, len(k))) + k + bytes((len(digest),)) + digest
            got = self._cipher(kid, key), head, _aad(head, what, bound)
            if fast:
                self._seals[(kid, what)] = got
                if kid == self.newest:
                    self._newest[what] = got
        aead, head, aad = got
        nonce = new_nonce()
        return codec.ext(EXT_CODE, head + nonce + aead.encrypt(nonce, plain, aad))

    def _opening_key(self, kid: str, queue: str) -> bytes:
        tenant = tenant_of_kid(kid)
        if tenant is not None:
            got = self._tenants.get((queue, tenant))
            if got is None or got[0] != kid:
                raise KeyNotFoundError(f"the key of tenant {tenant!r} (queue {queue!r}) is not loaded: forgotten, "
                                       "or the reader has no tenant keys")
            return got[1]
        key = self.keys.get(kid)
        if key is None:
            raise KeyNotFoundError(f"encryption key {kid!r} is not in the key ring (ids: {', '.join(self.keys)})")
        return key

    def open_bytes(self, ext: msgpack.ExtType, what: bytes, queue: str = "", bound: str = "") -> bytes:
        """The plaintext bytes of a sealed value. Raises :class:`KeyNotFoundError` /
        :class:`DecryptionError`."""
        data = ext.data
        got, opens = None, self._opens.get(what) if not bound else None
        if opens is not None and len(data) > 2 and (start := 3 + data[1]) < len(data) and data[start - 1] == 0:
            got = opens.get(data[:start])  # (a ring key's head: no digest)
        if got is None:
            kid, digest, start = header(ext)
            aead = self._cipher(kid, self._opening_key(kid, queue))
            got = aead, _aad(data[:start], what, bound)
            if opens is not None and not digest and tenant_of_kid(kid) is None and len(opens) < 32:
                opens[data[:start]] = got
        elif len(data) < start + NONCE_LEN + 16:
            raise DecryptionError("a truncated or altered encryption envelope")
        try:
            plain: bytes = got[0].decrypt(data[start:start + NONCE_LEN], data[start + NONCE_LEN:], got[1])
            return plain
        except _invalid_tag():
            raise DecryptionError(f"the {_WHAT.get(what, 'value')} does not decrypt under key {key_id(ext)!r}: a wrong "
                                  "key, or the ciphertext was altered") from None

    def open(self, value: Any, what: bytes, queue: str = "") -> Any:
        """``value`` decrypted if it is sealed, else itself (``queue``: the task's, whose tenant
        keys open it)."""
        if not is_sealed(value):
            return value
        return codec.decode_value(self.open_bytes(value, what, queue))

    def digest(self, task_type: str, payload: Any) -> bytes:
        """A unique task's lock digest over its plain payload, keyed (HMAC-SHA256 with the newest
        key, 20 bytes), so the lock does not reveal the payload."""
        plain = bytes.fromhex(codec.unique_digest(task_type, payload))
        return hmac.new(self.keys[self.newest], b"asynqpy-lock1:" + plain, hashlib.sha256).digest()[:20]

    # -- tenant keys (loaded by .keyplans) ----------------------------------------------------

    def tenant_key(self, queue: str, tenant: str) -> tuple[str, bytes] | None:
        """The tenant's key if it was read from Redis less than :data:`TENANT_KEY_TTL` ago (a
        forgotten key is known so within that time by every process that had it)."""
        if time.monotonic() - self._loaded.get((queue, tenant), -TENANT_KEY_TTL) >= TENANT_KEY_TTL:
            return None
        return self._tenants.get((queue, tenant))

    def known(self, queue: str, tenant: str) -> bool:
        """Was the tenant's key (or that it has none) read from Redis less than
        :data:`TENANT_KEY_TTL` ago?"""
        return time.monotonic() - self._loaded.get((queue, tenant), -TENANT_KEY_TTL) < TENANT_KEY_TTL

    def remember_none(self, queue: str, tenant: str) -> None:
        """The tenant has no key (as read now)."""
        with self._lock:
            self._tenants.pop((queue, tenant), None)
            if len(self._loaded) > 100_000:
                self._loaded.clear()
            self._loaded[(queue, tenant)] = time.monotonic()

    def remember(self, queue: str, tenant: str, kid: str, key: bytes) -> None:
        with self._lock:
            if len(self._tenants) > 100_000:
                self._tenants.clear()
                self._loaded.clear()
            self._tenants[(queue, tenant)] = (kid, key)
            self._loaded[(queue, tenant)] = time.monotonic()

    def forget(self, queue: str, tenant: str) -> None:
        with self._lock:
            self._tenants.pop((queue, tenant), None)
            self._loaded.pop((queue, tenant), None)

    def wrap(self, queue: str, tenant: str, kid: str, key: bytes) -> bytes:
        """A tenant key as stored in Redis: its id and the key sealed with the ring's newest key."""
        ext = self.seal_with(self.newest, self.keys[self.newest], key, TENANT_KEY, bound=f"{queue}\0{tenant}")
        return codec.encode_payload([kid, ext])

    def unwrap(self, queue: str, tenant: str, stored: bytes) -> tuple[str, bytes]:
        """(key id, key) of a tenant key as stored."""
        try:
            kid, ext = codec.decode_value(stored)
        except (ValueError, TypeError):
            raise DecryptionError(f"the stored key of tenant {tenant!r} is malformed") from None
        if not isinstance(kid, str) or not is_sealed(ext):
            raise DecryptionError(f"the stored key of tenant {tenant!r} is malformed")
        return kid, self.open_bytes(ext, TENANT_KEY, "", f"{queue}\0{tenant}")

    def new_tenant_key(self) -> tuple[str, bytes]:
        return os.urandom(4).hex(), os.urandom(KEY_LEN)


def tenant_kid(dek_id: str, tenant: str) -> str:
    return f"~{dek_id}{tenant}"


_WHAT = {PAYLOAD: "payload", RESULT: "result", LOGS: "logs", STATE: "process state", HISTORY: "history",
         TENANT_KEY: "tenant key"}


def _aad(head: bytes, what: bytes, bound: str) -> bytes:
    return b"asynqpy-enc1\0" + what + b"\0" + bound.encode(errors="surrogateescape") + b"\0" + head


def describe(value: Any) -> Any:
    """``value`` for a reader without its key: an :class:`Encrypted` if it is sealed."""
    return Encrypted(value, key_id(value)) if is_sealed(value) else value


# -- a task's message: what a worker opens and seals again --------------------------------------


def sealed_message(msg: codec.Message) -> bool:
    """Does ``msg`` carry encrypted values (its payload, a process input's arguments, its logs)?"""
    p = msg.payload
    return is_sealed(p) or is_sealed(msg.logs) or (type(p) is dict and is_sealed(p.get("a")))


def message_tenants(msg: codec.Message) -> list[str]:
    """The tenants whose keys sealed values of ``msg`` (a tenant key's id starts with '~': the
    envelope is parsed only then)."""
    p = msg.payload
    out = []
    values: tuple[Any, ...] = (p, msg.logs, msg.result, p.get("a") if type(p) is dict else None)
    for v in values:
        if is_sealed(v) and v.data[2:3] == b"~":
            tenant = tenant_of_kid(key_id(v))
            if tenant is not None:
                out.append(tenant)
    return out


def open_message(ring: KeyRing, queue: str, msg: codec.Message) -> codec.Message:
    """``msg`` with its payload (or a process input's arguments), result and logs decrypted.
    Raises :class:`KeyNotFoundError` / :class:`DecryptionError`."""
    p = msg.payload
    if is_sealed(p):
        p = ring.open(p, PAYLOAD, queue)
    elif type(p) is dict and is_sealed(p.get("a")):  # a process input: its arguments alone
        p = {**p, "a": ring.open(p["a"], PAYLOAD, queue)}
    logs = ring.open(msg.logs, LOGS, queue) if is_sealed(msg.logs) else msg.logs
    result = ring.open(msg.result, RESULT, queue) if is_sealed(msg.result) else msg.result
    return _with(msg, p, result, logs)


GENERAL: Any = object()
""":func:`open_plain_payload`'s answer for a message its common path does not open."""


def open_plain_payload(ring: KeyRing, queue: str, msg: codec.Message) -> Any:
    """The decrypted payload of a worker's common task: the payload sealed under a ring key, no
    process input's arguments, logs or result sealed, no tenant key needed; ``msg.payload`` itself
    where nothing of ``msg`` is sealed; :data:`GENERAL` where this path does not apply (then
    :func:`open_message`, after the tenant keys are loaded). Written out in one function, and
    the message left as stored (the worker keeps the payload beside it: no second message):
    every task of an encrypted queue comes through it. Raises :class:`EncryptionError` (a key
    missing, a tampered ciphertext, a value that does not decode)."""
    p = msg.payload
    if _EXT in (type(msg.logs), type(msg.result)) or (ring.tenant_keys and msg.tenant):
        return GENERAL  # (logs or a result sealed, or a tenant key to load: the general path)
    if type(p) is not _EXT:
        return GENERAL if type(p) is dict and is_sealed(p.get("a")) else p  # (a process input's arguments)
    data = p.data
    if p.code != EXT_CODE or len(data) < 3 + NONCE_LEN + 16 or data[2] == 126:  # (126: "~", a tenant key's id)
        return GENERAL
    start = 3 + data[1]  # (where the nonce starts when there is no digest: open_bytes's cache of a ring key's
    got = ring._opens[PAYLOAD].get(data[:start]) if data[start - 1:start] == b"\0" else None  # head, cipher, data)
    try:
        plain = got[0].decrypt(data[start:start + NONCE_LEN], data[start + NONCE_LEN:], got[1]) if got else None
    except Exception:  # noqa: BLE001 - (a short or altered envelope: open_bytes says which, below)
        plain = None
    plain = plain or ring.open_bytes(p, PAYLOAD, queue)  # (the general case, and its errors)
    try:
        return _unpackb(plain, strict_map_key=False, ext_hook=codec.ext)
    except Exception:  # noqa: BLE001 - (tuple keys, or not msgpack: decode_value says which)
        return _decoded(plain)


def _decoded(plain: bytes) -> Any:
    try:
        return codec.decode_value(plain)
    except MalformedMessageError as exc:
        raise EncryptionError(f"the task's encrypted values do not decode: {exc}") from None


def open_plain_message(ring: KeyRing, queue: str, msg: codec.Message) -> codec.Message | None:
    """:func:`open_plain_payload` as a message (``msg`` itself where nothing is sealed), or None
    where the common path does not apply."""
    p = open_plain_payload(ring, queue, msg)
    if p is GENERAL:
        return None
    return msg if p is msg.payload else _with(msg, p, msg.result, msg.logs)


def seal_rewrite(ring: KeyRing, queue: str, plain: codec.Message, stored: codec.Message) -> codec.Message:
    """``plain`` (a rewrite of :func:`open_message`'s message: its logs, result, error) as it is
    stored: the payload as ``stored`` holds it (its ciphertext, untouched), the logs and the
    result sealed."""
    logs, result = plain.logs, plain.result
    if logs is not None and not is_sealed(logs):
        logs = stored.logs if logs == _opened_logs(stored) else ring.seal(logs, LOGS, queue, plain.tenant)
    if result is not None and not is_sealed(result):
        result = ring.seal(result, RESULT, queue, plain.tenant)
    return _with(plain, stored.payload, result, logs)


_new, _setattr, _tuple_new = object.__new__, object.__setattr__, tuple.__new__
_EXT, _unpackb, _packers = msgpack.ExtType, msgpack.unpackb, codec.packers


def _with(msg: codec.Message, payload: Any, result: Any, logs: Any) -> codec.Message:
    """``msg.with_(payload=..., result=..., logs=...)`` without the frozen dataclass's ``replace``
    (28 fields through ``__init__``: the largest cost of a worker's encrypted task), as
    :func:`~asynqpy.core.model.codec.message_of` makes one: its fields' dict, copied."""
    d = msg.__dict__.copy()
    d["payload"] = payload
    d["result"] = result
    d["logs"] = logs
    m = _new(codec.Message)
    _setattr(m, "__dict__", d)
    return m


def _opened_logs(stored: codec.Message) -> Any:
    return None if is_sealed(stored.logs) else stored.logs


def check_ring(value: Any) -> KeyRing | None:
    """``encryption=``: a :class:`KeyRing` or None."""
    if value is not None and not isinstance(value, KeyRing):
        raise InvalidArgumentError(f"encryption must be a KeyRing (asynqpy.KeyRing({{'k1': key}})), got "
                                   f"{type(value).__name__}")
    return value


def sealed_payload(payload: Any) -> bool:
    """Is ``payload`` encrypted already (itself, or a process input's arguments)?"""
    return is_sealed(payload) or (type(payload) is dict and is_sealed(payload.get("a")))


# -- a durable process's state and history (the worker's runner seals and opens them) ------------


def seal_step(ring: KeyRing, queue: str, tenant: str, step: Any) -> Any:
    """A processor's ``Step`` with its state, events and response encrypted (what it keeps as
    is: KEEP, None, the timer, remove)."""
    from dataclasses import replace

    from ..processes.model import KEEP, Step

    if not isinstance(step, Step):
        return step  # (None, or a mistake plan_step reports)
    def seal(v: Any, what: bytes) -> Any:
        return ring.seal(v, what, queue, tenant)

    events = step.events
    if not isinstance(events, (str, bytes)) and isinstance(events, (list, tuple)):
        events = [seal(e, HISTORY) for e in events]
    return replace(step, events=events,
                   state=step.state if step.state is KEEP or step.state is None else seal(step.state, STATE),
                   response=None if step.response is None else seal(step.response, RESULT))


def open_process(ring: KeyRing, queue: str, proc: Any) -> Any:
    """A process (``Process``) as its processor sees it: its state and history decrypted."""
    from dataclasses import replace

    state = ring.open(proc.state, STATE, queue)
    history = [replace(e, data=ring.open(e.data, HISTORY, queue)) if is_sealed(e.data) else e for e in proc.history]
    return replace(proc, state=state, history=history)


def process_tenants(queue: str, proc: Any) -> set[tuple[str, str]]:
    """The (queue, tenant) keys a process's encrypted state and history name."""
    values = [proc.state, *(e.data for e in proc.history)]
    return {(queue, t) for v in values if is_sealed(v) and (t := tenant_of_kid(key_id(v))) is not None}
