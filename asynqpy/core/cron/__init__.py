"""Periodic tasks: entries, ticks, which tick is due, their calls (``entries``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
