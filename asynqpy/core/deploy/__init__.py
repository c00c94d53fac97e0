"""Deploy holds: the version encoding and the held bands (``versions``); block and unblock a task type
(``holds``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""

from .. import forward as _forward

# the names of the flat layout's module asynqpy.core.deploy (deprecated: see asynqpy.core)
__getattr__ = _forward(__name__, "versions")
