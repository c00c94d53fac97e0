"""The rules engine: its configuration and what an event becomes (``config``), its templates
(``templates``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""

from .. import forward as _forward

# the names of the flat layout's module asynqpy.core.rules (deprecated: see asynqpy.core)
__getattr__ = _forward(__name__, "config")
