"""The Django app config: ``INSTALLED_APPS = [..., "asynqpy.contrib.django"]`` brings the
``asynqpy_worker`` management command (the label is ``asynqpy``)."""

from __future__ import annotations

from django.apps import AppConfig


class AsynqpyConfig(AppConfig):  # type: ignore[misc]  # (Django ships no types)
    name = "asynqpy.contrib.django"
    label = "asynqpy"
    verbose_name = "asynqpy"
