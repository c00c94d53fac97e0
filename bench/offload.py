"""Offloaded payloads (issue 48 #3 target): a 10 MB payload's round trip through a blob store,
and Redis memory per offloaded task (target <= 1 KB), without and with encryption.

    python bench/offload.py [--mb 10] [--rounds 3] [--tasks 2000] [--only plain|encrypted]

On a redis-server this starts, with a FileBlobStore in a temporary directory: ``--rounds`` times,
a ``--mb`` MB payload enqueued and its handler's answer awaited (``Client.call``: enqueue, the
worker reads the blob, runs the handler, the caller gets its result), the wall time and the
producer's CPU time printed; then ``--tasks`` offloaded tasks (100 KB payloads) enqueued and
Redis ``used_memory`` after minus before over their number. Both runs, plain then encrypted (a
``KeyRing`` on the client and the worker: the payload sealed, then offloaded; the blob read, then
opened; the encrypted run also checks that no blob holds the payload's bytes). Wall times are
noisy on a loaded host: the load average is printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from redisproc import RedisProcess

from asynqpy import Client, FileBlobStore, KeyRing, ServeMux, Server, Task


def _serve(url: str, store: FileBlobStore, stop: threading.Event, ring: KeyRing | None) -> None:
    mux = ServeMux()

    @mux.handle("size")
    async def size(task: Task) -> int:
        return len(task.payload)

    server = Server(url, queues=["bench"], offload=store, encryption=ring, concurrency=4)

    async def main() -> None:
        run = asyncio.create_task(server.arun(mux))
        while not stop.is_set():
            await asyncio.sleep(0.05)
        server.stop()
        await run

    asyncio.run(main())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=2000)
    ap.add_argument("--only", choices=["plain", "encrypted"], default=None)
    args = ap.parse_args()
    rp = RedisProcess()
    try:
        for label, ring in (("plain", None), ("encrypted", KeyRing({"k1": b"\x11" * 32}))):
            if args.only in (None, label):
                print(f"== {label}")
                _bench(rp.url, args, ring, label)
    finally:
        rp.stop()


def _no_plaintext(root: str, payload: bytes) -> None:
    """No blob holds (a 64-byte stretch of) the payload: the encrypted run's blobs are ciphertext."""
    needles = [payload[i:i + 64] for i in (0, len(payload) // 2, len(payload) - 64)]
    for path in Path(root).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert not any(n in data for n in needles), f"plaintext in blob {path}"


def _bench(url: str, args: argparse.Namespace, ring: KeyRing | None, label: str) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = FileBlobStore(root)
        client = Client(url, offload=store, encryption=ring)
        stop = threading.Event()
        worker = threading.Thread(target=_serve, args=(url, store, stop, ring), daemon=True)
        worker.start()
        payload = os.urandom(args.mb * 1_000_000)
        print(f"load: {os.getloadavg()[0]:.1f} (1 min)")
        if ring is not None:  # one enqueue, kept: its blob checked for the payload's bytes
            client.enqueue("size", payload, queue="unserved")
            _no_plaintext(root, payload)
            print("blob of an encrypted payload: no plaintext (3 stretches of 64 bytes looked for)")
        for i in range(args.rounds):
            t0, c0 = time.perf_counter(), time.process_time()
            got = client.call("size", payload, queue="bench", timeout=120)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert got == len(payload)
            print(f"{label}: round trip {i + 1}: {args.mb} MB payload in {wall:.3f}s wall ({cpu:.3f}s CPU of this process, "
                  "the worker thread's included)")
        stop.set()
        worker.join(30)
        client.close()
        # every 100 KB payload offloaded
        client = Client(url, offload=FileBlobStore(root, threshold=1024), encryption=ring)
        held = f"held-{label}"
        client.enqueue("noop", body := b"\0" * 100_000, queue=held)  # (scripts loaded, the queue known)
        r = redis.Redis.from_url(url)
        before = int(r.info("memory")["used_memory"])
        for start in range(0, args.tasks, 500):
            client.enqueue_many([("noop", body) for _ in range(min(500, args.tasks - start))], queue=held)
        after = int(r.info("memory")["used_memory"])
        per = (after - before) / args.tasks
        print(f"{label}: redis memory per offloaded task: {per:.0f} bytes ({args.tasks} tasks of 100 KB payloads; "
              f"target <= 1024): {'OK' if per <= 1024 else 'OVER'}")
        client.close()


if __name__ == "__main__":
    main()
