"""Sandboxed handlers (docs/workers.md "Sandboxed handlers"): a handler past its timeout is killed
for real and retried once more; a child that segfaults or is SIGKILLed fails only its task; 1 000
tasks through 2 children recycle them as configured and lose nothing; memory recycling; progress,
results and headers cross the boundary (msgpack); lambdas are refused at registration; a kill takes
the processes a handler started (its child's process group); a child's answer is bounded before
the worker reads it (max_result_bytes in the child, the frame's length checked first). On
redis-server."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import redis
import sandboxed
from helpers import serving, until

from asynqpy import AsyncClient, Inspector, InvalidArgumentError, KeyRing, ServeMux, TaskFailedError, TaskState
from asynqpy.core.handlers.sandbox import frame_limit
from asynqpy.core.spine.keys import queue_keys

pytestmark = pytest.mark.real
Q = "sbx"


@pytest.fixture(autouse=True)
def record_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ASYNQPY_SANDBOX_DIR", str(tmp_path))
    return tmp_path


def _mux() -> ServeMux:
    mux = ServeMux()
    for name in ("hang", "die", "work", "hog", "steps", "async_work", "big", "forge", "spawn"):
        mux.handle(name, getattr(sandboxed, name), sandbox=True)
    return mux


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_handler_past_its_timeout_is_killed_and_retried_once_more(redis_url: str, record_dir: Path) -> None:
    async def main() -> None:
        c = AsyncClient(redis_url)
        async with serving(redis_url, _mux(), queues=[Q], sandbox_processes=2):
            # both children up first: the timeout is the handler's, not a cold interpreter's start
            await asyncio.gather(*(c.call("work", i, queue=Q, timeout=20) for i in range(4)))
            info = await c.enqueue("hang", 30, queue=Q, timeout=1, max_retry=1, retry_delay=0)
            with Inspector(redis_url) as insp:
                await until(lambda: insp.task_info(Q, info.id).state is TaskState.ARCHIVED, 15)
                t = insp.task_info(Q, info.id)
        starts = _lines(record_dir / "hang.starts")
        assert [s.split()[1] for s in starts] == ["0", "1"]  # the first run and exactly one retry
        pids = {s.split()[2] for s in starts}
        await asyncio.sleep(0.5)
        assert _lines(record_dir / "hang.ends") == []  # neither run went on after its timeout
        for pid in pids:
            with pytest.raises(ProcessLookupError):
                os.kill(int(pid), 0)  # the children were killed
        assert "timeout" in t.last_error and t.retried == 1
        await c.close()

    asyncio.run(main())


@pytest.mark.parametrize("how,signal_name", [("segv", "SIGSEGV"), ("kill", "SIGKILL")])
def test_a_dying_child_fails_only_its_task(redis_url: str, how: str, signal_name: str) -> None:
    async def main() -> None:
        c = AsyncClient(redis_url)
        async with serving(redis_url, _mux(), queues=[Q], sandbox_processes=2, concurrency=4):
            others = [c.call("work", i, queue=Q, timeout=20) for i in range(20)]
            dying = c.call("die", how, queue=Q, timeout=20, retry_delay=0)
            got = await asyncio.gather(dying, *others)
        assert got[0] == f"survived {how}"
        assert [g["n"] for g in got[1:]] == list(range(20))
        with Inspector(redis_url) as insp:
            events = [e for e in insp.events(Q) if e.event == "retry"]
        assert any(f"handler process died: {signal_name}" in e.error for e in events), events
        await c.close()

    asyncio.run(main())


def test_200_tasks_through_two_recycled_children(redis_url: str) -> None:
    """(400 tasks, 10 to 12 children started, cost 7 s of CPU: 200 recycle each child as often.)"""
    async def main() -> None:
        c = AsyncClient(redis_url)
        await c.enqueue_many([("work", i, {"retention": 600}) for i in range(200)], queue=Q)
        async with serving(redis_url, _mux(), queues=[Q], sandbox_processes=2, sandbox_max_tasks=40,
                           concurrency=8) as server:
            with Inspector(redis_url) as insp:
                await until(lambda: insp.queue_info(Q).completed == 200, 60)
                done = insp.list_tasks(Q, TaskState.COMPLETED, 1, 200)
        pids = {t.result["pid"] for t in done}
        assert sorted(t.result["n"] for t in done) == list(range(200))  # nothing lost
        assert 5 <= len(pids) <= 7, len(pids)  # 40 tasks per child, 2 at a time
        assert server is not None
        await c.close()

    asyncio.run(main())


def test_a_child_over_its_memory_limit_is_replaced(redis_url: str) -> None:
    """Measured from the child's own peak: a worker bigger than the limit (here 300 MB of
    ballast) must not make its children look bloated (ru_maxrss carries the parent's size across
    fork and exec: every child was replaced after each task in a long CI run)."""
    ballast = bytearray(300 << 20)
    for i in range(0, len(ballast), 4096):
        ballast[i] = 1

    async def main() -> None:
        c = AsyncClient(redis_url)
        async with serving(redis_url, _mux(), queues=[Q], sandbox_processes=1, sandbox_max_memory_mb=150):
            small = [await c.call("hog", 1, queue=Q, timeout=20) for _ in range(2)]
            big = await c.call("hog", 200, queue=Q, timeout=20)
            after = await c.call("hog", 1, queue=Q, timeout=20)
        assert small[0] == small[1] == big  # the same child, until it went over
        assert after != big
        await c.close()

    asyncio.run(main())
    assert len(ballast) == 300 << 20


def test_progress_results_headers_and_async_handlers_cross_the_boundary(redis_url: str) -> None:
    async def main() -> None:
        c = AsyncClient(redis_url)
        seen: list[Any] = []
        async with serving(redis_url, _mux(), queues=[Q]):
            got = await c.call("steps", None, queue=Q, timeout=20, headers={"trace": "t-1"}, on_progress=seen.append)
            a = await c.call("async_work", 7, queue=Q, timeout=20)
        assert got == {"steps": 3, "headers": {"trace": "t-1"}}
        assert seen and seen[-1] == {"step": 2}
        assert a.startswith("async 7 in ") and int(a.split()[-1]) != os.getpid()
        await c.close()

    asyncio.run(main())


def test_a_raising_handler_keeps_its_error_and_traceback(redis_url: str) -> None:
    mux = ServeMux()
    mux.handle("fail", sandboxed.fail, sandbox=True)

    async def main() -> None:
        c = AsyncClient(redis_url)
        async with serving(redis_url, mux, queues=[Q]):
            with pytest.raises(TaskFailedError, match="ValueError: bad input 7"):
                await c.call("fail", 7, queue=Q, timeout=20, max_retry=0, task_id="f1")
        with Inspector(redis_url) as insp:
            t = insp.task_info(Q, "f1")
        assert t.last_error == "ValueError: bad input 7"  # its own type, not the carrier's
        assert "sandboxed.py" in t.traceback and "in fail" in t.traceback  # the child's traceback
        await c.close()

    asyncio.run(main())


def test_lambdas_and_nested_functions_are_refused_at_registration() -> None:
    mux = ServeMux()
    with pytest.raises(InvalidArgumentError, match="not a lambda|module-level function"):
        mux.handle("x", lambda task: None, sandbox=True)

    def nested(task: Any) -> None:
        return None

    with pytest.raises(InvalidArgumentError, match="module-level function"):
        mux.handle("y", nested, sandbox=True)
    assert mux.match("x") is None and mux.match("y") is None  # nothing registered


def test_a_server_can_sandbox_every_plain_handler(redis_url: str) -> None:
    mux = ServeMux()
    mux.handle("work", sandboxed.work)  # plain: sandboxed by the server's option

    @mux.handle("inline")
    async def inline(task: Any) -> int:  # async: stays on the event loop
        return os.getpid()

    async def main() -> None:
        c = AsyncClient(redis_url)
        async with serving(redis_url, mux, queues=[Q], sandbox=True):
            assert (await c.call("work", 1, queue=Q, timeout=20))["pid"] != os.getpid()
            assert await c.call("inline", None, queue=Q, timeout=20) == os.getpid()
        await c.close()

    asyncio.run(main())
    bad = ServeMux()
    bad.handle("lam", lambda task: None)
    with pytest.raises(InvalidArgumentError, match="module-level function"):
        asyncio.run(_serve_once(redis_url, bad))


async def _serve_once(url: str, mux: ServeMux) -> None:
    async with serving(url, mux, queues=[Q], sandbox=True):
        pass


def test_typed_task_functions_can_be_sandboxed(redis_url: str) -> None:
    async def main() -> None:
        c = AsyncClient(redis_url)
        info = await c.enqueue(sandboxed.add.name, {"a": 2, "b": 3}, queue=Q,
                               retention=60)
        async with serving(redis_url, sandboxed.app.mux, queues=[Q]):
            assert (await c.call(sandboxed.shout.name, {"text": "hi"}, queue=Q, timeout=20)) == "HI"
            with Inspector(redis_url) as insp:
                await until(lambda: insp.task_info(Q, info.id).state is TaskState.COMPLETED, 20)
                result = insp.task_info(Q, info.id).result
        assert result["sum"] == 5 and result["pid"] != os.getpid()
        assert sandboxed.add(1, 2)["sum"] == 3  # still a plain function when called
        await c.close()

    asyncio.run(main())


def test_a_sandboxed_handler_reads_an_encrypted_payload_decrypted(redis_url: str) -> None:
    """The child is sent the message with its payload opened by the worker (the worker keeps the
    stored message as it is: docs/encryption.md), and its result is sealed again as stored."""
    ring = KeyRing({"k1": b"1" * 32})

    async def main() -> None:
        c = AsyncClient(redis_url, encryption=ring)
        async with serving(redis_url, _mux(), queues=[Q], encryption=ring):
            got = await c.call("work", {"card": "4111"}, queue=Q, timeout=20, retention=60)
        assert got["n"] == {"card": "4111"} and got["pid"] != os.getpid()
        await c.close()
        raw = redis.Redis.from_url(redis_url).hvals(queue_keys(Q).tasks)
        assert len(raw) == 1 and b"4111" not in raw[0]  # (payload and result stored sealed)

    asyncio.run(main())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", ["timeout", "cancel", "shutdown"])
def test_a_kill_takes_the_processes_the_handler_started(redis_url: str, record_dir: Path, how: str) -> None:
    """The child leads a process group of its own (start_new_session): a timeout, an operator's
    cancel or the end of the shutdown grace SIGKILLs the group, so the handler's tool (``sleep
    300``) dies with the child instead of running on, re-parented to init."""
    pids = record_dir / "spawn.pids"

    async def main() -> None:
        c = AsyncClient(redis_url)
        async with serving(redis_url, _mux(), queues=[Q], shutdown_timeout=0.2, sandbox_processes=1):
            await c.call("work", 0, queue=Q, timeout=20)  # the child is up: the timeout is the handler's
            info = await c.enqueue("spawn", 60, queue=Q, timeout=1 if how == "timeout" else 60, max_retry=0)
            await until(lambda: bool(_lines(pids)), 15)
            with Inspector(redis_url) as insp:
                if how == "cancel":
                    insp.cancel(info.id, Q)
                if how != "shutdown":
                    await until(lambda: insp.task_info(Q, info.id).state is TaskState.ARCHIVED, 15)
        await c.close()

    asyncio.run(main())
    child, tool = map(int, _lines(pids)[0].split())
    try:
        asyncio.run(until(lambda: not _alive(child) and not _alive(tool), 5))
    finally:
        if _alive(tool):
            os.kill(tool, signal.SIGKILL)


def test_a_result_over_max_result_bytes_fails_in_the_child_unsent(redis_url: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A 20 MB result with max_result_bytes 1 MiB: refused in the child (ResultError, archived as
    in-process), and the worker never reads more than the frame limit from a child's pipe (it used
    to read the whole answer, then refuse it: 300 MB grew the worker by 600 MB)."""
    asked: list[int] = []
    real = asyncio.StreamReader.readexactly

    async def readexactly(self: asyncio.StreamReader, n: int) -> bytes:
        asked.append(n)
        return await real(self, n)

    monkeypatch.setattr(asyncio.StreamReader, "readexactly", readexactly)

    async def main() -> None:
        c = AsyncClient(redis_url)
        async with serving(redis_url, _mux(), queues=[Q], max_result_bytes=1 << 20):
            with pytest.raises(TaskFailedError, match="over the server's max_result_bytes"):
                await c.call("big", 20, queue=Q, timeout=20, max_retry=3, task_id="big")
            assert (await c.call("work", 1, queue=Q, timeout=20))["n"] == 1  # the pool goes on
        with Inspector(redis_url) as insp:
            t = insp.task_info(Q, "big")
        assert t.state is TaskState.ARCHIVED and t.retried == 0  # as in-process: not retried
        assert t.last_error.startswith("ResultError: result is 20971") and "(1048576)" in t.last_error
        await c.close()

    asyncio.run(main())
    assert asked and max(asked) <= frame_limit(1 << 20), max(asked)


def test_an_oversized_frame_is_refused_unread_and_the_child_replaced(redis_url: str, record_dir: Path) -> None:
    """A child announcing a 1 GiB frame (a handler writing to the protocol's pipe): the worker
    fails the task with the reason at once, without waiting for (or buffering) the body, and
    replaces the child."""
    async def main() -> None:
        c = AsyncClient(redis_url)
        async with serving(redis_url, _mux(), queues=[Q], sandbox_processes=1):
            with pytest.raises(TaskFailedError, match="1073741824-byte answer, over the"):
                await c.call("forge", 1 << 30, queue=Q, timeout=15, max_retry=0, task_id="forge")
            after = (await c.call("work", 1, queue=Q, timeout=20))["pid"]
        (forger,) = map(int, _lines(record_dir / "forge.pids"))
        assert after != forger
        await until(lambda: not _alive(forger), 5)
        with Inspector(redis_url) as insp:
            t = insp.task_info(Q, "forge")
        assert t.state is TaskState.ARCHIVED and "SandboxFrameError" in t.last_error
        await c.close()

    asyncio.run(main())
