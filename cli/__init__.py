"""The ``asynqpy`` command line (installed as the ``asynqpy.cli`` package)."""
