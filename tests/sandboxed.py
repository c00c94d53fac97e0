"""Handlers the sandbox tests run in child processes (importable: tests/ is on the children's
path). Each records what it does in files under $ASYNQPY_SANDBOX_DIR, which survive the child."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from pathlib import Path
from typing import Any

from asynqpy import Task


def _log(name: str, line: str) -> None:
    with open(Path(os.environ["ASYNQPY_SANDBOX_DIR"]) / name, "a") as f:
        f.write(line + "\n")


def hang(task: Task) -> str:
    """Records its start, sleeps ``payload`` seconds, records its end."""
    _log("hang.starts", f"{task.id} {task.retry_count} {os.getpid()}")
    time.sleep(task.payload)
    _log("hang.ends", f"{task.id} {task.retry_count}")
    return "finished"


def die(task: Task) -> str:
    """The first attempt kills its own process (``payload``: 'segv' or 'kill'); the retry succeeds."""
    if task.retry_count == 0:
        if task.payload == "segv":
            ctypes.string_at(0)
        os.kill(os.getpid(), signal.SIGKILL)
    return f"survived {task.payload}"


def work(task: Task) -> dict[str, Any]:
    return {"n": task.payload, "pid": os.getpid()}


def hog(task: Task) -> int:
    block = bytearray(task.payload * 1024 * 1024)  # MB, touched
    for i in range(0, len(block), 4096):
        block[i] = 1
    return os.getpid()


def steps(task: Task) -> None:
    for i in range(3):
        task.progress({"step": i})
        time.sleep(0.25)
    task.write_result({"steps": 3, "headers": task.headers})


def big(task: Task) -> bytes:
    """Returns ``payload`` MB: over the server's max_result_bytes."""
    return b"x" * (task.payload << 20)


def forge(task: Task) -> None:
    """A handler writing to the protocol's pipe itself: announces a frame of ``payload`` bytes,
    sends none of it and waits."""
    import gc
    import io
    import struct

    _log("forge.pids", str(os.getpid()))
    (out,) = [o for o in gc.get_objects() if isinstance(o, io.FileIO) and not o.closed and o.mode == "wb"
              and o.fileno() > 2]  # the child's answer pipe
    out.write(struct.pack(">I", task.payload))
    time.sleep(30)


def spawn(task: Task) -> str:
    """Starts a tool (``sleep 300``), records the child's and the tool's pids, waits ``payload`` s."""
    import subprocess

    tool = subprocess.Popen(["sleep", "300"])
    _log("spawn.pids", f"{os.getpid()} {tool.pid}")
    time.sleep(task.payload)
    return "finished"


async def async_work(task: Task) -> str:
    return f"async {task.payload} in {os.getpid()}"


def fail(task: Task) -> None:
    raise ValueError(f"bad input {task.payload!r}")


from asynqpy import App  # noqa: E402

app = App()


@app.task(sandbox=True, queue="sbx")
def add(a: int, b: int = 0) -> dict[str, int]:
    return {"sum": a + b, "pid": os.getpid()}


@app.task(sandbox=True, queue="sbx")
async def shout(text: str) -> str:
    return text.upper()


def logs(task: Task) -> str:
    """Writes task logs in its child: a line, a logging record (captured when the worker
    captures), and one from a thread it starts with asyncio.to_thread."""
    import asyncio
    import logging

    task.log(f"child {os.getpid()}")
    logging.getLogger("tests.sandboxed").warning("a record in the child")

    async def in_thread() -> None:
        await asyncio.to_thread(logging.getLogger("tests.sandboxed").warning, "from a thread")

    asyncio.run(in_thread())
    if task.retry_count == 0:
        raise ValueError("once")
    return "ok"
