"""The task message and its encoding (msgpack; never pickle).

A message is stored as a msgpack array with its fields in a fixed order and trailing default
values left out, so a small no-op task costs only a few dozen bytes in Redis. The payload is kept
as a msgpack value inside the array: ``bytes`` stay ``bytes``, anything else msgpack can carry
(dicts, lists, str, int, float, bool, None) round-trips as such; a tuple comes back as a list,
except as a dict key, where it stays a tuple.

A signed message (see :mod:`asynqpy.signing`) is the same array followed by its tag, one msgpack
``bin`` object of 32 bytes; unsigned messages carry nothing extra. :func:`decode` reads the array
and accepts a trailing tag without checking it (checking is the signer's job).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, cast

import msgpack

from ..results import tasklogs
from .errors import MalformedMessageError, PayloadError

TAG_PREFIX = b"\xc4\x20"
"""msgpack header of a 32-byte ``bin``: how a signed message's trailing tag starts."""
TAG_LEN = len(TAG_PREFIX) + 32

DEFAULT_MAX_RETRY = 25
SERVER_DEFAULT = -1
MIN_PRIORITY, DEFAULT_PRIORITY, MAX_PRIORITY = 0, 5, 9
PRIORITY_INDEX = 19
"""The ``priority`` field's index: a message whose array reaches it has a priority other than
the default (trailing defaults are left out); Lua reads the array's length to know (``lua/includes/
priority.lua``), without decoding messages of the default priority."""
"""timeout_ms value meaning "the server's default timeout"."""


@dataclass(frozen=True)
class Message:
    """Everything asynqpy knows about a task except its id, queue and state (stored alongside).

    Times are Unix milliseconds; durations are milliseconds. ``timeout_ms``: -1 = the server's
    default, 0 = no limit. ``deadline_ms`` 0 = none. ``retry_delay_ms`` -1 = the server's policy.
    ``traceback``: the last failed attempt's traceback (bounded, its innermost frames kept), or ''.
    ``headers``: ``{str: str}`` the producer attached (None = none). ``reply_to``: the inbox id of
    the client waiting for the outcome (``Client.call``), or ''. ``group``: the aggregation group
    the task waits in (``enqueue(..., group=...)``), or ''. ``priority``: 0 (lowest) to 9 (highest),
5 by default. ``workers``: the names of the workers allowed to run it (None = any); ``runs``:
how many distinct workers must run it successfully. A task with either is a targeted task.
    ``after``: the parents a workflow task waited on, as ``[queue, id]`` pairs (None = none;
    the handler reads their results as ``task.parent_results``). ``key``: tasks of a queue with
    the same key run one at a time, in enqueue order ('' = none). ``retry_front``: a retry of the
    task goes to the front of its queue's pending tasks, not the back. ``tenant``: the tenant the
    task belongs to: a queue hands its pending tasks out round-robin across tenants ('' = none:
    the tasks without a tenant take their turns as one tenant). ``logs``: the lines its
    attempts logged (``asynqpy.core.results.tasklogs``: ``[attempt, unix ms, text]`` each; None = none).
    ``min_version``: the least worker version that may run it (``asynqpy.core.deploy.versions``
    encode_version; 0 = any worker).
    New fields only ever go at the end: an older message (shorter array) still decodes.
    """

    type: str
    payload: Any = None
    enqueued_at_ms: int = 0
    max_retry: int = DEFAULT_MAX_RETRY
    timeout_ms: int = SERVER_DEFAULT
    deadline_ms: int = 0
    retention_ms: int = 0
    unique: bool = False
    retried: int = 0
    last_error: str = ""
    last_failed_at_ms: int = 0
    retry_delay_ms: int = -1
    completed_at_ms: int = 0
    result: Any = None
    traceback: str = ""
    headers: dict[str, str] | None = None
    reply_to: str = ""
    group: str = ""
    unique_key: str = ""
    priority: int = DEFAULT_PRIORITY
    workers: list[str] | None = None
    runs: int = 1
    after: list[list[str]] | None = None
    key: str = ""
    retry_front: bool = False
    tenant: str = ""
    logs: list[list[Any]] | None = None
    min_version: int = 0

    def with_(self, **changes: Any) -> Message:
        """A copy with some fields changed."""
        return replace(self, **changes)

    def lock_digest(self, force: bool = False) -> str:
        """The uniqueness digest ('' when the task is not unique, unless ``force``: a throttled
        task's lock): of the caller's ``unique_key`` if it gave one, else of the type and payload
        (the lock key adds the queue), and of the tenant when the task has one."""
        if not (self.unique or force):
            return ""
        if self.unique_key:
            return hashlib.sha1(b"key\0" + self.unique_key.encode(), usedforsecurity=False).hexdigest()
        payload = self.payload
        if type(payload) is msgpack.ExtType and payload.code == ENCRYPTED_EXT:  # its keyed digest, in clear
            digest = _sealed_digest(payload.data)
        else:
            digest = unique_digest(self.type, payload)
        if self.tenant:  # one tenant's task never suppresses another's
            return hashlib.sha1(f"tenant\0{self.tenant}\0{digest}".encode(), usedforsecurity=False).hexdigest()
        return digest


ENCRYPTED_EXT = 69
"""The msgpack extension type of an encrypted value (core/security/encryption.py ``EXT_CODE``)."""


def _sealed_digest(data: bytes) -> str:
    """The digest an encrypted payload's envelope carries in clear (a unique task's lock: a keyed
    digest of the plain payload), hex; of the envelope itself when it carries none."""
    try:
        n = data[1]
        d = data[2 + n]
        digest = data[3 + n:3 + n + d]
    except IndexError:
        digest = b""
    return digest.hex() if digest else hashlib.sha1(data, usedforsecurity=False).hexdigest()


_FIELDS = [f.name for f in fields(Message)]
_BY_NAME = {f.name: f.default for f in fields(Message)}
del _BY_NAME["type"]  # (the one field without a default)


def message_of(values: Sequence[Any]) -> Message:
    """``Message(*values)`` for at most one value per field, in field order, made without the
    frozen dataclass's ``__init__`` (an ``object.__setattr__`` per field, 28 of them: ~6 µs, as
    much as the rest of building a task's message): the defaults' dict updated with the values."""
    d = {"type": values[0], **_BY_NAME}
    d.update(zip(_FIELDS, values))
    m = _new(Message)
    _setattr(m, "__dict__", d)
    return m


_new, _setattr = object.__new__, object.__setattr__
_DEFAULTS = [f.default for f in fields(Message)]
_TYPES: list[tuple[type, ...]] = [
    (str,), (object,), (int,), (int,), (int,), (int,), (int,), (bool,), (int,), (str,), (int,),
    (int,), (int,), (object,), (str,), (dict, type(None)), (str,), (str,), (str,), (int,), (list, type(None)),
    (int,), (list, type(None)), (str,), (bool,), (str,), (list, msgpack.ExtType, type(None)), (int,),
]
"""(``logs``: a list of lines, or the lines encrypted: an extension object, core/security/encryption.py)"""


def _default_hook(obj: object) -> object:
    if isinstance(obj, int):  # msgpack calls the hook for an int it cannot carry
        text = str(obj) if obj.bit_length() < 200 else f"an integer of {obj.bit_length()} bits"
        raise TypeError(f"integers must fit in 64 bits (-2**63 to 2**64-1), got {text}")
    raise TypeError(f"cannot serialize object of type {type(obj).__name__}")


packers = threading.local()
"""Each thread's ``packer`` once :func:`packer` made it (a hot path reads ``packers.packer``)."""


def packer() -> Any:
    """This thread's reusable msgpack packer (``packb`` builds a new one per call, which costs more
    than packing a small message). Its ``pack`` raises like ``packb`` and resets itself on error."""
    p = getattr(packers, "packer", None)
    if p is None:
        p = packers.packer = msgpack.Packer(use_bin_type=True, default=_default_hook)
    return p


def encode_payload(payload: Any, what: str = "payload") -> bytes:
    """Encode a payload alone (to check it is serializable and measure it). ``what`` names the
    value in the error: "payload", "result", ..."""
    try:
        return cast(bytes, msgpack.packb(payload, use_bin_type=True, default=_default_hook))
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadError(f"{what} is not msgpack-serializable: {exc}") from None


def encode(msg: Message) -> bytes:
    """Encode a message for storage."""
    return encode_values(list(msg.__dict__.values()))  # field order (a frozen dataclass, no slots)


def encoded_length(values: list[Any]) -> int:
    """How many leading fields an encoding keeps: trailing default values are left out."""
    end = len(values)
    while end > 1:
        v, d = values[end - 1], _DEFAULTS[end - 1]
        if v != d or type(v) is not type(d):
            break
        end -= 1
    return end


def encode_values(values: list[Any], end: int | None = None) -> bytes:
    """Encode a message given as its field values, in field order; ``end``: the
    :func:`encoded_length` if the caller knows it."""
    if end is None:
        end = encoded_length(values)
    try:
        return cast(bytes, packer().pack(values[:end]))
    except (TypeError, ValueError, OverflowError) as exc:
        raise PayloadError(f"payload is not msgpack-serializable: {exc}") from None


assert len(_TYPES) == len(_FIELDS), "one type per Message field"
assert _FIELDS.index("priority") == PRIORITY_INDEX
RETRY_FRONT_INDEX = _FIELDS.index("retry_front")
TENANT_INDEX = _FIELDS.index("tenant")
MIN_VERSION_INDEX = _FIELDS.index("min_version")
KEY_INDEX = _FIELDS.index("key")
# lua/includes/msgfield.lua's msg_tail finds these in one walk, in this order
assert PRIORITY_INDEX < KEY_INDEX < RETRY_FRONT_INDEX < TENANT_INDEX
FIELD_INDEX: dict[str, int] = {name: i for i, name in enumerate(_FIELDS)}
"""Each message field's index in the encoded array (0-based): the table a Lua script reads as
``F.<field>`` (core/spine/scripts.py emits the fields a script uses into its prologue), so no field
number is written in Lua."""
_UNIQUE_INDEX = _FIELDS.index("unique")


REWRITTEN_FIELDS = frozenset(_FIELDS.index(n) for n in (
    "retried", "last_error", "last_failed_at_ms", "completed_at_ms", "result", "traceback", "logs"))
"""The fields a task's own end rewrites in its stored message (a retry, an archive, a completion):
the rest is what the caller stored. lua/includes/newtask.lua (REWRITTEN_FIELD, 1-based) reads the
same list to recognise a task its caller sends again (:func:`same_task`)."""
ENQUEUED_AT_INDEX = _FIELDS.index("enqueued_at_ms")


def same_task(a: Message, b: Message, same_time: bool) -> bool:
    """Are ``a`` and ``b`` the same task, the fields its end rewrites (:data:`REWRITTEN_FIELDS`)
    aside, and its enqueue time unless ``same_time`` (then it must be equal and not 0)? The Python
    twin of lua/includes/newtask.lua ``same_task`` (which compares the fields' encodings): how a
    call that stores a new task recognises the caller's own task under its id (docs/internals-scripts.md
    "Calls sent again")."""
    skip = REWRITTEN_FIELDS if same_time else REWRITTEN_FIELDS | {ENQUEUED_AT_INDEX}
    va, vb = list(a.__dict__.values()), list(b.__dict__.values())
    for i in range(len(_FIELDS)):
        if i not in skip and encode_payload(va[i]) != encode_payload(vb[i]):
            return False
    return not same_time or a.enqueued_at_ms != 0


def _str_map(v: dict[Any, Any]) -> bool:
    return all(type(k) is str and type(x) is str for k, x in v.items())


def _str_list(v: list[Any]) -> bool:
    return all(type(w) is str for w in v)


def _refs(v: list[Any]) -> bool:
    return all(isinstance(r, list) and len(r) == 2 and type(r[0]) is str and type(r[1]) is str for r in v)


_ITEMS: dict[int, Any] = {_FIELDS.index("headers"): _str_map, _FIELDS.index("workers"): _str_list,
                          _FIELDS.index("after"): _refs, _FIELDS.index("logs"): tasklogs.valid}
"""Per field holding a container (when not None): the check of its items."""


def may_be_unique(data: bytes) -> bool:
    """False when an encoded message is certainly not unique: its array is too short to reach the
    ``unique`` field (trailing default values are left out), so most messages need no decoding."""
    return not (data and 0x90 <= data[0] <= 0x90 + _UNIQUE_INDEX)


def may_be_keyed(data: bytes) -> bool:
    """False when an encoded message certainly has no key (``key=``): its array is too short to
    reach the key field (as lua/includes/serial.lua's ``is_keyed`` reads it)."""
    return not (data and (0x90 <= data[0] <= 0x9F or (data[0] == 0xDC and len(data) > 2
                                                       and int.from_bytes(data[1:3], "big") <= KEY_INDEX)))


def _tuple(v: Any) -> Any:
    return tuple(_tuple(x) for x in v) if isinstance(v, list) else v


_tuple_new, _ExtType = tuple.__new__, msgpack.ExtType
EXT_MIN = 0
"""The lowest extension type code an application may use (msgpack reserves the negative ones)."""


def ext(code: int, data: bytes) -> msgpack.ExtType:
    """``msgpack.ExtType(code, data)`` for a code and bytes known good (what msgpack decodes, what
    asynqpy makes): the namedtuple without its checks (``ExtType(...)`` runs two Python frames:
    half the CPU of opening an encrypted payload went to them). A negative code (reserved by
    msgpack) raises ValueError as ``ExtType`` does."""
    if code < EXT_MIN:
        raise ValueError("ExtType code must be 0-127")
    return _tuple_new(_ExtType, (code, data))  # (not through cast(): a call less a value)


def _dict_with_tuple_keys(pairs: list[tuple[Any, Any]]) -> dict[Any, Any]:
    return {_tuple(k): v for k, v in pairs}


def _unpack(data: bytes, hook: Any = None) -> Any:
    """The message array, without a signed message's tag (see decode)."""
    try:
        return msgpack.unpackb(data, strict_map_key=False, object_pairs_hook=hook, ext_hook=ext)
    except msgpack.ExtraData as extra:  # a signed message's tag (any other trailing bytes: garbage)
        if len(extra.extra) != TAG_LEN or extra.extra[:2] != TAG_PREFIX:
            raise MalformedMessageError("undecodable message: unexpected bytes after the message") from None
        return extra.unpacked


def _values(data: bytes) -> Any:
    """The decoded array (any msgpack value), or MalformedMessageError."""
    try:
        try:
            return _unpack(data)
        except TypeError:  # a map key that is an array (a payload's tuple key): unhashable as a list
            return _unpack(data, _dict_with_tuple_keys)
    except MalformedMessageError:
        raise
    except Exception as exc:  # noqa: BLE001 - msgpack raises several unrelated types on garbage
        raise MalformedMessageError(f"undecodable message: {exc}") from None


_EXACT: list[frozenset[type] | None] = [None if t == (object,) else frozenset(t) for t in _TYPES]
"""Per field, the exact types msgpack may decode it to (None: any). What msgpack decodes is of a
builtin type, never a subclass, so an exact type test says what ``isinstance`` (with bool kept out
of the int fields) says, for less CPU: every task a worker runs is decoded."""


def decode(data: bytes) -> Message:
    """Decode a stored message; anything that is not one raises :class:`MalformedMessageError`."""
    values = _values(data)
    if type(values) is not list or not 1 <= len(values) <= len(_FIELDS):
        raise MalformedMessageError("message is not an array of the expected length")
    for value, allowed in zip(values, _EXACT):
        if allowed is not None and type(value) not in allowed:
            i = next(i for i, (v, ok) in enumerate(zip(values, _EXACT)) if ok is not None and type(v) not in ok)
            raise MalformedMessageError(f"message field {_FIELDS[i]!r} has a wrong type")
    if not values[0]:
        raise MalformedMessageError("message has an empty task type")
    n = len(values)
    for i, items in _ITEMS.items():
        if n > i and values[i] is not None and type(values[i]) is not msgpack.ExtType and not items(values[i]):
            raise MalformedMessageError(f"message field {_FIELDS[i]!r} has a wrong type")
    return message_of(values)


def decode_value(data: bytes) -> Any:
    """A msgpack value as :func:`encode_payload` wrote it (a decrypted payload, result, ...);
    MalformedMessageError for anything else."""
    try:
        try:
            return msgpack.unpackb(data, strict_map_key=False, ext_hook=ext)
        except TypeError:
            return msgpack.unpackb(data, strict_map_key=False, object_pairs_hook=_dict_with_tuple_keys, ext_hook=ext)
    except Exception as exc:  # noqa: BLE001 - msgpack raises several unrelated types on garbage
        raise MalformedMessageError(f"undecodable value: {exc}") from None


def untrusted(data: bytes, reason: str, now_ms: int) -> Message:
    """The message to archive for stored data a worker refused to run (malformed, or not signed
    with its key): the message's own fields if it decodes, else type ``(malformed)`` with the first
    4 KiB of the data as payload; ``reason`` becomes its last error."""
    try:
        msg = decode(data)
    except MalformedMessageError:
        msg = Message(type="(malformed)", payload=bytes(data[:4096]))
    return msg.with_(last_error=reason, last_failed_at_ms=now_ms)


def _canonical(value: Any) -> Any:
    if isinstance(value, dict):
        items = [(encode_payload(k), _canonical(v)) for k, v in value.items()]
        return [[k, v] for k, v in sorted(items, key=lambda kv: kv[0])]
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    return value


def unique_digest(task_type: str, payload: Any) -> str:
    """SHA-1 over the type and a canonical encoding of the payload (dict order does not matter)."""
    h = hashlib.sha1(task_type.encode(), usedforsecurity=False)
    h.update(b"\0")
    h.update(encode_payload(_canonical(payload)))
    return h.hexdigest()
