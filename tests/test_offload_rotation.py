"""Key rotation of offloaded payloads (docs/offload.md "With encryption", docs/encryption.md
"Rotation"): ``Inspector(encryption=, offload=).rotate_keys()`` reads an offloaded payload's blob,
opens it, seals it with the ring's newest key into a new blob and rewrites the task's reference
by the compare-and-set rewrap; the old blob is recorded for the drain; a task that changed
between the read and the rewrite keeps its blob and the new one is deleted. On fakeredis,
redis-server and the Cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers import serving, until
from test_encryption import _cli
from test_offload_encryption import BIG, K1, MARKER, _files, _msg, _mux

from asynqpy import Client, FileBlobStore, Inspector, KeyNotFoundError, KeyRing
from asynqpy.core.offload import refs
from asynqpy.core.security import encryption as enc
from asynqpy.core.spine.keys import queue_keys
from asynqpy.worker.offload import drain, sweep

K = queue_keys("default")
K2 = b"2" * 32


def _blob_kid(store: Any, backend: Any, id: str) -> str:
    return enc.key_id(refs.decode(store.get(refs.ref_of(_msg(backend, id).payload))))


def test_rotation_re_encrypts_an_offloaded_payload_into_a_new_blob(backend: Any, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path, threshold=1000)
    client = Client(backend.sync, encryption=KeyRing({"k1": K1}), offload=store)
    ids = [client.enqueue("t", {"n": n, "body": BIG}, process_in=3600).id for n in (1, 2)]
    small = client.enqueue("t", {"n": 3, "body": "small"}, process_in=3600).id  # sealed in the message
    old = {n for n, _ in store.list()}
    assert len(old) == 2 and all(_blob_kid(store, backend, id) == "k1" for id in ids)
    ring = KeyRing({"k1": K1, "k2": K2})
    report = Inspector(backend.sync, encryption=ring, offload=store).rotate_keys(restart=True)
    assert report.done and report.rewritten == 3 and report.failed == 0
    names = {refs.ref_of(_msg(backend, id).payload) for id in ids}
    assert not names & old  # new blobs, never written in place
    assert all(_blob_kid(store, backend, id) == "k2" for id in ids)
    assert enc.key_id(_msg(backend, small).payload) == "k2"
    assert not any(MARKER.encode() in data for data in _files(tmp_path).values())
    only_new = KeyRing({"k2": K2})
    for name in old:  # the old blobs: still under k1, recorded for deletion
        try:
            only_new.open(refs.decode(store.get(name)), enc.PAYLOAD, "default")
            raise AssertionError("an old blob opened under the new key alone")
        except KeyNotFoundError:
            pass
    assert {n.decode() for n in backend.sync.smembers(K.blobs)} == old
    again = Inspector(backend.sync, encryption=ring, offload=store).rotate_keys(restart=True)
    assert again.rewritten == 0 and {n for n, _ in store.list()} == old | names  # nothing left under k1

    async def main() -> None:
        assert await drain(backend.new_async(), store, "default") == 2

    asyncio.run(main())
    assert {n for n, _ in store.list()} == names
    insp = Inspector(backend.sync, encryption=only_new, offload=store)
    for id in [*ids, small]:
        insp.run_task("default", id)
    ran: list[Any] = []

    async def work() -> None:  # a worker holding only the new key runs them
        async with serving(backend.new_async(), _mux(ran), encryption=only_new, offload=store):
            await until(lambda: len(ran) == 3 and backend.sync.zcard(K.completed) == 0
                        and not backend.sync.hlen(K.tasks))

    asyncio.run(work())
    assert sorted(p["n"] for p in ran) == [1, 2, 3] and all(p["body"] == BIG for p in ran if p["n"] != 3)


def test_a_task_changed_between_read_and_rewrite_keeps_its_blob_for_the_next_pass(
        backend: Any, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path, threshold=1000)
    id = Client(backend.sync, encryption=KeyRing({"k1": K1}), offload=store).enqueue(
        "t", {"n": 1, "body": BIG}, process_in=3600).id
    (old, _), = store.list()
    ring = KeyRing({"k1": K1, "k2": K2})
    written: list[str] = []

    class Racing(FileBlobStore):
        """A store whose write lets the task change meanwhile (an operator runs it now)."""

        def put(self, name: str, data: bytes) -> None:
            super().put(name, data)
            written.append(name)
            Inspector(backend.sync).run_task("default", id)

    report = Inspector(backend.sync, encryption=ring, offload=Racing(tmp_path, threshold=1000)).rotate_keys(
        restart=True)
    assert report.done and report.rewritten == 0 and report.skipped == 1 and len(written) == 1
    assert refs.ref_of(_msg(backend, id).payload) == old and _blob_kid(store, backend, id) == "k1"
    assert {n for n, _ in store.list()} == {old}  # the new blob, never referred to, deleted
    assert not backend.sync.scard(K.blobs)
    report = Inspector(backend.sync, encryption=ring, offload=store).rotate_keys(restart=True)
    assert report.rewritten == 1 and _blob_kid(store, backend, id) == "k2"


def test_a_blob_left_by_a_rotation_killed_before_its_rewrite_is_swept(backend: Any, tmp_path: Path) -> None:
    """A crash between the new blob's write and the rewrite: the task still refers to its old
    blob, and the new one is an orphan the sweep removes."""
    store = FileBlobStore(tmp_path, threshold=1000)
    id = Client(backend.sync, encryption=KeyRing({"k1": K1}), offload=store).enqueue(
        "t", {"n": 1, "body": BIG}, process_in=3600).id
    (old, _), = store.list()

    class Killed(Exception):
        pass

    class Dying(FileBlobStore):
        def put(self, name: str, data: bytes) -> None:
            super().put(name, data)
            raise Killed  # (the process dies here: nothing after the write runs)

    ring = KeyRing({"k1": K1, "k2": K2})
    try:
        Inspector(backend.sync, encryption=ring, offload=Dying(tmp_path, threshold=1000)).rotate_keys(restart=True)
        raise AssertionError("the rotation went on")
    except Killed:
        pass
    assert refs.ref_of(_msg(backend, id).payload) == old and len(list(store.list())) == 2

    async def main() -> list[str]:
        return await sweep(backend.new_async(), store, ["default"], grace=0)

    swept = asyncio.run(main())
    assert len(swept) == 1 and swept[0] != old and {n for n, _ in store.list()} == {old}
    assert Inspector(backend.sync, encryption=ring, offload=store).rotate_keys().rewritten == 1
    assert _blob_kid(store, backend, id) == "k2"


@pytest.mark.real
def test_cli_keys_rotate_offload_dir_re_encrypts_blobs(redis_url: str, tmp_path: Path) -> None:
    import json

    import redis

    from asynqpy.core.model.codec import decode
    from asynqpy.core.spine import stored

    r = redis.Redis.from_url(redis_url)
    blobs, keys = tmp_path / "blobs", tmp_path / "keys.json"
    store = FileBlobStore(blobs, threshold=1000)
    id = Client(r, encryption=KeyRing({"k1": K1}), offload=store).enqueue("t", {"n": 1, "body": BIG},
                                                                          process_in=3600).id
    keys.write_text(json.dumps({"k1": K1.hex(), "k2": K2.hex()}))
    code, out, err = _cli("keys", "rotate", "--restart", "--encryption-keys", str(keys), "--offload-dir", str(blobs),
                          "--redis-url", redis_url)
    assert code == 0 and "1 task(s) re-encrypted" in out, (out, err)
    ref = decode(stored.message_of(r.hget(K.tasks, id))).payload
    assert enc.key_id(refs.decode(store.get(refs.ref_of(ref)))) == "k2"
