"""Queue limits: concurrency, rate, caps (``plans``); keyed serial execution's repair (``serial``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
