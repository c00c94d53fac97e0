"""Costs as a deployment grows: every row of docs/internals-costs.md "Costs as a deployment grows".

    python bench/scale.py [--quick] [--only janitor,stats] [--json PATH]

Each row is a module ``bench/scale_<row>.py`` with ``rows(url, quick) -> list[dict]``: the cost
of one mechanism at growing sizes (workers, queues, tasks, parents...), one dict per size, counted
from Redis's own ``INFO commandstats`` (calls and microseconds, the commands scripts run
included). This runner starts a fresh redis-server for each row (loopback, no persistence), calls
it, prints one table per row and writes every figure to bench/results/scale-latest.json (or
``--json``). ``--quick`` stops at the sizes that take seconds (the full sizes take minutes: 10^6
tasks, 10^4 queues).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))
from redisproc import RedisProcess  # noqa: E402


def row_modules() -> list[str]:
    """The rows, by name (``scale_<name>.py``), in name order."""
    return sorted(p.stem[len("scale_"):] for p in HERE.glob("scale_*.py"))


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of a row's figures (the union of the dicts' keys, in first-seen order)."""
    if not rows:
        return "(no figures)"
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if k not in cols]

    def cell(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.1f}"
        if isinstance(v, int):
            return f"{v:,}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes only (seconds per row, not minutes)")
    ap.add_argument("--only", default="", help="comma-separated row names (default: every bench/scale_*.py)")
    ap.add_argument("--json", default=str(HERE / "results" / "scale-latest.json"))
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or row_modules()
    unknown = sorted(set(names) - set(row_modules()))
    if unknown:
        print(f"no such row: {', '.join(unknown)} (rows: {', '.join(row_modules())})", file=sys.stderr)
        return 2
    results: dict[str, Any] = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "quick": args.quick,
                               "rows": {}}
    for name in names:
        module = importlib.import_module(f"scale_{name}")
        server = RedisProcess()
        t0 = time.monotonic()
        try:
            rows = module.rows(server.url, args.quick)
        finally:
            server.stop()
        took = time.monotonic() - t0
        doc = (module.__doc__ or name).strip().splitlines()[0]
        print(f"\n## {name}: {doc}  ({took:.0f} s)\n")
        print(table(rows), flush=True)
        results["rows"][name] = rows
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
