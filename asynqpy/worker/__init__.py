"""The worker: what runs inside a ``Server``. ``settings`` (ServerOptions), ``context`` (what the
loops share, and one log line per Redis outage), one module per loop — ``processor`` (fetch, run,
finish; the path of a task from dequeue to done reads top-down there), ``writer`` (the writes of
outcomes, batched and retried, and of progress), ``heartbeat``, ``forwarder``, ``recoverer``,
``janitor``, ``canceller``, ``scheduler`` (periodic tasks) — the processor's parts: ``runner`` (how a
handler runs: thread pool, sandbox, a process's input; the on_failure hook) and ``queues`` (which
queue the next dequeue tries) — the idle wait (``wake``), the event-loop ``watchdog``, the thread
pool, the process ``supervisor``, the log set-up (``logs``) and the worker's Prometheus ``metrics``.

May import: ``asynqpy.core``, ``asynqpy.redisio``. Not the facades (``asynqpy.client``,
``asynqpy.inspector``, ``asynqpy.server``) or the CLI (``tests/test_layers.py``).
"""
