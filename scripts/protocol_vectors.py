#!/usr/bin/env python3
"""Write tests/vectors/ (issue 47 #1): the wire protocol as data, for a client in another language
to check itself against (docs/protocol.md "Test vectors"); tests/test_vectors.py checks asynqpy's
own codec and scripts against the files.

- messages.json: task messages as msgpack bytes (hex) with their fields decoded (JSON), plain and
  signed; stored values (state code, lease token, message); malformed messages a reader refuses;
- replies.json: a sequence of script calls on an empty store (KEYS, ARGV, the reply);
- scripts.json: each script's KEYS and ARGV names, the SHA-1 of its flattened source (EVALSHA) and
  the name of its Redis Functions library and function (FCALL; the name holds its version).

JSON of a value: a str is a string, bytes are ``{"bin": hex}`` (in a message: msgpack bin) and a
Redis reply's bytes are a string when UTF-8, else ``{"hex": hex}``. ``--check``: write nothing,
exit 1 if a file is stale. Run after a deliberate change of the protocol only.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
VECTORS = ROOT / "tests" / "vectors"
sys.path.insert(0, str(ROOT))

KEY = bytes.fromhex("ab" * 32)
QUEUE = "vectors"
TOKEN = "tok12345"
NOW = 1_700_000_000_000
DAY = "2023-11-14"


def field_json(v: Any) -> Any:
    """A decoded message value as JSON (bytes: {"bin": hex}; a map with keys that are not text:
    [[k, v], ...] under "map")."""
    if isinstance(v, bytes):
        return {"bin": v.hex()}
    if isinstance(v, (list, tuple)):
        return [field_json(x) for x in v]
    if isinstance(v, dict):
        if all(isinstance(k, str) for k in v):
            return {k: field_json(x) for k, x in v.items()}
        return {"map": [[field_json(k), field_json(x)] for k, x in v.items()]}
    return v


def reply_json(v: Any) -> Any:
    """A Redis reply as JSON (bytes: a string when UTF-8, else {"hex": hex})."""
    if isinstance(v, bytes):
        try:
            return v.decode()
        except UnicodeDecodeError:
            return {"hex": v.hex()}
    if isinstance(v, list):
        return [reply_json(x) for x in v]
    return v


def messages() -> Any:
    from asynqpy.core.model import codec
    from asynqpy.core.model.codec import Message
    from asynqpy.core.security.signing import Signer

    payload = {"user": 42, "tags": ["a", "b"], "raw": b"\x00\xff"}
    full = Message("report:build", payload, NOW, 3, 60_000, NOW + 3_600_000, 86_400_000, True, 1, "boom", NOW + 5,
                   2_000, 0, None, "Traceback ...", {"trace": "abc"}, "inbox1",
                   "grp", "my-key", 9, ["w1", "w2"], 2, [["other", "parent-1"]], "customer-7", True, "acme",
                   [[1, NOW, "started"]], 200_030_001)
    cases = [
        ("minimal", "only the type: every other field is its default, left out", Message("email:send")),
        ("payload", "a map payload and the enqueue time", Message("email:send", {"to": "a@example.com", "n": 1}, NOW)),
        ("bytes_payload", "a bin payload stays bytes", Message("blob", b"\x00\x01\xfe", NOW)),
        ("priority", "priority 9: the array reaches field 19", Message("urgent", None, NOW, priority=9)),
        ("tenant", "a tenant (field 25): the fields before it at their defaults, written",
         Message("t", [1, 2], NOW, tenant="acme")),
        ("every_field", "every field set", full),
    ]
    out: dict[str, Any] = {"fields": [f for f in codec.FIELD_INDEX], "messages": [], "signed": [], "stored": [],
                           "malformed": []}
    for name, what, msg in cases:
        data = codec.encode(msg)
        n = codec.encoded_length(list(msg.__dict__.values()))
        out["messages"].append({"name": name, "what": what, "hex": data.hex(),
                                "fields": {k: field_json(v) for k, v in list(msg.__dict__.items())[:n]}})
    signer = Signer(KEY)
    for name, _, msg in cases[:2]:
        data = codec.encode(msg)
        out["signed"].append({"name": name, "key_hex": KEY.hex(), "queue": QUEUE, "id": f"id-{name}",
                              "message_hex": data.hex(), "hex": signer.seal(QUEUE, f"id-{name}", data).hex()})
    data = codec.encode(cases[1][2])
    out["stored"] = [{"state": "pending", "hex": (b"p" + data).hex(), "message_hex": data.hex()},
                     {"state": "active", "token": TOKEN, "hex": (b"a" + TOKEN.encode() + data).hex(),
                      "message_hex": data.hex()}]
    packb = codec.encode_values
    out["malformed"] = [
        {"why": "not an array", "hex": "a474797065"},
        {"why": "an empty array", "hex": "90"},
        {"why": "an empty task type", "hex": "91a0"},
        {"why": "more fields than this protocol has", "hex": packb(["t"] + [None] * len(codec.FIELD_INDEX),
                                                                    len(codec.FIELD_INDEX) + 1).hex()},
        {"why": "priority is not an int", "hex": packb(["t", None, 0, 25, -1, 0, 0, False, 0, "", 0, -1, 0, None,
                                                        "", None, "", "", "", "9"], 20).hex()},
        {"why": "unique is an int, not a bool", "hex": packb(["t", None, 0, 25, -1, 0, 0, 1], 8).hex()},
        {"why": "trailing bytes that are no signing tag", "hex": (codec.encode(cases[0][2]) + b"\x01").hex()},
    ]
    return out


def _keys_of(script: Any, q: Any, extra: dict[str, str]) -> dict[str, str]:
    return {n: extra[n] if n in extra else getattr(q, n) for n in script.keys}


def calls() -> list[dict[str, Any]]:
    """The scenario: two enqueues and a refused one, a dequeue, a completion, a retry and the
    queue's counts, every time given (``now``)."""
    from datetime import date

    from asynqpy.core.model import codec
    from asynqpy.core.model.codec import Message
    from asynqpy.core.spine.keys import queue_keys
    from asynqpy.core.spine.scripts import load_scripts

    s, q = load_scripts(), queue_keys(QUEUE)
    day = date.fromisoformat(DAY)
    m1 = codec.encode(Message("email:send", {"to": "a@example.com"}, NOW))
    m2 = codec.encode(Message("urgent", None, NOW, priority=9))
    done = codec.encode(Message("urgent", None, NOW, priority=9, completed_at_ms=NOW + 10, result="ok"))
    failed = codec.encode(Message("email:send", {"to": "a@example.com"}, NOW, retried=1, last_error="smtp down",
                                  last_failed_at_ms=NOW + 20))
    common = {"lock": q.placeholder, "keylist": q.placeholder, "reply": q.watch, "mine": q.targeted_for("none"),
              "processed_day": q.processed_on(day), "failed_day": q.failed_on(day)}
    out = []

    def call(name: str, args: dict[str, Any], what: str) -> None:
        script = s[name]
        out.append({"what": what, "script": name, "keys": list(_keys_of(script, q, common).values()),
                    "args": [args[a] for a in script.args]})

    call("enqueue", {"id": "v1", "msg": {"hex": m1.hex()}, "unique": "0", "check": "1"}, "store a task: 1")
    call("enqueue", {"id": "v2", "msg": {"hex": m2.hex()}, "unique": "0", "check": "1"}, "a task of priority 9")
    call("enqueue", {"id": "v1", "msg": {"hex": m2.hex()}, "unique": "0", "check": "1"},
         "another task under a live task's id: -2")
    call("dequeue", {"count": "10", "lease_ms": "30000", "token": TOKEN, "now": str(NOW), "name": "", "version": "0",
                     "pages": "-1"},
         "lease both: {now, remaining, wait, id, stored message, ...}, priority 9 first")
    call("complete", {"id": "v2", "token": TOKEN, "msg": {"hex": done.hex()}, "retention": "0", "day_ttl": "86400",
                      "now": str(NOW + 10), "payload": "", "attempt": "1", "result": "", "key": ""}, "completed: 1")
    call("retry", {"id": "v1", "token": TOKEN, "msg": {"hex": failed.hex()}, "delay": "5000", "day_ttl": "86400",
                   "now": str(NOW + 20), "recover": "0", "attempt": "1", "error": "smtp down"}, "to retry")
    call("complete", {"id": "v1", "token": "zzzzzzzz", "msg": {"hex": done.hex()}, "retention": "0",
                      "day_ttl": "86400", "now": str(NOW + 30), "payload": "", "attempt": "1", "result": "",
                      "key": ""}, "not active any more: refused")
    return out


def arg_bytes(a: Any) -> bytes:
    """An argument of replies.json as bytes ({"hex": ...}, or text)."""
    return bytes.fromhex(a["hex"]) if isinstance(a, dict) else str(a).encode()


def replay(r: Any, entries: list[dict[str, Any]]) -> list[Any]:
    """Each call's reply (as JSON) on the store ``r`` (a redis-py or fakeredis client), in order."""
    from asynqpy.core.spine.scripts import load_scripts

    s = load_scripts()
    got = []
    for e in entries:
        script = s[e["script"]]
        try:
            reply = r.eval(script.source, len(e["keys"]), *e["keys"], *(arg_bytes(a) for a in e["args"]))
        except Exception as exc:  # noqa: BLE001 - an error reply is part of the contract
            reply = {"error": str(exc)}
        got.append(reply_json(reply))
    return got


def replies() -> dict[str, Any]:
    import fakeredis

    from asynqpy.redisio.memory import install

    install()
    entries = calls()
    for e, reply in zip(entries, replay(fakeredis.FakeRedis(), entries)):
        e["reply"] = reply
    return {"queue": QUEUE, "calls": entries}


def scripts() -> dict[str, Any]:
    from asynqpy.core.spine.scripts import load_scripts

    return {name: {"keys": list(sc.keys), "keys_tail": sc.keys_tail, "args": list(sc.args), "args_tail": sc.args_tail,
                   "sha1": sc.sha, "function": sc.function} for name, sc in sorted(load_scripts().items())}


def files() -> dict[str, str]:
    return {name: json.dumps(data, indent=1, ensure_ascii=False) + "\n"
            for name, data in (("messages.json", messages()), ("replies.json", replies()), ("scripts.json", scripts()))}


def main(argv: list[str]) -> int:
    stale = []
    for name, text in files().items():
        path = VECTORS / name
        if "--check" in argv:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            VECTORS.mkdir(exist_ok=True)
            path.write_text(text, encoding="utf-8")
    if stale:
        sys.stderr.write(f"tests/vectors/{', '.join(stale)} stale: run python scripts/protocol_vectors.py\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
