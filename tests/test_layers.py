"""The package's layers and their one-way dependency rule, read from the source (no import runs):

    asynqpy.core  <-  asynqpy.redisio  <-  asynqpy.worker  <-  facades  <-  asynqpy.cli  <-  asynqpy.contrib

(facades: ``asynqpy`` itself, ``asynqpy.client``, ``asynqpy.inspector``, ``asynqpy.server``,
``asynqpy.cron``, ``asynqpy.limiter``, ``asynqpy.metrics``, ``asynqpy.otel``, ``asynqpy.workflows``, ``asynqpy.app``,
``asynqpy.rules``,
``asynqpy.testing``, the ``asynqpy.web`` package; ``asynqpy.contrib``: the framework integrations, on
top, importing what they need, imported by nothing, but for ``asynqpy.contrib.outbox``, the
SQLAlchemy outbox, which sits with the facades (:data:`PLACED`: the CLI runs its relay, and
``asynqpy.outbox``, its documented import, re-exports it)). A
module may import modules of its own layer and of the layers to its left, never to its right, and
no two modules may import each other, directly or through others (imports inside functions
count too). Each subpackage's ``__init__`` says what belongs in it.
"""

from __future__ import annotations

import ast
from pathlib import Path

from helpers import walked

ROOT = Path(__file__).resolve().parent.parent
LAYERS = {"core": 0, "redisio": 1, "worker": 2, "": 3, "cli": 4, "contrib": 5}
NAMES = ["core", "redisio", "worker", "facades", "cli", "contrib"]
PLACED = {"asynqpy.contrib.outbox": 3}
"""Packages in a folder whose layer they are not in: the outbox is an integration beside Django's
and FastAPI's, but a facade by its imports (core, redisio, the App) and its users (the CLI)."""


def _modules() -> dict[str, Path]:
    """Dotted module name -> file, for asynqpy/ and cli/ (installed as asynqpy.cli)."""
    out = {}
    for path in (ROOT / "asynqpy").rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    for path in (ROOT / "cli").glob("*.py"):
        name = "asynqpy.cli" if path.stem == "__init__" else f"asynqpy.cli.{path.stem}"
        out[name] = path
    return out


def _layer(module: str) -> int:
    for package, layer in PLACED.items():
        if module == package or module.startswith(package + "."):
            return layer
    parts = module.split(".")
    sub = parts[1] if len(parts) > 1 and parts[1] in LAYERS else ""
    return LAYERS[sub]


def _imports(module: str, path: Path, known: set[str]) -> set[str]:
    """The asynqpy modules ``module`` imports (a name imported from a package that is itself a
    module counts as that module)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in walked(path):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            targets = [origin] + [f"{origin}.{a.name}" for a in node.names]
        for t in targets:
            if t in known:
                found.add(t)
    found.discard(module)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {m: _imports(m, p, set(mods)) for m, p in mods.items()}


def test_every_import_points_down_or_sideways() -> None:
    upward = [f"{m} ({NAMES[_layer(m)]}) imports {t} ({NAMES[_layer(t)]})"
              for m, targets in _graph().items() for t in sorted(targets) if _layer(t) > _layer(m)]
    assert upward == []


def test_no_import_cycles() -> None:
    graph = _graph()
    # a package's __init__ re-exporting its modules is not a cycle with them
    edges = {m: {t for t in ts if not (m.startswith(t + ".") or t.startswith(m + ".") and m == "asynqpy")}
             for m, ts in graph.items()}
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(m: str, stack: list[str]) -> None:
        state[m] = 1
        for t in sorted(edges.get(m, ())):
            if state.get(t) == 1:
                cycles.append(stack[stack.index(t):] + [t])
            elif t not in state:
                visit(t, stack + [t])
        state[m] = 2

    for m in sorted(edges):
        if m not in state:
            visit(m, [m])
    assert cycles == []


def test_the_layers_hold_what_their_docstrings_say() -> None:
    mods = _modules()
    for sub in ("core", "redisio", "worker", "contrib"):
        doc = ast.get_docstring(ast.parse(mods[f"asynqpy.{sub}"].read_text()))
        assert doc and "May import" in doc, sub
    # the facades are few: everything else lives in a layer
    assert sorted(m for m in mods if m.count(".") == 1 and _layer(m) == 3) == [
        "asynqpy.app", "asynqpy.client", "asynqpy.cron", "asynqpy.inspector", "asynqpy.limiter", "asynqpy.metrics",
        "asynqpy.otel", "asynqpy.outbox", "asynqpy.rules", "asynqpy.server", "asynqpy.testing",
        "asynqpy.web",
        "asynqpy.workflows"]


def test_the_rule_test_itself_catches_an_upward_import(tmp_path: Path) -> None:
    bad = tmp_path / "probe.py"
    bad.write_text("from ..worker.processor import Processor\n")
    found = _imports("asynqpy.core.probe", bad, set(_modules()))
    assert found == {"asynqpy.worker.processor"} and _layer("asynqpy.worker.processor") > _layer("asynqpy.core.probe")


def test_every_package_is_in_the_wheel() -> None:
    """pyproject.toml lists its packages by hand (cli/ and lua/ are mapped into asynqpy): a new
    subpackage (core/ is grouped into them, docs/internals-layout.md) left out of the list would be
    missing from the wheel though every test run from the checkout passes; a package listed that
    moved away fails the build."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "asynqpy").rglob("__init__.py")}
    mapped = {"asynqpy.cli", "asynqpy.lua", "asynqpy.lua.includes"}  # from cli/ and lua/ (package-dir)
    assert (found - listed, listed - found - mapped) == (set(), set())


def test_the_outbox_import_is_a_thin_re_export() -> None:
    """``asynqpy.outbox`` (the documented import) defines nothing: it re-exports
    ``asynqpy.contrib.outbox``'s names, every one of them."""
    tree = ast.parse((ROOT / "asynqpy" / "outbox.py").read_text())
    body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
    imports = [n for n in body if isinstance(n, ast.ImportFrom)]
    assert {n.module for n in imports} == {"__future__", "contrib.outbox"}
    assert all(isinstance(n, ast.ImportFrom) or isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "__all__"
               for n in body)
    package = ast.parse((ROOT / "asynqpy" / "contrib" / "outbox" / "__init__.py").read_text())
    exported = [ast.literal_eval(n.value) for n in package.body if isinstance(n, ast.Assign)
                and ast.unparse(n.targets[0]) == "__all__"][0]
    assert sorted(a.name for n in imports if n.module == "contrib.outbox" for a in n.names) == sorted(exported)
