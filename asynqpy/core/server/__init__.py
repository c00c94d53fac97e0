"""Live servers: their record (``record``) and remote control (``control``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
