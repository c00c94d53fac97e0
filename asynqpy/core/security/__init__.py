"""HMAC signing of stored messages and the trust gate (``signing``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
