"""``python manage.py asynqpy_worker [flags]``: ``asynqpy worker`` serving the project's App
(:mod:`asynqpy.contrib.django.worker`), with every flag of that command (``--help`` lists them)."""

from __future__ import annotations

import os
import sys
from typing import Any

from django.core.management.base import BaseCommand

TARGET = "asynqpy.contrib.django.worker:app"
DJANGO_VALUED = ("--settings", "--pythonpath")  # read by manage.py before the command runs


def worker_argv(argv: list[str]) -> list[str]:
    """The command's arguments without Django's ``--settings``/``--pythonpath`` (applied by
    manage.py already)."""
    out: list[str] = []
    skip = False
    for a in argv:
        if skip:
            skip = False
        elif a in DJANGO_VALUED:
            skip = True
        elif not a.startswith(tuple(f"{o}=" for o in DJANGO_VALUED)):
            out.append(a)
    return out


def run_worker(args: list[str]) -> None:
    """Run ``asynqpy worker <the project's App> *args`` in this process (it returns when the
    worker stops; exits with the command's status). ``sys.argv`` is set to that command line: with
    ``--processes N`` each child runs it again (and sets Django up from the environment,
    ``DJANGO_SETTINGS_MODULE``, with the project's directory on ``PYTHONPATH``)."""
    from asynqpy.cli.main import main

    argv = ["worker", TARGET, *args]
    if sys.path and sys.path[0]:
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (sys.path[0], os.environ.get("PYTHONPATH")) if p)
    sys.argv = [sys.argv[0] if sys.argv else "asynqpy", *argv]
    main.main(args=argv, prog_name="asynqpy")


class Command(BaseCommand):  # type: ignore[misc]  # (Django ships no types)
    help = ("Run an asynqpy worker for this project's tasks: `asynqpy worker` on the App of settings.ASYNQPY, "
            "with the same flags (--concurrency, --queues, --processes...; --help lists them).")

    def run_from_argv(self, argv: list[str]) -> None:
        # every argument goes to `asynqpy worker` (click parses them), not to Django's argparse
        run_worker(worker_argv(argv[2:]))

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("worker_args", nargs="*", help="flags of `asynqpy worker`")

    def handle(self, *args: Any, **options: Any) -> None:
        run_worker(list(options.get("worker_args") or []))
