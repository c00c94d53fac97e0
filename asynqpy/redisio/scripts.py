"""The loader of the Lua scripts, for the executors: see :mod:`asynqpy.core.spine.scripts` (the core
reads each script's header, so that the broker builds its calls by name), and the loading of their
Redis Functions libraries by an administrator (:func:`load_functions`)."""

from __future__ import annotations

from typing import Any

from ..core.spine.scripts import Script, ScriptHeaderError, load_scripts

__all__ = ["Script", "ScriptHeaderError", "load_functions", "load_scripts"]


def load_functions(redis: Any) -> int:
    """Load every script's Redis Functions library on the server of the synchronous redis-py client
    ``redis`` (on a ``RedisCluster``: every master), as a user holding ``+function|load``: the
    deployment step of docs/security.md, whose roles call the functions (FCALL) but may not load
    them. Returns how many libraries were loaded (a loaded one is loaded again: REPLACE)."""
    scripts = load_scripts()
    where = {"target_nodes": redis.get_primaries()} if hasattr(redis, "get_primaries") else {}
    for name in scripts:
        redis.execute_command("FUNCTION", "LOAD", "REPLACE", scripts[name].library, **where)
    return len(scripts)
