"""Task logs (``task.log``, ``capture_logs``): kept per attempt with the task, in its stored
message, so they go with it on every path that removes it; bounded; never an error; no command of
their own (the attempt's end writes them). On fakeredis, redis-server and the cluster."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import fakeredis
import pytest
from helpers import serving, until

from asynqpy import AsyncInspector, Client, Inspector, ServeMux, Task, TaskNotFoundError, TaskState
from asynqpy.core.model.clock import FakeClock
from asynqpy.core.model.codec import Message, decode, encode
from asynqpy.core.results import tasklogs
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import AsyncExecutor, SyncExecutor

applog = logging.getLogger("tests.tasklogs.app")
applog.setLevel(logging.INFO)


def _texts(lines: list[tasklogs.LogLine]) -> list[tuple[int, str]]:
    return [(ln.attempt, ln.text) for ln in lines]


def _mux(gate: asyncio.Event) -> ServeMux:
    mux = ServeMux()

    @mux.handle("flaky")
    async def flaky(task: Task) -> str:
        task.log(f"{task.payload} start")
        applog.info("%s attempt %d", task.payload, task.retry_count + 1)
        await gate.wait()  # the two tasks run side by side: their lines must not mix
        await asyncio.to_thread(applog.warning, "%s from a thread", task.payload)
        logging.getLogger("asynqpy.tests").warning("an asynqpy logger: not captured")
        if task.retry_count == 0:
            raise ValueError("first attempt fails")
        return "ok"

    @mux.handle("plain")
    def plain(task: Task) -> None:  # a plain def: runs in the thread pool, with the task's context
        applog.info("plain handler")
        task.log(b"bytes \xff")
        raise ValueError("archived")

    @mux.handle("uncaptured")
    async def uncaptured(task: Task) -> None:
        applog.info("not a captured type")
        task.log("task.log is always kept")
        raise ValueError("archived")

    return mux


def test_logs_are_kept_per_attempt_and_shown(backend: Any) -> None:
    gate = asyncio.Event()

    async def main() -> None:
        r = backend.new_async()
        async with serving(r, _mux(gate), queues=["lq"], capture_logs=["flaky", "plain"]):
            with Client(backend.sync) as c:
                for name in ("a", "b"):
                    c.enqueue("flaky", name, task_id=name, retention=60, retry_delay=0, queue="lq")
                c.enqueue("plain", task_id="p", max_retry=0, queue="lq")
                c.enqueue("uncaptured", task_id="u", max_retry=0, queue="lq")
            ins = Inspector(backend.sync)

            def state(id: str) -> TaskState | None:
                try:
                    return ins.task_info("lq", id).state
                except TaskNotFoundError:
                    return None

            await until(lambda: all(state(i) is TaskState.ACTIVE for i in "ab"))
            assert ins.task_logs("lq", "a") == []  # an attempt's lines are written with its end
            gate.set()
            await until(lambda: all(state(i) is TaskState.COMPLETED for i in "ab")
                        and all(state(i) is TaskState.ARCHIVED for i in "pu"))
        for name in "ab":
            want = [(n, t) for n in (1, 2) for t in (f"{name} start", f"INFO tests.tasklogs.app: {name} attempt {n}",
                                                     f"WARNING tests.tasklogs.app: {name} from a thread")]
            assert _texts(ins.task_logs("lq", name)) == want
            async with AsyncInspector(backend.new_async()) as ai:
                assert _texts(await ai.task_logs("lq", name)) == want
        info = ins.task_info("lq", "a")
        assert _texts(info.logs) == _texts(ins.task_logs("lq", "a"))
        assert info.logs[0].at.tzinfo is not None and abs(info.logs[0].at.timestamp() - time.time()) < 60
        assert _texts(ins.task_logs("lq", "p")) == [(1, "INFO tests.tasklogs.app: plain handler"), (1, "bytes \ufffd")]
        assert _texts(ins.task_logs("lq", "u")) == [(1, "task.log is always kept")]
        assert [t.logs for t in ins.list_tasks("lq", TaskState.COMPLETED)] == [[], []]  # listings stay light

    asyncio.run(main())


def _scripts_called(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every script or command the asyncio executors send from now on, by name."""
    sent: list[str] = []
    run, run_many = AsyncExecutor.run, AsyncExecutor.run_many

    async def one(self: AsyncExecutor, call: Any) -> Any:
        sent.append(call.script or str(call.command[0]))
        return await run(self, call)

    async def many(self: AsyncExecutor, calls: Any) -> Any:
        sent.extend(c.script or str(c.command[0]) for c in calls)
        return await run_many(self, calls)

    monkeypatch.setattr(AsyncExecutor, "run", one)
    monkeypatch.setattr(AsyncExecutor, "run_many", many)
    return sent


def test_logs_cost_no_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """An attempt's lines ride the write that ends it: with logs on, the same calls end the same
    attempts as with logs off (one per attempt; successes without retention batched), and nothing
    else is written for them (the end calls are compared: the background loops' polls vary with
    timing)."""
    sent = _scripts_called(monkeypatch)
    ends: dict[bool, list[str]] = {}
    for logging_on in (False, True):
        server = fakeredis.FakeServer()
        mux = ServeMux()

        @mux.handle("t")
        async def t(task: Task, _on: bool = logging_on) -> None:
            if _on:
                for i in range(3):
                    task.log(f"line {i}")
                    applog.info("captured %d", i)
            if task.retry_count == 0:
                raise ValueError("retried once")

        with Client(fakeredis.FakeRedis(server=server)) as c:
            for i in range(4):
                c.enqueue("t", task_id=f"t{i}", retention=60 if i % 2 else 0, retry_delay=0, queue="cq")
        ins = Inspector(fakeredis.FakeRedis(server=server))

        def left() -> int:
            q = ins.queue_info("cq")
            return q.pending + q.active + q.retry + q.scheduled

        async def main() -> None:
            async with serving(fakeredis.FakeAsyncRedis(server=server), mux, queues=["cq"],
                               capture_logs=logging_on):
                await until(lambda: left() == 0)

        sent.clear()
        asyncio.run(main())
        ends[logging_on] = sorted(s for s in sent if s in ("done", "complete", "retry", "archive", "progress"))
        assert not [s for s in sent if "log" in s.lower()]
        kept = [len(ins.task_logs("cq", f"t{i}")) for i in (1, 3)]  # the kept tasks: 2 attempts x 6 lines
        assert kept == ([12, 12] if logging_on else [0, 0])
        for i in (0, 2):  # done without retention: gone, logs with them
            with pytest.raises(TaskNotFoundError):
                ins.task_logs("cq", f"t{i}")
    for on in (False, True):  # (the two done tasks may end in one batched call)
        assert [s for s in ends[on] if s != "done"] == ["complete"] * 2 + ["retry"] * 4
        assert 1 <= ends[on].count("done") <= 2


def _traces(r: Any, marker: bytes) -> list[str]:
    """The keys whose content holds ``marker`` (every key of the store, read by its type)."""
    found = []
    for key in r.scan_iter(count=1000):
        kind = r.type(key).decode()
        if kind == "hash":
            parts = [v for kv in r.hgetall(key).items() for v in kv]
        elif kind == "string":
            parts = [r.get(key)]
        elif kind == "list":
            parts = r.lrange(key, 0, -1)
        elif kind == "zset":
            parts = r.zrange(key, 0, -1)
        elif kind == "set":
            parts = list(r.smembers(key))
        else:  # stream
            parts = [v for _, fields in r.xrange(key) for kv in fields.items() for v in kv]
        if any(marker in p for p in parts):
            found.append(key.decode())
    return found


def test_a_task_leaves_no_logs_behind_when_it_goes() -> None:
    """Every way a task is removed takes its logs: a success without retention, a delete, the
    retention's expiry, the archive's trimming, dropping the queue, an id reused after a finished
    task (its logs are part of the stored task)."""
    server = fakeredis.FakeServer()
    r = fakeredis.FakeRedis(server=server)
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        task.log(f"MARK-{task.id}")
        if task.payload == "fail":
            raise ValueError("archived")

    with Client(r) as c:
        c.enqueue("t", task_id="done", queue="gq")
        c.enqueue("t", task_id="kept", retention=3600, queue="gq")
        c.enqueue("t", task_id="expires", retention=1, queue="gq")
        c.enqueue("t", "fail", task_id="trimmed", max_retry=0, queue="gq")
        c.enqueue("t", "fail", task_id="reused", max_retry=0, queue="gq")
        c.enqueue("t", "fail", task_id="dropped", max_retry=0, queue="dq")
    ins = Inspector(r)

    def ended() -> bool:
        q = ins.queue_info("gq")
        return q.pending + q.active == 0 and q.completed == 2 and q.archived == 2 \
            and ins.queue_info("dq").archived == 1

    async def main() -> None:
        async with serving(fakeredis.FakeAsyncRedis(server=server), mux, queues=["gq", "dq"], capture_logs=True):
            await until(ended)

    asyncio.run(main())
    for id in ("kept", "expires", "trimmed", "reused", "dropped"):
        assert _traces(r, f"MARK-{id}".encode()), id  # kept with the task meanwhile
    assert _traces(r, b"MARK-done") == []  # a success without retention: deleted with its logs

    ins.delete_task("gq", "kept")
    later = Broker(clock=FakeClock(int(time.time() * 1000) + 5000))
    assert SyncExecutor(r).run(later.expire("gq"))[0] == 1
    archived = [t.id for t in ins.list_tasks("gq", TaskState.ARCHIVED)]
    assert sorted(archived) == ["reused", "trimmed"]
    with Client(r) as c:
        c.enqueue("t", task_id="reused", queue="gq")  # a finished task's id: the new task replaces it
    assert SyncExecutor(r).run(Broker().trim("gq", 0, 10**9)) == 1
    ins.remove_queue("dq", force=True)
    for id in ("kept", "expires", "trimmed", "reused", "dropped"):
        assert _traces(r, f"MARK-{id}".encode()) == [], id
    assert ins.task_logs("gq", "reused") == []


def test_bad_input_is_kept_bounded_never_an_error() -> None:
    """Lines of any type, huge lines and too many lines: kept within the bounds, never raised."""

    class Broken:
        def __str__(self) -> str:
            raise RuntimeError("no")

    buf = tasklogs.Buffer(3)
    for value in ("text", b"\xffbytes", 42, None, "lone \udc80 surrogate", Broken(), ["a", 1]):
        buf.add(value, 1000)
    texts = [e[2] for e in buf.entries(2000)]
    assert texts == ["text", "\ufffdbytes", "42", "None", "lone ? surrogate", "<unprintable Broken: RuntimeError>",
                     "['a', 1]"]
    assert all(e[0] == 3 and e[1] == 1000 for e in buf.entries(2000))
    encode(Message("t", logs=buf.entries(2000)))  # storable as is

    huge = tasklogs.Buffer(1)
    huge.add("é" * 100_000, 1)
    [(_, _, text)] = huge.entries(2)
    assert len(text.encode()) <= tasklogs.MAX_LINE_BYTES and text.endswith("bytes cut]") and text.startswith("éé")

    many = tasklogs.Buffer(1)
    for i in range(150):
        many.add(f"line {i}", i)
    got = many.entries(999)
    assert len(got) == tasklogs.MAX_LINES + 1 and got[-1][2].startswith("[50 more lines not kept")
    big = tasklogs.Buffer(1)
    for _ in range(10):
        big.add("x" * 3000, 1)
    assert sum(len(e[2]) for e in big.lines) <= tasklogs.MAX_BYTES and big.dropped == 5

    # a task keeps its newest attempts within MAX_TASK_BYTES; whole attempts go
    stored: list[Any] | None = None
    for attempt in range(1, 8):
        stored = tasklogs.merged(stored, [[attempt, 0, "y" * 4000] for _ in range(4)])
    assert stored is not None and {e[0] for e in stored} == {4, 5, 6, 7}

    task = Task("t")  # a Task made by hand (a unit test of a handler): log works, nothing is sent
    task.log("by hand")
    assert _texts(task.logs) == [(1, "by hand")]
    [(attempt, _, text)] = decode(encode(task.logged(5))).logs or []
    assert (attempt, text) == (1, "by hand")


@pytest.mark.parametrize("bad", [[["1", 0, "x"]], [[1, 0]], [[1, 0, b"x"]], ["x"], [[1, 0.5, "x"]]])
def test_a_malformed_logs_field_is_a_malformed_message(bad: Any) -> None:
    from asynqpy import MalformedMessageError

    data = encode(Message("t", logs=[[1, 0, "ok"]]))
    assert decode(data).logs == [[1, 0, "ok"]]
    with pytest.raises(MalformedMessageError, match="logs"):
        decode(encode(Message("t", logs=bad)))


@pytest.mark.real
def test_task_inspect_and_the_web_task_page_show_the_logs(redis_url: str) -> None:
    import redis
    from click.testing import CliRunner
    from fastapi.testclient import TestClient

    from asynqpy.cli.main import main
    from asynqpy.web import create_app

    real = redis.Redis.from_url(redis_url)
    with Client(real) as c:
        c.enqueue("t", task_id="w", queue="wq", process_in=3600)
    lines = [[1, 1_700_000_000_000, "first <b>attempt</b>"], [2, 1_700_000_001_000, "x" * 150],
             [2, 1_700_000_002_000, "two\nlines"]]
    key = queue_keys("wq").tasks
    stored = real.hget(key, "w")
    assert stored is not None and stored[:1] == b"s"
    real.hset(key, "w", b"s" + encode(decode(stored[1:]).with_(logs=lines)))  # a scheduled task that logged
    res = CliRunner().invoke(main, ["task", "inspect", "-q", "wq", "--id", "w", "--redis-url", redis_url])
    assert res.exit_code == 0, res.output
    out = res.stdout
    assert "\nlogs (#attempt)\n#1 2023-11-14 22:13:20 UTC first <b>attempt</b>\n#2 2023-11-14 22:13:21 UTC xxx" in out
    assert "#2 2023-11-14 22:13:22 UTC two\n    lines\n" in out  # a line break in a line: indented
    assert all(len(line) <= 80 and line == line.rstrip() for line in out.splitlines()), out
    assert out.count("x") >= 150  # folded, not cut
    with TestClient(create_app(redis_url), base_url="http://localhost") as tc:
        page = tc.get("/queues/wq/tasks/w")
        api = tc.get("/api/queues/wq/tasks/w").json()
    assert page.status_code == 200
    assert "<h2>Logs</h2>" in page.text and "#1 2023-11-14 22:13:20 UTC first &lt;b&gt;attempt&lt;/b&gt;" in page.text
    assert [(ln["attempt"], ln["text"]) for ln in api["task"]["logs"]] == [(a, t) for a, _, t in lines]


def test_capture_keeps_pythons_last_resort_output(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """With no logging configured, Python prints warnings to stderr (its last-resort handler): the
    capture handler on the root logger must not silence them, and prints nothing more when the
    application has handlers of its own."""
    from asynqpy.worker.logs import capture_start, capture_stop

    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])
    quiet = logging.getLogger("tests.tasklogs.unconfigured")
    capture_start()
    try:
        quiet.warning("still printed")
        quiet.info("below the last resort's level")
        assert capsys.readouterr().err == "still printed\n"
        mine = logging.StreamHandler()
        root.addHandler(mine)  # (a handler of the application's: it prints, the capture does not again)
        quiet.warning("printed once")
        assert capsys.readouterr().err == "printed once\n"
    finally:
        capture_stop()
    assert root.handlers == [mine]


def test_logs_of_a_signed_task_are_signed_with_it() -> None:
    """The lines are part of the message the worker signs: the retried task verifies at its next
    dequeue (else it would be archived "bad signature"), and a line changed by hand does not."""
    server = fakeredis.FakeServer()
    r = fakeredis.FakeRedis(server=server)
    key = b"k" * 32
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        task.log(f"attempt {task.retry_count + 1}")
        if task.retry_count == 0:
            raise ValueError("again")
        if task.payload == "tamper":
            raise ValueError("fails to be archived")

    with Client(r, signing_key=key) as c:
        c.enqueue("t", task_id="s", retention=60, retry_delay=0, queue="sq")
        c.enqueue("t", "tamper", task_id="x", retry_delay=3600, queue="sq")
    ins = Inspector(r)

    async def main() -> None:
        async with serving(fakeredis.FakeAsyncRedis(server=server), mux, queues=["sq"], signing_key=key):
            await until(lambda: ins.queue_info("sq").completed == 1 and ins.queue_info("sq").retry == 1)
            tasks = queue_keys("sq").tasks
            v = r.hget(tasks, "x")
            assert v is not None and b"attempt 1" in v
            r.hset(tasks, "x", v.replace(b"attempt 1", b"attempt 9"))  # a line changed by hand
            ins.run_task("sq", "x")
            await until(lambda: ins.queue_info("sq").archived == 1)

    asyncio.run(main())
    assert _texts(ins.task_logs("sq", "s")) == [(1, "attempt 1"), (2, "attempt 2")]
    archived = ins.task_info("sq", "x")
    assert archived.last_error.startswith("bad signature") and archived.retried == 1


@pytest.mark.real
def test_a_sandboxed_handlers_logs_cross_the_boundary(redis_url: str) -> None:
    import os

    import sandboxed

    mux = ServeMux()
    mux.handle("logs", sandboxed.logs, sandbox=True)

    async def main() -> None:
        async with serving(redis_url, mux, queues=["sbq"], capture_logs=True, sandbox_processes=1):
            with Client(redis_url) as c:
                c.enqueue("logs", task_id="s1", queue="sbq", retention=60, retry_delay=0)
            with Inspector(redis_url) as ins:
                await until(lambda: ins.queue_info("sbq").completed == 1, timeout=20)
                lines = _texts(ins.task_logs("sbq", "s1"))
        pids = {t.split()[1] for _, t in lines if t.startswith("child ")}
        assert len(pids) == 1 and pids != {str(os.getpid())}
        assert [(a, t) for a, t in lines if not t.startswith("child ")] == [
            (n, t) for n in (1, 2) for t in ("WARNING tests.sandboxed: a record in the child",
                                             "WARNING tests.sandboxed: from a thread")]
        assert [a for a, _ in lines] == [1, 1, 1, 2, 2, 2]

    asyncio.run(main())


@pytest.mark.parametrize("bad", ["email", [1], [""], {"a": 1}, 3])
def test_capture_logs_takes_a_bool_or_task_types(bad: Any) -> None:
    from asynqpy import InvalidArgumentError, Server

    with pytest.raises(InvalidArgumentError, match="capture_logs must be a bool or a list of task types"):
        Server("redis://localhost:1/0", capture_logs=bad)
    assert Server("redis://localhost:1/0", capture_logs=["a", "b"]).options.capture_logs == frozenset({"a", "b"})
