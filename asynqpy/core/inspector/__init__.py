"""What ``Inspector`` and ``AsyncInspector`` do, written once as plans (``plans``), and their reads and
actions on queues, tasks, groups and stats (``inspection``: the actions, over ``reads``, on the values
and building blocks of ``values``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
