"""One name per feature in every layer (issue 44 #3 and #6): a feature's sans-I/O code in
``asynqpy/core/<name>/``, its facade ``asynqpy/<name>.py``, its worker loop
``asynqpy/worker/<name>.py``, its CLI module ``cli/<name>.py``, its web console routes
``asynqpy/web/routes/<name>.py`` and its page ``docs/<name>.md`` carry the same name, so a reader
who knows one finds the others (the package map: docs/internals-layout.md).

The table below says which layers each feature has (None: none there). A name that diverges, a
file that is missing, or an old name that comes back (``worker/scheduler.py`` beside
``core/cron/``) fails. The CLI and the web console name the thing a command or a page acts on, in
the singular like ``queue``, ``task`` and ``server`` or the plural like ``rules``: either form of the
feature's name is accepted there, nothing else.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Names:
    """Where a feature lives in each layer, as a path from the repository root (None: nowhere)."""

    core: str | None = None  # a subpackage of asynqpy/core/, or a module in one
    facade: str | None = None  # asynqpy/<name>.py, or a package
    worker: str | None = None  # the server's loop: asynqpy/worker/<name>.py
    cli: str | None = None  # cli/<name>.py
    command: str | None = None  # the top-level command cli/<name>.py defines
    web: str | None = None  # the console's routes: asynqpy/web/routes/<name>.py
    docs: str | None = None  # docs/<name>.md


FEATURES: dict[str, Names] = {
    "cron": Names(core="asynqpy/core/cron", facade="asynqpy/cron.py", worker="asynqpy/worker/cron.py",
                  cli="cli/cron.py", command="cron", web="asynqpy/web/routes/cron.py", docs="docs/cron.md"),
    "workflows": Names(core="asynqpy/core/workflows", facade="asynqpy/workflows.py",
                       worker="asynqpy/worker/workflows.py", docs="docs/workflows.md"),
    "processes": Names(core="asynqpy/core/processes", cli="cli/processes.py", command="process",
                       web="asynqpy/web/routes/processes.py", docs="docs/processes.md"),
    "rules": Names(core="asynqpy/core/rules", facade="asynqpy/rules.py", worker="asynqpy/worker/rules.py",
                   cli="cli/rules.py", command="rules", docs="docs/rules.md"),
    "tenants": Names(core="asynqpy/core/tenants", web="asynqpy/web/routes/tenants.py", docs="docs/tenants.md"),
    "events": Names(core="asynqpy/core/results/events.py", cli="cli/events.py", command="events",
                    docs="docs/events.md"),
    "results": Names(core="asynqpy/core/results", docs="docs/results.md"),
    "durable": Names(core="asynqpy/core/durable", cli="cli/durable.py", command="durable",
                     web="asynqpy/web/routes/durable.py", docs="docs/durable.md"),
    "deploy": Names(core="asynqpy/core/deploy", docs="docs/deploy.md"),
    "client": Names(core="asynqpy/core/client", facade="asynqpy/client.py", docs="docs/client.md"),
    "inspector": Names(core="asynqpy/core/inspector", facade="asynqpy/inspector.py", docs="docs/inspector.md"),
    "server": Names(core="asynqpy/core/server", facade="asynqpy/server.py", cli="cli/server.py", command="server",
                    web="asynqpy/web/routes/servers.py", docs="docs/server.md"),
    "metrics": Names(facade="asynqpy/metrics.py", worker="asynqpy/worker/metrics.py", cli="cli/metrics.py",
                     command="metrics", docs="docs/metrics.md"),
    "web": Names(facade="asynqpy/web", cli="cli/web.py", command="web", docs="docs/web.md"),
    "offload": Names(core="asynqpy/core/offload", worker="asynqpy/worker/offload.py", docs="docs/offload.md"),
}

RETIRED = {
    "scheduler": "cron", "periodic": "cron", "propagator": "workflows", "flows": "workflows",
    "workflow": "workflows", "process": "processes",
}
"""Old names of features, which no module or page of the layers may carry again (the CLI's
``asynqpy scheduler`` and ``process`` commands stay: they are commands, not modules)."""

LAYER_DIRS = ("asynqpy", "asynqpy/worker", "asynqpy/web/routes", "cli")


def _stem(path: str) -> str:
    return Path(path).name.removesuffix(".py").removesuffix(".md")


def _forms(feature: str) -> set[str]:
    """The feature's name, singular or plural (``processes``, ``process``; ``server``, ``servers``)."""
    return {feature, feature.removesuffix("es"), feature.removesuffix("s"), feature + "s"}


def _lazy_commands() -> dict[str, str]:
    """The CLI's top-level command -> the module that defines it: cli/main.py's ``lazy`` table,
    read from the source (the group pops an entry when it loads the command)."""
    tree = ast.parse((ROOT / "cli" / "main.py").read_text(encoding="utf-8"))
    table = next(k.value for node in ast.walk(tree) if isinstance(node, ast.Call)
                 for k in node.keywords if k.arg == "lazy")
    lazy: dict[str, str] = ast.literal_eval(table)
    return {name: target.partition(":")[0].lstrip(".") for name, target in lazy.items()}


def divergences(features: dict[str, Names], root: Path = ROOT) -> list[str]:
    """Every way ``features`` disagrees with itself or with the tree under ``root``."""
    out: list[str] = []
    commands = _lazy_commands()
    for feature, names in features.items():
        for layer in ("core", "facade", "worker", "cli", "web", "docs"):
            path = getattr(names, layer)
            if path is None:
                continue
            if not (root / path).exists():
                out.append(f"{feature}: {layer} {path} is missing")
            allowed = _forms(feature) if layer in ("cli", "web") else {feature}
            if _stem(path) not in allowed:
                out.append(f"{feature}: {layer} {path} is not named {feature}")
        if names.cli is not None:
            if names.command is None or names.command not in _forms(feature):
                out.append(f"{feature}: the command {names.command!r} is not named {feature}")
            elif commands.get(names.command) != _stem(names.cli):
                out.append(f"{feature}: the command {names.command!r} is not defined in {names.cli}")
    return out


def test_every_feature_has_one_name_in_every_layer() -> None:
    assert divergences(FEATURES) == []


def test_no_old_name_comes_back() -> None:
    found = [f"{folder}/{old}.py (now {new})" for folder in LAYER_DIRS for old, new in RETIRED.items()
             if (ROOT / folder / f"{old}.py").exists()]
    found += [f"asynqpy/core/{p.relative_to(ROOT / 'asynqpy' / 'core')} (now {RETIRED[p.stem]})"
              for p in (ROOT / "asynqpy" / "core").rglob("*.py") if p.stem in RETIRED]
    found += [f"docs/{old}.md (now {new})" for old, new in RETIRED.items() if (ROOT / "docs" / f"{old}.md").exists()]
    assert found == []


def test_every_core_feature_subpackage_is_in_the_table_or_a_concern() -> None:
    """A new subpackage of core/ is either a feature (in the table, with its other layers) or one
    of the concerns every feature shares."""
    concerns = {"model", "spine", "handlers", "security", "text", "limits"}  # limits: docs/flow.md
    subs = {p.parent.name for p in (ROOT / "asynqpy" / "core").glob("*/__init__.py")}
    table = {Path(n.core).parts[2] for n in FEATURES.values() if n.core}
    assert subs - table - concerns == set()


@pytest.mark.parametrize("layer,wrong", [
    ("facade", "asynqpy/scheduler.py"),  # the name the facade had before
    ("worker", "asynqpy/worker/propagator.py"),
    ("docs", "docs/periodic.md"),
    ("core", "asynqpy/core/flows"),
])
def test_the_check_catches_a_diverging_name(layer: str, wrong: str) -> None:
    broken = dict(FEATURES)
    feature = {"facade": "cron", "worker": "workflows", "docs": "cron", "core": "workflows"}[layer]
    broken[feature] = replace(FEATURES[feature], **{layer: wrong})
    found = divergences(broken)
    assert f"{feature}: {layer} {wrong} is not named {feature}" in found
    assert f"{feature}: {layer} {wrong} is missing" in found  # the old file is gone too


def test_the_check_catches_a_command_defined_elsewhere() -> None:
    broken = dict(FEATURES)
    broken["processes"] = replace(FEATURES["processes"], cli="cli/cron.py")
    assert divergences(broken) == ["processes: cli cli/cron.py is not named processes",
                                   "processes: the command 'process' is not defined in cli/cron.py"]


def test_the_flat_layouts_module_paths_still_import() -> None:
    """Code written against the flat ``core/`` (``from asynqpy.core.keys import queue_keys``, the
    defect repros among it) keeps working through the deprecation period: every old path of
    docs/internals-layout.md's table is the module holding its code now (asynqpy.core.MOVED, which
    must be that table), and an old name that is a package now forwards its module's names."""
    import importlib
    import re

    import asynqpy.core as core

    text = (ROOT / "docs" / "internals-layout.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| asynqpy\.core\.(\w+) \| asynqpy\.core\.([\w.]+) \|$", text, re.M))
    assert core.MOVED == table
    for old, new in table.items():
        now = importlib.import_module(f"asynqpy.core.{new}")
        was = importlib.import_module(f"asynqpy.core.{old}")
        if was is not now:  # a package now: the old module's names through it
            public = [n for n in vars(now) if not n.startswith("_")]
            assert public and all(getattr(was, n) is getattr(now, n) for n in public), old
        assert getattr(core, old) is not None
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("asynqpy.core.no_such_module")
