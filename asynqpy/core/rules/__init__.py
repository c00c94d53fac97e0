"""The rules engine: configuration, templates, actions (``config``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
