"""The worker's target in a Django project: ``app``, the project's App as a worker serves it
(:func:`~asynqpy.contrib.django.project_app`, its tasks modules imported, every handler closing
stale connections). Importing this module sets Django up (``DJANGO_SETTINGS_MODULE``) if it is not
yet, so the worker's child processes (``--processes N``) and a plain
``asynqpy worker asynqpy.contrib.django.worker:app`` work as ``manage.py asynqpy_worker`` does."""

from __future__ import annotations

import django
from django.apps import apps

from . import project_app, worker_app

if not apps.ready:
    django.setup()

app = worker_app(project_app())
