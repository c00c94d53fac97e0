"""The reference pages in docs/: the site builds offline (mkdocs --strict: no broken link between
pages), every python block compiles, and the pages whose examples are meant to run (RUNNABLE) run
as written, in order, against a real redis-server (``URL``: a scratch database)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUNNABLE = ["results.md", "events.md", "tasks.md", "cron.md", "groups.md", "flow.md", "queues.md", "workflows.md", "processes.md", "durable.md", "durable-operating.md", "rules.md",
            "tenants.md", "deploy.md", "search.md", "offload.md", "encryption.md",
            "metrics.md",
            "tracing.md", "web.md", "migrating.md", "integrations-frameworks.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXCERPT = re.compile(r"^```py\n(.*?)^```", re.MULTILINE | re.DOTALL)  # shown, compiled, not run


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def test_the_site_builds_offline(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "results" / "index.html").exists()


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_python_blocks_compile(page: str) -> None:
    """Every ```python block compiles; so does every ```py block, the excerpts a runnable page shows
    without running them (an overview's fragments: top-level ``await`` allowed)."""
    import ast

    for i, code in enumerate(blocks(DOCS / page)):
        compile(code, f"{page} block {i + 1}", "exec")
    for i, code in enumerate(EXCERPT.findall((DOCS / page).read_text())):
        compile(code, f"{page} py block {i + 1}", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)


@pytest.fixture(scope="module")
def zygote() -> Iterator[Any]:
    """A process that imported asynqpy once and forks a child per example (tests/faults/zygote.py:
    an interpreter's start, ~0.6 s of CPU, was most of an example's cost)."""
    sys.path.insert(0, str(Path(__file__).parent / "faults"))
    from zygote import Zygote

    z = Zygote(dict(os.environ), str(ROOT))
    yield z
    z.stop()


@pytest.mark.real
@pytest.mark.parametrize("page", RUNNABLE)
def test_examples_run_as_written(page: str, redis_url: str, zygote: Any, tmp_path: Path) -> None:
    """The page's python blocks, one after the other, as one ``python -c`` program (forked from
    :func:`zygote`), with ``URL`` a Redis database of its own."""
    url = redis_url.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(url).flushdb()
    source = "\n".join(blocks(DOCS / page))
    assert source, f"{page} has no python block"
    log = tmp_path / "example.log"
    child = zygote.start(["-c", f"URL = {url!r}\n{source}"], log)
    try:
        code = child.wait(60)
    finally:
        child.kill()
    assert code == 0, log.read_text(errors="replace")


def test_every_page_is_linked_from_the_index_and_the_nav() -> None:
    """Issue 42 #25: docs/index.md linked 9 of the 20 pages. Every docs/*.md page is linked from
    docs/index.md and listed in mkdocs.yml's nav (the site's menu), and both name only pages that
    exist."""
    import yaml

    pages = {p.name for p in DOCS.glob("*.md")} - {"index.md"}
    linked = set(re.findall(r"\]\(([\w.-]+\.md)(?:#[\w-]*)?\)", (DOCS / "index.md").read_text()))
    assert pages - linked == set(), f"not linked from docs/index.md: {sorted(pages - linked)}"
    assert linked - pages == set(), f"docs/index.md links pages that do not exist: {sorted(linked - pages)}"

    def names(nav: object) -> list[str]:
        if isinstance(nav, str):
            return [nav]
        if isinstance(nav, list):
            return [n for item in nav for n in names(item)]
        if isinstance(nav, dict):
            return [n for v in nav.values() for n in names(v)]
        return []

    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    in_nav = set(names(config["nav"]))
    assert pages | {"index.md"} == in_nav, f"mkdocs.yml nav differs: missing {sorted(pages - in_nav)}, " \
                                           f"extra {sorted(in_nav - pages - {'index.md'})}"


READING_ORDER = ["Getting started", "Tasks and workers", "Features", "Operations", "Security", "Internals"]
GENERATED = {"cli-reference.md", "inspector-reference.md", "protocol-reference.md"}  # made by scripts/: as long as they need
MAX_LINES = 400


def test_the_index_links_every_page_in_reading_order_and_the_nav_follows_it() -> None:
    """Issue 44: docs/index.md is the site's table of contents, in reading order (getting started,
    tasks and workers, features, operations, security, internals); mkdocs.yml's nav has the same
    sections, with the same pages in the same order."""
    import yaml

    index = (DOCS / "index.md").read_text()
    sections = re.findall(r"^## (.+)$", index, re.MULTILINE)
    assert sections == READING_ORDER, sections
    by_section = {name: re.findall(r"^- \[[^\]]+\]\(([\w.-]+\.md)\)", body, re.MULTILINE)
                  for name, body in (s.split("\n", 1) for s in re.split(r"\n## ", index)[1:])}
    assert all(by_section.values()), by_section
    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    assert nav[0] == {"Home": "index.md"}
    in_nav = {name: [next(iter(p.values())) for p in pages] for item in nav[1:] for name, pages in item.items()}
    assert in_nav == by_section, (in_nav, by_section)


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_no_page_is_over_400_lines_but_generated_reference(page: str) -> None:
    """Issue 44: a reader finds things by page, not by scrolling; generated reference (the CLI's)
    is exempt."""
    lines = len((DOCS / page).read_text().splitlines())
    if page in GENERATED:
        return
    assert lines <= MAX_LINES, f"docs/{page} has {lines} lines (at most {MAX_LINES}): split it by subject"


def test_the_cli_reference_is_current_and_names_every_command() -> None:
    """docs/cli-reference.md is what scripts/cli_reference.py makes from the click commands now:
    a command, an option or a help text changed without running it fails here."""
    res = subprocess.run([sys.executable, "scripts/cli_reference.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    import click

    from asynqpy.cli.main import main

    page = (DOCS / "cli-reference.md").read_text()
    headings = set(re.findall(r"^## (asynqpy.*)$", page, re.MULTILINE))

    def paths(path: str, cmd: click.Command) -> list[str]:
        ctx = click.Context(cmd)
        subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)] if isinstance(cmd, click.Group) else []
        return [path] + [p for n, s in subs if s is not None and not s.hidden for p in paths(f"{path} {n}", s)]

    commands = paths("asynqpy", main)
    assert len(commands) > 50 and set(commands) == headings, sorted(set(commands) ^ headings)
    for path in commands:
        section = page.split(f"\n## {path}\n", 1)[1].split("\n## ", 1)[0]
        assert f"Usage: {path} " in section, path


def test_the_inspector_reference_is_current_and_names_every_method() -> None:
    """docs/inspector-reference.md is what scripts/inspector_reference.py makes from the Inspector's
    docstrings now: a method added, renamed or documented anew without running it fails here; every
    public method has a docstring, and AsyncInspector has the same methods."""
    import inspect

    from asynqpy import AsyncInspector, Inspector

    res = subprocess.run([sys.executable, "scripts/inspector_reference.py", "--check"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    public = {n for n in dir(Inspector) if not n.startswith("_") and callable(getattr(Inspector, n))}
    assert public == {n for n in dir(AsyncInspector) if not n.startswith("_") and callable(getattr(AsyncInspector, n))}
    assert [n for n in sorted(public) if not inspect.getdoc(getattr(Inspector, n))] == []
    page = (DOCS / "inspector-reference.md").read_text()
    headings = set(re.findall(r"^## (\w+)$", page, re.MULTILINE))
    assert len(public) > 40 and headings == public, sorted(headings ^ public)


def test_the_readme_links_only_pages_that_exist() -> None:
    """The README is the front door: each of its links into docs/ (and to its sections) leads somewhere."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\((docs/[^)#]+)(?:#([\w-]+))?\)", readme)
    assert len(links) > 20, links
    for path, anchor in links:
        target = ROOT / path
        assert target.exists(), path
        if anchor and target.suffix == ".md":
            slugs = {re.sub(r"[^\w\- ]", "", h).strip().lower().replace(" ", "-")
                     for h in re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)}
            assert anchor in slugs, f"{path}#{anchor}"
