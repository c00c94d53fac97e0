"""Framework integrations, each behind its optional extra: ``asynqpy.contrib.django`` (``django``)
and ``asynqpy.contrib.fastapi`` (``fastapi``). Nothing here is imported by the rest of the package,
so the core install stays light.

May import: every layer (the facades, and ``asynqpy.cli``, whose ``worker`` command the Django
management command runs) and its framework (``tests/test_layers.py``).
"""
