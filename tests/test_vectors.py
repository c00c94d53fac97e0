"""The shared test vectors of tests/vectors/ (issue 47 #1, docs/protocol.md "Test vectors"),
checked by asynqpy's own codec, signer and scripts: a client in another language checks itself
against the same files. The script calls are replayed on fakeredis, a real redis-server and a
real Redis Cluster (a queue's keys: one slot)."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest
from helpers import ROOT

from asynqpy.core.model import codec
from asynqpy.core.model.errors import MalformedMessageError
from asynqpy.core.security.signing import Signer
from asynqpy.core.spine import stored
from asynqpy.core.spine.scripts import load_scripts
from asynqpy.redisio.connection import sync_client

VECTORS = ROOT / "tests" / "vectors"
sys.path.insert(0, str(ROOT / "scripts"))
import protocol_vectors  # noqa: E402  (scripts/: the JSON conventions and the replay)


def load(name: str) -> Any:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))


def from_json(v: Any) -> Any:
    """A message value from its JSON ({"bin": hex} -> bytes; {"map": pairs} -> a dict)."""
    if isinstance(v, dict) and set(v) == {"bin"}:
        return bytes.fromhex(v["bin"])
    if isinstance(v, dict) and set(v) == {"map"}:
        return {from_json(k): from_json(x) for k, x in v["map"]}
    if isinstance(v, dict):
        return {k: from_json(x) for k, x in v.items()}
    if isinstance(v, list):
        return [from_json(x) for x in v]
    return v


def test_the_vectors_are_current() -> None:
    """What scripts/protocol_vectors.py makes now is what tests/vectors/ holds: a change of the
    codec, a script's inputs or source, or a reply fails here until the files are made again (on
    purpose: a protocol change)."""
    res = subprocess.run([sys.executable, "scripts/protocol_vectors.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


def test_messages_decode_to_their_fields_and_encode_to_their_bytes() -> None:
    data = load("messages.json")
    assert data["fields"] == list(codec.FIELD_INDEX)
    assert len(data["messages"]) >= 5
    for v in data["messages"]:
        raw = bytes.fromhex(v["hex"])
        msg = codec.decode(raw)
        fields = {k: from_json(x) for k, x in v["fields"].items()}
        assert list(fields) == list(codec.FIELD_INDEX)[:len(fields)], v["name"]
        assert {k: getattr(msg, k) for k in fields} == fields, v["name"]
        assert codec.encode(codec.Message(**fields)) == raw, v["name"]  # the left-out fields are the defaults
        assert raw[0] == 0x90 + len(fields) or raw[:3] == b"\xdc" + len(fields).to_bytes(2, "big"), v["name"]


def test_signed_messages_carry_their_tag() -> None:
    for v in load("messages.json")["signed"]:
        signer = Signer(bytes.fromhex(v["key_hex"]))
        sealed, message = bytes.fromhex(v["hex"]), bytes.fromhex(v["message_hex"])
        assert signer.seal(v["queue"], v["id"], message) == sealed
        assert signer.open(v["queue"], v["id"], sealed) == message
        assert codec.decode(sealed) == codec.decode(message)  # the reader skips the tag


def test_stored_values_and_malformed_messages() -> None:
    data = load("messages.json")
    for v in data["stored"]:
        value = bytes.fromhex(v["hex"])
        assert stored.message_of(value) == bytes.fromhex(v["message_hex"])
        assert stored.is_active(value) == (v["state"] == "active")
        if "token" in v:
            assert stored.token_of(value) == v["token"].encode()
    assert len(data["malformed"]) >= 5
    for v in data["malformed"]:
        with pytest.raises(MalformedMessageError):
            codec.decode(bytes.fromhex(v["hex"]))


def test_the_scripts_inputs_and_sources() -> None:
    scripts = load("scripts.json")
    loaded = load_scripts()
    assert sorted(scripts) == sorted(loaded)
    for name, v in scripts.items():
        s = loaded[name]
        assert (v["keys"], v["args"], v["keys_tail"], v["args_tail"], v["sha1"], v["function"]) == \
            (list(s.keys), list(s.args), s.keys_tail, s.args_tail, s.sha, s.function), name


@pytest.fixture(params=["fake", "real", pytest.param("cluster", marks=pytest.mark.cluster)])
def store(request: pytest.FixtureRequest) -> Any:
    if request.param == "real":
        r = sync_client(request.getfixturevalue("redis_server").url)
        r.flushall()
        return r
    if request.param == "cluster":
        return sync_client(request.getfixturevalue("cluster_url"))
    return sync_client(f"memory://vectors-{id(request)}")


def test_script_calls_give_the_recorded_replies(store: Any) -> None:
    calls = load("replies.json")["calls"]
    assert [c["script"] for c in calls][:4] == ["enqueue", "enqueue", "enqueue", "dequeue"]
    if hasattr(store, "get_nodes"):  # a cluster: every call's keys in the queue's slot, sent to its node
        node = store.get_node_from_key(calls[0]["keys"][0])
        store = store.get_redis_connection(node)
    got = protocol_vectors.replay(store, calls)
    assert got == [c["reply"] for c in calls]
