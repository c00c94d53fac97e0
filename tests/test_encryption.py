"""Encryption of payloads, results and logs (docs/encryption.md): the envelope, the key ring and
its rotation, what a worker, the clients and the Inspector do with and without keys, bad input
(a wrong key, a missing key id, a tampered ciphertext), and how it meets signing, retries, the
archive, edits, resends and tenants."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
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
        # (the message a handler may read, task.message, carries the payload decrypted too)
        ran.append(task.payload if task.message.payload == task.payload else ("differs", task.message.payload))
        return {"echo": task.payload}

    return mux


# -- the envelope and the ring ----------------------------------------------------------------------


def test_the_workers_common_path_opens_as_the_general_one_and_refuses_the_same() -> None:
    """enc.open_plain_message (every task of an encrypted queue) with its caches warm: the same
    message as open_message; the same typed errors for a tampered, truncated or undecodable
    payload; None (the general path) for what it does not handle."""
    from asynqpy.core.model.codec import Message

    ring = KeyRing({"k1": K1, "k2": K2})
    base = Message(type="t", payload=None)
    for _ in range(2):  # (the second time from the caches)
        sealed = ring.seal({"card": SECRET}, enc.PAYLOAD, "q")
        m = base.with_(payload=sealed, logs=["a line"])
        assert enc.open_plain_message(ring, "q", m) == enc.open_message(ring, "q", m)
        assert enc.open_plain_message(ring, "q", m).payload == {"card": SECRET}
        tampered = msgpack.ExtType(sealed.code, sealed.data[:-1] + bytes([sealed.data[-1] ^ 1]))
        with pytest.raises(DecryptionError):
            enc.open_plain_message(ring, "q", base.with_(payload=tampered))
        truncated = base.with_(payload=msgpack.ExtType(sealed.code, sealed.data[:20]))
        assert enc.open_plain_message(ring, "q", truncated) is None  # (the general path says why)
        with pytest.raises(DecryptionError, match="truncated"):
            enc.open_message(ring, "q", truncated)
        with pytest.raises(KeyNotFoundError):
            enc.open_plain_message(KeyRing({"k9": K1}), "q", m)
        garbage = ring.seal_with("k2", K2, b"\xc1", enc.PAYLOAD)  # (0xc1: never valid msgpack)
        with pytest.raises(EncryptionError, match="do not decode"):
            enc.open_plain_message(ring, "q", base.with_(payload=garbage))
    plain = base.with_(payload={"x": 1})
    assert enc.open_plain_message(ring, "q", plain) is plain
    assert enc.open_plain_message(ring, "q", base.with_(payload=sealed, logs=ring.seal(["l"], enc.LOGS))) is None
    assert enc.open_plain_message(ring, "q", base.with_(payload=sealed, result=ring.seal(1, enc.RESULT))) is None
    assert enc.open_plain_message(ring, "q", base.with_(payload={"a": sealed})) is None  # a process input
    tenant_ring = KeyRing({"k1": K1}, tenant_keys=True)
    assert enc.open_plain_message(tenant_ring, "q", base.with_(payload=sealed, tenant="acme")) is None
    digested = ring.seal({"u": 1}, enc.PAYLOAD, digest=b"d" * 20)  # (a unique task's: not cached, opened)
    assert enc.open_plain_message(ring, "q", base.with_(payload=digested)).payload == {"u": 1}


def test_nonces_are_never_used_twice_not_even_by_a_forked_child() -> None:
    """Nonces are read from os.urandom 64 at a time (enc.new_nonce): each is used once, by the
    ring's common sealing path too, and a forked child starts without its parent's next ones."""
    import os

    # from an empty buffer: the tests this process ran before drew some, and a count of draws that
    # emptied it exactly (so that the parent held none to compare with) failed the test by chance
    enc._nonces.clear()
    ring = KeyRing({"k1": K1})
    def nonce_of(sealed: Any) -> bytes:
        start = enc.header(sealed)[2]
        return bytes(sealed.data[start:start + enc.NONCE_LEN])

    drawn = [enc.new_nonce() for _ in range(300)] + [nonce_of(ring.seal(i, enc.RESULT)) for i in range(300)]
    assert len(set(drawn)) == 600 and {len(n) for n in drawn} == {enc.NONCE_LEN}
    enc.new_nonce()  # (the parent holds its next nonces)
    pending = list(enc._nonces)
    assert pending
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: how many it inherited, and the nonce it seals with
        try:
            os.write(w, bytes([len(enc._nonces)]) + enc.new_nonce())
        finally:
            os._exit(0)
    os.close(w)
    got = os.read(r, 64)
    os.close(r)
    os.waitpid(pid, 0)
    assert got[0] == 0 and len(got) == 1 + enc.NONCE_LEN and got[1:] not in pending
    assert enc._nonces == pending  # (the parent's are its own still)


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
    assert KeyRing.from_env(environ={enc.ENV: str(f)}).newest == "k2"
    assert KeyRing.from_env(environ={enc.ENV: json.dumps({"a": K1.hex()})}).newest == "a"
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
    assert isinstance(keyless.payload, Encrypted) and str(keyless.payload) == "encrypted (key k1)"
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


# -- rotation ----------------------------------------------------------------------------------------


def test_rotate_keys_re_encrypts_resumably_and_leaves_what_changed(backend: Any) -> None:
    old = KeyRing({"k1": K1})
    client = Client(backend.sync, encryption=old)
    ids = [client.enqueue("t", {"i": i, "s": SECRET}, process_in=3600).id for i in range(30)]
    ids.append(client.enqueue("t", {"u": SECRET}, unique=3600).id)
    archived = client.enqueue("t", "to archive").id
    Inspector(backend.sync).archive_task("default", archived)
    other = Client(backend.sync, encryption=old).enqueue("t", "elsewhere", queue="other").id
    new = KeyRing({"k1": K1, "k2": K2})
    insp = Inspector(backend.sync, encryption=new)
    first = insp.rotate_keys(max_pages=1, restart=True)
    assert not first.done or first.rewritten == 33  # (a small hash may come in one page)
    rest = insp.rotate_keys()  # goes on from the cursor kept in Redis
    assert rest.done and first.rewritten + rest.rewritten == 33
    assert not backend.sync.exists("asynqpy:keys:rotate")
    for id in [*ids, archived]:
        assert enc.key_id(decode(stored(backend, id)).payload) == "k2"
    assert enc.key_id(decode(stored(backend, other, "other")).payload) == "k2"
    only_new = Inspector(backend.sync, encryption=KeyRing({"k2": K2}))
    assert only_new.task_info("default", ids[0]).payload == {"i": 0, "s": SECRET}
    assert only_new.task_info("default", archived).payload == "to archive"
    from asynqpy import DuplicateTaskError

    with pytest.raises(DuplicateTaskError):  # the lock still matches the rewritten task's digest
        Client(backend.sync, encryption=KeyRing({"k1": K1})).enqueue("t", {"u": SECRET}, unique=3600)
    assert insp.rotate_keys().rewritten == 0  # nothing left under k1
    with pytest.raises(InvalidArgumentError, match="needs the key ring"):
        Inspector(backend.sync).rotate_keys()


def test_rotation_leaves_a_task_that_changed_since_read(backend: Any) -> None:
    from asynqpy.core.spine.broker import Broker
    from asynqpy.redisio.executor import SyncExecutor

    id = Client(backend.sync, encryption=KeyRing({"k1": K1})).enqueue("t", SECRET, process_in=3600).id
    read = backend.sync.hget(K.tasks, id)
    ex = SyncExecutor(backend.sync)
    assert ex.run(Broker().rewrap("default", id, b"p-not-what-is-stored", b"pX")) == 0
    assert ex.run(Broker().rewrap("default", id, read, b"x" + read[1:])) == -5  # never a change of state
    assert backend.sync.hget(K.tasks, id) == read


# -- per-tenant keys and erasure -------------------------------------------------------------------


def test_tenant_keys_seal_each_tenant_under_its_own_key(backend: Any) -> None:
    ring = KeyRing({"k1": K1}, tenant_keys=True)
    client = Client(backend.sync, encryption=ring)
    a = client.enqueue("t", {"who": "acme"}, tenant="acme", retention=60).id
    b = client.enqueue("t", {"who": "globex"}, tenant="globex", retention=60).id
    plain = client.enqueue("t", {"who": "none"}, retention=60).id
    kid_a = enc.key_id(decode(stored(backend, a)).payload)
    assert kid_a.startswith("~") and kid_a.endswith("acme") and enc.tenant_of_kid(kid_a) == "acme"
    assert enc.key_id(decode(stored(backend, plain)).payload) == "k1"
    assert backend.sync.hlen(K.tkeys) == 2
    ran: list[Any] = []

    async def main() -> None:
        fresh = KeyRing({"k1": K1})  # a worker without tenant_keys still reads them (the ids say so)
        async with serving(backend.new_async(), _mux(ran), encryption=fresh):
            await until(lambda: len(ran) == 3)

    asyncio.run(main())
    insp = Inspector(backend.sync, encryption=KeyRing({"k1": K1}))
    assert insp.task_info("default", a).result == {"echo": {"who": "acme"}}
    assert enc.key_id(decode(stored(backend, a)).result) == kid_a  # the result: the tenant's key too
    report = insp.forget_tenant("default", "acme")
    assert report.key and report.removed == 1 and report.left == 0
    with pytest.raises(Exception, match="not found"):
        insp.task_info("default", a)
    assert insp.task_info("default", b).payload == {"who": "globex"}
    events = [e for e in insp.events("default") if e.event == "tenant_forgotten"]
    assert len(events) == 1 and events[0].tenant == "acme"


def test_a_forgotten_tenants_tasks_cannot_be_read_and_are_archived_when_met(backend: Any) -> None:
    ring = KeyRing({"k1": K1}, tenant_keys=True)
    id = Client(backend.sync, encryption=ring).enqueue("t", SECRET, tenant="acme").id
    value = backend.sync.hget(K.tasks, id)
    Inspector(backend.sync, encryption=ring).forget_tenant("default", "acme")
    backend.sync.hset(K.tasks, id, value)  # (as if it had been active during the sweep: put back)
    backend.sync.rpush(K.pending, id)
    reader = KeyRing({"k1": K1}, tenant_keys=True)  # a fresh reader: nothing cached
    shown = Inspector(backend.sync, encryption=reader).task_info("default", id)
    assert isinstance(shown.payload, Encrypted) and "forgotten" in shown.payload.reason
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran), encryption=reader):
            await until(lambda: backend.sync.zcard(K.archived) == 1)

    asyncio.run(main())
    assert ran == [] and "forgotten" in Inspector(backend.sync).task_info("default", id).last_error
    assert Inspector(backend.sync, encryption=reader).forget_tenant("default", "acme").removed == 1


@pytest.mark.slow
def test_after_forgetting_no_byte_of_the_tenants_plaintext_is_left_in_redis(tmp_path: Path) -> None:
    """The whole keyspace (every key, every value, dumped) and the AOF, rewritten, hold neither the
    tenant's plaintext nor its key, sealed or not."""
    import redis
    from redisproc import RedisProcess

    server = RedisProcess("--appendonly", "yes", "--appendfsync", "always", dir=tmp_path)
    try:
        r = redis.Redis.from_url(server.url)
        ring = KeyRing({"k1": K1}, tenant_keys=True)
        client = Client(server.url, encryption=ring)
        marker = "ACME-PLAINTEXT-7f3a9c"
        client.enqueue("t", {"m": marker}, tenant="acme", retention=3600)
        client.enqueue("t", {"m": marker}, tenant="acme", process_in=3600)
        client.enqueue("t", {"m": marker + "-fails"}, tenant="acme", max_retry=0)
        keep = client.enqueue("t", {"m": "globex"}, tenant="globex", retention=3600).id
        ran: list[Any] = []

        async def main() -> None:
            async with serving(redis.asyncio.Redis.from_url(server.url), _fail_marked(ran), encryption=ring):
                await until(lambda: len(ran) == 3 and r.zcard(K.archived) == 1 and r.zcard(K.completed) == 2)

        asyncio.run(main())
        stored_key = r.hget(K.tkeys, "acme")
        kid, dek = ring.unwrap("default", "acme", stored_key)
        report = Inspector(server.url, encryption=ring).forget_tenant("default", "acme")
        assert report.key and report.removed == 3 and report.left == 0
        needles = [marker.encode(), dek, dek.hex().encode(), stored_key, kid.encode()]
        for key in r.scan_iter(count=1000):
            dumped = r.dump(key) or b""
            assert not any(n in dumped or n in key for n in needles), key
        r.bgrewriteaof()
        for _ in range(500):
            info = r.info("persistence")
            if info["aof_rewrite_in_progress"] == 0 and info["aof_rewrite_scheduled"] == 0:
                break
            time.sleep(0.02)
        files = [p for p in tmp_path.rglob("*") if p.is_file() and "aof" in p.name]
        assert files
        aof = b"".join(p.read_bytes() for p in files)
        assert b"globex" in aof  # (the AOF holds the data: the scan below reads the right files)
        assert not any(n in aof for n in needles)
        assert Inspector(server.url, encryption=ring).task_info("default", keep).payload == {"m": "globex"}
    finally:
        server.stop()


def _fail_marked(ran: list[Any]) -> ServeMux:
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> Any:
        task.log(f"line {task.payload}")
        ran.append(task.payload)
        if str(task.payload["m"]).endswith("-fails"):
            raise RuntimeError("it fails")
        return {"echo": task.payload}

    return mux


# -- the CLI ---------------------------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None, input: str | None = None) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    res = CliRunner(env=env).invoke(main, list(args), input=input)
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.real
def test_cli_encryption_keys(redis_url: str, tmp_path: Path) -> None:
    import redis

    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"k1": K1.hex()}))
    code, out, err = _cli("enqueue", "t", "--payload", json.dumps({"s": SECRET}), "--in", "3600",
                          "--encryption-keys", str(keys), "--json", "--redis-url", redis_url)
    assert code == 0, err
    id = json.loads(out)["id"]
    r = redis.Redis.from_url(redis_url)
    assert SECRET.encode() not in r.hget(K.tasks, id)
    code, out, err = _cli("task", "inspect", id, "-q", "default", "--redis-url", redis_url)
    assert code == 0 and "encrypted (key k1)" in out and SECRET not in out, (out, err)
    code, out, err = _cli("task", "inspect", id, "-q", "default", "--json", "--redis-url", redis_url,
                          env={enc.ENV: str(keys)})
    assert code == 0 and json.loads(out)["payload"] == {"s": SECRET}, err
    code, out, err = _cli("task", "ls", "-q", "default", "-s", "scheduled", "--full", "--encryption-keys", str(keys),
                          "--redis-url", redis_url)
    assert code == 0 and SECRET in out, err
    code, out, _ = _cli("task", "inspect", id, "-q", "default", "--json", "--redis-url", redis_url)
    assert json.loads(out)["payload"] == {"encrypted": "k1"}
    # rotation
    keys.write_text(json.dumps({"k1": K1.hex(), "k2": K2.hex()}))
    code, out, err = _cli("keys", "rotate", "--encryption-keys", str(keys), "--redis-url", redis_url)
    assert code == 0 and "1 task(s) re-encrypted" in out and "done" in out, (out, err)
    assert enc.key_id(decode(r.hget(K.tasks, id)[1:]).payload) == "k2"
    # bad input: one line, exit 2
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"k2": OTHER.hex()}))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases = [
        (["task", "inspect", id, "-q", "default", "--encryption-keys", str(wrong)], "does not decrypt under key 'k2'"),
        (["task", "inspect", id, "-q", "default", "--encryption-keys", str(tmp_path / "k1only")], "cannot read"),
        (["enqueue", "t", "--encryption-keys", str(bad)], "not a JSON object"),
        (["worker", "workers:mux", "--encryption-keys", str(bad)], "not a JSON object"),
        (["keys", "rotate"], "needs the keys"),
    ]
    for args, message in cases:
        code, _, err = _cli(*args, "--redis-url", redis_url)
        assert code == 2 and err.startswith("asynqpy: error:") and message in err and err.count("\n") == 1, (args, err)
    k1only = tmp_path / "k1only.json"
    k1only.write_text(json.dumps({"k1": K1.hex()}))
    code, _, err = _cli("task", "inspect", id, "-q", "default", "--encryption-keys", str(k1only),
                        "--redis-url", redis_url)
    assert code == 2 and "'k2' is not in the key ring" in err and err.count("\n") == 1


@pytest.mark.real
def test_cli_tenant_forget(redis_url: str, tmp_path: Path) -> None:
    import redis

    ring = KeyRing({"k1": K1}, tenant_keys=True)
    Client(redis_url, encryption=ring).enqueue("t", SECRET, tenant="acme", process_in=3600)
    keys = tmp_path / "keys.json"
    keys.write_text(json.dumps({"k1": K1.hex()}))
    code, out, err = _cli("tenant", "forget", "default", "acme", "--redis-url", redis_url, input="n\n")
    assert code == 2 and "nothing done" in err
    code, out, err = _cli("tenant", "forget", "default", "acme", "--yes", "--encryption-keys", str(keys),
                          "--redis-url", redis_url)
    assert code == 0 and "its key destroyed, 1 task(s) deleted" in out, (out, err)
    r = redis.Redis.from_url(redis_url)
    assert r.hlen(K.tasks) == 0 and r.hlen(K.tkeys) == 0


def test_a_workflow_child_reads_its_encrypted_parents_results(backend: Any) -> None:
    ring = KeyRing({"k1": K1})
    client = Client(backend.sync, encryption=ring)
    parent = client.enqueue("t", {"p": SECRET})
    client.enqueue("child", None, after=[parent])
    got: list[Any] = []
    mux = _mux([])

    @mux.handle("child")
    async def child_handler(task: Task) -> None:
        got.append(task.parent_results)

    async def main() -> None:
        async with serving(backend.new_async(), mux, encryption=ring):
            await until(lambda: got)

    asyncio.run(main())
    assert got == [[{"echo": {"p": SECRET}}]]


def test_durable_process_inputs_state_and_history_are_encrypted(backend: Any) -> None:
    """A process input's arguments are sealed (its process id and kind stay readable: the worker
    routes it by them), and so are the state and history events it commits; the processor gets
    them decrypted, its response comes back decrypted, the Inspector shows them with the ring."""
    from asynqpy import AsyncClient, Input, Process, Step

    ring = KeyRing({"k1": K1})
    mux = ServeMux()
    seen: list[Any] = []

    @mux.process("vault")
    def vault(p: Process, i: Input) -> Step | None:
        seen.append(i.args)
        if i.kind == "init":
            return Step(state={"s": SECRET}, events=[{"e": SECRET}])
        assert p.state == {"s": SECRET} and [e.data for e in p.history] == [{"e": SECRET}]  # decrypted
        return Step(response={"got": i.args}, events=["called"])

    async def main() -> None:
        async with serving(backend.new_async(), mux, encryption=ring, queues=["pq"]):
            c = AsyncClient(backend.new_async(), encryption=ring)
            assert await c.start_process("vault", "v1", {"secret": SECRET}, queue="pq") is True
            assert await c.call_process("v1", {"q": SECRET}, queue="pq", timeout=10) == {"got": {"q": SECRET}}
            await c.close()

    asyncio.run(main())
    assert seen == [{"secret": SECRET}, {"q": SECRET}]
    for key in backend.sync.scan_iter("asynqpy:{pq}:*"):  # state, history, inputs: none in clear
        if backend.sync.type(key) == b"hash":
            for v in backend.sync.hvals(key):
                assert SECRET.encode() not in v, key
    proc = Inspector(backend.sync, encryption=ring).process("pq", "v1")
    assert proc.state == {"s": SECRET} and [e.data for e in proc.history] == [{"e": SECRET}, "called"]
    keyless = Inspector(backend.sync).process("pq", "v1")
    assert isinstance(keyless.state, Encrypted) and isinstance(keyless.history[0].data, Encrypted)


def test_grouped_encrypted_tasks_are_aggregated_plain_and_the_aggregate_sealed(backend: Any) -> None:
    ring = KeyRing({"k1": K1})
    got: list[Any] = []
    mux = ServeMux()

    @mux.handle("digest")
    async def digest(task: Task) -> None:
        got.append(task.payload)

    def aggregate(group: str, tasks: list[Task]) -> tuple[str, Any]:
        return "digest", [t.payload for t in tasks]

    with Client(backend.sync, encryption=ring) as c:
        for i in range(3):
            c.enqueue("mail", {"to": SECRET, "i": i}, group="g1", queue="gq")

    async def main() -> None:
        async with serving(backend.new_async(), mux, queues={"gq": 1}, group_aggregator=aggregate,
                           group_grace_period=0.2, encryption=ring):
            await until(lambda: got)

    asyncio.run(main())
    assert got == [[{"to": SECRET, "i": i} for i in range(3)]]


def test_a_durable_functions_history_is_encrypted(backend: Any) -> None:
    from asynqpy import AsyncClient, Durable

    ring = KeyRing({"k1": K1})
    mux = ServeMux()
    client = AsyncClient(backend.new_async(), encryption=ring)

    def load(user_id: str) -> dict[str, str]:
        return {"card": SECRET, "id": user_id}

    @mux.durable(name="vaultfn", queue="dq", client=client)
    async def vaultfn(ctx: Durable, user_id: str) -> str:
        user = await ctx.step("load", load, user_id)
        return str(user["card"])

    async def main() -> None:
        async with serving(backend.new_async(), mux, encryption=ring, queues=["dq"]):
            run = await client.start(vaultfn, SECRET, id="run-1")
            assert await client.result(run, timeout=20) == SECRET
        await client.close()

    asyncio.run(main())
    for key in backend.sync.scan_iter("asynqpy:{dq}:*"):
        if backend.sync.type(key) == b"hash":
            for v in backend.sync.hvals(key):
                assert SECRET.encode() not in v, key
