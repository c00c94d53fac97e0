"""The loader of the Lua scripts, for the executors: see :mod:`asynqpy.core.spine.scripts` (the core
reads each script's header, so that the broker builds its calls by name)."""

from __future__ import annotations

from ..core.spine.scripts import Script, ScriptHeaderError, load_scripts

__all__ = ["Script", "ScriptHeaderError", "load_scripts"]
