"""Deploy holds: the version encoding and the held bands (``versions``); block and unblock a task type
(``holds``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
