"""Sandboxed handlers (docs/workers.md "Sandboxed handlers"): a handler past its timeout is killed
for real and retried once more; a child that segfaults or is SIGKILLed fails only its task; 1 000
tasks through 2 children recycle them as configured and lose nothing; memory recycling; progress,
results and headers cross the boundary (msgpack); lambdas are refused at registration. On
redis-server."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest
import sandboxed
from helpers import serving, until

from asynqpy import AsyncClient, Inspector, InvalidArgumentError, ServeMux, TaskFailedError, TaskState

pytestmark = pytest.mark.real
Q = "sbx"


@pytest.fixture(autouse=True)
def record_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ASYNQPY_SANDBOX_DIR", str(tmp_path))
    return tmp_path


def _mux() -> ServeMux:
    mux = ServeMux()
    for name in ("hang", "die", "work", "hog", "steps", "async_work"):
        mux.handle(name, getattr(sandboxed, name), sandbox=True)
    return mux


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_a_handler_past_its_timeout_is_killed_and_retried_once_more(redis_url: str, record_dir: Path) -> None:
    async def main() -> None:
        c = AsyncClient(redis_url)
        info = await c.enqueue("hang", 30, queue=Q, timeout=0.5, max_retry=1, retry_delay=0)
        async with serving(redis_url, _mux(), queues=[Q]):
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


def test_a_thousand_tasks_through_two_recycled_children(redis_url: str) -> None:
    async def main() -> None:
        c = AsyncClient(redis_url)
        await c.enqueue_many([("work", i, {"retention": 600}) for i in range(1000)], queue=Q)
        async with serving(redis_url, _mux(), queues=[Q], sandbox_processes=2, sandbox_max_tasks=100,
                           concurrency=8) as server:
            with Inspector(redis_url) as insp:
                await until(lambda: insp.queue_info(Q).completed == 1000, 60)
                done = insp.list_tasks(Q, TaskState.COMPLETED, 1, 1000)
        pids = {t.result["pid"] for t in done}
        assert sorted(t.result["n"] for t in done) == list(range(1000))  # nothing lost
        assert 10 <= len(pids) <= 12, len(pids)  # 100 tasks per child, 2 at a time
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
