"""The in-process store (``memory://``, fakeredis with Lua) compiles each script once, as Redis does.

fakeredis runs a script by compiling its source on every EVAL/EVALSHA (``LuaRuntime.execute``).
asynqpy's scripts carry their includes (10–20 KB of Lua each), so compiling took most of the time
of a script call: milliseconds where the call itself takes tens of microseconds. Redis compiles a
script once, when it is loaded, into a function it calls on each EVALSHA; :func:`install` makes
fakeredis do the same, keeping each compiled chunk by its source in the store's Lua runtime.

What a script sees is unchanged: a compiled chunk is called afresh on each call (its locals are
new), KEYS and ARGV are the globals fakeredis sets before the call, and fakeredis's own checks
(no global written by a script) still run. If fakeredis changes the internals this relies on
(``_get_server_runtime``, a runtime with ``execute`` and ``compile``), :func:`install` does
nothing and scripts run as fakeredis runs them.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

log = logging.getLogger("asynqpy.memory")

_installed = False
_lock = threading.Lock()


class _CompilingRuntime:
    """A fakeredis server's Lua runtime whose ``execute`` compiles a given source once."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime
        self._chunks: dict[bytes | str, Any] = {}

    def execute(self, source: bytes | str, *args: Any) -> Any:
        chunk = self._chunks.get(source)
        if chunk is None:
            if len(self._chunks) > 1000:  # scripts written by hand, one per call: keep it bounded
                self._chunks.clear()
            chunk = self._chunks[source] = self._runtime.compile(source)
        return chunk(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)


def install() -> bool:
    """Make fakeredis (in this process) compile each script source once. Idempotent; returns
    whether it is in effect."""
    global _installed
    with _lock:
        if _installed:
            return True
        try:
            from fakeredis.commands_mixins.scripting_mixin import ScriptingCommandsMixin
        except ImportError:
            return False
        original = getattr(ScriptingCommandsMixin, "_get_server_runtime", None)
        if original is None:
            log.debug("fakeredis has no _get_server_runtime: scripts are compiled on each call")
            return False

        def _get_server_runtime(self: Any, server: Any) -> Any:
            runtime = original(self, server)
            if not isinstance(runtime, _CompilingRuntime) and hasattr(runtime, "compile"):
                runtime = server._lua_runtime = _CompilingRuntime(runtime)
            return runtime

        ScriptingCommandsMixin._get_server_runtime = _get_server_runtime  # type: ignore[method-assign]
        _installed = True
        return True
