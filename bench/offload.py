"""Offloaded payloads (issue 48 #3 target): a 10 MB payload's round trip through a blob store,
and Redis memory per offloaded task (target <= 1 KB).

    python bench/offload.py [--mb 10] [--rounds 3] [--tasks 2000]

On a redis-server this starts, with a FileBlobStore in a temporary directory: ``--rounds`` times,
a ``--mb`` MB payload enqueued and its handler's answer awaited (``Client.call``: enqueue, the
worker reads the blob, runs the handler, the caller gets its result), the wall time and the
producer's CPU time printed; then ``--tasks`` offloaded tasks (100 KB payloads) enqueued and
Redis ``used_memory`` after minus before over their number. Wall times are noisy on a loaded host:
``uptime`` is printed with them.
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

from asynqpy import Client, FileBlobStore, ServeMux, Server, Task


def _serve(url: str, store: FileBlobStore, stop: threading.Event) -> None:
    mux = ServeMux()

    @mux.handle("size")
    async def size(task: Task) -> int:
        return len(task.payload)

    server = Server(url, queues=["bench"], offload=store, concurrency=4)

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
    args = ap.parse_args()
    rp = RedisProcess()
    try:
        _bench(rp.url, args)
    finally:
        rp.stop()


def _bench(url: str, args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as root:
        store = FileBlobStore(root)
        client = Client(url, offload=store)
        stop = threading.Event()
        worker = threading.Thread(target=_serve, args=(url, store, stop), daemon=True)
        worker.start()
        payload = os.urandom(args.mb * 1_000_000)
        print(f"load: {os.getloadavg()[0]:.1f} (1 min)")
        for i in range(args.rounds):
            t0, c0 = time.perf_counter(), time.process_time()
            got = client.call("size", payload, queue="bench", timeout=120)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            assert got == len(payload)
            print(f"round trip {i + 1}: {args.mb} MB payload in {wall:.3f}s wall ({cpu:.3f}s CPU of this process, "
                  "the worker thread's included)")
        stop.set()
        worker.join(30)
        client.close()
        client = Client(url, offload=FileBlobStore(root, threshold=1024))  # every 100 KB payload offloaded
        client.enqueue("noop", body := b"\0" * 100_000, queue="held")  # (scripts loaded, the queue known)
        r = redis.Redis.from_url(url)
        before = int(r.info("memory")["used_memory"])
        for start in range(0, args.tasks, 500):
            client.enqueue_many([("noop", body) for _ in range(min(500, args.tasks - start))], queue="held")
        after = int(r.info("memory")["used_memory"])
        per = (after - before) / args.tasks
        print(f"redis memory per offloaded task: {per:.0f} bytes ({args.tasks} tasks of 100 KB payloads; "
              f"target <= 1024): {'OK' if per <= 1024 else 'OVER'}")
        client.close()


if __name__ == "__main__":
    main()
