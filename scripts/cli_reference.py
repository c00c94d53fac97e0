#!/usr/bin/env python3
"""Write docs/cli-reference.md: every command and subcommand of ``asynqpy``, with the help click
prints for it (``asynqpy COMMAND --help``), made from the commands themselves. ``--check``: write
nothing, exit 1 if the page is stale (tests/test_docs.py checks the same)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click
from generated_page import write_or_check  # (scripts/ is on sys.path: run as python scripts/...)

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "cli-reference.md"
WIDTH = 100

HEADER = """# CLI reference

<!-- made by scripts/cli_reference.py from the click commands: do not edit by hand;
python scripts/cli_reference.py writes it again, tests/test_docs.py fails when it is stale -->

Every command of `asynqpy`, with the help it prints (`asynqpy COMMAND --help`). Every command also
takes `--redis-url` (default `$ASYNQPY_REDIS_URL`, else `redis://localhost:6379/0`) where it talks to
Redis, and `--log-level`. The commands at a glance, with examples of their output: [The `asynqpy`
command](cli.md).

"""


def commands() -> list[tuple[str, click.Command, click.Context]]:
    """Every command, groups included, depth first in name order, with a context to format it."""
    from asynqpy.cli.main import main

    out: list[tuple[str, click.Command, click.Context]] = []

    def walk(path: str, cmd: click.Command, parent: click.Context | None) -> None:
        ctx = click.Context(cmd, info_name=path.split(" ")[-1], parent=parent, terminal_width=WIDTH,
                            max_content_width=WIDTH)
        out.append((path, cmd, ctx))
        if isinstance(cmd, click.Group):
            for name in sorted(cmd.list_commands(ctx)):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    walk(f"{path} {name}", sub, ctx)

    walk("asynqpy", main, None)
    return out


def page() -> str:
    """The page's text."""
    parts = [HEADER]
    for path, cmd, ctx in commands():
        help_text = cmd.get_help(ctx).rstrip()
        parts.append(f"## {path}\n\n```text\n{help_text}\n```\n\n")
    return "".join(parts).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    os.environ.pop("ASYNQPY_REDIS_URL", None)  # (no environment in the help's defaults)
    text = page()
    return write_or_check(PAGE, text, argv, "scripts/cli_reference.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
