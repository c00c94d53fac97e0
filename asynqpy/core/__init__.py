"""The sans-I/O core: what a task is and how every transition is described, with no Redis I/O.

Here: the key schema (``keys``), the stored message and its encoding (``codec``), signing,
validation of enqueue options (``options``), the broker (one ``Call`` per Lua script, the reply
codes and their typed errors; it calls each script by the names its header declares, read by
``scripts``, the loader of ``lua/``), the Inspector's plans (``inspection``), the task models (``task``),
errors, the clock, the retry policy and the ``ServeMux`` (routing).

May import: the standard library, msgpack, and redis-py's *exception classes* only. Nothing from
``asynqpy.redisio``, ``asynqpy.worker``, the facades or the CLI (``tests/test_layers.py``).
"""
