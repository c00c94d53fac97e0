"""The Lua readers of a stored message's fields in place (lua/includes/msgfield.lua: ``msg_tenant``,
``msg_priority``, ``msg_retry_front``, ``msg_key``, ``msg_field``, and ``msg_tail``, which finds the
priority, key, retry_front and tenant in one walk for the forward, and ``msg_priority_tenant``, the
two a push reads, in that walk) agree with the codec on every kind of message:
payloads and results of every msgpack type (nested, long, binary), the times as 64-bit integers,
optional fields set and left out, and messages cut short or not msgpack at all, which read as
the defaults and never fail the script. ``msg_field`` skips a run of one-byte fields with one
``string.find`` (a tenant's done: ~9 -> ~4 µs a task), so its skipping is checked byte for byte
against a decoder's offsets."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import msgpack
import pytest

from asynqpy.core.model.codec import FIELD_INDEX, Message, encode
from asynqpy.core.spine.scripts import _lua_dir, load_dir

PROBE = """--[[ probe: the message field readers on each message
ARG msgs...  the messages
Returns, per message: {tenant or '', priority, retry_front (0/1), where field F.tenant starts or -1,
where field 3 starts or -1, key or '', then where msg_tail says priority, key, retry_front and tenant
start (-1: not encoded) and what the *_at readers read there: tenant, priority, retry_front, key;
then msg_priority_tenant's priority and tenant or ''}.
]]
--- @include "msgfield"
local out = {}
for j = 1, A.msgs.n do
  local m = A.msgs[j]
  out[j] = {msg_tenant(m, 1) or '', msg_priority(m, 1), msg_retry_front(m, 1) and 1 or 0,
            msg_field(m, 1, F.tenant) or -1, msg_field(m, 1, 3) or -1, msg_key(m, 1) or ''}
  local p, k, f, t = msg_tail(m, 1)
  local o = out[j]
  o[7], o[8], o[9], o[10] = p or -1, k or -1, f or -1, t or -1
  o[11], o[12] = tenant_at(m, t) or '', priority_at(m, p)
  o[13], o[14] = retry_front_at(m, f) and 1 or 0, key_at(m, k) or ''
  local pp, pt = msg_priority_tenant(m, 1)
  o[15], o[16] = pp, pt or ''
end
return out
"""


def _value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["int", "neg", "big", "float", "str", "long", "bytes", "none", "bool"]
    if depth < 2:
        kinds += ["list", "map"]
    k = rng.choice(kinds)
    if k == "int":
        return rng.randrange(0, 200)
    if k == "neg":
        return -rng.randrange(1, 2 ** 40)
    if k == "big":
        return rng.randrange(2 ** 16, 2 ** 64)
    if k == "float":
        return rng.random() * 1e6
    if k == "str":
        return "".join(rng.choice("ab\u00e9z") for _ in range(rng.randrange(0, 40)))
    if k == "long":
        return "x" * rng.choice([31, 32, 255, 256, 70_000])
    if k == "bytes":
        return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 300)))
    if k == "none":
        return None
    if k == "bool":
        return rng.random() < 0.5
    if k == "list":
        return [_value(rng, depth + 1) for _ in range(rng.randrange(0, 20))]
    return {f"k{i}": _value(rng, depth + 1) for i in range(rng.randrange(0, 20))}


def _message(rng: random.Random) -> Message:
    pick = rng.random
    return Message(type=rng.choice(["t", "email:send", "x" * 40]), payload=_value(rng),
                   enqueued_at_ms=rng.choice([0, 1_764_000_000_000]), max_retry=rng.choice([0, 25, 300]),
                   timeout_ms=rng.choice([-1, 0, 30_000, 2 ** 40]), unique=pick() < 0.2,
                   retried=rng.choice([0, 3, 200]), last_error="" if pick() < 0.7 else "boom " * rng.randrange(1, 9),
                   result=_value(rng) if pick() < 0.3 else None,
                   headers={"h": "v" * rng.randrange(0, 40)} if pick() < 0.3 else None,
                   reply_to="" if pick() < 0.8 else "inbox-1", priority=rng.randrange(0, 10),
                   workers=["w1", "w2"] if pick() < 0.2 else None,
                   key=rng.choice(["", "", "", "k", "k\u00e9y:" + "x" * rng.choice([1, 40, 300, 70_000])]),
                   retry_front=pick() < 0.3,
                   tenant=rng.choice(["", "", "acme", "t" * 64, "t\u00e9"]),
                   min_version=rng.choice([0, 0, 70_000]))


def _starts(data: bytes) -> list[int]:
    """The 1-based byte offset where each top-level field of the encoded array starts."""
    u = msgpack.Unpacker(raw=True)
    u.feed(data)
    n = u.read_array_header()
    out = []
    for _ in range(n):
        out.append(u.tell() + 1)
        u.skip()
    return out


@pytest.fixture
def probe(tmp_path: Path) -> Any:
    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "msgfield.lua").write_text((_lua_dir() / "includes" / "msgfield.lua").read_text())
    (tmp_path / "probe.lua").write_text(PROBE)
    return load_dir(tmp_path)["probe"]


def test_the_readers_agree_with_the_codec(backend: Any, probe: Any) -> None:
    rng = random.Random(45)
    msgs = [_message(rng) for _ in range(400)]
    raw = [encode(m) for m in msgs]
    got = backend.sync.eval(probe.source, 0, *raw)
    t = FIELD_INDEX["tenant"]
    tail = [FIELD_INDEX[f] for f in ("priority", "key", "retry_front", "tenant")]
    for m, data, reply in zip(msgs, raw, got, strict=True):
        tenant, priority, front, at_tenant, at_3, key = reply[:6]
        starts = _starts(data)
        assert reply[6:10] == [starts[i] if len(starts) > i else -1 for i in tail], m  # one walk, the same places
        assert reply[10:14] == [tenant, priority, front, key], m
        assert reply[14:16] == [priority, tenant], m  # (msg_priority_tenant: the two in one walk)
        assert tenant.decode() == m.tenant, m
        assert key.decode() == m.key, m
        assert (priority, front) == (m.priority, int(m.retry_front)), m
        assert at_tenant == (starts[t] if len(starts) > t else -1), m
        assert at_3 == (starts[3] if len(starts) > 3 else -1), m


def test_a_message_cut_short_or_not_msgpack_reads_as_the_defaults(backend: Any, probe: Any) -> None:
    rng = random.Random(46)
    whole = encode(Message(type="t", payload={"a": "b" * 50}, enqueued_at_ms=1_764_000_000_000, priority=2,
                           retry_front=True, tenant="acme", key="acct-7"))
    cut = [whole[:k] for k in range(len(whole))]
    junk = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 80))) for _ in range(200)]
    got = backend.sync.eval(probe.source, 0, *cut, *junk, b"\xdc\xff\xff" + b"\xc1" * 40)
    assert len(got) == len(cut) + len(junk) + 1  # (no reply failed the script)
    at = _starts(whole)[FIELD_INDEX["tenant"]]
    for k, reply in enumerate(got[:len(cut)]):
        if k < at:  # (cut before the tenant's first byte: none)
            assert reply[0] == b"", (k, reply)
        assert reply[0] in (b"", b"acme"), (k, reply)  # a tenant cut short is none, never a part of it
        assert reply[15] == reply[0] and reply[14] == reply[1], (k, reply)
    key_end = _starts(whole)[FIELD_INDEX["key"] + 1] - 1  # (bytes up to the key's last one)
    for k, reply in enumerate(got[:len(cut)]):  # a key cut short is none, never a part of it
        assert reply[5] == (b"acct-7" if k >= key_end else b""), (k, reply)


REC_PROBE = """--[[ rec_probe: lua/includes/flow.lua rec_unpack and rec_pack on each string
ARG recs...  the strings
Returns, per string: {1, its items...} read by rec_unpack and packed again by rec_pack (the pack
first), or {0, the error} when it is not a record.
]]
--- @include "flow"
local out = {}
for j = 1, A.recs.n do
  local ok, got = pcall(rec_unpack, A.recs[j])
  if ok then
    out[j] = {1, rec_pack(got), unpack(got)}
  else
    out[j] = {0, tostring(got)}
  end
end
return out
"""


def test_lua_reads_and_writes_records_as_python_does(backend: Any, tmp_path: Path) -> None:
    """rec_unpack (lengths of one or two digits read as bytes, longer ones as text) and rec_pack
    agree with core/workflows/records.py on records of 0 to 20 items of 0 to 1 200 bytes (any
    byte, ':' included); a string that is not a record is refused with an error, never read as
    one."""
    from asynqpy.core.workflows.records import rec_pack, rec_unpack

    (tmp_path / "includes").mkdir()
    (tmp_path / "includes" / "flow.lua").write_text((_lua_dir() / "includes" / "flow.lua").read_text())
    (tmp_path / "rec_probe.lua").write_text(REC_PROBE)
    probe = load_dir(tmp_path)["rec_probe"]
    rng = random.Random(46)
    records = [[bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 9, 10, 11, 99, 100, 1200])))
                for _ in range(rng.randrange(0, 21))] for _ in range(300)]
    got = backend.sync.eval(probe.source, 0, *(rec_pack(r) for r in records))
    for items, reply in zip(records, got):
        assert reply[0] == 1 and reply[1] == rec_pack(items) and list(reply[2:]) == items
    bad = [b"x:abc", b"3abc", b"a3:abc", b"1:a:b", b"3:ab", b"-1:a"]
    got = backend.sync.eval(probe.source, 0, *bad)
    assert [r[0] for r in got] == [0, 0, 0, 0, 0, 0] and all(b"rec_unpack: not a record" in r[1] for r in got), got
    for b in bad:  # (refused by Python's reader too)
        with pytest.raises(ValueError):
            rec_unpack(b)


HEAD_PROBE = """--[[ head_probe: the readers that look at a message's first bytes only, on each message
ARG msgs...  the messages
Returns, per message: {msg_type (includes/events), the blob name msg_blob reads or '' (includes/offload),
msg_short(m, 1, F.tenant) and msg_short(m, 1, F.min_version) as 0/1 (includes/msgfield)}.
]]
--- @include "msgfield"
--- @include "events"
--- @include "offload"
local out = {}
for j = 1, A.msgs.n do
  local m = A.msgs[j]
  out[j] = {msg_type(m, 1), msg_blob(m, 1) or '', msg_short(m, 1, F.tenant) and 1 or 0,
            msg_short(m, 1, F.min_version) and 1 or 0}
end
return out
"""


def _array32(data: bytes) -> bytes:
    """The same message with its array's header written as an array32 (valid msgpack, never what the
    codec writes): the readers must not take it for a short array."""
    u = msgpack.Unpacker(raw=True)
    u.feed(data)
    n = u.read_array_header()
    return b"\xdd" + n.to_bytes(4, "big") + data[u.tell():]


def test_the_header_readers_agree_with_the_codec(backend: Any, tmp_path: Path) -> None:
    """msg_type and msg_blob read the array's header and the type's in one call, and msg_short tells
    a message that stops before a field from its header alone (the lease's version check and a
    done's tenant, no walk): on short arrays, array16 (a keyed or targeted task's) and array32
    (which msg_short never calls short: the field readers walk it)."""
    (tmp_path / "includes").mkdir()
    for name in ("msgfield", "events", "offload"):
        (tmp_path / "includes" / f"{name}.lua").write_text((_lua_dir() / "includes" / f"{name}.lua").read_text())
    (tmp_path / "head_probe.lua").write_text(HEAD_PROBE)
    probe = load_dir(tmp_path)["head_probe"]
    rng = random.Random(47)
    msgs = [_message(rng) for _ in range(300)]
    msgs += [Message(type="t", payload=msgpack.ExtType(70, b"blob-1")),  # an offloaded payload's reference
             Message(type="t" * 40, payload=msgpack.ExtType(70, b"b" * 300), key="k"),
             Message(type="t", payload=msgpack.ExtType(71, b"not-a-blob"), tenant="acme")]
    raw = [encode(m) for m in msgs]
    raw += [_array32(r) for r in raw[:50]] + [_array32(r) for r in raw[-3:]]
    msgs += msgs[:50] + msgs[-3:]
    got = backend.sync.eval(probe.source, 0, *raw)
    for m, data, (mtype, blob, short_tenant, short_version) in zip(msgs, raw, got, strict=True):
        fields = len(_starts(data))
        assert mtype.decode() == m.type, m
        ref = m.payload if isinstance(m.payload, msgpack.ExtType) and m.payload.code == 70 else None
        assert blob == (ref.data if ref is not None else b""), m
        for short, field in ((short_tenant, "tenant"), (short_version, "min_version")):
            if data[0] == 0xDD:  # (an array32 is never told short: its readers walk it, as before)
                assert short == 0, (m, data[:3])
            else:
                assert short == int(fields <= FIELD_INDEX[field]), (m, field, data[:3])
    assert {r[:1] for r in raw} >= {b"\xdc", b"\xdd"} and any(0x90 <= r[0] <= 0x9f for r in raw)
