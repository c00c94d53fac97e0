"""The reference pages in docs/: the site builds offline (mkdocs --strict: no broken link between
pages), every python block compiles, and the pages whose examples are meant to run (RUNNABLE) run
as written, in order, against a real redis-server (``URL``: a scratch database)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import redis

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUNNABLE = ["results.md", "events.md", "tasks.md", "periodic.md", "groups.md", "flow.md", "workflows.md", "processes.md", "rules.md",
            "tenants.md", "deploy.md",
            "metrics.md",
            "tracing.md", "web.md", "migrating.md", "integrations-frameworks.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)


def blocks(page: Path) -> list[str]:
    return BLOCK.findall(page.read_text())


def test_the_site_builds_offline(tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                          "-d", str(tmp_path / "site")], capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert (tmp_path / "site" / "results" / "index.html").exists()


@pytest.mark.parametrize("page", sorted(p.name for p in DOCS.glob("*.md")))
def test_python_blocks_compile(page: str) -> None:
    for i, code in enumerate(blocks(DOCS / page)):
        compile(code, f"{page} block {i + 1}", "exec")


@pytest.mark.real
@pytest.mark.parametrize("page", RUNNABLE)
def test_examples_run_as_written(page: str, redis_url: str) -> None:
    url = redis_url.rsplit("/", 1)[0] + "/14"
    redis.Redis.from_url(url).flushdb()
    source = "\n".join(blocks(DOCS / page))
    assert source, f"{page} has no python block"
    res = subprocess.run([sys.executable, "-c", f"URL = {url!r}\n{source}"], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=False)
    assert res.returncode == 0, res.stdout + res.stderr


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
