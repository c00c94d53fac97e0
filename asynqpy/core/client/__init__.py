"""What ``Client`` and ``AsyncClient`` do, written once as plans (``plans``), and what their sends
come back as (``replies``: ``TaskInfoList``, a batch's replies read).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
