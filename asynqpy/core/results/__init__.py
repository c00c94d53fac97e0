"""What a task leaves behind: outcomes for waiting callers (``plans``), the lifecycle event stream
(``events``), task logs (``tasklogs``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""

from .. import forward as _forward

# the names of the flat layout's module asynqpy.core.results (deprecated: see asynqpy.core)
__getattr__ = _forward(__name__, "plans")
