"""The queue settings table (core/spine/queue_settings.py), the producer entry (lua/includes/admit.lua) and
the reply-code table (core/model/errors.py REPLY_ERRORS): what is made from them covers every row, and the
bounded-queue feature is carried by at most 10 files outside tests/ and docs/ (issue 43 item 5's
measure; scripts/feature_files.py prints them)."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shutil
import sys
from pathlib import Path

import pytest

from asynqpy import Inspector, QueueFullError, TaskIdConflictError
from asynqpy.core.inspector.inspection import QueueInfo
from asynqpy.core.model import errors
from asynqpy.core.spine.queue_settings import QUEUE_SETTINGS, STATS_FIELDS, QueueSettingPlans, stats_values
from asynqpy.core.spine.scripts import load_scripts

ROOT = Path(__file__).resolve().parent.parent
PRODUCER_ENTRY = ("enqueue", "enqueue_many", "enqueue_keyed", "enqueue_keyed_many")


def test_each_setting_makes_its_inspector_methods_command_stats_and_metrics() -> None:
    from asynqpy.cli.queue import queue as queue_group

    info_fields = {f.name: f for f in dataclasses.fields(QueueInfo)}
    declared = set(QueueSettingPlans.__annotations__)
    for s in QUEUE_SETTINGS:
        assert {s.setter, s.getter} <= declared, s.name  # (the annotations mypy reads name every method)
        for name in (s.setter, s.getter):
            assert getattr(Inspector, name).__doc__, name
        assert s.command in queue_group.commands, s.command
        assert s.conf in STATS_FIELDS and set(s.counters) <= set(STATS_FIELDS)
        for st in s.stats:
            assert st.name in info_fields, f"QueueInfo has no field {st.name} for the {s.name} setting"
            assert all(label in {x.name for x in s.stats} for label in st.labels)
    assert declared == {n for s in QUEUE_SETTINGS for n in (s.setter, s.getter)}
    # a stats reply without the settings (an older caller) decodes to QueueInfo's defaults
    values = stats_values(())
    assert all(values[k] == info_fields[k].default for k in values)


def test_the_producer_entry_scripts_all_go_through_admit_and_name_no_rule() -> None:
    scripts = load_scripts()
    for name in PRODUCER_ENTRY:
        body = (ROOT / "lua" / f"{name}.lua").read_text()
        assert '--- @include "admit"' in body, name
        assert "admit_done(K, ticket)" in body, name
        assert not re.search(r"\bcap_\w+|@include \"cap\"", body), f"{name} calls a rule itself, not through admit"
        assert "admit_done" in scripts[name].source
    lone = (ROOT / "lua" / "enqueue_lone.lua").read_text()  # the lone producer's quick path: no rule
    assert '--- @include "admit"' in lone and "admit_plain(K.conf, tenant)" in lone  # is set, or it writes nothing
    assert not re.search(r"\bcap_\w+|@include \"cap\"|admit_done|admit\(", lone)
    others = {p.stem for p in (ROOT / "lua").glob("*.lua")} - set(PRODUCER_ENTRY) - {"enqueue_lone"}
    for name in others:  # the rules are the producer entry's alone
        assert '--- @include "admit"' not in (ROOT / "lua" / f"{name}.lua").read_text(), name


def test_the_reply_code_table() -> None:
    assert errors.REPLY_ERRORS[QueueFullError.reply_code or 0] is QueueFullError
    assert errors.REPLY_ERRORS[TaskIdConflictError.reply_code or 0] is TaskIdConflictError
    full = errors.reply_error(-10, "q", "", 3)
    assert isinstance(full, QueueFullError) and (full.queue, full.count) == ("q", 3) and full.transient
    assert errors.reply_error(1, "q") is None and errors.reply_error(-99, "q") is None
    assert not TaskIdConflictError.transient
    assert len(set(errors.REPLY_ERRORS)) == len(errors.REPLY_ERRORS)
    cap_lua = (ROOT / "lua" / "includes" / "cap.lua").read_text()
    assert f"QUEUE_FULL, LOOK, DROPPED = {QueueFullError.reply_code}," in cap_lua  # (the Lua's code is the class's)


def _feature_files() -> object:
    spec = importlib.util.spec_from_file_location("feature_files", ROOT / "scripts" / "feature_files.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["feature_files"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="needs the git checkout")
def test_bounded_queues_take_at_most_ten_files_outside_tests_and_docs() -> None:
    ff = _feature_files()
    files = ff.feature_files()  # type: ignore[attr-defined]
    assert "lua/includes/cap.lua" in files and "asynqpy/core/spine/queue_settings.py" in files  # (the grep finds it)
    for spine in ("lua/enqueue.lua", "lua/stats.lua", "asynqpy/core/spine/broker.py", "cli/queue.py", "asynqpy/metrics.py",
                  "asynqpy/outbox.py", "asynqpy/web/templates/queue.html", "asynqpy/core/limits/plans.py"):
        assert spine not in files, spine
    assert len(files) <= ff.BOUND == 10, files  # type: ignore[attr-defined]
