"""Encryption of payloads, results and logs (docs/encryption.md): the envelope, the key ring and
its rotation, what a worker, the clients and the Inspector do with and without keys, bad input
(a wrong key, a missing key id, a tampered ciphertext), and how it meets signing, retries, the
archive, edits, resends and tenants."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgpack
import pytest
from helpers import serving, until

from asynqpy import (
    Client,
    DecryptionError,
    EncryptionError,
    Inspector,
    InvalidArgumentError,
    KeyNotFoundError,
    KeyRing,
    ServeMux,
    Task,
)
from asynqpy.core.model.codec import decode, encode
from asynqpy.core.security import encryption as enc
from asynqpy.core.security.encryption import Encrypted
from asynqpy.core.security.signing import Signer
from asynqpy.core.spine.keys import queue_keys

K1, K2, OTHER = b"1" * 32, b"2" * 32, b"x" * 32
K = queue_keys("default")
SECRET = "card-4111-1111-1111-1111"


def stored(backend: Any, id: str, queue: str = "default") -> bytes:
    """A task's stored message (state char and lease token removed)."""
    value: bytes = backend.sync.hget(queue_keys(queue).tasks, id)
    return value[9:] if value[:1] == b"a" else value[1:]


def _mux(ran: list[Any], fail_once: set[Any] | None = None) -> ServeMux:
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> Any:
        task.log(f"handling {task.payload}")
        key = json.dumps(task.payload, sort_keys=True)
        if fail_once is not None and key in fail_once:
            fail_once.discard(key)
            raise RuntimeError("first attempt fails")
        ran.append(task.payload)
        return {"echo": task.payload}

    return mux


# -- the envelope and the ring ----------------------------------------------------------------------


def test_seal_open_round_trip_and_what_breaks_it() -> None:
    ring = KeyRing({"k1": K1})
    value = {"card": SECRET, "n": [1, 2.5, None, b"\x00"]}
    sealed = ring.seal(value, enc.PAYLOAD)
    assert enc.is_sealed(sealed) and SECRET.encode() not in sealed.data
    assert enc.key_id(sealed) == "k1"
    assert ring.open(sealed, enc.PAYLOAD) == value
    with pytest.raises(DecryptionError, match="wrong key, or the ciphertext was altered"):
        ring.open(sealed, enc.RESULT)  # bound to what it is: a payload is not a result
    tampered = msgpack.ExtType(sealed.code, sealed.data[:-1] + bytes([sealed.data[-1] ^ 1]))
    with pytest.raises(DecryptionError):
        ring.open(tampered, enc.PAYLOAD)
    with pytest.raises(DecryptionError):
        KeyRing({"k1": OTHER}).open(sealed, enc.PAYLOAD)  # a wrong key under the same id
    with pytest.raises(KeyNotFoundError, match="'k1' is not in the key ring"):
        KeyRing({"k2": K2}).open(sealed, enc.PAYLOAD)
    with pytest.raises(DecryptionError, match="truncated"):
        ring.open(msgpack.ExtType(sealed.code, sealed.data[:5]), enc.PAYLOAD)


def test_rotation_seals_with_the_newest_and_opens_all() -> None:
    old = KeyRing({"k1": K1}).seal("x", enc.PAYLOAD)
    ring = KeyRing({"k1": K1, "k2": K2})
    assert enc.key_id(ring.seal("x", enc.PAYLOAD)) == "k2"
    assert ring.open(old, enc.PAYLOAD) == "x"


@pytest.mark.parametrize("keys", [{}, {"k": b"short"}, {"bad id!": K1}, {"k": "zz"}, [("k", K1)], {"k": 5}])
def test_bad_key_rings_are_invalid_arguments(keys: Any) -> None:
    with pytest.raises(InvalidArgumentError):
        KeyRing(keys)


def test_key_files_and_the_environment(tmp_path: Path) -> None:
    f = tmp_path / "keys.json"
    f.write_text(json.dumps({"k1": K1.hex(), "k2": K2.hex()}))
    ring = KeyRing.from_file(f)
    assert ring.newest == "k2" and ring.keys["k1"] == K1
    assert KeyRing.from_env(environ={enc.ENV: str(f)}).newest == "k2"  # type: ignore[union-attr]
    assert KeyRing.from_env(environ={enc.ENV: json.dumps({"a": K1.hex()})}).newest == "a"  # type: ignore[union-attr]
    assert KeyRing.from_env(environ={}) is None
    f.write_text("[1]")
    with pytest.raises(InvalidArgumentError, match="not a JSON object"):
        KeyRing.from_file(f)
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        KeyRing.from_file(tmp_path / "missing")
    assert "1111" not in repr(ring) and K1.hex() not in repr(ring)  # a ring never shows its keys


def test_importing_asynqpy_does_not_import_the_cipher() -> None:
    """The core install stays light: ``cryptography``'s cipher code loads when encryption is used
    (redis-py itself imports the bare ``cryptography`` package when it is installed, to know it is;
    nothing of its primitives)."""
    code = ("import sys, asynqpy; from asynqpy import Client, Server, Inspector, KeyRing, App;"
            "import asynqpy.core.security.encryption, asynqpy.cli.main;"
            "loaded = [m for m in sys.modules if m.startswith('cryptography.hazmat')]; assert not loaded, loaded;"
            "KeyRing({'k': b'1' * 32}).seal(1, b'p');"
            "assert 'cryptography.hazmat.primitives.ciphers.aead' in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)


# -- a worker, the clients, the Inspector ---------------------------------------------------------


def test_encrypted_tasks_run_and_what_they_leave_is_encrypted(backend: Any) -> None:
    ring = KeyRing({"k1": K1})
    client = Client(backend.sync, encryption=ring)
    ids = [client.enqueue("t", {"card": SECRET, "i": 1}, retention=60).id,
           client.enqueue("t", {"card": SECRET, "i": 2}, retry_delay=0.05, retention=60).id]
    ids += client.enqueue_many([("t", {"card": SECRET, "i": 3}), ("t", {"card": SECRET, "i": 4})],
                               retention=60).ids
    for id in ids:
        raw = stored(backend, id)
        assert SECRET.encode() not in raw
        msg = decode(raw)
        assert msg.type == "t" and enc.key_id(msg.payload) == "k1"  # routing stays readable
    ran: list[Any] = []
    fail = {json.dumps({"card": SECRET, "i": 2}, sort_keys=True)}

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran, fail), encryption=ring):
            await until(lambda: len(ran) == 4)
            await until(lambda: Inspector(backend.sync).queue_info("default").completed == 4)

    asyncio.run(main())
    assert sorted(p["i"] for p in ran) == [1, 2, 3, 4]
    for id in ids:
        raw = stored(backend, id)
        assert SECRET.encode() not in raw and b"handling" not in raw and b"echo" not in raw
        msg = decode(raw)
        assert enc.is_sealed(msg.result) and enc.is_sealed(msg.logs) and enc.is_sealed(msg.payload)
    info = Inspector(backend.sync, encryption=ring).task_info("default", ids[1])
    assert info.payload == {"card": SECRET, "i": 2} and info.result == {"echo": info.payload}
    assert [line.text for line in info.logs] == [f"handling {info.payload}"] * 2  # both attempts
    assert Inspector(backend.sync, encryption=ring).task_logs("default", ids[1])[1].attempt == 2
    assert client.result(ids[0]) == {"echo": {"card": SECRET, "i": 1}}
    keyless = Inspector(backend.sync).task_info("default", ids[0])
    assert isinstance(keyless.payload, Encrypted) and str(keyless.payload) == "<encrypted: key k1>"
    assert isinstance(keyless.result, Encrypted) and isinstance(keyless.logs[0].text, Encrypted)
    with pytest.raises(EncryptionError, match="is encrypted: give the key ring"):
        Client(backend.sync).result(ids[0])


def test_call_returns_the_decrypted_result(backend: Any) -> None:
    ring = KeyRing({"k1": K1})
    ran: list[Any] = []

    async def main() -> None:
        from asynqpy import AsyncClient

        async with serving(backend.new_async(), _mux(ran), encryption=ring):
            client = AsyncClient(backend.new_async(), encryption=ring)
            assert await client.call("t", SECRET, timeout=10) == {"echo": SECRET}
            await client.close()

    asyncio.run(main())


def test_bad_input_is_archived_with_the_reason_never_a_crash_loop(backend: Any) -> None:
    ring = KeyRing({"k1": K1})
    wrong = Client(backend.sync, encryption=KeyRing({"k1": OTHER})).enqueue("t", SECRET).id
    unknown = Client(backend.sync, encryption=KeyRing({"k9": K1})).enqueue("t", SECRET).id
    tampered = Client(backend.sync, encryption=ring).enqueue("t", SECRET).id
    msg = decode(stored(backend, tampered))
    data = msg.payload.data
    bad = msg.with_(payload=msgpack.ExtType(msg.payload.code, data[:-1] + bytes([data[-1] ^ 1])))
    backend.sync.hset(K.tasks, tampered, b"p" + encode(bad))
    Client(backend.sync, encryption=ring).enqueue("t", "fine")
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran), encryption=ring):
            await until(lambda: backend.sync.zcard(K.archived) == 3 and ran == ["fine"])

    asyncio.run(main())
    insp = Inspector(backend.sync, encryption=ring)
    assert "does not decrypt under key 'k1'" in insp.task_info("default", wrong).last_error
    assert "'k9' is not in the key ring" in insp.task_info("default", unknown).last_error
    assert "does not decrypt" in insp.task_info("default", tampered).last_error
    for id in (wrong, unknown, tampered):
        assert insp.task_info("default", id).retried == 0  # archived at once, not retried


def test_a_keyless_worker_archives_encrypted_tasks(backend: Any) -> None:
    id = Client(backend.sync, encryption=KeyRing({"k1": K1})).enqueue("t", SECRET).id
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran)):
            await until(lambda: backend.sync.zcard(K.archived) == 1)

    asyncio.run(main())
    assert ran == [] and "no key ring" in Inspector(backend.sync).task_info("default", id).last_error


def test_encrypt_then_sign_verify_before_decrypting(backend: Any) -> None:
    ring, key = KeyRing({"k1": K1}), b"s" * 32
    client = Client(backend.sync, encryption=ring, signing_key=key)
    id = client.enqueue("t", SECRET, retention=60).id
    data = Signer(key).open("default", id, stored(backend, id))  # the tag covers the ciphertext
    assert enc.is_sealed(decode(data).payload)
    forged = Client(backend.sync, encryption=ring, signing_key=b"f" * 32).enqueue("t", "forged").id
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran), encryption=ring, signing_key=key):
            await until(lambda: ran == [SECRET] and backend.sync.zcard(K.archived) == 1)

    asyncio.run(main())
    insp = Inspector(backend.sync, encryption=ring, signing_key=key)
    assert insp.task_info("default", forged).last_error.startswith("bad signature")
    assert Signer(key).open("default", id, stored(backend, id))  # the completed task is signed again


def test_edit_an_encrypted_tasks_payload(backend: Any) -> None:
    ring = KeyRing({"k1": K1})
    id = Client(backend.sync, encryption=ring).enqueue("t", SECRET, process_in=3600).id
    insp = Inspector(backend.sync, encryption=ring)
    assert insp.edit_task("default", id, payload={"new": SECRET}).payload == {"new": SECRET}
    assert SECRET.encode() not in stored(backend, id)
    with pytest.raises(EncryptionError, match="encrypted"):
        Inspector(backend.sync).edit_task("default", id, payload="plain")
    Inspector(backend.sync).edit_task("default", id, max_retry=3)  # other fields: the ciphertext is kept
    assert insp.task_info("default", id).payload == {"new": SECRET}


def test_unique_encrypted_tasks_lock_on_a_keyed_digest(backend: Any) -> None:
    from asynqpy import DuplicateTaskError

    client = Client(backend.sync, encryption=KeyRing({"k1": K1}))
    client.enqueue("t", {"a": SECRET}, unique=60)
    with pytest.raises(DuplicateTaskError):
        client.enqueue("t", {"a": SECRET}, unique=60)
    client.enqueue("t", {"a": "other"}, unique=60)
    locks = [k for k in backend.sync.scan_iter("asynqpy:{default}:u:*")]
    assert len(locks) == 2
