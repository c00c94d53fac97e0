"""Inspector.search (issue 48 #4): a queue's tasks found by what they hold, in bounded steps of
lua/search.lua (each task checked in place in Redis), resumable by cursor, counted, and acted on;
the script agrees with the Python test of a decoded message (core/inspector/search.matches) on
random payloads and conditions; bad input gets a typed error and loses nothing. On fakeredis, the
real redis-server and the Cluster."""

from __future__ import annotations

import asyncio
import random
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asynqpy import AsyncInspector, Client, Inspector, InvalidArgumentError, QueueNotFoundError, TaskState
from asynqpy.core.inspector import search as S
from asynqpy.core.model.codec import decode
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.spine.stored import message_of, state_char
from asynqpy.redisio.executor import SyncExecutor
from cli.main import main as cli


def _seed(backend: Any, q: str = "sq") -> None:
    """Tasks in several states with known payloads: p00 active (taken with p01 before the others
    were enqueued), p01 cancelled (archived with an error), p03 archived by an operator (no
    error), 'later' scheduled, the others pending."""
    b, x = Broker(), SyncExecutor(backend.sync)
    with Client(backend.sync) as c:
        for i in range(20):
            c.enqueue("pay" if i % 2 else "mail", {"user": {"id": i % 4, "tags": ["a", f"t{i}"]}, "note": f"order {i}",
                                                  "amount": i * 10}, queue=q, task_id=f"p{i:02d}",
                      tenant="acme" if i < 5 else None, headers={"src": "api" if i % 3 == 0 else "web"}, max_retry=0)
            if i == 1:
                assert sorted(id for id, _ in x.run(b.dequeue(q, 2, 30_000, "w0000001")).tasks) == ["p00", "p01"]
        c.enqueue("pay", {"user": {"id": 1}}, queue=q, task_id="later", process_in=600)
        c.enqueue("pay", {"user": {"id": 1}, "note": "ünïcode ✓"}, queue=q, task_id="uni")
    with Inspector(backend.sync) as insp:
        insp.archive_task(q, "p03")
        insp.cancel("p01", q)  # archived, last error 'cancelled by an operator'


def _ids(tasks: Any) -> list[str]:
    return sorted(t.id for t in tasks)


def test_each_condition_finds_its_tasks_sync_and_async(backend: Any) -> None:
    _seed(backend)
    with Inspector(backend.sync) as insp:
        assert len(_ids(insp.search("sq"))) == 22
        assert _ids(insp.search("sq", payload={"user.id": 3})) == ["p03", "p07", "p11", "p15", "p19"]
        assert _ids(insp.search("sq", payload={"user.id": 3}, state="pending")) == ["p07", "p11", "p15", "p19"]
        assert _ids(insp.search("sq", state=["archived", "active"])) == ["p00", "p01", "p03"]
        assert _ids(insp.search("sq", state=TaskState.SCHEDULED)) == ["later"]
        assert _ids(insp.search("sq", payload={"user.tags.1": "t12"})) == ["p12"]
        assert _ids(insp.search("sq", payload={"user.tags.2": ...})) == []
        assert _ids(insp.search("sq", payload={"note": ...}, type="pay")) == [f"p{i:02d}" for i in range(1, 20, 2)] + \
            ["uni"]
        assert _ids(insp.search("sq", payload={"amount": 50})) == ["p05"]
        assert _ids(insp.search("sq", payload={"amount": 50.0})) == []  # (compared as encoded: documented)
        assert _ids(insp.search("sq", tenant="acme")) == ["p00", "p01", "p02", "p03", "p04"]
        assert _ids(insp.search("sq", header={"src": "api"}, type="mail")) == ["p00", "p06", "p12", "p18"]
        assert _ids(insp.search("sq", text="order 1")) == ["p01"] + [f"p{i}" for i in range(10, 20)]
        assert _ids(insp.search("sq", text="ünïcode")) == ["uni"]
        assert _ids(insp.search("sq", error="cancelled by")) == ["p01"]
        ts = {t.id: t.enqueued_at.timestamp() for t in insp.search("sq")}
        cut = sorted(ts.values())[10]
        assert _ids(insp.search("sq", since=cut)) == sorted(i for i, t in ts.items() if t >= cut - 0.0005)
        assert set(_ids(insp.search("sq", until=cut))) == set(ts) - set(_ids(insp.search("sq", since=cut)))
        assert len(list(insp.search("sq", limit=3))) == 3
        assert insp.search_count("sq", payload={"user.id": 1}) == 7
        assert _ids(insp.search("sq", id_prefix="p1", payload={"user.id": 1})) == ["p13", "p17"]
        assert _ids(insp.search("sq", id_prefix="*")) == []  # (a glob character matches itself)

    async def main() -> list[str]:
        async with AsyncInspector(backend.new_async()) as a:
            return _ids([t async for t in a.search("sq", payload={"user.id": 2}, type="mail")])

    assert asyncio.run(main()) == ["p02", "p06", "p10", "p14", "p18"]


def test_a_type_written_with_a_longer_header_than_it_needs_is_still_found(backend: Any) -> None:
    """The type is compared in place as its smallest encoding; another writer may give a short type
    a str8 header (valid msgpack, not the protocol's smallest form): the script reads that header
    and compares the string, so the task is found by its type and by nothing else."""
    _seed(backend)
    k = queue_keys("sq").tasks
    raw = backend.sync.hget(k, "p05")
    head = len(raw) - len(message_of(raw))
    assert raw[head:head + 1] == b"\xdc" and raw[head + 3:head + 7] == b"\xa3pay"  # (array16; fixstr "pay")
    backend.sync.hset(k, "p05", raw[:head + 3] + b"\xd9\x03pay" + raw[head + 7:])
    assert decode(message_of(backend.sync.hget(k, "p05"))).type == "pay"  # (still the same message)
    with Inspector(backend.sync) as insp:
        assert "p05" in _ids(insp.search("sq", type="pay"))
        assert "p05" not in _ids(insp.search("sq", type="mail"))
        assert "p05" not in _ids(insp.search("sq", type="pa"))
        assert _ids(insp.search("sq", type="pay", payload={"amount": 50})) == ["p05"]


def test_pages_resume_from_their_cursor_and_report_progress(backend: Any) -> None:
    with Client(backend.sync) as c:
        c.enqueue_many([("t", {"n": i, "odd": i % 2 == 1}) for i in range(1500)], queue="big")
    with Inspector(backend.sync) as insp:
        seen: list[str] = []
        cursor, pages, looked = 0, 0, 0
        while True:
            page = insp.search_page("big", cursor=cursor, budget=200, limit=10, payload={"odd": True})
            assert page.total == 1500 and 0 <= page.looked <= 1500  # (a last HSCAN batch may hold none)
            seen += [t.id for t in page.tasks]
            looked += page.looked
            pages += 1
            cursor = page.cursor
            if cursor == 0:
                break
        assert pages > 3 and len(seen) == len(set(seen)) == 750  # every match once (the hash is not resized)
        assert looked >= 1500
        assert _ids(insp.search("big", payload={"odd": True}, budget=50)) == sorted(seen)


def test_acting_on_matches(backend: Any) -> None:
    _seed(backend)
    q = queue_keys("sq")
    with Inspector(backend.sync) as insp:
        rep = insp.search_act("sq", "archive", payload={"user.id": 3})
        assert (rep.done, rep.skipped, rep.gone, rep.refused) == (4, {"archived": 1}, 0, {})  # (p03)
        assert _ids(insp.search("sq", state="archived")) == ["p01", "p03", "p07", "p11", "p15", "p19"]
        rep = insp.search_act("sq", "retry", state="archived", payload={"user.id": 3})
        assert rep.done == 5 and _ids(insp.search("sq", state="pending", payload={"user.id": 3})) == \
            ["p03", "p07", "p11", "p15", "p19"]
        rep = insp.search_act("sq", "cancel", tenant="acme")
        assert rep.done == 1 and rep.skipped == {"pending": 3, "archived": 1}
        assert insp.task_info("sq", "p00").state is TaskState.ARCHIVED
        before = backend.sync.hlen(q.tasks)
        rep = insp.search_act("sq", "delete", header={"src": "api"}, type="mail")
        assert rep.done == 4 and backend.sync.hlen(q.tasks) == before - 4
        assert insp.search_act("sq", "run", payload={"nothing": ...}).done == 0


def test_bad_input_is_a_typed_error_and_loses_nothing(backend: Any) -> None:
    _seed(backend)
    q = queue_keys("sq")
    before = backend.sync.hgetall(q.tasks)
    with Inspector(backend.sync) as insp:
        for bad in ({"state": "nosuch"}, {"payload": {"a..b": 1}}, {"payload": {"x": object()}},
                    {"header": {"": "x"}}, {"header": {"a": 1}}, {"type": 3}, {"since": "yesterday"},
                    {"since": 10, "until": 5}):
            with pytest.raises(InvalidArgumentError):
                list(insp.search("sq", **bad))
        for bad2 in ({"budget": 0}, {"limit": 0}, {"cursor": -1}):
            with pytest.raises(InvalidArgumentError):
                list(insp.search("sq", **bad2))
        with pytest.raises(InvalidArgumentError):
            insp.search_act("sq", "explode", type="pay")
        with pytest.raises(QueueNotFoundError):
            list(insp.search("nosuch"))
        with pytest.raises(TypeError):
            list(insp.search("sq", colour="red"))
    assert backend.sync.hgetall(q.tasks) == before


def test_the_cli_lists_counts_asks_and_acts(backend: Any) -> None:
    if backend.kind == "fake":
        pytest.skip("the CLI connects by URL")
    _seed(backend)
    url = backend.url
    run = CliRunner().invoke
    out = run(cli, ["task", "search", "-q", "sq", "-p", "user.id=3", "--redis-url", url])
    assert out.exit_code == 0 and "5 task(s)" in out.output, out.output
    out = run(cli, ["task", "search", "-q", "sq", "-p", "user.id=3", "--dry-run", "--redis-url", url])
    assert out.exit_code == 0 and "5 task(s) match" in out.output
    out = run(cli, ["task", "search", "-q", "sq", "-p", "user.id=3", "--then", "delete", "--redis-url", url], input="n\n")
    assert out.exit_code == 2 and "nothing done" in out.output
    with Inspector(backend.sync) as insp:
        assert insp.search_count("sq", payload={"user.id": 3}) == 5  # refused: nothing lost
    out = run(cli, ["task", "search", "-q", "sq", "-p", "user.id=3", "-s", "pending", "--then", "archive",
                    "--redis-url", url], input="y\n")
    assert out.exit_code == 0 and "archive: 4 done" in out.output, out.output
    for bad in (["--state", "nosuch"], ["--header", "novalue"], ["--then", "explode"], ["--since", "soon"]):
        out = run(cli, ["task", "search", "-q", "sq", *bad, "--redis-url", url])
        assert out.exit_code == 2, (bad, out.output)
    out = run(cli, ["task", "search", "-q", "nosuch", "--redis-url", url])
    assert out.exit_code == 2 and "not found" in out.output


# -- the script and the Python test agree (fakeredis: fast; the real server in one run) ---------------

_leaf = st.one_of(st.none(), st.booleans(), st.integers(-300, 70000), st.sampled_from([1.5, -0.0, 2.0]),
                  st.text(alphabet="abé✓ 0", max_size=6), st.binary(max_size=3))
_payload = st.recursive(_leaf, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                      st.dictionaries(st.sampled_from("abc"), kids, max_size=3)),
                        max_leaves=8)


def _conditions(rnd: random.Random, payloads: list[Any]) -> dict[str, Any]:
    """Conditions drawn from what the payloads hold (so that some match)."""
    p = rnd.choice(payloads)
    path: list[str] = []
    while isinstance(p, (dict, list)) and p and rnd.random() < 0.8:
        if isinstance(p, dict):
            k = rnd.choice(sorted(p))
            path.append(k)
            p = p[k]
        else:
            i = rnd.randrange(len(p))
            path.append(str(i))
            p = p[i]
    out: dict[str, Any] = {}
    if path:
        out["payload"] = {".".join(path): p if rnd.random() < 0.7 else ...}
    if rnd.random() < 0.3:
        out["text"] = rnd.choice(["a", "é", "✓", "b0"])
    if rnd.random() < 0.3:
        out["state"] = rnd.choice(["pending", "scheduled"])
    if rnd.random() < 0.2:
        out["id_prefix"] = rnd.choice(["x", "x1", "x[", "y"])
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payloads=st.lists(_payload, min_size=1, max_size=12), seed=st.integers(0, 1000))
def test_the_script_agrees_with_the_python_test(payloads: list[Any], seed: int) -> None:
    import fakeredis

    r = fakeredis.FakeRedis()
    with Client(r) as c:
        for i, p in enumerate(payloads):
            c.enqueue("t", p, queue="pq", task_id=f"x{i}", process_in=60 if i % 3 == 0 else None)
    stored = r.hgetall(queue_keys("pq").tasks)
    rnd = random.Random(seed)
    with Inspector(r) as insp:
        for _ in range(6):
            cond = _conditions(rnd, payloads)
            search = S.make_search(**cond)
            want = sorted(k.decode() for k, v in stored.items()
                          if S.matches(search, k.decode(), TaskState.from_code(state_char(v).decode()), decode(message_of(v))))
            assert _ids(insp.search("pq", **cond)) == want, cond


def test_encrypted_payloads_are_searched_by_a_reader_with_the_keys(backend: Any) -> None:
    """docs/search.md: payload conditions on encrypted payloads (docs/encryption.md) are checked by
    a reader holding the key ring, on the decrypted payloads (the other conditions still in Redis);
    a reader without keys finds none by payload (a ciphertext holds nothing to match)."""
    import os

    from asynqpy import KeyRing

    ring = KeyRing({"k1": os.urandom(32)})
    with Client(backend.sync, encryption=ring) as c:
        for i in range(30):
            c.enqueue("pay" if i % 2 else "mail", {"user": {"id": i % 3}, "note": f"secret {i}"}, queue="eq",
                      task_id=f"e{i:02d}")
    assert b"secret" not in b"".join(backend.sync.hvals(queue_keys("eq").tasks))
    with Inspector(backend.sync, encryption=ring) as insp:
        assert _ids(insp.search("eq", payload={"user.id": 2}, type="pay")) == ["e05", "e11", "e17", "e23", "e29"]
        assert _ids(insp.search("eq", text="secret 1")) == ["e01"] + [f"e{i}" for i in range(10, 20)]
        assert len(list(insp.search("eq", payload={"user.id": 0}, limit=4))) == 4
        assert insp.search_count("eq", payload={"user.id": 1}) == 10
        assert [t.payload["note"] for t in insp.search("eq", payload={"note": "secret 7"})] == ["secret 7"]
        assert insp.search_act("eq", "archive", payload={"user.id": 2}).done == 10
    with Inspector(backend.sync) as plain:
        assert list(plain.search("eq", payload={"user.id": 2})) == [] and plain.search_count("eq", type="pay") == 15
