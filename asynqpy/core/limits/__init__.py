"""Queue limits: concurrency, rate, caps (``plans``); keyed serial execution's repair (``serial``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""

from .. import forward as _forward

# the names of the flat layout's module asynqpy.core.limits (deprecated: see asynqpy.core)
__getattr__ = _forward(__name__, "plans")
