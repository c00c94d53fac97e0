"""Durable functions: a run is a durable process; the replay and the Durable context (``replay``), the
clients' plans (``plans``), a run's tasks (``tasks``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
