"""What a task leaves behind: outcomes for waiting callers (``plans``), the lifecycle event stream
(``events``), task logs (``tasklogs``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
