"""Durable processes: their formats, types and decisions (``model``); the read and listing plans
(``plans``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""

from .. import forward as _forward

# the names of the flat layout's module asynqpy.core.processes (deprecated: see asynqpy.core)
__getattr__ = _forward(__name__, "plans")
