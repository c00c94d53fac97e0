"""One place for each job every feature goes through: the key schema (``keys``), the stored value's
layout (``stored``), the loader of ``lua/`` (``scripts``), the broker (one ``Call`` per Lua script
and its reply codes: ``broker``, the calls of a task's life; ``calls``, its vocabulary;
``feature_calls`` and ``operator_calls``), sync and async from one plan (``twin``), the tracing
hook (``tracing``).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
