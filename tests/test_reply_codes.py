"""Reply codes stay in the broker (issue 30 item 7, the part done): a script's raw reply is turned
into a value with a name (an enum, a TaskState, a bool, a typed error) by its parser in
the broker (``core/spine/broker.py`` and the modules it is split into, :data:`BROKER`); no other module compares a reply with a bare number. Read as text (AST), nothing
runs: a comparison of a reply-like name, or of an awaited/called ``run``, with an int literal fails, and
so does a comparison with one of the broker's integer reply codes (``OK``, ``CHANGED``, ...) imported
outside it: other modules compare :class:`~asynqpy.core.spine.broker.Acted` members (or another enum).
Keys are the key schema's too: no module but ``core/spine/keys.py`` formats an ``asynqpy:`` key by hand."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from helpers import walked

from asynqpy.core.spine import broker

ROOT = Path(__file__).resolve().parent.parent
REPLY_NAMES = {"code", "codes", "reply", "replies", "r", "res", "rc", "got", "out", "done", "freed"}
"""Names the package gives to script replies."""
BROKER = {f"asynqpy/core/spine/{m}.py" for m in ("broker", "calls", "feature_calls", "operator_calls")}
"""The broker's modules: its vocabulary (calls.py: Call, the reply codes and parsers), the calls of a
task's life (broker.py), of the features and of an operator."""
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
        if rel in BROKER or rel in NOT_REPLIES:
            continue
        for node in walked(path):
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


CODES = {m.name for m in broker.Acted if type(getattr(broker, m.name, None)) is int}
"""The broker's integer reply codes (OK, NOT_FOUND, CHANGED, ...), kept for its own parsers."""


def _code_comparisons(path: Path, rel: str) -> list[str]:
    """Comparisons with a reply code imported from the broker (by name, or as ``broker.X``)."""
    nodes = walked(path)
    imported = {a.asname or a.name for n in nodes if isinstance(n, ast.ImportFrom)
                and (n.module or "").endswith(("broker", "spine.calls")) for a in n.names if a.name in CODES}
    found = []
    for node in nodes:
        if not isinstance(node, ast.Compare):
            continue
        for side in ast.walk(node):
            if ((isinstance(side, ast.Name) and side.id in imported)
                    or (isinstance(side, ast.Attribute) and side.attr in CODES and isinstance(side.value, ast.Name)
                        and side.value.id == "broker")):
                found.append(f"{rel}:{node.lineno}: {ast.unparse(node)}")
                break
    return found


def test_no_module_but_the_broker_compares_with_its_integer_reply_codes() -> None:
    assert {"OK", "NOT_FOUND", "CHANGED", "NOT_LOCATED", "WRONG_STATE", "NOT_EMPTY"} <= CODES
    found = []
    for path in sorted((ROOT / "asynqpy").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in BROKER:
            found += _code_comparisons(path, rel)
    assert not found, "compare broker.Acted members, not the broker's integer codes:\n" + "\n".join(found)


def test_the_code_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from .broker import OK, CHANGED as C, Acted\nfrom . import broker\n"
                     "def f(code, codes):\n    if code == OK: pass\n    if code != C: pass\n"
                     "    if codes == [OK]: pass\n    if code == broker.NOT_FOUND: pass\n"
                     "    if code == Acted.OK: pass\n")
    assert len(_code_comparisons(probe, "probe.py")) == 4


_KEY = re.compile(r"asynqpy:[\w{]")


def _hand_made_keys(path: Path, rel: str) -> list[str]:
    """String literals and f-strings outside docstrings that begin a key (``asynqpy:{q}:...``)."""
    nodes = walked(path)
    docs = {id(n.value) for n in nodes if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    docs |= {id(v) for n in nodes if isinstance(n, ast.JoinedStr) for v in n.values}  # seen as the f-string
    found = []
    for node in nodes:
        text = None
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            text = node.value
        elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
            text = str(node.values[0].value)
        if text is not None and _KEY.match(text):
            found.append(f"{rel}:{node.lineno}: {ast.unparse(node)[:80]}")
    return found


def test_no_module_but_the_key_schema_formats_a_key() -> None:
    found = []
    for path in sorted([*(ROOT / "asynqpy").rglob("*.py"), *(ROOT / "cli").glob("*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        if rel != "asynqpy/core/spine/keys.py":
            found += _hand_made_keys(path, rel)
    assert not found, "build keys with asynqpy.core.spine.keys (queue_keys, ...):\n" + "\n".join(found)


def test_the_key_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text('"""asynqpy:{q}:t in a docstring is fine"""\n'
                     'a = f"asynqpy:{{{q}}}:tick"\nb = "asynqpy:server:x"\nc = f"asynqpy: error: {e}"\n')
    assert len(_hand_made_keys(probe, "probe.py")) == 2
