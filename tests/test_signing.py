"""Message security. HMAC signing: a worker with keys runs only tasks signed with one of them,
archives the others unrun ("bad signature") and keeps going; what it rewrites it signs again; keys
rotate. And no pickle (nor marshal, eval, exec) anywhere in the package."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import serving, until

from asynqpy import AsyncClient, Client, Inspector, InvalidArgumentError, ServeMux, Server, Task, TaskState
from asynqpy.core.model.codec import Message, decode, encode
from asynqpy.core.model.errors import MalformedMessageError, SignatureError
from asynqpy.core.security.signing import Signer, load_keys
from asynqpy.core.spine.broker import Broker
from asynqpy.core.spine.keys import queue_keys
from asynqpy.redisio.executor import SyncExecutor

OLD, NEW, OTHER = b"o" * 32, b"n" * 32, b"x" * 32
K = queue_keys("default")


def stored(backend: Any, id: str) -> bytes:
    """A task's stored message (state char and lease token removed)."""
    value: bytes = backend.sync.hget(K.tasks, id)
    return value[9:] if value[:1] == b"a" else value[1:]


# -- the format ---------------------------------------------------------------------------------


def test_seal_open_round_trip_and_what_breaks_it() -> None:
    s = Signer(NEW)
    data = encode(Message(type="t", payload={"a": 1}))
    sealed = s.seal("q", "id1", data)
    assert sealed.startswith(data) and len(sealed) == len(data) + 34 and sealed[len(data):len(data) + 2] == b"\xc4\x20"
    assert s.open("q", "id1", sealed) == data
    assert decode(sealed) == decode(data)  # a keyless reader ignores the tag
    bad = [
        ("q", "id1", data),  # not signed
        ("q", "id2", sealed),  # copied to another id
        ("other", "id1", sealed),  # or to another queue
        ("q", "id1", sealed[:5] + b"\x00" + sealed[6:]),  # message changed
        ("q", "id1", sealed[:-1] + bytes([sealed[-1] ^ 1])),  # tag changed
        ("q", "id1", b""),
    ]
    for queue, id, value in bad:
        with pytest.raises(SignatureError, match="bad signature"):
            s.open(queue, id, value)
    with pytest.raises(SignatureError, match="none of the signing keys"):
        Signer(OTHER).open("q", "id1", sealed)
    # the id is length-prefixed: moving bytes between the id and the message does not verify
    assert Signer(NEW).seal("q", "a", b"\x91\xa1b")[-32:] != Signer(NEW).seal("q", "a\x91", b"\xa1b")[-32:]


def test_rotation_signs_with_the_first_key_and_accepts_all() -> None:
    data = encode(Message(type="t"))
    old_sealed = Signer(OLD).seal("q", "i", data)
    both = Signer([NEW, OLD])
    assert both.open("q", "i", old_sealed) == data
    assert Signer(NEW).open("q", "i", both.seal("q", "i", data)) == data
    with pytest.raises(SignatureError):
        Signer(OLD).open("q", "i", both.seal("q", "i", data))


def test_trailing_garbage_is_still_malformed() -> None:
    data = encode(Message(type="t"))
    for extra in (b"\x00", b"\xc4\x20" + b"x" * 31, b"\xc4\x21" + b"x" * 33, b"\xc4\x20" + b"x" * 33):
        with pytest.raises(MalformedMessageError):
            decode(data + extra)


@pytest.mark.parametrize("key", ["a string key of 32 characters!!!", 123, None.__class__, b"short", [], [NEW, "str"],
                                 [b"short"], bytearray(b"s")])
def test_a_bad_signing_key_is_an_invalid_argument(key: Any) -> None:
    for make in (lambda: Client("redis://localhost:1/0", signing_key=key),
                 lambda: AsyncClient("redis://localhost:1/0", signing_key=key),
                 lambda: Server("redis://localhost:1/0", signing_key=key),
                 lambda: Signer(key)):
        with pytest.raises(InvalidArgumentError, match="signing"):
            make()


def test_accepted_key_forms() -> None:
    assert Signer(bytearray(NEW)).keys == (NEW,)
    assert Signer((NEW, OLD)).keys == (NEW, OLD)
    assert Signer(iter([NEW])).keys == (NEW,)


def test_load_keys(tmp_path: Path) -> None:
    f = tmp_path / "keys"
    f.write_bytes(b"# rotated 2026-11\n" + NEW + b"\r\n\n  " + OLD + b"  \n")
    assert load_keys(f) == [NEW, OLD]
    f.write_text("# nothing\n\n")
    with pytest.raises(InvalidArgumentError, match="holds no key"):
        load_keys(f)
    f.write_text("short\n")
    with pytest.raises(InvalidArgumentError, match="at least 16 bytes"):
        load_keys(f)
    with pytest.raises(InvalidArgumentError, match="cannot read signing key file"):
        load_keys(tmp_path / "missing")


# -- a worker with keys -------------------------------------------------------------------------


def _recording_mux(ran: list[Any], fail_once: set[Any] | None = None) -> ServeMux:
    mux = ServeMux()

    @mux.handle("t")
    async def t(task: Task) -> None:
        if fail_once is not None and task.payload in fail_once:
            fail_once.discard(task.payload)
            raise RuntimeError("first attempt fails")
        ran.append(task.payload)

    @mux.handle("keep")
    async def keep(task: Task) -> None:
        task.write_result({"ok": task.payload})
        ran.append(task.payload)

    return mux


def test_signed_tasks_run_and_rewrites_are_signed_again(backend: Any) -> None:
    client = Client(backend.sync, signing_key=OLD)
    ids = [client.enqueue("t", 1).id, client.enqueue("t", 2, retry_delay=0.05).id,
           client.enqueue("t", 3, process_in=0.05).id, client.enqueue("t", 4, unique=60).id]
    ids += client.enqueue_many([("t", 5), ("t", 6)]).ids
    ids.append(client.enqueue("keep", 7, retention=60).id)
    for id in ids:
        assert Signer(OLD).open("default", id, stored(backend, id))
    ran: list[Any] = []

    async def main() -> None:
        # rotation: the worker signs with NEW and still accepts what OLD signed
        async with serving(backend.new_async(), _recording_mux(ran, {2}), signing_key=[NEW, OLD]):
            await until(lambda: sorted(ran) == [1, 2, 3, 4, 5, 6, 7])

    asyncio.run(main())
    done = Inspector(backend.sync).task_info("default", ids[-1])
    assert done.state is TaskState.COMPLETED and done.result == {"ok": 7}
    assert Signer(NEW).open("default", ids[-1], stored(backend, ids[-1]))  # rewritten with the new key


def test_retry_rewrite_is_signed_with_the_first_key(backend: Any) -> None:
    client = Client(backend.sync, signing_key=OLD)
    id = client.enqueue("t", 1, retry_delay=60).id
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _recording_mux(ran, {1}), signing_key=[NEW, OLD]):
            await until(lambda: backend.sync.zcard(K.retry) == 1)

    asyncio.run(main())
    value = stored(backend, id)
    assert decode(Signer(NEW).open("default", id, value)).retried == 1
    with pytest.raises(SignatureError):
        Signer(OLD).open("default", id, value)


def test_unsigned_forged_or_moved_tasks_are_archived_unrun(backend: Any) -> None:
    good = Client(backend.sync, signing_key=NEW)
    unsigned = Client(backend.sync).enqueue("t", "unsigned").id
    forged = Client(backend.sync, signing_key=OTHER).enqueue("t", "forged").id
    signed = good.enqueue("t", "tampered").id
    value = backend.sync.hget(K.tasks, signed)
    backend.sync.hset(K.tasks, signed, value.replace(b"tampered", b"TAMPERED"))
    moved = good.enqueue("t", "moved", task_id="original").id
    backend.sync.hset(K.tasks, "copy", backend.sync.hget(K.tasks, moved))  # a replay under another id
    backend.sync.lpush(K.pending, "copy")
    backend.sync.hset(K.tasks, "junk", b"p\xc1garbage")
    backend.sync.lpush(K.pending, "junk")
    ran: list[Any] = []
    refused = [unsigned, forged, signed, "copy", "junk"]

    async def main() -> None:
        async with serving(backend.new_async(), _recording_mux(ran), signing_key=NEW):
            await until(lambda: backend.sync.zcard(K.archived) == 5 and ran == ["moved"])
            good.enqueue("t", "after")  # the worker keeps going
            await until(lambda: ran == ["moved", "after"])

    asyncio.run(main())
    insp = Inspector(backend.sync)
    for id in refused:
        info = insp.task_info("default", id)
        assert info.state is TaskState.ARCHIVED and info.retried == 0, id
        assert info.last_error.startswith("bad signature"), info.last_error
        with pytest.raises(SignatureError):  # archived unsigned: running it later is refused again
            Signer(NEW).open("default", id, stored(backend, id))
    assert insp.task_info("default", unsigned).payload == "unsigned"  # kept readable for inspection
    assert insp.task_info("default", unsigned).type == "t"
    assert insp.task_info("default", "junk").type == "(malformed)"


def test_recoverer_does_not_launder_an_unsigned_active_task(backend: Any) -> None:
    """A task found active with an expired lease is verified before the recoverer rewrites it:
    a forged one is archived unsigned, never retried into a validly signed task."""
    forged = Client(backend.sync).enqueue("t", "forged").id
    ok = Client(backend.sync, signing_key=NEW).enqueue("t", "ok").id
    ex = SyncExecutor(backend.sync)
    taken = ex.run(Broker().dequeue("default", 10, 1, "deadbeef"))  # a "crashed worker", 1 ms lease
    assert sorted(id for id, _ in taken.tasks) == sorted([forged, ok])
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _recording_mux(ran), signing_key=NEW):
            await until(lambda: ran == ["ok"] and backend.sync.zcard(K.archived) == 1)

    asyncio.run(main())
    info = Inspector(backend.sync).task_info("default", forged)
    assert info.state is TaskState.ARCHIVED and info.last_error.startswith("bad signature")
    with pytest.raises(SignatureError):
        Signer(NEW).open("default", forged, stored(backend, forged))


def test_a_keyless_worker_runs_signed_tasks(backend: Any) -> None:
    Client(backend.sync, signing_key=NEW).enqueue_many([("t", 1), ("t", 2)])
    ran: list[Any] = []

    async def main() -> None:
        async with serving(backend.new_async(), _recording_mux(ran)):
            await until(lambda: sorted(ran) == [1, 2])

    asyncio.run(main())


def test_async_client_signs(backend: Any) -> None:
    async def main() -> list[str]:
        client = AsyncClient(backend.new_async(), signing_key=NEW)
        one = await client.enqueue("t", 1)
        many = await client.enqueue_many([("t", 2), ("t", 3, {"process_in": 60})])
        return [one.id, *many.ids]

    for id in asyncio.run(main()):
        assert Signer(NEW).open("default", id, stored(backend, id))


# -- the CLI ------------------------------------------------------------------------------------


def _cli(*args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from asynqpy.cli.main import main

    res = CliRunner(env=env).invoke(main, list(args))
    return res.exit_code, res.stdout, res.stderr


@pytest.mark.real
def test_cli_signing_key_file(redis_url: str, tmp_path: Path) -> None:
    key_file = tmp_path / "key"
    key_file.write_bytes(NEW + b"\n" + OLD + b"\n")
    code, out, err = _cli("enqueue", "t", "--signing-key-file", str(key_file), "--redis-url", redis_url)
    assert code == 0, err
    code, out, err = _cli("enqueue", "t", "--redis-url", redis_url, env={"ASYNQPY_SIGNING_KEY_FILE": str(key_file)})
    assert code == 0, err
    r = redis.Redis.from_url(redis_url)
    assert r.hlen(K.tasks) == 2
    for id in r.hkeys(K.tasks):  # both signed with the file's first key
        assert Signer(NEW).open("default", id.decode(), r.hget(K.tasks, id)[1:])
    short = tmp_path / "short"
    short.write_text("tooshort\n")
    cases = [
        (["enqueue", "t", "--signing-key-file", str(tmp_path / "missing")], "cannot read signing key file"),
        (["worker", "workers:mux", "--signing-key-file", str(tmp_path / "missing")], "cannot read signing key file"),
        (["enqueue", "t", "--signing-key-file", str(short)], "at least 16 bytes"),
        (["worker", "workers:mux", "--processes", "2", "--signing-key-file", str(short)], "at least 16 bytes"),
    ]
    for args, message in cases:
        code, _, err = _cli(*args, "--redis-url", redis_url)
        assert code == 2 and err.startswith("asynqpy: error:") and message in err and err.count("\n") == 1, err
    code, _, err = _cli("enqueue", "t", "--signing-key", "secret", "--redis-url", redis_url)
    assert code == 2 and "No such option" in err  # a key is never taken on the command line
    assert r.hlen(K.tasks) == 2


# -- no pickle ----------------------------------------------------------------------------------

FORBIDDEN = re.compile(
    r"^\s*(?:import|from)\s[^\n]*\b(?:pickle|cPickle|_pickle|marshal|shelve|dill|cloudpickle|jsonpickle)\b"
    r"|(?<![\w.])(?:eval|exec|__import__)\s*\(|\byaml\.(?:unsafe_)?load\(",
    re.MULTILINE,
)


def test_no_pickle_marshal_or_eval_in_the_installed_package() -> None:
    import asynqpy
    import asynqpy.cli

    files = {f for pkg in (asynqpy, asynqpy.cli) for f in Path(pkg.__file__ or "").parent.rglob("*.py")}
    assert len(files) > 20
    hits = [(f.name, m.group(0)) for f in sorted(files) for m in FORBIDDEN.finditer(f.read_text())]
    assert hits == []
    for bad in ("import pickle", "from os import path, marshal", "  import cloudpickle as cp", "eval(data)",
                "x = exec(code)", "yaml.load(s)", "__import__(name)"):
        assert FORBIDDEN.search(bad), bad
    for fine in ('("EVAL", src)', "_eval(call)", "self.evaluate(x)", "# never pickle"):
        assert not FORBIDDEN.search(fine), fine


def test_msgpack_extension_types_stay_data() -> None:
    import msgpack

    ext = msgpack.ExtType(1, b"\x80\x04os.system")  # what a pickle-minded attacker might store
    msg = decode(msgpack.packb(["t", ext]))
    assert msg.payload == ext and isinstance(msg.payload, msgpack.ExtType)


@pytest.mark.parametrize("key", [b"k" * 16, b"k" * 32, b"\x00" * 64, b"\xff" * 65, bytes(range(256)) * 2])
def test_tag_is_standard_hmac_sha256(key: bytes) -> None:
    import hmac

    data = encode(Message(type="t", payload=b"\x00\x01"))
    expected = hmac.digest(key, b"asynqpy1:7:default,4:id\xc3\xa9," + data, "sha256")
    assert Signer(key).seal("default", "idé", data)[-32:] == expected


# -- the trust gate: nothing re-signs a message it has not verified ------------------------------


def test_trust_gate_verifies_before_it_reseals() -> None:
    from asynqpy.core.security.signing import Refused, Verified, trust_gate

    s = Signer(NEW)
    data = encode(Message(type="t", payload=1))
    ok = trust_gate(s, "q", "i", s.seal("q", "i", data))
    assert isinstance(ok, Verified) and ok.msg.payload == 1
    assert s.open("q", "i", ok.store(ok.msg.with_(payload=2))) == encode(Message(type="t", payload=2))
    for value in (data, Signer(OTHER).seal("q", "i", data), s.seal("q", "other", data), b"\xc1junk"):
        bad = trust_gate(s, "q", "i", value)
        assert isinstance(bad, Refused), value
        out = bad.store(bad.msg.with_(last_error="cancelled"))
        with pytest.raises(SignatureError):
            s.open("q", "i", out)  # never signed
        assert decode(out).last_error == f"{bad.reason}; cancelled" and bad.reason.startswith("bad signature")
    assert isinstance(trust_gate(None, "q", "i", data), Verified)  # a keyless reader checks the encoding only
    junk = trust_gate(None, "q", "i", b"\xc1junk")
    assert isinstance(junk, Refused) and isinstance(junk.error, MalformedMessageError)


def _unverified(backend: Any, id: str) -> bool:
    """The task's stored message does not verify with NEW."""
    try:
        Signer(NEW).open("default", id, stored(backend, id))
    except SignatureError:
        return True
    return False


def test_a_failed_parent_cancels_its_children_without_signing_unverified_ones(backend: Any) -> None:
    """The propagator archives the waiting children of a failed parent: a child that does not
    verify (a keyless producer's, a forged one) is archived unsigned ("bad signature"), so running
    it from the archive is refused again; a signed child is archived signed (it may be re-run)."""
    keyless, forger, good = Client(backend.sync), Client(backend.sync, signing_key=OTHER), \
        Client(backend.sync, signing_key=NEW)
    keyless.enqueue("t", "parent", task_id="P")  # refused by the keyed worker: a failed parent
    keyless.enqueue("t", "unsigned child", task_id="C1", after=[("default", "P")])
    forger.enqueue("t", "forged child", task_id="C2", after=[("default", "P")])
    good.enqueue("t", "signed child", task_id="C3", after=[("default", "P")])
    ran: list[Any] = []
    insp = Inspector(backend.sync)

    async def main() -> None:
        async with serving(backend.new_async(), _recording_mux(ran), signing_key=NEW):
            await until(lambda: backend.sync.zcard(K.archived) == 4)
            for id in ("C1", "C2", "C3"):  # an operator (or an attacker with Redis access) runs them again
                insp.run_task("default", id)
            await until(lambda: backend.sync.zcard(K.archived) == 3 and ran == ["signed child"])

    asyncio.run(main())
    assert ran == ["signed child"]
    for id in ("C1", "C2"):
        info = insp.task_info("default", id)
        assert info.state is TaskState.ARCHIVED and info.last_error.startswith("bad signature"), info.last_error
        assert _unverified(backend, id)


def test_the_inspector_never_re_signs_an_unverified_task(backend: Any) -> None:
    """A keyed Inspector's edit and set_workers refuse (SignatureError, nothing written) a task
    that does not verify; its cancel archives such a task unsigned. Verified tasks are re-signed."""
    keyless, good = Client(backend.sync), Client(backend.sync, signing_key=NEW)
    insp = Inspector(backend.sync, signing_key=NEW)
    for id, client in (("u", keyless), ("s", good)):
        client.enqueue("t", id, task_id=f"{id}-sched", process_in=3600)
        client.enqueue("t", id, task_id=f"{id}-targeted", workers=["w1"])
    backend.sync.hset(K.tasks, "f-sched", backend.sync.hget(K.tasks, "s-sched")[:1]
                      + Signer(OTHER).seal("default", "f-sched", encode(Message(type="t", payload="forged"))))
    backend.sync.zadd(K.scheduled, {"f-sched": 1e15})
    for id in ("u-sched", "f-sched"):
        before = backend.sync.hget(K.tasks, id)
        with pytest.raises(SignatureError, match="not edited"):
            insp.edit_task("default", id, payload="changed", max_retry=3)
        assert backend.sync.hget(K.tasks, id) == before and _unverified(backend, id)
    with pytest.raises(SignatureError, match="not changed"):
        insp.set_workers("default", "u-targeted", ["w2"])
    assert _unverified(backend, "u-targeted")
    assert insp.edit_task("default", "s-sched", payload="changed").payload == "changed"
    assert not _unverified(backend, "s-sched")
    insp.set_workers("default", "s-targeted", ["w2"])
    assert not _unverified(backend, "s-targeted")
    # cancel: two running tasks (leased by hand), one unsigned and one signed
    keyless.enqueue("t", "unsigned", task_id="u-active", queue="run")
    good.enqueue("t", "signed", task_id="s-active", queue="run")
    taken = SyncExecutor(backend.sync).run(Broker().dequeue("run", 10, 60_000, "deadbeef"))
    assert sorted(id for id, _ in taken.tasks) == ["s-active", "u-active"]
    for id in ("u-active", "s-active"):
        info = insp.cancel(id, "run")
        assert info.state is TaskState.ARCHIVED
    value = backend.sync.hget(queue_keys("run").tasks, "u-active")[1:]
    with pytest.raises(SignatureError):
        Signer(NEW).open("run", "u-active", value)
    assert decode(value).last_error.startswith("bad signature")
    assert decode(Signer(NEW).open("run", "s-active", backend.sync.hget(queue_keys("run").tasks, "s-active")[1:])
                  ).last_error == "cancelled by an operator"


def test_the_aggregator_archives_unverified_grouped_tasks(backend: Any) -> None:
    """A grouped task that does not verify never joins a (signed) aggregate: it is archived as it
    is, and the group's signed tasks are aggregated."""
    Client(backend.sync).enqueue("t", "unsigned", group="g", task_id="u")
    Client(backend.sync, signing_key=NEW).enqueue("t", "signed", group="g", task_id="s")
    ran: list[Any] = []

    def aggregate(group: str, tasks: list[Task]) -> tuple[str, Any]:
        return "t", sorted(t.payload for t in tasks)

    async def main() -> None:
        async with serving(backend.new_async(), _recording_mux(ran), signing_key=NEW, group_aggregator=aggregate,
                           group_grace_period=0.1):
            await until(lambda: ran == [["signed"]])

    asyncio.run(main())
    assert Inspector(backend.sync).task_info("default", "u").state is TaskState.ARCHIVED
    assert _unverified(backend, "u")
