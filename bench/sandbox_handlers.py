"""Helpers importable by sandbox children (bench/sandbox.py puts bench/ on sys.path)."""

from __future__ import annotations

import time

from asynqpy import Task


def noop(task: Task) -> None:
    return None


def hang(task: Task) -> None:
    time.sleep(3600)
