"""Tenants of a queue: their settings and the page of tenants (``plans``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
