"""bench/scale.py, the runner of issue 31's cost rows: every ``bench/scale_<row>.py`` has the
``rows(url, quick)`` and ``main()`` it calls, tables print every figure, and an unknown row is
refused with exit code 2 before any server starts. (The figures themselves: ``python
bench/scale.py``; speed is never asserted here.)"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
import scale  # noqa: E402


def test_every_row_module_has_rows_and_main() -> None:
    names = scale.row_modules()
    assert {"janitor", "stats", "events", "fanin", "ratelimit"} <= set(names), names
    for name in names:
        tree = ast.parse((ROOT / "bench" / f"scale_{name}.py").read_text())
        funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        assert "main" in funcs, name
        args = [a.arg for a in funcs["rows"].args.args] if "rows" in funcs else []
        assert args[:2] == ["url", "quick"], (name, args)
        assert ast.get_docstring(tree), f"bench/scale_{name}.py says what it measures"


def test_a_table_shows_every_figure() -> None:
    text = scale.table([{"queues": 10, "seconds": 0.5}, {"queues": 10_000, "seconds": 12.25, "cmds": 140_000}])
    lines = text.splitlines()
    assert lines[0] == "| queues | seconds | cmds |"
    assert lines[2] == "| 10 | 0.500 |  |" and lines[3] == "| 10,000 | 12.2 | 140,000 |"
    assert scale.table([]) == "(no figures)"


def test_an_unknown_row_is_refused() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "scale.py"), "--only", "nosuch"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stderr.startswith("no such row: nosuch"), out.stderr
