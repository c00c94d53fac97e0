#!/usr/bin/env python3
"""Write the settings table into docs/workers.md (between its ``<!-- settings:`` and
``<!-- end settings -->`` markers) from the server's settings table,
``asynqpy.worker.settings.SETTINGS``. ``--check``: write nothing, exit 1 if the docs are stale
(tests/test_settings_table.py checks the same)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from asynqpy.worker.settings import settings_table

DOC = Path(__file__).resolve().parent.parent / "docs" / "workers.md"
BLOCK = re.compile(r"(<!-- settings:[^\n]*-->\n)(?:.*?\n)?(<!-- end settings -->)", re.S)


def updated(text: str) -> str:
    """``text`` with the block between the markers replaced by the current table."""
    if not BLOCK.search(text):
        raise SystemExit(f"{DOC}: no <!-- settings: ... --> / <!-- end settings --> markers")
    return BLOCK.sub(lambda m: m.group(1) + settings_table() + "\n" + m.group(2), text, count=1)


def main(argv: list[str]) -> int:
    text = DOC.read_text(encoding="utf-8")
    new = updated(text)
    if "--check" in argv:
        if new != text:
            sys.stderr.write(f"{DOC} is stale: run python scripts/settings_table.py\n")
            return 1
        return 0
    if new != text:
        DOC.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
