"""Every script through which a task ends or is removed does the shared bookkeeping (issue 29: each
defect of its first part was a path that skipped a duty the main path does).

A script "ends a task" when its own text deletes a field of the tasks hash or stores a task
archived ('x') or completed ('c'). Each one must either leave through ``lua/includes/exit.lua``
(``task_exit``: lock, progress, children told, key released) or be listed below with the reason
it does without (its duties inline, or none apply); and docs/architecture.md's "Exit paths" table
names each of them. A new script that ends tasks therefore fails here until someone decides how
it meets every duty. Nothing runs: the scripts are read as text."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "lua"

INLINE = {
    "done": "the worker's batched success: lock, progress, notify, children (c + result), key: inline per batch",
    "complete": "success with retention: the same duties inline",
    "archive": "the worker's and recoverer's final failure: lock, progress, children, key, process: inline",
    "proc_commit": "a process input's success: progress and key inline; an input is never a parent nor unique",
    "fail_waiting": "a waiting child cancelled by the propagator: tells its children; after= refuses key and unique",
    "enqueue_after": "a new child archived at once: no lock, key, progress or children can exist yet",
    "aggregate": "grouped members: locks released inline; grouped tasks are never parents and have no key",
    "ungroup": "the operator's action on a grouped task: lock inline; never a parent, no key",
    "run_end": "a targeted task: lock inline; targeted tasks are never parents and have no key",
    "extend": "deletes the run task of a targeted run whose worker is no longer allowed (not a task of its own)",
    "expire": "completed tasks past their retention: every duty was done when they completed",
    "reconcile": "repairs a task with an unknown state byte by archiving it as is (a damaged task: nothing to release)",
}
"""Scripts that end or remove tasks without ``task_exit``, and why (docs/architecture.md "Exit paths")."""


def _tasks_key(text: str) -> int | None:
    m = re.search(r"^KEYS\[(\d+)\]\s+(?:t|tasks)\s", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def _ends_a_task(text: str) -> bool:
    n = _tasks_key(text)
    if n is None:
        return False
    body = text.split("]]", 1)[1] if text.startswith("--[[") else text
    t = rf"KEYS\[{n}\]"
    return bool(re.search(rf"'HDEL',\s*{t}", body) or re.search(rf"'HSET',\s*{t},[^\n]*'[xc]' \.\.", body))


def _scripts() -> dict[str, str]:
    return {p.name.rsplit("-", 1)[0]: p.read_text() for p in sorted(LUA.glob("*.lua"))}


def test_every_script_that_ends_a_task_leaves_through_the_exit_include_or_says_why() -> None:
    ending = {name for name, text in _scripts().items() if _ends_a_task(text)}
    assert {"cancel", "delete_tasks", "archive_tasks", "schedule", "done", "archive"} <= ending  # the check works
    for name in sorted(ending):
        text = _scripts()[name]
        uses_exit = '--- @include "exit"' in text
        assert uses_exit or name in INLINE, (
            f"lua/{name}-*.lua ends or removes a task without lua/includes/exit.lua: call task_exit, or list it "
            "in INLINE with how it meets each duty (lock, progress, children, key, process)")
        assert not (uses_exit and name in INLINE), f"{name} uses the exit include: take it out of INLINE"
    assert not set(INLINE) - ending, f"INLINE lists scripts that no longer end tasks: {set(INLINE) - ending}"


def test_the_architecture_lists_every_exit_path() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    table = doc.split("### Exit paths", 1)[1].split("\n### ", 1)[0]
    files = {p.name[:-4] for p in LUA.glob("*.lua")}
    for name, text in _scripts().items():
        if _ends_a_task(text) and name not in ("extend", "reconcile"):
            full = next(f for f in files if f.rsplit("-", 1)[0] == name)
            assert f"`{full}`" in table, f"docs/architecture.md 'Exit paths' does not name {full}"
