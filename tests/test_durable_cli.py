"""``asynqpy durable ls|inspect|signal|cancel|resume|result`` (docs/durable.md "Operating runs") on
a redis-server, with a worker in a thread: a failed run listed and inspected, the fix deployed, one
run resumed by its id and every other failed run of the function in bulk, a signal, a cancel, a run's result waited for,
and the one-line errors (exit 2) of bad input and of a run that did not complete."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from click.testing import CliRunner
from helpers import serving, wait_sync

from asynqpy import Client, Durable, DurableRun, Inspector, Retry, RunFailedError, ServeMux
from asynqpy.cli.main import main

pytestmark = pytest.mark.real

Q = "dcli"


def run(url: str, *args: str) -> tuple[int, str, str]:
    res = CliRunner().invoke(main, [*args, "--redis-url", url])
    return res.exit_code, res.stdout, res.stderr


def ok(url: str, *args: str) -> str:
    code, out, err = run(url, *args)
    assert code == 0, (args, out, err)
    return out


def fails(url: str, *args: str, message: str) -> None:
    code, out, err = run(url, *args)
    assert code == 2, (args, out, err)
    assert err.count("\n") == 1 and err.startswith("asynqpy: error: ") and message in err, err


def order_mux(version: str, calls: list[str]) -> ServeMux:
    mux = ServeMux()

    def charge(n: int) -> int:
        calls.append(f"charge-{version}")
        if version == "v1":
            raise ValueError("declined")
        return n

    @mux.durable(name="order", queue=Q)
    async def order(ctx: Durable, n: int) -> str:
        await ctx.step("reserve", lambda: calls.append("reserve"))
        await ctx.step("charge", charge, n, retry=Retry(attempts=1))
        return f"{n} on {version}"

    @mux.durable(name="waiter", queue=Q)
    async def waiter(ctx: Durable) -> Any:
        return await ctx.wait_for("go")

    return mux


@contextmanager
def worker(url: str, mux: ServeMux) -> Iterator[None]:
    stop = threading.Event()

    async def serve() -> None:
        async with serving(url, mux, queues=[Q]):
            while not stop.is_set():
                await asyncio.sleep(0.02)

    t = threading.Thread(target=asyncio.run, args=(serve(),), daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(20)


def state(url: str, rid: str) -> str:
    with Inspector(url) as insp:
        return insp.durable_run(Q, rid).state


def test_the_durable_commands_list_inspect_resume_signal_and_cancel_runs(redis_url: str) -> None:
    calls: list[str] = []
    c = Client(redis_url)
    with worker(redis_url, order_mux("v1", calls)):
        for n in (1, 2):
            c.start("order", n, id=f"o{n}", queue=Q)
        c.start("waiter", id="w1", queue=Q)
        c.start("waiter", id="w2", queue=Q)
        wait_sync(lambda: state(redis_url, "o1") == state(redis_url, "o2") == "failed")
        wait_sync(lambda: state(redis_url, "w2") == "waiting")
        listed = json.loads(ok(redis_url, "durable", "ls", "-q", Q, "--json"))
        assert listed["total"] == 4 and {r["id"] for r in listed["runs"]} == {"o1", "o2", "w1", "w2"}
        failed = json.loads(ok(redis_url, "durable", "ls", "-q", Q, "-s", "failed", "-f", "order", "--json"))
        assert failed["total"] == 2 and all("declined" in r["error"] for r in failed["runs"])
        table = ok(redis_url, "durable", "ls", "-q", Q, "--state", "failed")
        assert "2 failed run(s) in queue dcli" in table and "o1" in table and "declined" in table
        text = ok(redis_url, "durable", "inspect", "o1", "-q", Q)
        assert "failed" in text and "reserve" in text and "charge" in text and "durable resume o1 -q dcli" in text
        shown = json.loads(ok(redis_url, "durable", "inspect", "o1", "-q", Q, "--json"))
        assert [(e["kind"], e["name"], e["status"]) for e in shown["timeline"]][1:] == [
            ("step", "reserve", "completed"), ("step", "charge", "failed"), ("failed", "", "failed")]
        assert "signal go delivered" in ok(redis_url, "durable", "signal", "w1", "go", "-p", '{"x": 1}', "-q", Q)
        assert "run w2 cancelled" in ok(redis_url, "durable", "cancel", "w2", "-q", Q, "--reason", "not needed")
        fails(redis_url, "durable", "signal", "w1", "go", "-q", Q, message="has finished")
        fails(redis_url, "durable", "signal", "w1", "go", "-p", "{", "-q", Q, message="--payload is not valid JSON")
        fails(redis_url, "durable", "resume", "w1", "-q", Q, message="is completed")
        fails(redis_url, "durable", "resume", "-q", Q, message="give a RUN_ID or --all-failed")
        fails(redis_url, "durable", "resume", "o1", "--all-failed", "-q", Q, message="give a RUN_ID or --all-failed")
        fails(redis_url, "durable", "inspect", "nope", "-q", Q, message="no process 'nope'")
        assert c.result(DurableRun("w1", Q), timeout=20) == {"x": 1}
        with pytest.raises(RunFailedError, match="not needed"):
            c.result(DurableRun("w2", Q), timeout=20)
        assert json.loads(ok(redis_url, "durable", "result", "w1", "-q", Q, "--json"))["result"] == {"x": 1}
        assert ok(redis_url, "durable", "result", "w1", "-q", Q).strip() == '{"x": 1}'
        fails(redis_url, "durable", "result", "w2", "-q", Q, message="cancelled: not needed")
        fails(redis_url, "durable", "result", "o1", "-q", Q, message="failed")
        c.start("waiter", id="w3", queue=Q)
        fails(redis_url, "durable", "result", "w3", "-q", Q, "--timeout", "0.2", message="did not end within 0.2s")
        fails(redis_url, "durable", "result", "nope", "-q", Q, message="no process 'nope'")
        fails(redis_url, "durable", "result", "bad\nid", "-q", Q, message="a process id must be")
    with worker(redis_url, order_mux("v2", calls)):  # the fix deployed
        assert ok(redis_url, "durable", "resume", "o1", "-q", Q).strip() == "run o1 resumed"  # one run
        assert c.result(DurableRun("o1", Q), timeout=20) == "1 on v2"
        fails(redis_url, "durable", "resume", "o1", "-q", Q, message="is completed")  # resumed, then done
        out = ok(redis_url, "durable", "resume", "--all-failed", "--function", "order", "-q", Q)
        assert "resumed 1 run(s)" in out and "o2" in out and "o1" not in out  # the rest, in bulk
        assert [c.result(DurableRun(f"o{n}", Q), timeout=20) for n in (1, 2)] == ["1 on v2", "2 on v2"]
    assert calls.count("reserve") == 2 and calls.count("charge-v2") == 2
    c.close()
