"""Integrations, each behind its optional extra: ``asynqpy.contrib.django`` (``django``),
``asynqpy.contrib.fastapi`` (``fastapi``) and ``asynqpy.contrib.outbox``, the transactional outbox
(``sqlalchemy``). Nothing here is imported by the rest of the package (the core install stays
light), except the outbox: it sits with the facades by its imports, the CLI runs its relay
(``asynqpy outbox``, ``worker --outbox``) and ``asynqpy.outbox``, its documented import,
re-exports it (``tests/test_layers.py``, ``PLACED``).

May import: every layer (the facades, and ``asynqpy.cli``, whose ``worker`` command the Django
management command runs) and its framework; the outbox, only the layers below the CLI
(``tests/test_layers.py``).
"""
