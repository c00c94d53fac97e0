"""The task model and its encoding: ``Task``, ``TaskInfo``, the stored ``Message`` (``codec``), errors,
enqueue options (``options``; the checks of single values: ``checks``) and the kind of task they
make (``kinds``), argument checks (``argtypes``), the clock.

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
