"""The rules engine: its configuration and what an event becomes (``config``), its templates
(``templates``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
