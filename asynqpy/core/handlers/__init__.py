"""What happens to an attempt: routing (``mux``), sandboxed handlers' frames (``sandbox``), the retry
policy (``retry``), the outcome decision (``outcome.decide``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
