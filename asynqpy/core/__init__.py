"""The sans-I/O core: what a task is and how every transition is described, with no Redis I/O.

Grouped by concern (the package map: docs/internals-layout.md): ``model`` (the task model, the
stored message and its encoding, errors, enqueue options), ``spine`` (the key schema, the stored
value's layout, the loader of ``lua/`` and the broker: one ``Call`` per Lua script, the reply codes
and their typed errors), ``handlers`` (routing, the outcome of an attempt, retries, sandboxed
frames), ``security`` (signing), ``facades`` (the Client's and the Inspector's plans, written once
for sync and async), ``servers``, ``text``, and one subpackage per feature holding its plans:
``cron``, ``workflows``, ``processes``, ``tenants``, ``holds``, ``limits``, ``results`` (with
events and task logs), ``rules``, ``inspection``.

May import: the standard library, msgpack, and redis-py's *exception classes* only. Nothing from
``asynqpy.redisio``, ``asynqpy.worker``, the facades or the CLI (``tests/test_layers.py``).
"""

# -- the flat layout's module paths (deprecated) ------------------------------------------------
# ``core/`` was one flat folder before issue 44 grouped it by concern. Code written against the
# old paths (``from asynqpy.core.keys import queue_keys``) keeps working for the deprecation period
# docs/releases.md states (two minor releases): each old module name is an alias of the module
# that holds its code now (the table of docs/internals-layout.md, which tests/test_names.py
# compares with this one). An old name that is a package now (``asynqpy.core.cron``) forwards the
# names its module had through the package's own ``__getattr__``.

import importlib as _importlib
import importlib.abc as _abc
import importlib.util as _util
import sys as _sys
from types import ModuleType as _ModuleType
from typing import Any as _Any

MOVED: dict[str, str] = {
    "codec": "model.codec", "task": "model.task", "errors": "model.errors", "kinds": "model.kinds",
    "options": "model.options", "argtypes": "model.argtypes", "clock": "model.clock",
    "humanize": "text.humanize", "jsontext": "text.jsontext", "scripts": "spine.scripts",
    "broker": "spine.broker", "keys": "spine.keys", "stored": "spine.stored", "twin": "spine.twin",
    "tracing": "spine.tracing", "mux": "handlers.mux", "outcome": "handlers.outcome",
    "retry": "handlers.retry", "sandbox": "handlers.sandbox", "signing": "security.signing",
    "client_plans": "client.plans", "inspector_plans": "inspector.plans",
    "inspection": "inspector.inspection", "server_record": "server.record", "control": "server.control",
    "cron": "cron.entries", "workflow": "workflows.records", "flows": "workflows.plans",
    "process": "processes.model", "processes": "processes.plans", "tenants": "tenants.plans",
    "holds": "deploy.holds", "deploy": "deploy.versions", "limits": "limits.plans", "serial": "limits.serial",
    "results": "results.plans", "events": "results.events", "tasklogs": "results.tasklogs",
    "rules": "rules.config",
}
"""Old module name (``asynqpy.core.<old>``) -> where its code is now (under ``asynqpy.core``)."""


class _Alias(_abc.MetaPathFinder, _abc.Loader):
    """Finds ``asynqpy.core.<old>`` (only when no module of that name exists: it is consulted
    last) and makes it the module that holds the code now."""

    def find_spec(self, name: str, path: _Any, target: _Any = None) -> _Any:
        old = name.removeprefix(__name__ + ".")
        if old == name or old not in MOVED:
            return None
        return _util.spec_from_loader(name, self)

    def create_module(self, spec: _Any) -> _ModuleType:
        return _importlib.import_module(f"{__name__}.{MOVED[spec.name.rsplit('.', 1)[1]]}")

    def exec_module(self, module: _ModuleType) -> None:
        pass  # (the module it stands for ran already)


def __getattr__(name: str) -> _ModuleType:
    """``from asynqpy.core import flows`` (an old module name): the module holding it now."""
    if name in MOVED:
        return _importlib.import_module(f"{__name__}.{MOVED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def forward(package: str, module: str) -> _Any:
    """A package's ``__getattr__`` forwarding the names its flat-layout module had (``module``,
    relative to ``package``): for an old module name that is a package now."""

    def __getattr__(name: str) -> _Any:
        # a dunder, or a submodule not imported yet (``from ..results import tasklogs`` asks the
        # package first): not forwarded, the import system goes on as usual
        if name.startswith("__") or _util.find_spec(f"{package}.{name}") is not None:
            raise AttributeError(name)
        return getattr(_importlib.import_module(f"{package}.{module}"), name)

    return __getattr__


if not any(isinstance(f, _Alias) for f in _sys.meta_path):
    _sys.meta_path.append(_Alias())
