"""Run by tests/test_django.py under pytest-django (``--ds djangoproj.settings``) with asynqpy's
pytest plugin: the fixtures ``asynqpy_url`` and ``asynqpy_drain`` in a Django project's tests."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from shop import tasks
from shop.models import Order

from asynqpy import App, Client, Inspector
from asynqpy.contrib.django import DjangoApp, enqueue_on_commit, project_app, worker_app


@pytest.fixture
def app(asynqpy_url: str) -> Any:
    tasks.app.redis = asynqpy_url
    tasks.SEEN.clear()
    return tasks.app


def test_the_settings_are_the_apps_arguments(settings: Any) -> None:
    assert project_app() is tasks.app  # found by autodiscovery: shop/tasks.py
    assert tasks.app.default_queue == "shop" and tasks.app.name == "shop.tasks"
    assert tasks.app.server().options.concurrency == 2
    assert tasks.app.server().options.queues == {"shop": 1}
    settings.ASYNQPY = {"redis": "memory://x", "concurency": 3}
    with pytest.raises(ImproperlyConfigured, match="concurency.*concurrency"):
        DjangoApp()


@pytest.mark.django_db(transaction=True)
def test_enqueued_when_the_transaction_commits_never_after_a_rollback(app: Any, asynqpy_url: str) -> None:
    insp = Inspector(asynqpy_url)
    with transaction.atomic():
        order = Order.objects.create()
        id = enqueue_on_commit(tasks.mark_paid, order.id)
        assert "shop" not in insp.queues()  # not before the commit
    assert id is not None and insp.task_info("shop", id).payload == {"order_id": order.id}
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_on_commit("shop.tasks.mark_paid", {"order_id": 0}, queue="shop")
        raise RuntimeError("rolled back")
    with pytest.raises(Exception, match="extra"):  # checked at the call, in the transaction
        enqueue_on_commit(tasks.mark_paid, order_id="1", extra=2)  # type: ignore[call-arg]
    assert insp.queue_info("shop").size == 1
    now = enqueue_on_commit("shop.tasks.mark_paid", {"order_id": order.id}, queue="shop")  # no transaction: at once
    assert now is not None and insp.task_info("shop", now).state.value == "pending"


@pytest.mark.django_db(transaction=True)
def test_drain_runs_orm_tasks_with_fresh_connections(app: Any, asynqpy_drain: Any) -> None:
    order = Order.objects.create()
    with transaction.atomic():
        enqueue_on_commit(tasks.mark_paid, order.id)
        enqueue_on_commit(tasks.mark_paid, order.id)
        enqueue_on_commit(tasks.note, order.id, "async ORM")
    asynqpy_drain(app, concurrency=1)  # one thread: the second task meets what the first left
    order.refresh_from_db()
    assert order.paid and order.note == "async ORM"
    assert tasks.SEEN == [False, False]  # CONN_MAX_AGE=0: each task's connection closed after it


@pytest.mark.django_db(transaction=True)
def test_a_plain_app_leaves_the_threads_connection_open(asynqpy_url: str, asynqpy_drain: Any) -> None:
    plain = App(asynqpy_url, default_queue="shop")
    paid = plain.task(tasks.mark_paid.fn)  # the same function, without the connection handling

    @plain.task
    def close() -> None:  # else the thread's connection outlives the test: the test database cannot be dropped
        connection.close()

    order = Order.objects.create()
    with Client(asynqpy_url) as c:
        for _ in range(2):
            c.enqueue(paid.name, {"order_id": order.id}, queue="shop")
        c.enqueue(close.name, {}, queue="shop")
    tasks.SEEN.clear()
    asynqpy_drain(plain, concurrency=1)
    assert tasks.SEEN == [False, True]  # what DjangoApp prevents (the check above can fail)
    assert worker_app(plain).mux is not plain.mux and worker_app(tasks.app) is tasks.app


@pytest.mark.django_db(transaction=True)
def test_the_outbox_on_djangos_connection(app: Any, asynqpy_url: str, asynqpy_drain: Any) -> None:
    outbox_module = pytest.importorskip("asynqpy.outbox")  # (the sqlalchemy extra)
    from asynqpy.contrib.django.outbox import DjangoOutbox, sqlalchemy_url

    outbox = DjangoOutbox()
    outbox.create_table()
    outbox.create_table()  # (once)
    kept = Order.objects.create()
    with transaction.atomic():
        lost = Order.objects.create()
        id = outbox.enqueue(tasks.mark_paid, kept.id)
        with pytest.raises(Exception, match="extra"):  # checked before anything is written
            outbox.enqueue(tasks.mark_paid, kept.id, extra=1)  # type: ignore[call-arg]
    with pytest.raises(RuntimeError), transaction.atomic():
        outbox.enqueue("shop.tasks.mark_paid", {"order_id": lost.id}, queue="shop")
        raise RuntimeError("rolled back: no row")
    relay = outbox_module.Relay(sqlalchemy_url(), asynqpy_url)  # the test database's URL
    try:
        sent = relay.relay_once()
    finally:
        relay.engine.dispose()  # its pooled connection: else the test database cannot be dropped
    assert sent.stored == 1 and Inspector(asynqpy_url).task_info("shop", id).payload == {"order_id": kept.id}
    asynqpy_drain(app)
    kept.refresh_from_db()
    lost.refresh_from_db()
    assert kept.paid and not lost.paid


@pytest.mark.django_db(transaction=True)
def test_the_django_outbox_signs_its_rows_and_names_bring_declared_options(app: Any, asynqpy_url: str) -> None:
    """Issue 42: DjangoOutbox signs each row (its key, else the project App's); the relay verifies
    and sets aside a row written by plain SQL; a task type given by name brings the options its
    task function declares in the project's App (mark_paid: retention=60), as enqueue_on_commit does."""
    outbox_module = pytest.importorskip("asynqpy.outbox")
    from asynqpy.contrib.django.outbox import DjangoOutbox, sqlalchemy_url

    key = b"d" * 32
    outbox = DjangoOutbox(signing_key=key)
    outbox.create_table()
    order = Order.objects.create()
    with transaction.atomic():
        by_name = outbox.enqueue("shop.tasks.mark_paid", {"order_id": order.id})
        with pytest.raises(Exception, match="extra"):  # the function's argument checks, by name too
            outbox.enqueue("shop.tasks.mark_paid", {"order_id": order.id, "extra": 2})
        row = outbox_module.Outbox(None, app=tasks.app).row("shop.tasks.mark_paid", {"order_id": order.id},
                                                              task_id="forged")
        with connection.cursor() as cursor:  # any database writer, without the key
            cursor.execute(outbox._insert_sql(list(row)), list(row.values()))
    on_commit = enqueue_on_commit("shop.tasks.mark_paid", {"order_id": order.id})
    relay = outbox_module.Relay(sqlalchemy_url(), asynqpy_url, signing_key=key)
    try:
        sent = relay.relay_once()
        aside = relay.set_aside()
    finally:
        relay.engine.dispose()
    assert (sent.stored, sent.set_aside) == (1, 1), sent
    assert [(r.id, r.error) for r in aside] == [("forged", "bad signature: the message is not signed")]
    insp = Inspector(asynqpy_url)
    assert insp.task_info("shop", by_name).retention == 60
    assert on_commit is not None and insp.task_info("shop", on_commit).retention == 60


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("kind", ["DjangoApp", "plain App"])
def test_a_connection_the_database_ended_is_replaced_before_the_next_task(kind: str, app: Any, asynqpy_url: str,
                                                                            asynqpy_drain: Any) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL ends a backend here")
    db = connection.settings_dict  # (the dict every thread's connection reads)
    saved = db["CONN_MAX_AGE"], db["CONN_HEALTH_CHECKS"]
    db["CONN_MAX_AGE"], db["CONN_HEALTH_CHECKS"] = None, True  # persistent connections, checked when reused
    target = app if kind == "DjangoApp" else App(asynqpy_url, default_queue="shop")
    if kind == "plain App":
        target.task(tasks.kill_my_connection)

        @target.task(max_retry=0)
        def close() -> None:
            connection.close()

        paid = target.task(max_retry=0)(tasks.mark_paid.fn)
    else:
        paid = tasks.mark_paid.using(max_retry=0)
    order = Order.objects.create()
    try:
        with Client(asynqpy_url) as c:  # one thread (concurrency=1), in this order
            c.enqueue("shop.tasks.kill_my_connection", {}, queue="shop")
            c.enqueue(paid.name, {"order_id": order.id}, queue="shop", max_retry=0)
            if kind == "plain App":
                c.enqueue(close.name, {}, queue="shop")
        report = asynqpy_drain(target, concurrency=1, raise_on_failure=False)
    finally:
        db["CONN_MAX_AGE"], db["CONN_HEALTH_CHECKS"] = saved
    order.refresh_from_db()
    if kind == "DjangoApp":
        assert report.failed == [] and order.paid  # the dead connection was found and replaced
        with connection.cursor() as cursor:  # and the one kept between tasks was closed when the server stopped
            cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                           "AND pid <> pg_backend_pid()")
            assert cursor.fetchone()[0] == 0
    else:  # what happens without it: the next task meets the dead connection
        assert [t.type for t in report.failed] == ["shop.tasks.mark_paid"] and not order.paid
        assert "connection" in report.failed[0].last_error.lower()


def test_every_way_of_registering_a_handler_gets_the_connection_handling() -> None:
    from asynqpy.contrib.django import DjangoServeMux, django_mux
    from asynqpy.core.handlers.sandbox import Sandboxed
    from asynqpy.core.processes.model import ProcessHandler

    mux = DjangoServeMux()

    @mux.handle("plain")
    def plain(task: Any) -> int:
        return 1

    async def coro(task: Any) -> int:
        return 2

    mux.handle("coro", coro)
    mux.process("proc")(coro)
    mux.handle("boxed", tasks.kill_my_connection, sandbox=True)  # runs in a child process: left alone
    wrapped = {p: mux.match(p) for p in mux.patterns}
    assert getattr(wrapped["plain"], "__asynqpy_django__", False) and wrapped["plain"].__wrapped__ is plain
    assert getattr(wrapped["coro"], "__asynqpy_django__", False) and wrapped["coro"].__wrapped__ is coro
    proc = wrapped["process:proc"]
    assert isinstance(proc, ProcessHandler) and proc.is_async and proc.fn.__wrapped__ is coro
    assert isinstance(wrapped["boxed"], Sandboxed)
    assert django_mux(mux) is mux and isinstance(django_mux(App().mux), DjangoServeMux)
