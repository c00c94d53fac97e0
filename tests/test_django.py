"""asynqpy.contrib.django in a real Django project (tests/djangoproj): its own tests run under
pytest-django with asynqpy's pytest plugin, and ``manage.py asynqpy_worker`` serves a task
enqueued on commit, against a real redis-server. The database: PostgreSQL when the test session
has one (tests/pgserver.py), else a SQLite file."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("django")
pytest.importorskip("pytest_django")

PROJECT = Path(__file__).parent / "djangoproj"


def _env(db: str, redis_url: str | None = None) -> dict[str, str]:
    env = {**os.environ, "ASYNQPY_DJANGO_DB": db, "DJANGO_SETTINGS_MODULE": "djangoproj.settings",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(PROJECT)}
    if redis_url:
        env["ASYNQPY_REDIS_URL"] = redis_url
    return env


@pytest.fixture
def project_db(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The project's database: a PostgreSQL database of its own (tests/pgserver.py), or in the
    fast tier (nothing real started) a SQLite file."""
    if os.environ.get("ASYNQPY_FAST") == "1":
        return str(tmp_path / "db.sqlite3")
    url: str = request.getfixturevalue("pg_url")
    return url.replace("postgresql+psycopg://", "postgresql://")


def test_the_project_passes_its_tests_under_pytest_django(project_db: str, tmp_path: Path) -> None:
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_django.plugin",
                          "-p", "asynqpy.testing", "--confcutdir", str(PROJECT), "--rootdir", str(PROJECT),
                          str(PROJECT / "checks_django.py")],
                         cwd=PROJECT, env={**_env(project_db), "ASYNQPY_TEST_MEMORY": "1"},
                         capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0, res.stdout + res.stderr
    passed = re.search(r"^(\d+) passed", res.stdout, re.M)
    # on PostgreSQL the connection checks run too (the outbox's: once asynqpy.outbox is there)
    assert passed and int(passed[1]) >= (6 if project_db.startswith("postgres") else 4), res.stdout
    assert "warning" not in res.stdout, res.stdout  # (a connection left open by a worker thread: "Error when
    # trying to teardown test databases ... being accessed by other users")


@pytest.mark.real
def test_manage_py_asynqpy_worker_serves_a_task_enqueued_on_commit(project_db: str, redis_url: str) -> None:
    from asynqpy import Client

    env = _env(project_db, redis_url)
    manage = [sys.executable, str(PROJECT / "manage.py")]
    made = subprocess.run([*manage, "shell", "-c", (  # one Django process: migrate, then a transaction
        "from django.core.management import call_command\n"
        "call_command('migrate', verbosity=0)\n"
        "from django.db import transaction\n"
        "from asynqpy.contrib.django import enqueue_on_commit\n"
        "from shop.models import Order\n"
        "from shop.tasks import mark_paid\n"
        "with transaction.atomic():\n"
        "    order = Order.objects.create(note='from the shell')\n"
        "    print(enqueue_on_commit(mark_paid, order.id))\n")],
        cwd=PROJECT, env=env, capture_output=True, text=True, check=True, timeout=60)
    task_id = made.stdout.split()[-1]  # (Django 5.2: the shell says what it imported first)
    worker = subprocess.Popen([*manage, "asynqpy_worker", "--concurrency", "1", "--settings", "djangoproj.settings",
                               "--shutdown-timeout", "1"], cwd=PROJECT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        with Client(redis_url) as client:
            got: Any = client.result(task_id, queue="shop", timeout=30)
        assert got["paid"] is True and got["note"] == "from the shell" and got["pid"] == worker.pid
    finally:
        worker.send_signal(signal.SIGTERM)
        out, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, out
