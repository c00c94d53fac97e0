#!/usr/bin/env python3
"""Write docs/inspector-reference.md: every public method of ``asynqpy.Inspector`` (``AsyncInspector``
has the same ones, awaited), its signature and its docstring, made from the class itself.
``--check``: write nothing, exit 1 if the page is stale (tests/test_docs.py checks the same)."""

from __future__ import annotations

import inspect
import re
import sys
from pathlib import Path

from generated_page import write_or_check  # (scripts/ is on sys.path: run as python scripts/...)

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "inspector-reference.md"

HEADER = """# Inspector reference

<!-- made by scripts/inspector_reference.py from asynqpy.Inspector's docstrings: do not edit by hand;
python scripts/inspector_reference.py writes it again, tests/test_docs.py fails when it is stale -->

Every public method of `Inspector`, with its signature and what its docstring says. `AsyncInspector`
has the same methods, to be awaited (`async with AsyncInspector(url) as insp: await insp.queues()`).
The methods by purpose, with their costs: [The Inspector](inspector.md).

"""


def markdown(doc: str) -> str:
    """A reST-flavoured docstring as Markdown: ``x`` and :meth:`x` become `x`."""
    doc = re.sub(r":(?:meth|class|func|attr|data|exc):`~?([^`]+)`", r"`\1`", doc)
    return doc.replace("``", "`")


class _Raw(str):
    """An annotation written as text, shown as written (not quoted)."""

    def __repr__(self) -> str:
        return str(self)


def signature(function: object) -> str:
    """``(a: int, b: str = 'x') -> None``, self left out, annotations as the source writes them."""
    assert callable(function)
    sig = inspect.signature(function)

    def raw(annotation: object) -> object:
        return _Raw(annotation) if isinstance(annotation, str) else annotation

    params = [p.replace(annotation=raw(p.annotation)) for p in sig.parameters.values() if p.name != "self"]
    return str(sig.replace(parameters=params, return_annotation=raw(sig.return_annotation)))


def methods() -> list[tuple[str, object]]:
    """The public methods of Inspector, by name."""
    from asynqpy import Inspector

    return [(name, member) for name, member in sorted(vars(Inspector).items())
            if not name.startswith("_") and inspect.isfunction(member)]


def page() -> str:
    """The page's text."""
    from asynqpy import Inspector

    parts = [HEADER, markdown(inspect.getdoc(Inspector) or ""), "\n\n"]
    for name, member in methods():
        doc = inspect.getdoc(member) or ""
        parts.append(f"## {name}\n\n```text\n{name}{signature(member)}\n```\n\n{markdown(doc)}\n\n")
    return "".join(parts).rstrip("\n") + "\n"


def main(argv: list[str]) -> int:
    text = page()
    return write_or_check(PAGE, text, argv, "scripts/inspector_reference.py")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
