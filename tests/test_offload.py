"""Offloaded payloads (claim check, docs/offload.md): large payloads go to a blob store and the
message carries a reference; workers read them before the handler; blobs are deleted when their
task leaves for good (the exit duty and the blob janitor's drain) and orphans are swept. On
fakeredis, redis-server and the Cluster (the exit duty is in the scripts)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgpack
import pytest
from helpers import serving, until

from asynqpy import (
    BlobNotFoundError,
    Client,
    FileBlobStore,
    Inspector,
    InvalidArgumentError,
    PayloadError,
    ServeMux,
    Task,
    TaskState,
)
from asynqpy.core.model.codec import decode
from asynqpy.core.offload import refs
from asynqpy.core.spine import stored
from asynqpy.core.spine.keys import queue_keys
from asynqpy.worker.offload import drain, sweep

K = queue_keys("default")
BIG = "x" * 5000


def _msg(backend: Any, id: str) -> Any:
    return decode(stored.message_of(backend.sync.hget(K.tasks, id)))


def _blobs(store: FileBlobStore) -> list[str]:
    return sorted(name for name, _ in store.list())


def _mux(ran: list[Any], fail: set[int] | None = None) -> ServeMux:
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        ran.append(task.payload)
        if fail and task.payload.get("n") in fail and task.retry_count == 0:
            raise RuntimeError("once")

    return mux


def test_small_payloads_stay_in_the_message_large_ones_are_offloaded(backend: Any, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path, threshold=1000)
    client = Client(backend.sync, offload=store)
    small = client.enqueue("t", {"n": 1}).id
    big = client.enqueue("t", {"n": 2, "body": BIG}).id
    assert _msg(backend, small).payload == {"n": 1}
    ref = _msg(backend, big).payload
    assert refs.is_ref(ref) and type(ref) is msgpack.ExtType and ref.code == refs.EXT_CODE
    name = refs.ref_of(ref)
    assert refs.parse_name(name) == (K.name, big) and _blobs(store) == [name]
    assert refs.decode(store.get(name)) == {"n": 2, "body": BIG}  # the blob: what the message would hold
    assert len(backend.sync.hget(K.tasks, big)) < 200
    # batches too (the fast path of enqueue_many)
    ids = client.enqueue_many([("t", {"n": 3, "body": BIG}), ("t", {"n": 4})]).ids
    assert refs.is_ref(_msg(backend, ids[0]).payload) and _msg(backend, ids[1]).payload == {"n": 4}


def test_workers_read_the_blob_and_delete_it_when_the_task_is_done(backend: Any, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path, threshold=1000)
    client = Client(backend.sync, offload=store)
    done = client.enqueue("t", {"n": 1, "body": BIG}).id
    retried = client.enqueue("t", {"n": 2, "body": BIG}, retry_delay=0.05).id
    kept = client.enqueue("t", {"n": 3, "body": BIG}, retention=60).id
    assert len(_blobs(store)) == 3
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran, {2}), offload=store):
            await until(lambda: len(ran) == 4)
            # the done ones' blobs deleted by the drain, then their names
            await until(lambda: len(_blobs(store)) == 1 and backend.sync.scard(K.blobs) == 0)

    asyncio.run(main())
    assert sorted(p["n"] for p in ran) == [1, 2, 2, 3] and all(p["body"] == BIG for p in ran)
    assert not backend.sync.hexists(K.tasks, done) and not backend.sync.hexists(K.tasks, retried)
    info = Inspector(backend.sync, offload=store).task_info("default", kept)
    assert info.state is TaskState.COMPLETED and info.payload == {"n": 3, "body": BIG}
    assert refs.ref_of(_msg(backend, kept).payload) == _blobs(store)[0]
    # without the store, or with its blob gone, the Inspector shows what it can: the reference
    name = _blobs(store)[0]
    assert Inspector(backend.sync).task_info("default", kept).payload == refs.Offloaded(name)
    store.delete(name)
    listed = Inspector(backend.sync, offload=store).list_tasks("default", "completed")
    assert [t.payload for t in listed] == [refs.Offloaded(name, missing=True)]
    assert backend.sync.scard(K.blobs) == 0


def test_a_missing_blob_archives_the_task_with_the_reason(backend: Any, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path, threshold=1000)
    id = Client(backend.sync, offload=store).enqueue("t", {"n": 1, "body": BIG}, max_retry=5).id
    store.delete(_blobs(store)[0])
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran), offload=store):
            await until(lambda: backend.sync.zcard(K.archived) == 1)

    asyncio.run(main())
    info = Inspector(backend.sync).task_info("default", id)
    assert ran == [] and info.state is TaskState.ARCHIVED and info.retried == 0
    assert "BlobNotFoundError" in info.last_error and "is not in" in info.last_error


def test_an_operator_delete_records_the_blob_and_the_drain_deletes_it(backend: Any, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path, threshold=1000)
    id = Client(backend.sync, offload=store).enqueue("t", {"n": 1, "body": BIG}).id
    name = _blobs(store)[0]
    Inspector(backend.sync).delete_task("default", id)
    assert backend.sync.smembers(K.blobs) == {name.encode()}

    async def main() -> None:
        r = backend.new_async()
        assert await drain(r, store, "default") == 1
        assert await drain(r, store, "default") == 0  # idempotent

    asyncio.run(main())
    assert _blobs(store) == [] and backend.sync.scard(K.blobs) == 0


def test_the_sweep_removes_orphans_older_than_the_grace_only(backend: Any, tmp_path: Path) -> None:
    store = FileBlobStore(tmp_path, threshold=1000)
    client = Client(backend.sync, offload=store)
    live = client.enqueue("t", {"n": 1, "body": BIG}).id
    # a producer killed between storing its blob and the enqueue: a blob, no task
    orphan = refs.blob_name("default", "never-enqueued")
    store.put(orphan, refs.encode({"n": 2}))

    async def main() -> None:
        r = backend.new_async()
        assert await sweep(r, store, ["default"], grace=3600) == []  # too young: its task may be on its way
        assert await sweep(r, store, ["default"], grace=0) == [orphan]

    asyncio.run(main())
    assert [refs.parse_name(n).task_id for n in _blobs(store)] == [live]  # type: ignore[union-attr]


def test_the_message_cap_points_to_offloading(backend: Any) -> None:
    with pytest.raises(PayloadError, match="offload"):
        Client(backend.sync, max_payload_bytes=1000).enqueue("t", BIG)


def test_bad_stores_and_thresholds_are_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError):
        Client(offload="/tmp/x")
    with pytest.raises(InvalidArgumentError):
        FileBlobStore(tmp_path, threshold=-1)
    with pytest.raises(BlobNotFoundError):
        FileBlobStore(tmp_path).get("default/x/" + "0" * 24 + "p")
    with pytest.raises(InvalidArgumentError):
        FileBlobStore(tmp_path).put("../escape", b"")


@pytest.fixture(scope="module")
def s3_endpoint() -> Any:
    """A local S3-compatible server (moto's server mode) on a free port, no network."""
    yield from moto_server()


def moto_server() -> Any:
    """Start moto's server, yield its URL, stop it (the fixtures of this module and others')."""
    pytest.importorskip("boto3")
    pytest.importorskip("moto")
    import socket
    import subprocess
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url + "/moto-api/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("moto's server did not start") from None
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def _s3(endpoint: str, bucket: str, threshold: int = 1000) -> Any:
    import boto3

    from asynqpy import S3BlobStore

    options = {"region_name": "us-east-1", "aws_access_key_id": "test", "aws_secret_access_key": "test"}
    boto3.client("s3", endpoint_url=endpoint, **options).create_bucket(Bucket=bucket)
    return S3BlobStore(bucket, threshold=threshold, endpoint_url=endpoint, **options)


def test_the_s3_store_round_trips_deletes_and_sweeps(backend: Any, s3_endpoint: str) -> None:
    store = _s3(s3_endpoint, f"b-{backend.kind}")
    with pytest.raises(BlobNotFoundError):
        store.get("default/x/" + "0" * 24 + "p")
    store.delete("default/x/" + "0" * 24 + "p")  # gone already: nothing
    client = Client(backend.sync, offload=store)
    id = client.enqueue("t", {"n": 1, "body": BIG}).id
    orphan = refs.blob_name("default", "never-enqueued")
    store.put(orphan, refs.encode({"n": 2}))
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran), offload=store):
            await until(lambda: len(ran) == 1)
            await until(lambda: [n for n, _ in store.list()] == [orphan])  # the done task's blob drained
        assert await sweep(backend.new_async(), store, ["default"], grace=0) == [orphan]

    asyncio.run(main())
    assert ran == [{"n": 1, "body": BIG}] and not backend.sync.hexists(K.tasks, id) and list(store.list()) == []


_KILLING_STORE = """
import os, signal, sys
from asynqpy import FileBlobStore

class Killing(FileBlobStore):
    def {method}(self, *args):
        super().{method}(*args) if {after} else None
        os.kill(os.getpid(), signal.SIGKILL)  # killed right {where}
store = Killing(sys.argv[2], threshold=1000)
"""


def _run_killed(code: str, url: str, root: Path) -> None:
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-c", code, url, str(root)], capture_output=True, text=True, timeout=60,
                         check=False)
    assert res.returncode == -9, res.stdout + res.stderr  # SIGKILL, where the store said


@pytest.mark.real
def test_a_producer_killed_between_its_blob_and_the_enqueue_leaves_an_orphan_the_sweep_removes(
        redis_url: str, tmp_path: Path) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    r.flushall()
    code = _KILLING_STORE.format(method="put", after=True, where="after storing the blob") + (
        "from asynqpy import Client\nClient(sys.argv[1], offload=store).enqueue('t', {'body': 'x' * 5000})\n")
    _run_killed(code, redis_url, tmp_path)
    store = FileBlobStore(tmp_path, threshold=1000)
    assert len(_blobs(store)) == 1 and r.hlen(K.tasks) == 0  # the blob, no task (the enqueue never returned)

    async def main() -> None:
        import redis.asyncio as aredis

        a = aredis.Redis.from_url(redis_url)
        assert await sweep(a, store, ["default"], grace=3600) == []
        assert len(await sweep(a, store, ["default"], grace=0)) == 1
        await a.aclose()

    asyncio.run(main())
    assert _blobs(store) == []


@pytest.mark.real
def test_a_worker_killed_between_the_end_and_the_deletion_leaves_the_name_the_next_drain_deletes(
        redis_url: str, tmp_path: Path) -> None:
    import redis

    r = redis.Redis.from_url(redis_url)
    r.flushall()
    store = FileBlobStore(tmp_path, threshold=1000)
    client = Client(redis_url, offload=store)
    done = client.enqueue("t", {"n": 1, "body": BIG}).id
    kept = client.enqueue("t", {"n": 2, "body": BIG}, retention=600).id
    code = _KILLING_STORE.format(method="delete", after=False, where="before deleting the blob") + """
from asynqpy import ServeMux, Server
mux = ServeMux()
mux.handle("t")(lambda task: None)
Server(sys.argv[1], offload=store, heartbeat_interval=0.5).run(mux)
"""
    _run_killed(code, redis_url, tmp_path)
    # the task ended (done, not kept: gone), its blob's name recorded, the blob still there
    assert not r.hexists(K.tasks, done) and r.hexists(K.tasks, kept) and r.scard(K.blobs) == 1
    assert len(_blobs(store)) == 2

    async def main() -> None:
        import redis.asyncio as aredis

        a = aredis.Redis.from_url(redis_url)
        assert await drain(a, store, "default") == 1
        assert await sweep(a, store, ["default"], grace=0) == []  # the kept task's blob is not an orphan
        await a.aclose()

    asyncio.run(main())
    assert [refs.parse_name(n).task_id for n in _blobs(store)] == [kept]  # type: ignore[union-attr]
    assert r.scard(K.blobs) == 0 and Inspector(r, offload=store).task_info("default", kept).payload["n"] == 2


def test_blobs_meet_retry_archive_operator_delete_retention_expiry_and_queue_removal(
        backend: Any, tmp_path: Path) -> None:
    """Where a task with an offloaded payload meets the other ways a task goes on or leaves: a
    retry and an archive keep its blob (it is still readable); an operator's delete records it
    (drained at once); a retention expiry and a queue removal record nothing (no exit): the sweep
    removes those blobs, and nothing else."""
    store = FileBlobStore(tmp_path, threshold=1000)
    client, insp = Client(backend.sync, offload=store), Inspector(backend.sync, offload=store)
    archived = client.enqueue("t", {"n": 1, "body": BIG}, process_in=3600).id
    retried = client.enqueue("t", {"n": 2, "body": BIG}, retry_delay=0.05).id
    expired = client.enqueue("t", {"n": 3, "body": BIG}, retention=1).id
    removed = client.enqueue("t", {"n": 4, "body": BIG}, queue="gone").id
    name = {refs.parse_name(n).task_id: n for n in _blobs(store)}  # type: ignore[union-attr]
    insp.archive_task("default", archived)
    assert insp.task_info("default", archived).payload == {"n": 1, "body": BIG}  # archived: kept, readable
    insp.remove_queue("gone", force=True)
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _mux(ran, {2}), offload=store, janitor_interval=0.2):
            await until(lambda: len(ran) == 3)  # 2 failed once: retried with its blob
            await until(lambda: not backend.sync.hexists(K.tasks, expired))  # its retention expired
            assert name[archived] in _blobs(store) and name[expired] in _blobs(store)
            insp.delete_task("default", archived)  # an operator's delete: recorded, drained
            await until(lambda: name[archived] not in _blobs(store) and backend.sync.scard(K.blobs) == 0)
        assert name[retried] not in _blobs(store)  # done after its retry: drained
        r = backend.new_async()
        assert sorted(await sweep(r, store, ["default", "gone"], grace=0)) == sorted([name[expired], name[removed]])

    asyncio.run(main())
    assert sorted(p["n"] for p in ran) == [2, 2, 3] and _blobs(store) == []


@pytest.mark.real
def test_the_worker_command_reads_and_deletes_blobs_of_its_offload_dir(redis_url: str, tmp_path: Path) -> None:
    import redis
    from helpers import start_worker, wait_sync

    r = redis.Redis.from_url(redis_url)
    r.flushall()
    store = FileBlobStore(tmp_path, threshold=1000)
    id = Client(redis_url, offload=store).enqueue("noop", {"body": BIG}).id
    assert len(_blobs(store)) == 1
    proc = start_worker(redis_url, "workers:mux", "--offload-dir", str(tmp_path))
    try:
        # (the loop deletes the blob, then its name: both waited for, a stop between them is no failure)
        wait_sync(lambda: not r.hexists(K.tasks, id) and _blobs(store) == [] and r.scard(K.blobs) == 0, 30)
    finally:
        proc.terminate()
        proc.wait(20)
    assert r.scard(K.blobs) == 0 and _blobs(store) == []


@pytest.mark.parametrize("task_id", ["a", "id with spaces/and/slashes", "é" * 100, "x" * 256])
def test_the_exit_duty_reads_every_length_of_reference(task_id: str, tmp_path: Path) -> None:
    """lua/includes/offload.lua reads the reference in place: an ext 8 and an ext 16 value (a
    long, percent-quoted id), whatever the type's string length."""
    import fakeredis

    r = fakeredis.FakeRedis()
    store = FileBlobStore(tmp_path, threshold=1000)
    for task_type in ("t", "T" * 40, "y" * 250):
        Client(r, offload=store).enqueue(task_type, {"body": BIG}, task_id=task_id)
        name = next(n for n, _ in store.list() if refs.parse_name(n).task_id == task_id)  # type: ignore[union-attr]
        assert refs.ref_of(_msg_of(r, task_id).payload) == name
        Inspector(r).delete_task("default", task_id)
        assert r.smembers(K.blobs) == {name.encode()}
        store.delete(name)
        r.delete(K.blobs)


def _msg_of(r: Any, id: str) -> Any:
    return decode(stored.message_of(r.hget(K.tasks, id)))
