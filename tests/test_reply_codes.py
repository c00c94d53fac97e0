"""Reply codes stay in the broker (issue 30 item 7, the part done): a script's raw reply is turned
into a value with a name (an enum, a TaskState, a bool, a typed error) by its parser in
``core/broker.py``; no other module compares a reply with a bare number. Read as text (AST), nothing
runs: a comparison of a reply-like name, or of an awaited/called ``run``, with an int literal fails."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPLY_NAMES = {"code", "codes", "reply", "replies", "r", "res", "rc", "got", "out", "done", "freed"}
"""Names the package gives to script replies."""
NOT_REPLIES = {
    "asynqpy/worker/sandbox.py": "a child process's exit code (a signal when negative), not a script reply",
}


def _is_run(node: ast.AST) -> bool:
    """An ``exec.run(...)`` / ``run_many`` / ``run_plan`` call, awaited or not."""
    if isinstance(node, ast.Await):
        node = node.value
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr.startswith("run")


def _ints(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return type(node.value) is int
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_ints(e) for e in node.elts)
    if isinstance(node, ast.UnaryOp):
        return _ints(node.operand)
    return False


def test_no_module_but_the_broker_compares_a_script_reply_with_a_number() -> None:
    found = []
    for path in sorted((ROOT / "asynqpy").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "asynqpy/core/broker.py" or rel in NOT_REPLIES:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            sides = [node.left, *node.comparators]
            replyish = [s for s in sides if (isinstance(s, ast.Name) and s.id in REPLY_NAMES) or _is_run(s)]
            if replyish and any(_ints(s) for s in sides):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
    assert not found, "compare a named value (broker enum, constant or TaskState), not a number:\n" + "\n".join(found)


def test_the_check_finds_what_it_looks_for() -> None:
    src = "async def f(x, b):\n    if code == 3: pass\n    if await x.run(b.drop('q', 'i')) == 1: pass\n"
    hits = [n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.Compare)
            and any((isinstance(s, ast.Name) and s.id in REPLY_NAMES) or _is_run(s) for s in [n.left, *n.comparators])
            and any(_ints(s) for s in [n.left, *n.comparators])]
    assert len(hits) == 2
