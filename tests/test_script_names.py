"""Every Lua script's header names its keys and arguments, and the broker calls each script by
those names (issue 30 item 1).

- Statically: every ``script_call("<script>", parse, ...)`` in the package gives exactly the names
  the script's header declares (``**_q(q, "a b")`` and the key groups' ``**pending_keys(q)`` ...
  ``**exit_keys(q)`` expanded), and every script in lua/ is called so; no ``Call`` names a script
  with positional keys. Each key group (core/spine/scripts.py KEY_GROUPS) is declared once, filled by
  one broker function, and named by every header that uses all its keys.
- Dynamically: each broker method that runs a script is built with dummy inputs (a wrong name
  would raise TypeError there), covering every script.
- A header that breaks the grammar (a group spelled out key by key included), or disagrees with
  its file name or body (KEYS / ARGV / KV / AV read in it), fails at load time; a missing or extra
  name, or a stride tail that is not whole items, fails when the call is built.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from helpers import walked

from asynqpy.core.deploy import holds
from asynqpy.core.durable import events as durable_events
from asynqpy.core.inspector import search
from asynqpy.core.limits import plans as limits
from asynqpy.core.model.clock import Clock
from asynqpy.core.model.codec import Message, encode
from asynqpy.core.model.task import TaskState
from asynqpy.core.processes import model as P
from asynqpy.core.spine.broker import (
    GROUP_KEYS,
    Broker,
    Done,
    event_keys,
    exit_keys,
    pending_keys,
    script_call,
    serial_keys,
)
from asynqpy.core.spine.keys import queue_keys
from asynqpy.core.spine.scripts import KEY_GROUPS, ScriptHeaderError, group_keys, load_dir, load_scripts
from asynqpy.core.tenants import plans as tenants

ROOT = Path(__file__).resolve().parent.parent
HELPERS = {"exit_keys": exit_keys, "serial_keys": serial_keys, "pending_keys": pending_keys, "event_keys": event_keys}
"""The broker's shared key dicts, expanded with ``**`` into script calls."""


def _names_given(call: ast.Call, where: str) -> set[str]:
    """The names a ``script_call`` node passes (its ``**`` helpers expanded)."""
    names: set[str] = set()
    q = queue_keys("q")
    for kw in call.keywords:
        if kw.arg is not None:
            names.add(kw.arg)
            continue
        v = kw.value
        assert isinstance(v, ast.Call) and isinstance(v.func, ast.Name), f"{where}: ** of {ast.unparse(v)}"
        if v.func.id == "_q":
            lit = v.args[1]
            if isinstance(lit, ast.Constant) and isinstance(lit.value, str):
                words = lit.value.split()
            else:  # implicitly concatenated pieces are one Constant; anything else is not allowed
                raise AssertionError(f"{where}: _q takes a literal string of names, got {ast.unparse(lit)}")
            for w in words:
                assert isinstance(getattr(q, w, None), str), f"{where}: {w!r} is not a QueueKeys key"
            names |= set(words)
        elif v.func.id in HELPERS:
            names |= set(HELPERS[v.func.id](q))
        else:
            raise AssertionError(f"{where}: ** of an unknown helper {v.func.id}")
    return names


def _script_calls() -> list[tuple[str, str, set[str]]]:
    """(where, script, names given) of every script_call in the package."""
    out = []
    for path in sorted((ROOT / "asynqpy").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        for node in walked(path):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "script_call":
                where = f"{rel}:{node.lineno}"
                script = node.args[0]
                assert isinstance(script, ast.Constant) and isinstance(script.value, str), where
                assert len(node.args) == 2, f"{where}: script_call takes the script, the parser, then names only"
                out.append((where, script.value, _names_given(node, where)))
    return out


def test_every_script_call_gives_exactly_the_names_its_header_declares() -> None:
    scripts = load_scripts()
    calls = _script_calls()
    wrong = [f"{where}: {script}: missing {sorted(scripts[script].names - given)}, "
             f"extra {sorted(given - scripts[script].names)}"
             for where, script, given in calls if script in scripts and given != scripts[script].names]
    unknown = [f"{where}: no script {script!r}" for where, script, _ in calls if script not in scripts]
    assert not wrong and not unknown, "\n".join(wrong + unknown)
    assert {script for _, script, _ in calls} == set(scripts), "every script in lua/ is called by name"


def test_no_call_names_a_script_with_positional_keys() -> None:
    """A ``Call`` naming a script by a literal, or given a literal tuple of keys, would bypass the
    header's names (re-wrapping a built call, ``Call(p, call.script, call.keys, call.args)``, is fine)."""
    found = []
    for path in sorted((ROOT / "asynqpy").rglob("*.py")):
        for node in walked(path):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Call"):
                continue
            given = dict(zip(("parse", "script", "keys", "args"), node.args))
            given.update({k.arg: k.value for k in node.keywords if k.arg})
            literal_script = isinstance(given.get("script"), ast.Constant)
            literal_keys = isinstance(given.get("keys"), (ast.Tuple, ast.List))
            if literal_script or literal_keys:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {ast.unparse(node)[:100]}")
    assert found == [], "build script calls with script_call(name, parse, **names):\n" + "\n".join(found)


M = Message("t", payload=[1], key="k1", reply_to="inb", retention_ms=5000, unique=True, retried=2,
            last_error="boom\nx", result=3, workers=["w1", "w2"], runs=2, group="g1")
M0 = Message("t", payload=[2])
S = b"p" + encode(M)
ITEMS = [("i1", "dg", -1, S), ("i2", "", 3, b"s" + encode(M0))]

CALLS: list[tuple[str, Callable[[Broker], Any]]] = [
    ("enqueue_keyed", lambda b: b.enqueue_keyed("q", "i", M)),
    ("enqueue_keyed_many", lambda b: b.enqueue_keyed_many("q", [("i", M, None), ("j", M, None)], True)),
    ("key_gate", lambda b: b.key_gate("q", [("i", "k"), ("j", "k2")])),
    ("key_free", lambda b: b.key_free("q", "k", "h")),
    ("proc_start", lambda b: b.proc_start("q", "p1", "i", Message(P.TYPE_PREFIX + "x", key="proc:p1"))),
    ("proc_read", lambda b: b.proc_read("q", "p1", 3, 7)),
    ("proc_step", lambda b: b.proc_step("q", [("i", "tok", "p1", P.parse_record("p1", P.new_record("t")), 1, b"", "proc:p1")])),
    ("proc_commit", lambda b: b.proc_commit("q", "i", "tok", M, P.Plan("p1", "call", P.new_record("t"), state=b"s",
                                              events=[b"e"], timer="s", timer_at=5, remove=True, response=4, keep=9),
                                              ("ti", M0), b"out")),
    ("rules_take", lambda b: b.rules_take("in", "tk", 5)),
    ("rules_push", lambda b: b.rules_push("qq", "task", "g")),
    ("rules_redrive", lambda b: b.rules_redrive("d", "in", 5)),
    ("rules_dead", lambda b: b.rules_dead("tk", "d", b"ev", "rec")),
    ("enqueue", lambda b: b.enqueue("q", "i", M, unique_ttl=10, mode="t")),
    ("enqueue_lone", lambda b: b.enqueue_lone("q")("i", encode(M))),
    ("enqueue_many", lambda b: b.enqueue_many("q", [("a", b"x"), ("b", b"y")], True)),
    ("register_child", lambda b: b.register_child("q", "par", "cq", "ch")),
    ("enqueue_after", lambda b: b.enqueue_after("q", "i", M, "c", [(b"r1", b""), (b"r2", b"c")], delay_ms=5,
                                                cancelled=M0)),
    ("resolve", lambda b: b.resolve("q", "ch", b"ref", b"c")),
    ("flow_read", lambda b: b.deps("q", "ch")),
    ("fail_waiting", lambda b: b.fail_waiting("q", "i", S, b"new", "err")),
    ("group_add", lambda b: b.group_add("q", "i", M, unique_ttl=3)),
    ("schedule", lambda b: b.schedule("q", "i", M, 500, unique_ttl=3, mode="d")),
    ("enqueue_target", lambda b: b.enqueue_target("q", "i", M, unique_ttl=3)),
    ("run_end", lambda b: b.run_end("q", "i", M, "s", run="i|w1", token="tok", failed=M0, result=5)),
    ("set_workers", lambda b: b.set_workers("q", "i", S, M, M.with_(workers=["w3"]), b"st")),
    ("dequeue", lambda b: b.dequeue("q", 4, 1000, "tok", "w1")),
    ("done", lambda b: b.done_many("q", [Done("a", "t1", M, b"o"), Done("b", "t2", M0), Done("c", "t3", M, b"o2")])),
    ("done_dequeue", lambda b: b.done_dequeue("q", [Done("a", "t1", M, b"o"), Done("b", "t2", M0)], 4, 1000, "tok", "w1",
                                              pages=20)),
    ("complete", lambda b: b.complete("q", "i", "tok", M, b"o")),
    ("retry", lambda b: b.retry("q", "i", b"tok", M, 12.5, recover=True)),
    ("archive", lambda b: b.archive("q", "i", "tok", Message(P.TYPE_PREFIX + "x", key="proc:p1", reply_to="r",
                                                                  unique=True), 10, 20, outcome=b"o")),
    ("progress", lambda b: b.progress("q", "i", "tok", M, b"v", b"p")),
    ("watch", lambda b: b.watch("q", "i", "inb")),
    ("proc_watch", lambda b: b.proc_watch("q", "p1", "inb")),
    ("reply", lambda b: b.reply("q", "inb", b"o")),
    ("rewake", lambda b: b.rewake("q")),
    ("durable_emit", lambda b: durable_events.emit_call("q", durable_events.emit_items("i", "durable.f", "r", [b"\x81\xa1k\xa4done"]))),
    ("wake_take", lambda b: b.wake_take([queue_keys("q").wake, queue_keys("r").wake], 5)),
    ("snooze", lambda b: b.snooze("q", "i", "tok", 50)),
    ("requeue", lambda b: b.requeue("q", "i", "tok")),
    ("extend", lambda b: b.extend("q", 100, [("a", "t"), ("b", "t2", "m")])),
    ("forward", lambda b: b.forward("q", 7)),
    ("expired", lambda b: b.expired("q", 7)),
    ("drop", lambda b: b.drop("q", "i")),
    ("reconcile", lambda b: b.reconcile("q", "0", 5)),
    ("forget_gone", lambda b: b.forget_gone("q", "children", "0", 5)),
    ("tenant_fix", lambda b: b.tenant_fix("q", "ring", "0", 5)),
    ("sweep", lambda b: b.sweep_save("q", "own", 1000, 5000, {"tasks": "7"})),
    ("expire", lambda b: b.expire("q", 7)),
    ("trim", lambda b: b.trim("q", 5, 6)),
    ("pause", lambda b: b.pause("q")),
    ("unpause", lambda b: b.unpause("q")),
    ("stats", lambda b: b.stats("q")),
    ("page", lambda b: b.page("q", TaskState.ARCHIVED, 0, 9)),
    ("cron_fire", lambda b: b.cron_fire("q", "e", b"def", 123, "cron:e:123", M0, 5)),
    ("cron_remove", lambda b: b.cron_remove("q", "e")),
    ("cron_pause", lambda b: b.cron_pause("q", "e", True)),
    ("delete_tasks", lambda b: b.delete_tasks("q", TaskState.PENDING, ITEMS, 100)),
    ("archive_tasks", lambda b: b.archive_tasks("q", TaskState.SCHEDULED, ITEMS, 100)),
    ("edit_task", lambda b: b.edit_task("q", TaskState.RETRY, "i", S, b"new", 5, None, 10, -1, keyed=True)),
    ("rewrap", lambda b: b.rewrap("q", "i", S, b"new")),
    ("aggregate", lambda b: b.aggregate("q", "g1", [("a", S), ("b", b"g" + encode(M0))], "new", M0)),
    ("ungroup", lambda b: b.ungroup("q", "i", S, "archive", "g1")),
    ("run_tasks", lambda b: b.run_tasks("q", TaskState.ARCHIVED, ["a", "b"])),
    ("cancel", lambda b: b.cancel("q", "i", "tok", b"new", "dg", b"notice", Message(P.TYPE_PREFIX + "x", key="kk"))),
    ("drop_queue", lambda b: b.drop_queue("q", True)),
    ("limit_acquire", lambda b: limits.acquire_call("lim", 2.5, 3, 4, "h", 100)),
    ("set_tenant", lambda b: tenants.set_call("q", "acme", weight=3, paused=False)),
    ("tenants", lambda b: tenants.page_call("q", "acme", 10)),
    ("search", lambda b: search.search_call("q", search.make_search(payload={"a.b": 1}, header={"h": "v"}), 0, 100)),
    ("hold", lambda b: holds.hold_call("q", "unblock", "t", 3)),
]


def test_every_broker_script_call_builds_and_covers_every_script() -> None:
    b = Broker(Clock())
    for name, build in CALLS:
        call = build(b)
        s = load_scripts()[name]
        assert call.script == name
        assert len(call.keys) >= s.numkeys and all(isinstance(k, str) for k in call.keys), name
        assert len(call.args) >= len(s.args), name
        assert all(k.startswith("asynqpy:{") or name.startswith("rules_") or name == "limit_acquire"
                   for k in call.keys), name
    assert {name for name, _ in CALLS} == set(load_scripts())


def test_names_bind_in_header_order_and_tails_follow() -> None:
    q = queue_keys("q")
    call = script_call("extend", lambda r: r, tasks=q.tasks, lease=q.lease, runs=q.runs, progress=q.progress,
                       wake=q.wake, lease_ms=100, now="", held=["a", "t", "", "b", "u", "r"])
    assert call.keys == (q.tasks, q.lease, q.runs, q.progress, q.wake)
    assert call.args == (100, "", "a", "t", "", "b", "u", "r")
    call = Broker(Clock()).archive("q", "i", "tok", Message("t"), 10, 20)
    assert call.keys[:4] == (q.tasks, q.lease, q.archived, q.lock(""))
    assert call.keys[-2:] == (q.proc, q.procs)
    exit_at = call.keys.index(q.events)  # KEY @exit: its keys in place, in the group's order
    assert call.keys[exit_at:exit_at + len(group_keys("exit"))] == tuple(exit_keys(q).values())
    assert len(call.keys) == load_scripts()["archive"].numkeys


def test_a_missing_or_extra_name_fails_when_the_call_is_built() -> None:
    q = queue_keys("q")
    good: dict[str, Any] = dict(tasks=q.tasks, watch=q.watch, id=b"i", inbox="")
    script_call("watch", int, **good)
    with pytest.raises(TypeError, match=r"'watch'.*missing \['inbox'\]"):
        script_call("watch", int, **{k: v for k, v in good.items() if k != "inbox"})
    with pytest.raises(TypeError, match=r"'watch'.*unexpected \['token'\]"):
        script_call("watch", int, **good, token="t")
    with pytest.raises(TypeError, match="variadic tail"):
        script_call("run_tasks", int, tasks=q.tasks, container=q.archived, wake=q.wake, events=q.events, conf=q.conf,
                    **pending_keys(q),
                    state="x", ids="abc")


GOOD = """--[[ probe: a test script
KEY tasks          tasks hash
KEY lease          lease zset
{extra_keys}ARG id
ARG now            '' = Redis time
{extra_args}Returns 1.
]]
return {{K.tasks, K.lease, A.id, A.now{body}}}
"""


@pytest.mark.parametrize("filename, extra_keys, extra_args, body, error", [
    ("probe.lua", "", "", "", None),
    ("probe.lua", "KEY more...  a tail\n", "ARG items...  a tail\n", ", K.more[2], A.items[9], K.more.n, A.items.n", None),
    ("probe.lua", "", "ARG items... {id token}  a stride\n", ", A.items[1].token, A.items.n", None),
    ("probe.lua", "KEY more... {*}  the fixed keys again\n", "", ", K.more[1].lease", None),
    ("probe.lua", "", "ARG items... {id id}  a member twice\n", "", "the members of a stride are distinct"),
    ("probe.lua", "", "ARG items... {id n}  n is the count\n", "", "the members of a stride are distinct"),
    ("probe.lua", "", "ARG item {id token}  no tail\n", "", "only a variadic tail has members"),
    ("probe.lua", "KEY @pending\n", "", ", K.prio, K.ta", None),
    ("probe.lua", "KEY @nosuch\n", "", "", "a group is a KEY among"),
    ("probe.lua", "", "ARG @pending\n", "", "a group is a KEY among"),
    ("probe.lua", "KEY @pending\nKEY prio  again\n", "", "", "unique across keys and arguments"),
    ("probe.lua", "KEY pending  p\nKEY prio  p\nKEY tq  t\nKEY tr  t\nKEY tn  t\nKEY ta  t\n", "", "",
     "every key of the group @pending one by one"),
    ("probe.lua", "KEY @events\nKEY children  c\nKEY outbox  o\nKEY @serial\nKEY blobs  b\n", "", "",
     "the group @exit one by one"),
    ("probe.lua", "KEY @exit\n", "", ", K.ta, K.conf", None),
    ("probe.lua", "KEY @exit\n", "", ", G.pending[3], G.exit[1]", None),
    ("probe.lua", "", "", ", G.pending", "uses G.pending, which is no key group its header declares"),
    ("probe.lua", "KEY @pending\n", "", ", G.pendings", "uses G.pendings, which is no key group"),
    ("probe-2.lua", "", "", "", "is not named <verb>.lua"),
    ("probe.lua", "KEYS[3] more      the old grammar\n", "", "", "not a declaration"),
    ("probe.lua", "KEY 2j          not a name\n", "", "", "not a declaration"),
    ("probe.lua", "", "ARG lease  a key's name again\n", "", "unique across keys and arguments"),
    ("probe.lua", "", "ARG from  a Python keyword\n", "", "not a Python or Lua keyword"),
    ("probe.lua", "", "ARG repeat  a Lua keyword\n", "", "not a Python or Lua keyword"),
    ("probe.lua", "", "ARG in one space before its description\n", "", "not a declaration"),
    ("probe.lua", "", "", ", KEYS[3]", "uses KEYS itself"),
    ("probe.lua", "", "", ", ARGV[1]", "uses ARGV itself"),
    ("probe.lua", "", "", ", #ARGV", "uses ARGV itself"),
    ("probe.lua", "", "", ", K.tsks", "uses K.tsks, which its header does not name"),
    ("probe.lua", "", "", ", A.tasks", "uses A.tasks, which its header does not name"),
    ("probe.lua", "KEY more...  a tail\n", "", ", KV[3]", "uses KV itself"),
    ("probe.lua", "", "ARG items...  a tail\n", ", #AV", "uses AV itself"),
    ("probe.lua", "", "", ", K.more[1]", "uses K.more, which its header does not name"),
    ("probe.lua", "", "ARG items...  a tail\nARG late  after the tail\n", "", "follows the variadic tail"),
    ("probe.lua", "", "", ", F.tenant", None),
    ("probe.lua", "", "", ", F.tenants", "uses F.tenants, which is no message field"),
])
def test_a_header_that_does_not_match_fails_at_load_time(tmp_path: Path, filename: str, extra_keys: str,
                                                         extra_args: str, body: str, error: str | None) -> None:
    (tmp_path / "includes").mkdir()
    (tmp_path / filename).write_text(GOOD.format(extra_keys=extra_keys, extra_args=extra_args, body=body))
    if error is None:
        s = load_dir(tmp_path)["probe"]
        assert s.keys[:2] == ("tasks", "lease") and s.args[:2] == ("id", "now")
        return
    with pytest.raises(ScriptHeaderError, match=error):
        load_dir(tmp_path)


def test_the_prologue_binds_each_name_to_its_position(tmp_path: Path) -> None:
    """The loader's prologue gives the body K.<key> and A.<arg> in the header's order, a group's
    keys in place, and a tail as a view (``K.more[i]``, ``.n``; a stride's ``A.items[i].member``;
    ``{*}``: item 0 is K itself): run on a server, the probe returns its inputs by name."""
    import fakeredis

    (tmp_path / "includes").mkdir()
    body = (", K.prio, G.pending[6], K.more[1], K.more.n, A.items[2].b, A.items[1].a, A.items.n, "
            "#{A.items.all()}")
    (tmp_path / "probe.lua").write_text(GOOD.format(extra_keys="KEY @pending\nKEY more...  a tail\n",
                                                    extra_args="ARG items... {a b}  a stride\n", body=body))
    (tmp_path / "again.lua").write_text(GOOD.replace("probe:", "again:").format(
        extra_keys="KEY more... {*}  the keys of more queues\n", extra_args="",
        body=", K.more[0].lease, K.more[1].tasks, K.more[2].lease, K.more.n"))
    scripts = load_dir(tmp_path)
    s = scripts["probe"]
    assert s.keys == ("tasks", "lease", *group_keys("pending")) and s.args_stride == ("a", "b")
    pk = {k: k[:2] for k in group_keys("pending")}
    keys, args = bind_named(s.name, tmp_path, tasks="t", lease="l", **pk, more=["m"], id="i", now="n",
                            items=["x", "y", "z", "w"])
    r = fakeredis.FakeStrictRedis()
    assert r.eval(s.source, len(keys), *keys, *args) == [b"t", b"l", b"i", b"n", b"pr", b"ta", b"m", 1, b"w", b"x",
                                                         2, 4]
    a = scripts["again"]
    keys, args = bind_named(a.name, tmp_path, tasks="t", lease="l", more=["t1", "l1", "t2", "l2"], id="i", now="n")
    assert r.eval(a.source, len(keys), *keys, *args) == [b"t", b"l", b"i", b"n", b"l", b"t1", b"l2", 2]


def test_no_body_spells_out_the_pending_group() -> None:
    """A script passes its pending keys to includes/priority as ``G.pending`` (the prologue builds
    it from KEY_GROUPS), so a key added to the group reaches every such call."""
    by_hand = re.compile(r"\{\s*K\.pending\s*,\s*K\.prio\b")
    found = [p.name for p in sorted((ROOT / "lua").rglob("*.lua"))
             if by_hand.search(p.read_text().split("]]", 1)[-1])]
    assert found == [], f"use G.pending: {found}"


def test_a_stride_tail_takes_whole_items() -> None:
    q = queue_keys("q")
    with pytest.raises(TypeError, match="a tail of items of 3, got 4 values"):
        script_call("extend", lambda r: r, tasks=q.tasks, lease=q.lease, runs=q.runs, progress=q.progress,
                    wake=q.wake, lease_ms=100, now="", held=["a", "t", "", "b"])


def test_each_key_group_is_declared_once_and_filled_by_one_broker_function() -> None:
    """core/spine/scripts.py KEY_GROUPS is the one declaration of a group; the broker fills each with one
    function (GROUP_KEYS), giving exactly the group's keys; a script whose header names a group's
    keys names the group (the loader refuses a header spelling every key of one out)."""
    q = queue_keys("q")
    assert set(GROUP_KEYS) == set(KEY_GROUPS)
    for g, fill in GROUP_KEYS.items():
        assert tuple(fill(q)) == group_keys(g)
        assert all(isinstance(v, str) and v.startswith(q.base) for v in fill(q).values())
    text = {p.stem: p.read_text().split("]]", 1)[0] for p in (ROOT / "lua").glob("*.lua")}
    using = {g: sorted(n for n, h in text.items() if f"KEY @{g}" in h) for g in KEY_GROUPS}
    assert len(using["pending"]) >= 10 and len(using["exit"]) >= 5, using  # (the groups are in use)
    for name, script in load_scripts().items():
        for g in KEY_GROUPS:
            assert not set(group_keys(g)) <= set(script.keys) or any(
                f"KEY @{h}" in text[name] for h in KEY_GROUPS if set(group_keys(g)) <= set(group_keys(h))), name


def bind_named(name: str, root: Path, **named: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    """KEYS, ARGV of a call of a script of ``root`` (bind's work, for a directory of one's own)."""
    s = load_dir(root)[name]
    keys = tuple(named[k] for k in s.keys) + tuple(named[s.keys_tail] if s.keys_tail else ())
    args = tuple(named[a] for a in s.args) + tuple(named[s.args_tail] if s.args_tail else ())
    return keys, args


def test_no_script_body_indexes_keys_or_argv() -> None:
    """Script bodies and includes read their inputs by name (the loader's prologue, core/spine/scripts.py):
    no ``KEYS[`` / ``ARGV[`` after a script's header (comments included), and no file name carries
    a key count."""
    for path in [*sorted((ROOT / "lua").glob("*.lua")), *sorted((ROOT / "lua" / "includes").glob("*.lua"))]:
        text = path.read_text()
        body = text.split("]]", 1)[1] if text.startswith("--[[") else text
        code = "\n".join(line.split("--", 1)[0] for line in body.splitlines())
        assert "KEYS[" not in body and "ARGV[" not in body, f"{path.name} indexes KEYS/ARGV: use K.x / A.x"
        assert not re.search(r"\b(KV|AV)\b", code), f"{path.name} reads KV/AV: a tail is read by name (K.extra[i])"
        assert "-" not in path.stem, f"{path.name}: a script's file name is its verb alone"


LUA_MAX_LINES = 200
"""Most lines a Lua file (a script or an include) may have (issue 43: one concern a file, each stage of
the dequeue readable in a screen; a longer file is split by concern into includes)."""


def test_no_lua_file_is_over_the_line_limit() -> None:
    files = [*sorted((ROOT / "lua").glob("*.lua")), *sorted((ROOT / "lua" / "includes").glob("*.lua"))]
    assert len(files) > 60  # (the glob found the scripts: an empty list would pass)
    long = {p.relative_to(ROOT).as_posix(): n for p in files if (n := len(p.read_text().splitlines())) > LUA_MAX_LINES}
    assert not long, f"Lua files over {LUA_MAX_LINES} lines (split them by concern into includes): {long}"


def test_the_shipped_headers_load() -> None:
    scripts = load_dir(ROOT / "lua")
    assert scripts["done"].keys_tail == "extra" and scripts["done"].args_tail == "items"
    assert all(s.numkeys == len(s.keys) for s in scripts.values())


PENDING_KEYS = group_keys("pending")
NOT_ALL_PENDING_KEYS = {
    "aggregate": "pushes the aggregate it builds: a task of the default priority with no tenant (group= refuses "
                 "priority= and tenant=)",
    "reconcile": "frees the active tenant tasks' slots (ta) alone",
    "page": "reads one container, the caller's (the pending list as its 'container')",
    "set_tenant": "moves one tenant in or out of the ready ring: no task moves",
    "tenants": "reads the tenant zset alone (a page of tenants)",
}


def test_a_script_that_names_one_pending_key_names_them_all() -> None:
    """The tenants' rule (docs/internals-tenants.md "Tenants"): a script that makes tasks pending, takes
    them out of pending or counts them names the five keys holding pending tasks, so a tenant's
    task is never pushed to, or looked for in, the plain list alone (lua/includes/priority raises
    when it meets one without them)."""
    for name, script in sorted(load_scripts().items()):
        keys = set(script.keys)
        named = keys & set(PENDING_KEYS)
        if named and name not in NOT_ALL_PENDING_KEYS:
            assert named == set(PENDING_KEYS), f"{name} names {sorted(named)} of the pending keys, not all of them"


def test_no_field_number_is_written_twice() -> None:
    """Message field numbers come from core/model/codec.py's field table (FIELD_INDEX), emitted into each
    script's prologue as ``F``: no Lua file gives a field's index a number of its own."""
    from asynqpy.core.model.codec import FIELD_INDEX

    for path in [*sorted((ROOT / "lua").glob("*.lua")), *sorted((ROOT / "lua" / "includes").glob("*.lua"))]:
        code = "\n".join(line.split("--", 1)[0] for line in path.read_text().split("]]", 1)[-1].splitlines())
        assert not re.search(r"_INDEX\b[^=\n]*=\s*[\d,\s]+$|msg_field\([^)]*,\s*\d+\)", code, re.MULTILINE), path.name
        assert not re.search(r"\[\d+\]\s*=\s*true", code), f"{path.name}: a table of field numbers (use F.<field>)"
    dq = load_scripts()["dequeue"].source
    line = next(x for x in dq.splitlines() if x.startswith("local F = {"))
    assert f"priority = {FIELD_INDEX['priority']}" in line and f"tenant = {FIELD_INDEX['tenant']}" in line


def test_shake_drops_the_local_functions_nothing_reaches() -> None:
    """The loader keeps a top-level ``local function`` only when the code outside every such
    definition, or a kept one, names it (Lua makes a closure of each at every call)."""
    from asynqpy.core.spine.scripts import shake

    code = ("local function leaf(x)\n  return x\nend\n"
            "local function used(x)  -- calls leaf\n  return leaf(x) + 1\nend\n"
            "local function unused(x)\n  return used(x)\nend\n"
            "local function self_only(n)\n  return self_only(n - 1)\nend\n"
            "local T = {f = used}\nreturn used(1)\n")
    kept = shake(code)
    assert "local function leaf(" in kept and "local function used(" in kept
    assert "unused" not in kept and "self_only" not in kept
    assert kept.endswith("local T = {f = used}\nreturn used(1)\n")
    assert shake("return 1\n") == "return 1\n"
    enqueue = load_scripts()["enqueue"].source
    assert "local function push_pending(" in enqueue and "local function cap_drop(" in enqueue  # (reached)
    assert "signal_if_first" not in enqueue  # (includes/signal: enqueue signals a list, never a zset's head)


def test_a_cached_build_is_the_build_and_a_changed_input_builds_again(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A process's first use of a script reads its build from the cache beside Python's bytecode
    (core/spine/scripts.py ``_cached``: ~40 ms for all scripts, ~340 ms built): every shipped script
    read from the cache equals its build, names and pickers included; a changed include, a changed
    script and a damaged cache file are built again (the cache never wins over the text)."""
    import sys

    from asynqpy.core.spine import scripts as S

    monkeypatch.setattr(sys, "pycache_prefix", str(tmp_path / "prefix"))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    root = S._lua_dir()
    S._built.cache_clear()
    built = load_dir(root)
    assert (tmp_path / "prefix").is_dir()
    calls: list[str] = []
    real = S._built.__wrapped__
    monkeypatch.setattr(S, "_built", lambda f, t, flat: calls.append(f) or real(f, t, flat))
    cached = load_dir(root)
    assert calls == [] and cached == built
    for name, s in built.items():
        c = cached[name]
        assert (c.library, c.function, c.names) == (s.library, s.function, s.names)
        assert c.pick_keys({k: k for k in s.keys}) == s.pick_keys({k: k for k in s.keys})
    # a copy of lua/ whose include changed, then whose script changed, then whose cache file is damaged
    copy = tmp_path / "lua"
    (copy / "includes").mkdir(parents=True)
    (copy / "probe.lua").write_text(GOOD.format(extra_keys="", extra_args="", body=", helper()").replace(
        "\nreturn", '\n--- @include "probe_inc"\nreturn'))
    (copy / "includes" / "probe_inc.lua").write_text("local function helper() return 1 end\n")
    first = load_dir(copy)["probe"]
    assert load_dir(copy)["probe"] == first and calls == ["probe.lua"]
    (copy / "includes" / "probe_inc.lua").write_text("local function helper() return 2 end\n")
    assert "return 2" in load_dir(copy)["probe"].source and calls == ["probe.lua"] * 2
    (copy / "probe.lua").write_text((copy / "probe.lua").read_text().replace("helper()", "helper(), 3"))
    assert ", 3" in load_dir(copy)["probe"].source and calls == ["probe.lua"] * 3
    cache = S._cache_file(copy, "probe.lua")
    assert cache is not None and cache.is_file()
    cache.write_bytes(cache.read_bytes()[:40])
    assert ", 3" in load_dir(copy)["probe"].source and calls == ["probe.lua"] * 4
