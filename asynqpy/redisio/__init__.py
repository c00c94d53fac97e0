"""Redis I/O: clients from URLs (single server, Cluster, Sentinel), the executors that run the
core's ``Call``s (sync and async, singly or pipelined, one pipeline per cluster master) and the
loader of the Lua scripts.

May import: ``asynqpy.core``, redis-py, hiredis. Not ``asynqpy.worker``, the facades or the CLI
(``tests/test_layers.py``).
"""
