"""Workflows: the records of ``lua/includes/flow.lua``, parent refs, failure policies (``records``);
the plans of ``enqueue(after=)`` and of the propagator (``plans``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
