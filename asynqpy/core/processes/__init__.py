"""Durable processes: their formats, types and decisions (``model``); the read and listing plans
(``plans``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
