"""What ``Client`` and ``AsyncClient`` do, written once as plans (``plans``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
