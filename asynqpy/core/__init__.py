"""The sans-I/O core: what a task is and how every transition is described, with no Redis I/O.

Grouped by concern (the package map: docs/internals-layout.md): ``model`` (the task model, the
stored message and its encoding, errors, enqueue options), ``spine`` (the key schema, the stored
value's layout, the loader of ``lua/`` and the broker: one ``Call`` per Lua script, the reply codes
and their typed errors), ``handlers`` (routing, the outcome of an attempt, retries, sandboxed
frames), ``security`` (signing), ``facades`` (the Client's and the Inspector's plans, written once
for sync and async), ``servers``, ``text``, and one subpackage per feature holding its plans:
``cron``, ``workflows``, ``processes``, ``tenants``, ``holds``, ``limits``, ``results`` (with
events and task logs), ``rules``, ``inspection``.

May import: the standard library, msgpack, and redis-py's *exception classes* only. Nothing from
``asynqpy.redisio``, ``asynqpy.worker``, the facades or the CLI (``tests/test_layers.py``).
"""
