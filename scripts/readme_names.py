#!/usr/bin/env python3
"""The public names and CLI commands a Markdown text documents, one per line.

Issue 44 moved the README's reference into docs/ ("nothing lost"). This script made
``tests/readme_names.txt`` once, from the README as it was before the move::

    python scripts/readme_names.py --rev 1fa0483 > tests/readme_names.txt

and ``tests/test_readme_names.py`` runs the same extraction over the hand-written docs/*.md pages
and requires every line of that list among what they document. ``python scripts/readme_names.py
FILE...`` prints what the given files document.

What counts (only text in code: inline backticks and fenced blocks, where the README names API):

- ``py asynqpy.NAME``: a name of ``asynqpy.__all__`` the text uses, and dotted names under
  ``asynqpy.`` (``asynqpy.otel.instrument``, ``from asynqpy.outbox import Outbox``) that resolve;
- ``py CLASS.MEMBER``: a public method or attribute of such a class (by ``dir``) that the text
  uses as an identifier, for a class the text names;
- ``cli asynqpy CMD [SUB]``: each command and subcommand of the ``asynqpy`` click group written
  after ``asynqpy`` (alternatives ``ls|inspect`` expanded), and ``cli asynqpy CMD [SUB] --FLAG``
  each of its options written after it on the same line;
- ``cli --FLAG``: an option of some command written alone (``--processes N``).
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import subprocess
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")
IDENT = re.compile(r"[A-Za-z_]\w*")
DOTTED = re.compile(r"\basynqpy(?:\.\w+)+")
FROM_IMPORT = re.compile(r"from (asynqpy(?:\.\w+)*) import ([\w, ()]+)")
FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def code_lines(text: str) -> list[str]:
    """The lines of the fenced blocks, then each inline code span, of a Markdown text."""
    lines: list[str] = []
    for block in FENCE.findall(text):
        for line in block.splitlines():
            if lines and line[:1].isspace() and line.lstrip().startswith(("[", "-")):
                lines[-1] += " " + line.strip()  # a synopsis continued on the next line
            else:
                lines.append(line)
    prose = FENCE.sub("", text)
    lines += INLINE.findall(prose)
    return lines


def _resolve(dotted: str) -> object | None:
    """The object a dotted ``asynqpy.x.y`` name stands for, or None (an extra not installed too)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except Exception:  # noqa: BLE001 (not a module, or an extra missing)
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            return None
        return obj
    return None


def python_names(lines: list[str]) -> set[str]:
    import asynqpy

    public = set(asynqpy.__all__)
    words: set[str] = set()
    found: set[str] = set()
    for line in lines:
        words.update(IDENT.findall(line))
        for dotted in DOTTED.findall(line):
            if _resolve(dotted) is not None:
                found.add(dotted)
        for module, names in FROM_IMPORT.findall(line):
            for name in IDENT.findall(names):
                if _resolve(f"{module}.{name}") is not None:
                    found.add(f"{module}.{name}" if module != "asynqpy" else f"asynqpy.{name}")
    for name in sorted(public & words):
        found.add(f"asynqpy.{name}")
        obj = getattr(asynqpy, name)
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for member in dir(obj):
                if not member.startswith("_") and member in words:
                    found.add(f"{name}.{member}")
    return {f"py {n}" for n in found}


def _tree() -> click.Group:
    from asynqpy.cli.main import main

    assert isinstance(main, click.Group)
    return main


def _sub(group: click.Group, name: str) -> click.Command | None:
    ctx = click.Context(group)
    return group.get_command(ctx, name)


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params if isinstance(p, click.Option) for o in (*p.opts, *p.secondary_opts)}


def all_commands() -> Iterator[tuple[str, click.Command]]:
    """Every command of the ``asynqpy`` group, as ``asynqpy a b``, groups included, sorted."""
    def walk(path: str, cmd: click.Command) -> Iterator[tuple[str, click.Command]]:
        yield path, cmd
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in sorted(cmd.list_commands(ctx)):
                sub = cmd.get_command(ctx, name)
                if sub is not None and not sub.hidden:
                    yield from walk(f"{path} {name}", sub)

    yield from walk("asynqpy", _tree())


def _paths(words: list[str]) -> list[tuple[str, click.Command, int]]:
    """The commands named by ``words`` (after ``asynqpy``): (path, command, words used)."""
    out: list[tuple[str, click.Command, int]] = []

    def walk(path: str, cmd: click.Command, i: int) -> None:
        if isinstance(cmd, click.Group) and i < len(words):
            # `ls|inspect Q...|history Q... [--days N]|pause Q...`: the alternatives, each after a |
            alts = words[i].split("|") + [a for w in words[i + 1:] for a in w.split("|")[1:]]
            subs = [(alt, _sub(cmd, alt)) for alt in dict.fromkeys(alts) if alt]
            found = [(alt, s) for alt, s in subs if s is not None]
            if found:
                for alt, s in found:
                    assert s is not None
                    walk(f"{path} {alt}", s, i + 1)
                return
        out.append((path, cmd, i))

    walk("asynqpy", _tree(), 0)
    return out


def cli_names(lines: list[str]) -> set[str]:
    main = _tree()
    known = {o for _, cmd in all_commands() for o in _options(cmd) if o.startswith("--")}
    found: set[str] = set()
    for line in lines:
        segments = re.split(r"(?<![\w./-])asynqpy(?=\s)", line)
        head, rest = segments[0], segments[1:]
        found.update(f"cli {f}" for f in FLAG.findall(head) if f in known)
        for seg in rest:
            words = seg.split("#", 1)[0].split() if "#" in seg.split()[1:2] else seg.split()
            for path, cmd, used in _paths(words):
                found.add(f"cli {path}")
                opts = _options(cmd) | _options(main)
                for flag in FLAG.findall(" ".join(words[used:])):
                    if flag in opts and flag.startswith("--"):
                        found.add(f"cli {path} {flag}")
                    elif flag in known:
                        found.add(f"cli {flag}")
    found.discard("cli asynqpy")
    return found


def names(texts: Iterable[str]) -> set[str]:
    """Everything the texts document (``py ...`` and ``cli ...`` lines)."""
    lines = [line for text in texts for line in code_lines(text)]
    return python_names(lines) | cli_names(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", type=Path, help="Markdown files (default: README.md)")
    parser.add_argument("--rev", help="read README.md as of this git revision instead")
    args = parser.parse_args(argv)
    if args.rev:
        texts = [subprocess.run(["git", "show", f"{args.rev}:README.md"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout]
    else:
        texts = [p.read_text(encoding="utf-8") for p in (args.files or [ROOT / "README.md"])]
    sys.stdout.write("".join(f"{n}\n" for n in sorted(names(texts))))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
