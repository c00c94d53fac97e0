"""One way for the scripts that generate a docs page (scripts/cli_reference.py,
scripts/inspector_reference.py) to write it, or with ``--check`` to fail when it is stale."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_or_check(page: Path, text: str, argv: list[str], script: str) -> int:
    """Write ``text`` to ``page``; with ``--check`` in ``argv``, write nothing and return 1 (saying
    which ``script`` remakes it) when the page differs from ``text``."""
    if "--check" in argv:
        if not page.exists() or page.read_text(encoding="utf-8") != text:
            sys.stderr.write(f"{page.relative_to(ROOT)} is stale: run python {script}\n")
            return 1
        return 0
    page.write_text(text, encoding="utf-8")
    return 0
