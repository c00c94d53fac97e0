"""The Node producer (clients/node/, issue 47 #4, docs/clients.md) against the session's real
redis-server, with Python workers processing what its tests enqueue: ``npm ci`` (skipped while
clients/node/node_modules matches package-lock.json), the TypeScript build, then ``node --test``
(clients/node/test/: the vectors, the script loader's SHA-1s, the protocol check, and the client's
calls, whose results the Node side reads back). Any divergence of the Node side from the protocol
fails here. Skipped where node/npm are missing (scripts/test installs them, like redis-server)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import ROOT, serving

from asynqpy import Client, ServeMux, Task
from asynqpy.core.model import codec
from asynqpy.core.model import options as opts
from asynqpy.redisio.connection import async_client, sync_client

NODE = ROOT / "clients" / "node"
KEY = b"node-client-test-signing-key-0123456789"
pytestmark = pytest.mark.real


def _run(cmd: list[str], timeout: float) -> None:
    done = subprocess.run(cmd, cwd=NODE, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        pytest.fail(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")


def _newer(paths: list[Path], than: Path) -> bool:
    """Whether ``than`` is missing or older than any of ``paths``."""
    if not than.exists():
        return True
    stamp = than.stat().st_mtime
    return any(p.stat().st_mtime > stamp for p in paths)


def _build() -> None:
    """``npm ci`` when node_modules does not match the lock file, then the build when a source
    changed since the last one (both cached in clients/node: node_modules/, dist/)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        if os.environ.get("ASYNQPY_REQUIRE_REAL"):
            pytest.fail("node and npm are required (ASYNQPY_REQUIRE_REAL=1): apt-get install nodejs npm")
        pytest.skip("node/npm not installed (scripts/test installs them: apt-get install nodejs npm)")
    if _newer([NODE / "package-lock.json"], NODE / "node_modules" / ".package-lock.json"):
        _run(["npm", "ci", "--prefer-offline", "--no-audit", "--no-fund", "--loglevel=error"], 300)
    sources = [*NODE.glob("src/*.ts"), *NODE.glob("test/*.ts"), NODE / "tsconfig.json", NODE / "package-lock.json"]
    if _newer(sources, NODE / "dist" / ".built"):
        _run([str(NODE / "node_modules" / ".bin" / "tsc"), "-p", "."], 180)
        (NODE / "dist" / ".built").touch()


def _mux() -> ServeMux:
    mux = ServeMux()
    started = itertools.count()

    @mux.handle("add")
    async def add(task: Task) -> Any:
        return task.payload["a"] + task.payload["b"]

    @mux.handle("echo")
    async def echo(task: Task) -> Any:
        return task.payload

    @mux.handle("fail")
    async def fail(task: Task) -> None:
        raise RuntimeError(str(task.payload))

    @mux.handle("order")
    async def order(task: Task) -> int:
        return next(started)

    @mux.handle("slow")
    async def slow(task: Task) -> Any:
        await asyncio.sleep(0.3)
        return task.payload

    @mux.handle("info")
    async def info(task: Task) -> Any:
        return {"tenant": task.tenant, "priority": task.message.priority, "key": task.message.key,
                "parents": task.parent_results}

    return mux


def _python_unique_tasks(url: str) -> dict[str, str]:
    """Unique tasks the Python client stores in node-idle (no worker): the Node side's tasks of the
    same type and payload, key or tenant must meet their locks."""
    with Client(url) as c:
        return {
            "plain": c.enqueue("py:unique", {"m": [1, 2], "n": 1}, queue="node-idle", unique=60).id,
            "keyed": c.enqueue("py:unique", None, queue="node-idle", unique_key="order:42").id,
            "tenant": c.enqueue("py:unique", {"n": 1}, queue="node-idle", unique=60, tenant="acme").id,
        }


def test_the_node_client_against_python_workers(redis_url: str) -> None:
    t0 = time.monotonic()
    _build()
    built = time.monotonic() - t0
    env = {**os.environ, "ASYNQPY_TEST_REDIS_URL": redis_url, "ASYNQPY_TEST_SIGNING_KEY": KEY.decode(),
           "ASYNQPY_TEST_PY_UNIQUE": json.dumps(_python_unique_tasks(redis_url)), "NODE_NO_WARNINGS": "1"}

    log = NODE / "dist" / "test-output.txt"

    async def main() -> int:
        mux = _mux()
        async with serving(async_client(redis_url), mux, queues=["node"], concurrency=4), \
                serving(async_client(redis_url), mux, queues=["node-prio"], concurrency=1), \
                serving(async_client(redis_url), mux, queues=["node-signed"], signing_key=KEY):
            with log.open("wb") as out:
                files = sorted(str(p.relative_to(NODE)) for p in (NODE / "dist" / "test").glob("*.test.js"))
                proc = await asyncio.create_subprocess_exec(
                    "node", "--test", *files, cwd=NODE, env=env, stdout=out, stderr=asyncio.subprocess.STDOUT)
                try:
                    return await asyncio.wait_for(proc.wait(), 120)
                except asyncio.TimeoutError:
                    proc.kill()
                    await proc.wait()
                    return -1

    t1 = time.monotonic()
    rc = asyncio.run(main())
    text = log.read_text(errors="replace")
    sys.stdout.write(f"build {built:.1f} s, node --test with the workers {time.monotonic() - t1:.1f} s\n")
    assert rc == 0, text[-8000:]
    assert "# fail 0" in text and "# skipped 0" in text, text[-8000:]
    _same_as_python(redis_url)


def _same_as_python(url: str) -> None:
    """The task with every option the Node tests left is the one the Python client would have stored
    with the same options, byte for byte (its enqueue time aside), under the lock Python computes."""
    r = sync_client(url)
    stored = r.hget("asynqpy:{node-idle}:t", "node-every")
    assert stored is not None and stored[:1] == b"s"
    got = codec.decode(stored[1:])
    want = opts.prepare("every", {"x": [1, "y"], "b": b"\x01"}, queue="node-idle", task_id="node-every", unique=30,
                        priority=2, tenant="acme", max_retry=3, timeout=60, retention=120, retry_delay=5,
                        deadline=2e9, headers={"h": "v"}, retry_front=True, process_in=3600,
                        now=got.enqueued_at_ms / 1000)
    assert stored[1:] == want.data, (got, want.msg)
    assert 29 <= r.ttl(f"asynqpy:{{node-idle}}:u:{want.msg.lock_digest()}") <= 3630
