"""The option table (asynqpy/core/model/options.py SPEC) is the one list of enqueue options: prepare's
checks and conflicts, the task kinds, Client.enqueue's docstring, docs/options.md and the
``asynqpy enqueue`` flags all agree with it, and each of its conflicts is refused."""

from __future__ import annotations

import itertools
import re
from pathlib import Path
from typing import Any

import click
import pytest

from asynqpy import AsyncClient, Client, InvalidArgumentError
from asynqpy.core.model import kinds
from asynqpy.core.model import options as opts
from asynqpy.core.model.kinds import ROUTES, TaskKind
from asynqpy.core.model.options import CALLED, OPTION, OPTIONS, SPEC
from asynqpy.core.spine.broker import Broker

ROOT = Path(__file__).resolve().parent.parent
NOW = 1_700_000_000.0


def _prepare(**options: Any) -> opts.Prepared:
    return opts.prepare("t", None, now=NOW, **options)


def _examples(*names: str) -> dict[str, Any]:
    return {n: OPTION[n].example for n in names}


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0].split("-->", 1)[1].strip()


def test_every_row_is_complete() -> None:
    assert len(OPTION) == len(SPEC)
    for o in SPEC:
        assert re.fullmatch(r"[a-z_]+", o.name) and o.type and o.default and o.doc, o
        assert o.example is not None, f"{o.name}: give the row an example value"
        assert set(o.conflicts) <= set(OPTION) | {CALLED}, o.name
        assert o.flag is None or re.fullmatch(r"--[a-z-]+", o.flag), o.name
    flags = [o.flag for o in SPEC if o.flag]
    assert len(flags) == len(set(flags)), "one flag per option"


def test_each_example_is_valid_alone_and_unknown_names_are_refused() -> None:
    for name in sorted(OPTIONS):
        _prepare(**_examples(name))
    with pytest.raises(InvalidArgumentError, match="did you mean 'max_retry'"):
        _prepare(retries=3)
    with pytest.raises(InvalidArgumentError, match="unknown enqueue option"):
        _prepare(on_conflict="return")  # the client's own option: not stored with the task


@pytest.mark.parametrize("o", [o for o in SPEC if o.conflicts], ids=lambda o: o.name)
def test_each_conflict_is_refused_with_its_message(o: opts.Option) -> None:
    for other, message in o.conflicts.items():
        if other == CALLED:
            with pytest.raises(InvalidArgumentError) as got:
                opts.prepare("t", None, reply_to="inbox", **_examples(o.name))
        else:
            with pytest.raises(InvalidArgumentError) as got:
                _prepare(**_examples(o.name, other))
        assert str(got.value) == message, (o.name, other)


def test_every_other_pair_of_options_goes_together() -> None:
    """Two options that no row says conflict are taken together (so the table is the whole story),
    except a keyed task's unique lock, which its kind refuses."""
    refused_by_kind = {frozenset(p) for p in (("key", "unique"), ("key", "unique_key"))}
    for a, b in itertools.combinations(sorted(OPTIONS), 2):
        if b in opts.conflicting(a) or frozenset((a, b)) in refused_by_kind:
            continue
        _prepare(**_examples(a, b))
    for pair in refused_by_kind:
        with pytest.raises(InvalidArgumentError, match="cannot be combined with unique yet"):
            _prepare(**_examples(*pair))
    _prepare(**_examples("key", "unique", "process_in"))  # scheduled first: the lock is the schedule's


@pytest.mark.parametrize("kind", [k for k in TaskKind if ROUTES[k].takes is None], ids=lambda k: k.value)
def test_each_kind_is_decided_once_and_refuses_what_it_does_not_allow(kind: TaskKind) -> None:
    route = ROUTES[kind]
    for by in route.by:
        assert _prepare(**_examples(by)).kind is kind
    if not route.by:
        assert _prepare().kind is kind
    for name in sorted(OPTIONS - opts.allowed(kind)):
        for by in route.by:
            with pytest.raises(InvalidArgumentError):
                _prepare(**_examples(by, name))


def test_process_inputs_are_their_own_kind_and_take_only_their_options() -> None:
    p = opts.prepare("process:order", {"p": "o1", "i": "call", "a": None}, key="proc:o1", now=NOW)
    assert p.kind is TaskKind.PROCESS_INPUT
    assert _prepare(key="proc:o1").kind is TaskKind.KEYED  # not a process's task type
    from asynqpy.client import PROCESS_OPTIONS

    assert PROCESS_OPTIONS == opts.allowed(TaskKind.PROCESS_INPUT) < OPTIONS


@pytest.mark.parametrize("kind", [k for k in TaskKind if k is not TaskKind.WAITING], ids=lambda k: k.value)
def test_each_kind_is_stored_by_its_routes_call(kind: TaskKind) -> None:
    route = ROUTES[kind]
    if kind is TaskKind.PROCESS_INPUT:
        p = opts.prepare("process:order", {"p": "o1", "i": "call", "a": None}, key="proc:o1", now=NOW)
    else:
        p = _prepare(**_examples(*route.by[:1]))
    assert kinds.store_call(Broker(), p).script == route.call
    assert kinds.first_state(kind, 0) is route.state


def test_a_waiting_task_is_never_stored_by_one_call() -> None:
    with pytest.raises(InvalidArgumentError, match="enqueue_many does not take after="):
        kinds.store_call(Broker(), _prepare(after=["p1"]))


def test_enqueue_docstrings_are_made_from_the_table() -> None:
    for cls in (Client, AsyncClient):
        doc = cls.enqueue.__doc__ or ""
        assert doc == opts.enqueue_doc()
        for o in SPEC:
            assert f"``{o.name}``" in doc


def test_docs_tables_are_the_tables_the_option_table_makes() -> None:
    text = (ROOT / "docs" / "options.md").read_text()
    assert _between(text, "<!-- options:", "<!-- end options -->") == opts.options_table(), (
        "docs/options.md is stale: paste asynqpy.core.model.options.options_table() between its markers")
    assert _between(text, "<!-- kinds:", "<!-- end kinds -->") == opts.kinds_table(), (
        "docs/options.md is stale: paste asynqpy.core.model.options.kinds_table() between its markers")


def test_the_client_page_table_names_only_options_of_the_table() -> None:
    """docs/client.md's table of the main options (the README's, before issue 44 moved it)."""
    text = (ROOT / "docs" / "client.md").read_text()
    table = text.split("| option | default | meaning |", 1)[1].split("\n\n", 1)[0]
    names = [n for line in table.splitlines()[2:] for n in re.findall(r"`(\w+)`", line.split("|")[1])]
    assert names and set(names) <= set(OPTION)


def test_the_enqueue_command_has_a_flag_for_each_option_that_has_one() -> None:
    from asynqpy.cli.main import enqueue, enqueue_flags

    assert isinstance(enqueue, click.Command)
    params = {p.name: p for p in enqueue.params if isinstance(p, click.Option)}
    own = {"payload", "as_json", "signing_key_file", "encryption_keys_file", "redis_url", "log_level"}  # the command's, not options
    assert set(params) - own == {o.name for o in SPEC if o.flag}
    for o in SPEC:
        if o.flag:
            assert o.flag in params[o.name].opts, o.name
    assert enqueue_flags()["process_in"] == "--in" and "queue" not in enqueue_flags()


def test_the_other_option_lists_are_subsets_of_the_table() -> None:
    from asynqpy.app import _TASK_OPTIONS
    from asynqpy.core.cron.entries import ENTRY_OPTIONS
    from asynqpy.worker.aggregator import AGGREGATE_OPTIONS

    for subset in (_TASK_OPTIONS, ENTRY_OPTIONS, AGGREGATE_OPTIONS):
        assert subset <= OPTIONS
