"""asynqpy in a Django project (``pip install '.[django]'` from a clone`; docs/integrations-frameworks.md).

- ``settings.ASYNQPY = {...}``: the keyword arguments of :class:`asynqpy.App` (``redis``,
  ``default_queue``, ``signing_key``, ``name``) and of the server (the fields of
  :class:`asynqpy.worker.settings.ServerOptions`: ``concurrency``, ``queues``, ``lease``...), plus
  ``app`` (``"module:attribute"`` of the project's App, when there is more than one) and
  ``autodiscover`` (the module the worker imports in every installed app, default ``"tasks"``;
  None: none). One configuration, the App's: nothing else is read.
- :class:`DjangoApp`: an :class:`~asynqpy.App` configured from the settings whose handlers close
  the thread's stale database connections before and after each task (Django's
  ``close_old_connections``, as its request cycle does).
- :func:`enqueue_on_commit`: enqueue when the current transaction commits (``transaction.on_commit``),
  never after a rollback. Not durable: a process that dies between the commit and the enqueue loses
  the task (the outbox is the durable way).
- ``python manage.py asynqpy_worker [asynqpy worker flags]`` (add ``"asynqpy.contrib.django"`` to
  ``INSTALLED_APPS``): the ``asynqpy worker`` command on the project's App, its tasks modules
  imported.

Why the connections are handled per handler and not in a middleware: a middleware
(``ServeMux.use``) runs on the worker's event loop, but a plain ``def`` handler runs on a thread of
the worker's pool, and Django's connections belong to the thread that opened them. So the handler
itself is wrapped (:func:`with_connections`), in the thread that runs it; an ``async def`` handler's
ORM calls run on asgiref's one sync thread, where its wrapper closes them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import sys
import threading
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections, connections, transaction

from ...app import App, TaskFunction, task_call
from ...client import Client
from ...core.handlers.mux import Handler, ServeMux
from ...core.handlers.sandbox import Sandboxed
from ...core.model.errors import InvalidArgumentError
from ...core.model.options import new_task_id, prepare, unknown_options
from ...core.processes import model as process
from ...worker.runner import is_async
from ...worker.settings import ServerOptions

__all__ = ["DjangoApp", "DjangoServeMux", "app_options", "close_idle_connections", "enqueue_on_commit",
           "project_app", "with_connections", "worker_app"]

APP_KEYS = frozenset({"redis", "default_queue", "signing_key", "name"})
"""The keys of ``settings.ASYNQPY`` that are :class:`~asynqpy.App`'s own arguments."""
SERVER_KEYS = frozenset(f.name for f in dataclasses.fields(ServerOptions)) - {
    "on_startup", "on_shutdown", "scheduler_entries", "scheduler_owner"}
"""The keys that are server options (the App passes them to its servers; its hooks and periodic
entries are declared in code)."""
OWN_KEYS = frozenset({"app", "autodiscover"})
"""The keys only this integration reads: where the project's App is, which modules hold tasks."""

_apps: list[DjangoApp] = []  # every DjangoApp made in this process (project_app finds the one)


def conf() -> dict[str, Any]:
    """``settings.ASYNQPY`` (empty when unset), its keys checked: ImproperlyConfigured naming an
    unknown key and the closest known one."""
    given = getattr(settings, "ASYNQPY", None) or {}
    if not isinstance(given, dict):
        raise ImproperlyConfigured(f"settings.ASYNQPY must be a dict, got {type(given).__name__}")
    bad = set(given) - APP_KEYS - SERVER_KEYS - OWN_KEYS
    if bad:
        raise ImproperlyConfigured("settings.ASYNQPY: " + unknown_options(
            "key", bad, sorted(APP_KEYS | SERVER_KEYS | OWN_KEYS)))
    return dict(given)


def app_options() -> dict[str, Any]:
    """The keyword arguments of :class:`~asynqpy.App` that ``settings.ASYNQPY`` gives."""
    return {k: v for k, v in conf().items() if k not in OWN_KEYS}


# -- the connections around each task ---------------------------------------------------------------

_idle: dict[int, list[Any]] = {}
"""Thread id -> the connections its last task left open, while the thread waits for its next task
(a task's start takes its thread out): what :func:`close_idle_connections` closes."""
_idle_lock = threading.Lock()


def _before_task() -> None:
    with _idle_lock:
        _idle.pop(threading.get_ident(), None)
    close_old_connections()


def _after_task() -> None:
    close_old_connections()
    still = [c for c in connections.all(initialized_only=True) if c.connection is not None]
    if still:
        with _idle_lock:
            _idle[threading.get_ident()] = still


def close_idle_connections(*_: Any) -> None:
    """Close the connections the worker's threads keep between tasks (``CONN_MAX_AGE`` > 0), from
    this thread: run when a server stops (a :class:`DjangoApp`'s ``on_shutdown``), so a worker
    run in a test (``drain``) leaves no session open, which would keep the test database from
    being dropped. Only threads waiting for a task are touched."""
    with _idle_lock:
        held = [c for conns in _idle.values() for c in conns]
        _idle.clear()
    for conn in held:
        conn.inc_thread_sharing()  # (Django refuses to close another thread's connection otherwise)
        try:
            conn.close()
        finally:
            conn.dec_thread_sharing()


_abefore_task = sync_to_async(_before_task)  # thread_sensitive: the ORM's sync thread, where its connections are
_aafter_task = sync_to_async(_after_task)


def with_connections(handler: Any) -> Any:
    """``handler`` closing the stale database connections of the thread that runs it before and
    after each task (``django.db.close_old_connections``: a connection past ``CONN_MAX_AGE``, or
    unusable after an error, is closed; the next query opens a fresh one). A plain handler is
    wrapped where it runs (the worker's thread), an ``async def`` one around asgiref's sync thread
    (where the async ORM runs queries), a durable process's processor the same way; a sandboxed
    one runs in a child process and is left as it is."""
    if isinstance(handler, Sandboxed) or getattr(handler, "__asynqpy_django__", False):
        return handler
    if isinstance(handler, process.ProcessHandler):
        return process.ProcessHandler(handler.type, with_connections(handler.fn), handler.history,
                                      handler.max_events)
    if is_async(handler):
        async def run_async(*args: Any) -> Any:
            await _abefore_task()
            try:
                return await handler(*args)
            finally:
                await _aafter_task()

        wrapped: Any = run_async
    else:
        def run(*args: Any) -> Any:
            _before_task()
            try:
                return handler(*args)
            finally:
                _after_task()

        wrapped = run
    functools.update_wrapper(wrapped, handler, updated=())  # its name (logs; a sandbox's import path)
    wrapped.__asynqpy_django__ = True
    return wrapped


class DjangoServeMux(ServeMux):
    """A :class:`~asynqpy.ServeMux` whose every handler is registered :func:`with_connections`."""

    def handle(self, pattern: str, handler: Handler | None = None, *, sandbox: bool = False) -> Any:
        if handler is None:
            def register(fn: Handler) -> Handler:
                self.handle(pattern, fn, sandbox=sandbox)
                return fn

            return register
        return super().handle(pattern, handler if sandbox else with_connections(handler), sandbox=sandbox)


def django_mux(mux: ServeMux) -> ServeMux:
    """``mux`` itself if its handlers handle connections already, else a copy whose handlers do
    (the same patterns, the same middleware)."""
    if isinstance(mux, DjangoServeMux):
        return mux
    out = DjangoServeMux()
    for pattern in mux.patterns:
        fn = mux.match(pattern)
        assert fn is not None
        out.handle(pattern, fn)
    out.use(*mux.middleware)
    return out


# -- the App ------------------------------------------------------------------------------------------


class DjangoApp(App):
    """An :class:`~asynqpy.App` configured from ``settings.ASYNQPY`` (the arguments given here
    win), whose task functions and handlers close stale database connections around each task
    (:func:`with_connections`): served by ``manage.py asynqpy_worker``, ``asynqpy worker``,
    ``app.run()`` or :func:`asynqpy.testing.drain` alike. When a server of the app stops, the
    connections its threads kept between tasks are closed (:func:`close_idle_connections`)."""

    def __init__(self, redis: Any = None, **options: Any) -> None:
        merged = app_options()
        if redis is not None:
            merged["redis"] = redis
        merged.update(options)
        if merged.get("name") is None:  # the module that makes the App (App's own default looks one frame too far)
            merged["name"] = str(sys._getframe(1).f_globals.get("__name__") or "app")
        super().__init__(merged.pop("redis", None), **merged)
        self.mux = DjangoServeMux()
        self.shutdown.append(close_idle_connections)
        _apps.append(self)


def worker_app(app: App) -> App:
    """``app`` as a Django worker serves it: itself if its handlers handle connections already
    (a :class:`DjangoApp`), else a shallow copy whose mux wraps them (:func:`django_mux`)."""
    mux = django_mux(app.mux)
    if mux is app.mux:
        return app
    clone = copy.copy(app)
    clone.mux = mux
    clone.shutdown = [*app.shutdown, close_idle_connections]
    return clone


def _import_app(target: str) -> App:
    module, _, attr = target.partition(":")
    if not module or not attr:
        raise ImproperlyConfigured(f"settings.ASYNQPY['app'] is 'module:attribute', got {target!r}")
    found = getattr(importlib.import_module(module), attr, None)
    if not isinstance(found, App):
        raise ImproperlyConfigured(f"settings.ASYNQPY['app'] = {target!r} is not an asynqpy App")
    return found


def project_app(*, discover: bool = True) -> App:
    """The project's App: ``settings.ASYNQPY['app']``, else the one :class:`DjangoApp` made. With
    ``discover``, the ``autodiscover`` module of every installed app is imported first (where
    task functions are declared, as Django's ``admin`` modules are found)."""
    cfg = conf()
    if discover and cfg.get("autodiscover", "tasks"):
        from django.utils.module_loading import autodiscover_modules

        autodiscover_modules(cfg.get("autodiscover", "tasks"))
    if cfg.get("app"):
        return _import_app(cfg["app"])
    if len(_apps) == 1:
        return _apps[0]
    if not _apps:
        raise ImproperlyConfigured("no asynqpy App found: make one with asynqpy.contrib.django.DjangoApp() in a "
                                   "tasks module of an installed app, or name it in settings.ASYNQPY['app']")
    raise ImproperlyConfigured(f"{len(_apps)} DjangoApps were made ({', '.join(a.name for a in _apps)}): name the "
                               "project's in settings.ASYNQPY['app'] = 'module:attribute'")


# -- enqueue on commit -----------------------------------------------------------------------------


def enqueue_on_commit(task: TaskFunction[Any, Any] | str, *args: Any, using: str | None = None,
                      robust: bool = False, client: Client | None = None, **kwargs: Any) -> str | None:
    """Enqueue when the current transaction (of database ``using``) commits: nothing after a
    rollback; at once outside a transaction (Django's ``transaction.on_commit``).

    ``task``: a task function (``enqueue_on_commit(send_receipt, order.id)``: its arguments and
    options, checked now) or a task type (``enqueue_on_commit("report:build", payload,
    queue="reports", **options)``, sent with ``client``, default the project's App's). The
    arguments and options are checked now, in the caller's transaction; the enqueue happens on
    commit (a ``process_in`` counts from then). Returns the task's id (chosen now; None when the
    options make a task that takes no id of its own, such as ``debounce``).

    Not durable: if the process dies, or Redis cannot be reached, between the commit and the
    enqueue, the task is lost (the error is raised to the code that committed, unless ``robust``:
    then Django logs it). The transactional outbox is the way that loses nothing."""
    task_type, payload, options = task_call(task, args, kwargs, None if isinstance(task, TaskFunction) else
                                            declaring_app(), "enqueue_on_commit")
    task_id: str | None = options.get("task_id")
    if task_id is None:
        own = new_task_id()
        try:  # an id of our own, so the caller has it now
            prepare(task_type, payload, task_id=own, **options)
            task_id = options["task_id"] = own
        except InvalidArgumentError:
            prepare(task_type, payload, **options)  # the options' own error, if they have one
    else:
        prepare(task_type, payload, **options)

    def enqueue() -> None:
        sender = client or (task.app.client() if isinstance(task, TaskFunction) else _client())
        sender.enqueue(task_type, payload, **options)

    transaction.on_commit(enqueue, using=using, robust=robust)
    return task_id


_settings_client: Client | None = None


def declaring_app() -> App | None:
    """The project's App when there is one (named in the settings, or the one made), whose task
    functions a task type enqueued by name brings (:func:`asynqpy.app.task_call`); else None."""
    cfg = conf()
    if cfg.get("app") or len(_apps) == 1:
        return project_app(discover=False)
    return None


def _client() -> Client:
    """The client of the project's App (named in the settings or the one made), else one on the
    settings' Redis."""
    global _settings_client
    cfg = conf()
    if cfg.get("app") or len(_apps) == 1:
        return project_app(discover=False).client()
    if _settings_client is None:
        _settings_client = Client(cfg.get("redis"), signing_key=cfg.get("signing_key"))
    return _settings_client
