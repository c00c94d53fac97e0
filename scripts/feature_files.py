#!/usr/bin/env python3
"""The measure of issue 43 item 5: how many files outside tests/ and docs/ carry the bounded-queue
feature, i.e. name one of its own names (its Inspector methods, option names, error, value class,
Lua functions, counters and include). Prints each file, then the count; exits 1 when the count is
over the issue's bound (10).

    python scripts/feature_files.py            # the bounded-queue feature, bound 10
    python scripts/feature_files.py --max 12   # another bound

The files that take part without naming it are the spine every setting and admission rule shares,
not counted: the four enqueue scripts (through lua/includes/admit.lua), lua/stats.lua and the broker
(the table's conf fields), the CLI, the metrics and the console (made from core/spine/queue_settings.py),
the outbox (the error's ``transient``). docs/internals-scripts.md "Queue settings and the producer
entry" says which one place a new setting or rule is.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

NAMES = ("max_pending", "drop_oldest", "QueueFullError", "QueueCap", "set_queue_cap", "queue_cap", "cap_gate",
         "cap_drop", "cap_refuse", "cap_rejected", "cap_dropped", '@include "cap"', "includes/cap")
"""The bounded-queue feature's own names (docs/queues.md "Bounded queues")."""
BOUND = 10
SELF = "scripts/feature_files.py"
"""This script, which names the feature to look for it: not counted."""
"""Issue 43: "Bounded queues shipped with <= 10 files touched outside tests and docs"."""


def feature_files(names: tuple[str, ...] = NAMES) -> list[str]:
    """The tracked files outside tests/ and docs/ naming one of ``names`` (``git grep -l``; this
    script left out)."""
    pattern = "|".join(re.escape(n) for n in names)
    out = subprocess.run(["git", "grep", "-l", "-E", pattern, "--", ".", ":!tests", ":!docs", f":!{SELF}"], cwd=ROOT,
                         capture_output=True, text=True, check=False)
    if out.returncode not in (0, 1):  # (1: nothing found)
        raise RuntimeError(f"git grep failed: {out.stderr.strip()}")
    return sorted(out.stdout.split())


def main(argv: list[str]) -> int:
    bound = int(argv[argv.index("--max") + 1]) if "--max" in argv else BOUND
    files = feature_files()
    for f in files:
        sys.stdout.write(f"{f}\n")
    sys.stdout.write(f"{len(files)} files outside tests/ and docs/ carry the bounded-queue feature (bound {bound})\n")
    return 0 if len(files) <= bound else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
