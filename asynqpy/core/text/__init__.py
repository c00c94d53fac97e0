"""Values as people and JSON read them: ``humanize`` (the CLI, the dashboard, the web console),
``jsontext`` (``--json``, the console's API).

Part of the sans-I/O core (:mod:`asynqpy.core`; the package map: docs/internals-layout.md).
"""
