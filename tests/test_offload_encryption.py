"""Offloaded payloads with encryption on (docs/offload.md, docs/encryption.md): the client seals
the payload, then offloads the sealed bytes, so a blob holds ciphertext; the worker reads the blob,
then decrypts it; every rewrite stores the reference again; a wrong key archives the task with the
reason; erasing a tenant leaves no plaintext in Redis or in the store; search reads no blob. On
fakeredis, redis-server and the Cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers import serving, until
from test_offload import _s3, moto_server

from asynqpy import Client, FileBlobStore, Inspector, KeyNotFoundError, KeyRing, ServeMux, Task, TaskState
from asynqpy.core.model.codec import decode
from asynqpy.core.offload import refs
from asynqpy.core.security import encryption as enc
from asynqpy.core.security.encryption import Encrypted
from asynqpy.core.spine import stored
from asynqpy.core.spine.keys import queue_keys
from asynqpy.worker.offload import drain

K = queue_keys("default")
K1, OTHER = b"1" * 32, b"x" * 32
MARKER = "PLAINTEXT-MARKER-5c1d"
BIG = MARKER * 400  # ~8 KB: over the threshold below, sealed or not


@pytest.fixture(scope="module")
def s3_endpoint() -> Any:
    """A local S3-compatible server (tests/test_offload.py's moto_server)."""
    yield from moto_server()


def _msg(backend: Any, id: str) -> Any:
    return decode(stored.message_of(backend.sync.hget(K.tasks, id)))


def _files(root: Path) -> dict[str, bytes]:
    """Every blob file of the store, by its path (what an attacker with the volume reads)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _keyspace_holds(backend: Any, needle: bytes) -> list[bytes]:
    """The keys of Redis whose name or dumped value holds ``needle``."""
    r = backend.sync
    keys = r.keys("*") if backend.kind != "cluster" else list(r.scan_iter(count=1000))
    return [k for k in keys if needle in k or needle in (r.dump(k) or b"")]


def _mux(ran: list[Any], fail_once: set[int] | None = None) -> ServeMux:
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> Any:
        if fail_once and task.payload["n"] in fail_once and task.retry_count == 0:
            raise RuntimeError("first attempt fails")
        ran.append(task.payload)
        return {"len": len(task.payload["body"])}  # (a result: sealed, never offloaded)

    return mux


def test_an_encrypted_offloaded_task_round_trips_and_its_blob_holds_ciphertext(backend: Any, tmp_path: Path) -> None:
    ring = KeyRing({"k1": K1})
    store = FileBlobStore(tmp_path, threshold=1000)
    client = Client(backend.sync, encryption=ring, offload=store)
    kept = client.enqueue("t", {"n": 1, "body": BIG}, retention=60).id
    retried = client.enqueue("t", {"n": 2, "body": BIG}, retention=60, retry_delay=0.05).id
    batch = client.enqueue_many([("t", {"n": 3, "body": BIG}), ("t", {"n": 4, "body": "small"})],
                                retention=60).ids
    small = batch[1]
    files = _files(tmp_path)
    assert len(files) == 3 and not any(MARKER.encode() in data for data in files.values())
    for id in (kept, retried, batch[0]):
        ref = _msg(backend, id).payload
        assert refs.is_ref(ref)  # the message holds the reference; its blob, the sealed envelope
        sealed = refs.decode(store.get(refs.ref_of(ref)))
        assert enc.is_sealed(sealed) and enc.key_id(sealed) == "k1"
        assert ring.open(sealed, enc.PAYLOAD, "default")["body"] == BIG
    assert enc.is_sealed(_msg(backend, small).payload)  # under the threshold: sealed in the message
    assert _keyspace_holds(backend, MARKER.encode()) == []
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran, {2}), encryption=ring, offload=store):
            await until(lambda: len(ran) == 4 and backend.sync.zcard(K.completed) == 4)

    asyncio.run(main())
    assert sorted(p["n"] for p in ran) == [1, 2, 3, 4]
    assert all(p["body"] == BIG for p in ran if p["n"] != 4)  # the handler saw the plaintext
    for id in (kept, retried, batch[0]):  # every rewrite (the retry's, the completion's) kept the reference
        msg = _msg(backend, id)
        assert refs.is_ref(msg.payload) and enc.is_sealed(msg.result)
    assert _keyspace_holds(backend, MARKER.encode()) == [] and len(_files(tmp_path)) == 3
    # the Inspector: the blob read, then decrypted; without the store or the ring, what it can show
    both = Inspector(backend.sync, encryption=ring, offload=store).task_info("default", retried)
    assert both.state is TaskState.COMPLETED and both.payload == {"n": 2, "body": BIG}
    assert both.result == {"len": len(BIG)} and both.retried == 1
    listed = Inspector(backend.sync, encryption=ring, offload=store).list_tasks("default", "completed")
    assert sorted(t.payload["n"] for t in listed) == [1, 2, 3, 4]
    no_ring = Inspector(backend.sync, offload=store).task_info("default", kept).payload
    assert isinstance(no_ring, Encrypted) and "encrypted" in str(no_ring)
    no_store = Inspector(backend.sync, encryption=ring).task_info("default", kept).payload
    assert no_store == refs.Offloaded(refs.ref_of(_msg(backend, kept).payload))


def test_an_encrypted_payload_offloaded_to_s3_is_ciphertext_in_its_object(backend: Any, s3_endpoint: str) -> None:
    import boto3

    ring = KeyRing({"k1": K1})
    bucket = f"enc-{backend.kind}"
    store = _s3(s3_endpoint, bucket)
    id = Client(backend.sync, encryption=ring, offload=store).enqueue("t", {"n": 1, "body": BIG}, retention=60).id
    (name, _), = store.list()
    s3 = boto3.client("s3", endpoint_url=s3_endpoint, region_name="us-east-1", aws_access_key_id="test",
                      aws_secret_access_key="test")
    objects = s3.list_objects_v2(Bucket=bucket)["Contents"]
    assert len(objects) == 1
    raw = s3.get_object(Bucket=bucket, Key=objects[0]["Key"])["Body"].read()
    assert MARKER.encode() not in raw and enc.is_sealed(refs.decode(raw))  # the object: the envelope
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran), encryption=ring, offload=store):
            await until(lambda: len(ran) == 1 and backend.sync.zcard(K.completed) == 1)

    asyncio.run(main())
    assert ran == [{"n": 1, "body": BIG}] and refs.ref_of(_msg(backend, id).payload) == name
    assert Inspector(backend.sync, encryption=ring, offload=store).task_info("default", id).payload["body"] == BIG


def test_a_wrong_or_missing_key_archives_an_offloaded_task_with_the_reason(backend: Any, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path, threshold=1000)
    wrong = Client(backend.sync, encryption=KeyRing({"k1": OTHER}), offload=store).enqueue(
        "t", {"n": 1, "body": BIG}, max_retry=5).id
    ring = KeyRing({"k1": K1})
    fine = Client(backend.sync, encryption=ring, offload=store).enqueue("t", {"n": 2, "body": BIG}).id
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran), encryption=ring, offload=store):
            await until(lambda: backend.sync.zcard(K.archived) == 1 and len(ran) == 1)

    asyncio.run(main())
    assert [p["n"] for p in ran] == [2] and not backend.sync.hexists(K.tasks, fine)
    info = Inspector(backend.sync, encryption=ring, offload=store).task_info("default", wrong)
    assert info.state is TaskState.ARCHIVED and info.retried == 0  # at once, never retried
    assert "DecryptionError" in info.last_error and "does not decrypt under key 'k1'" in info.last_error
    assert isinstance(info.payload, Encrypted)  # the blob read, its envelope not opened
    assert refs.is_ref(_msg(backend, wrong).payload)  # the archived task keeps its reference, and its blob
    assert store.get(refs.ref_of(_msg(backend, wrong).payload))
    # a worker without a ring: the blob read, then "no key ring"
    other = Client(backend.sync, encryption=ring, offload=store).enqueue("t", {"n": 3, "body": BIG}).id

    async def keyless() -> None:
        async with serving(backend.new_async(), _mux(ran), offload=store):
            await until(lambda: backend.sync.zcard(K.archived) == 2)

    asyncio.run(keyless())
    last = Inspector(backend.sync).task_info("default", other).last_error
    assert "EncryptionError" in last and "no key ring" in last and len(ran) == 1


def test_forgetting_a_tenant_leaves_no_plaintext_and_its_blobs_are_deleted(backend: Any, tmp_path: Path) -> None:
    """Its blobs hold ciphertext under the tenant's key from the start: destroying the key makes
    them unreadable at once; deleting the tenant's tasks records their blobs (the exit duty) and a
    worker's drain deletes them."""
    ring = KeyRing({"k1": K1}, tenant_keys=True)
    store = FileBlobStore(tmp_path, threshold=1000)
    client = Client(backend.sync, encryption=ring, offload=store)
    client.enqueue("t", {"n": 1, "body": BIG}, tenant="acme", process_in=3600)  # scheduled
    client.enqueue("t", {"n": 2, "body": BIG}, tenant="acme")  # pending
    keep = client.enqueue("t", {"n": 3, "body": BIG}, tenant="globex", process_in=3600).id
    names = {n for n, _ in store.list()}
    assert len(names) == 3
    kid = enc.key_id(refs.decode(store.get(refs.ref_of(_msg(backend, keep).payload))))
    assert enc.tenant_of_kid(kid) == "globex"  # a tenant's blob: sealed with its own key
    stored_key = backend.sync.hget(K.tkeys, "acme")
    assert stored_key
    insp = Inspector(backend.sync, encryption=ring, offload=store)
    report = insp.forget_tenant("default", "acme")
    assert report.key and report.removed == 2 and report.left == 0
    assert not backend.sync.hexists(K.tkeys, "acme")
    # the two blobs: never plaintext, now under a destroyed key, and recorded for deletion
    assert not any(MARKER.encode() in data for data in _files(tmp_path).values())
    recorded = {n.decode() for n in backend.sync.smembers(K.blobs)}
    assert len(recorded) == 2 and recorded < names
    assert _keyspace_holds(backend, MARKER.encode()) == [] and _keyspace_holds(backend, stored_key) == []
    fresh = KeyRing({"k1": K1}, tenant_keys=True)  # no reader can open them any more
    for name in recorded:
        with pytest.raises(KeyNotFoundError):
            fresh.open(refs.decode(store.get(name)), enc.PAYLOAD, "default")

    async def main() -> None:
        assert await drain(backend.new_async(), store, "default") == 2

    asyncio.run(main())
    assert {n for n, _ in store.list()} == names - recorded and backend.sync.scard(K.blobs) == 0
    assert Inspector(backend.sync, encryption=ring, offload=store).task_info("default", keep).payload == {
        "n": 3, "body": BIG}


def test_search_reads_no_blob_an_offloaded_payload_matches_only_other_conditions(
        backend: Any, tmp_path: Path) -> None:
    ring = KeyRing({"k1": K1})
    store = FileBlobStore(tmp_path, threshold=1000)
    sealed = Client(backend.sync, encryption=ring, offload=store)
    big = sealed.enqueue("t", {"n": 1, "body": BIG}, tenant="acme").id
    small = sealed.enqueue("t", {"n": 2, "body": MARKER}, tenant="acme").id
    plain_big = Client(backend.sync, offload=store).enqueue("t", {"n": 3, "body": BIG}).id
    assert refs.is_ref(_msg(backend, big).payload) and refs.is_ref(_msg(backend, plain_big).payload)
    with_keys = Inspector(backend.sync, encryption=ring, offload=store)
    keyless = Inspector(backend.sync)
    # payload and text conditions: the small encrypted payload (decrypted by the reader) matches;
    # the offloaded ones never (their content is not in Redis), encrypted or not
    assert [t.id for t in with_keys.search("default", text=MARKER)] == [small]
    assert [t.id for t in with_keys.search("default", payload={"n": 1})] == []
    assert [t.id for t in keyless.search("default", payload={"n": 3})] == []
    assert [t.id for t in keyless.search("default", text=MARKER)] == []
    # the reference names its queue and task: a text condition does not match it
    for text in ("default", big[:8], plain_big[:8]):
        assert [t.id for t in keyless.search("default", text=text)] == []
        assert big not in [t.id for t in with_keys.search("default", text=text)]
    # the other conditions match them, and a match is shown as the Inspector shows it
    found = {t.id: t for t in with_keys.search("default", tenant="acme")}
    assert set(found) == {big, small}
    assert found[big].payload == {"n": 1, "body": BIG} and found[small].payload == {"n": 2, "body": MARKER}
    shown = {t.id: t.payload for t in keyless.search("default", type="t")}
    assert shown[plain_big] == refs.Offloaded(refs.ref_of(_msg(backend, plain_big).payload))
    page = Inspector(backend.sync, offload=store).search_page("default", type="t")
    assert {t.id: t.payload for t in page.tasks}[plain_big] == {"n": 3, "body": BIG}
    assert set(shown) == {big, small, plain_big} and keyless.search_count("default", state="pending") == 3
