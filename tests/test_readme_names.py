"""Issue 44: the README's reference moved into docs/ with nothing lost. tests/readme_names.txt is
every public name (``asynqpy.X``, ``Class.member``) and every CLI command, subcommand and flag the
README documented before the move (made once by scripts/readme_names.py, which says how); each must
still be documented by a hand-written page of docs/ (the generated CLI and Inspector references do
not count)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
LIST = ROOT / "tests" / "readme_names.txt"
GENERATED = {"cli-reference.md", "inspector-reference.md"}


def extractor() -> ModuleType:
    spec = importlib.util.spec_from_file_location("readme_names", ROOT / "scripts" / "readme_names.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def documented() -> set[str]:
    pages = [p.read_text() for p in sorted(DOCS.glob("*.md")) if p.name not in GENERATED]
    names: set[str] = extractor().names(pages)
    return names


def test_every_name_the_readme_documented_is_documented_in_docs(documented: set[str]) -> None:
    listed = LIST.read_text().splitlines()
    # the list is the whole README's: its size guards against an emptied or truncated file
    assert len(listed) > 500 and sum(n.startswith("py ") for n in listed) > 250, len(listed)
    missing = [n for n in listed if n not in documented]
    assert missing == [], f"documented by the README before issue 44, by no docs/ page now: {missing}"


def test_the_extraction_sees_what_a_page_documents_and_what_it_does_not() -> None:
    """The check can fail: a text without the names yields none of them; written in code, each kind
    of name is found (the alternatives of a synopsis expanded, a flag given to its command)."""
    ex = extractor()
    text = ("Use `Inspector.queue_info` and `from asynqpy.outbox import Outbox`.\n\n```\n"
            "asynqpy queue ls|pause Q... [--json]\nasynqpy worker tasks:app --concurrency 3\n```\n")
    got = ex.names([text])
    assert {"py asynqpy.Inspector", "py Inspector.queue_info", "py asynqpy.outbox.Outbox",
            "cli asynqpy queue ls", "cli asynqpy queue pause", "cli asynqpy queue ls --json",
            "cli asynqpy worker", "cli asynqpy worker --concurrency"} <= got, got
    assert "cli asynqpy queue rm" not in got and "py Inspector.remove_queue" not in got
    assert ex.names(["Inspector, queue_info and asynqpy worker --concurrency, out of code."]) == set()
