"""App: typed task functions, lifecycle hooks and per-process state, on top of ServeMux.

    app = App("redis://localhost:6379/0")

    @app.task(queue="mail", max_retry=5)
    async def send_welcome(user_id: int, lang: str = "en") -> str:
        ...

    send_welcome.enqueue(42, lang="fr")            # checked against the signature (and by mypy)
    send_welcome.enqueue_in(60, 42)                # in a minute
    result = send_welcome.call_within(10, 42)      # enqueue and wait (at most 10 s) for the result
    await send_welcome(42)                         # still the plain function, for unit tests

The decorated function is registered on the app's ServeMux under its task type (default
``module.qualname``), so ``asynqpy worker module:app`` serves it, next to handlers registered the
ServeMux way (``@app.mux.handle("type")``). The payload is the call's arguments by parameter name
(a msgpack map), so the queue stays readable from the CLI and from other languages.

A running task function reaches its :class:`Task` (id, retry count, headers, progress) with
:func:`current_task`, not with a parameter: a parameter would be part of the function's signature,
so type checkers would ask every caller to pass it.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import sys
import types
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Generic, ParamSpec, TypeVar, overload

from .client import AsyncClient, Client
from .core.cron.entries import ENTRY_OPTIONS, Entry, make_entry
from .core.handlers.mux import ServeMux
from .core.handlers.sandbox import Sandboxed
from .core.model.argtypes import ArgumentChecks
from .core.model.errors import InvalidArgumentError
from .core.model.options import OPTIONS, Seconds, When, unknown_options
from .core.model.task import Task, TaskInfo, current_task
from .core.security.encryption import check_ring
from .core.spine.keys import validate_name, validate_queue
from .server import Server
from .worker.blobs import check_store
from .worker.cron import entries_of
from .workflows import Sig

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
Hook = Callable[[types.SimpleNamespace], Any]

__all__ = ["App", "AsyncTaskFunction", "TaskFunction", "current_task", "task_call"]

_TASK_OPTIONS = OPTIONS - {"task_id", "process_at", "process_in"}


def _bind(fn: Callable[..., Any], sig: inspect.Signature, name: str, args: tuple[Any, ...],
          kwargs: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments as a payload (parameter name -> value), or InvalidArgumentError naming
    what does not fit the signature."""
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidArgumentError(f"task {name}: {exc}") from None
    payload: dict[str, Any] = {}
    for pname, value in bound.arguments.items():
        kind = sig.parameters[pname].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            payload[pname] = list(value)
        else:
            payload[pname] = value
    return payload


def _call_args(sig: inspect.Signature, payload: Any) -> tuple[list[Any], dict[str, Any]]:
    """The positional and keyword arguments a payload made by :func:`_bind` stands for."""
    if not isinstance(payload, dict):
        raise InvalidArgumentError(f"a task function's payload is a map of arguments, got {type(payload).__name__}")
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    # with values for *args, the parameters before it were given by position (bind() filled them)
    star = next((n for n, p in sig.parameters.items() if p.kind is inspect.Parameter.VAR_POSITIONAL), None)
    by_position = star is not None and bool(payload.get(star))
    for pname, param in sig.parameters.items():
        if pname not in payload:
            continue
        value = payload[pname]
        if param.kind is inspect.Parameter.POSITIONAL_ONLY or (
                by_position and param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD):
            args.append(value)
        elif param.kind is inspect.Parameter.VAR_POSITIONAL:
            args.extend(value)
        elif param.kind is inspect.Parameter.VAR_KEYWORD:
            kwargs.update(value)
        else:
            kwargs[pname] = value
    unknown = set(payload) - set(sig.parameters)
    if unknown:
        raise InvalidArgumentError(f"the payload names no parameter of the function: {sorted(unknown)}")
    return args, kwargs


class TaskFunction(Generic[P, R]):
    """A plain-``def`` task function: call it directly, or enqueue it (see the module docstring).
    Made by :meth:`App.task`."""

    def __init__(self, app: App, fn: Callable[P, R], name: str, options: dict[str, Any]) -> None:
        self.app = app
        self.fn = fn
        self.name = name
        self.options = options
        self.signature = inspect.signature(fn)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __sandbox_call__(self, task: Task) -> Any:
        """Run as a sandboxed handler (in a child process): the payload bound to the signature
        (a coroutine for an async function)."""
        args, kwargs = _call_args(self.signature, task.payload)
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<task function {self.name}>"

    def _payload(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's payload, checked against the signature and the annotations it can check
        (:mod:`asynqpy.core.model.argtypes`): InvalidArgumentError naming the argument otherwise."""
        payload = _bind(self.fn, self.signature, self.name, args, kwargs)
        checks = self.__dict__.get("_checks")
        if checks is None:  # made at the first call: annotations may name what is defined after the function
            checks = self.__dict__["_checks"] = ArgumentChecks(self.fn, self.signature)
        checks.check(self.name, payload)
        return payload

    def _check_payload(self, payload: Any) -> dict[str, Any]:
        """A payload given with the function's name (not its arguments): the map of arguments a
        call would make, checked as :meth:`_payload` checks a call (InvalidArgumentError naming
        what does not fit)."""
        if payload is None:
            payload = {}
        if not isinstance(payload, dict):
            raise InvalidArgumentError(f"task {self.name}: the payload of a task function is a map of its arguments "
                                       f"by name, got {type(payload).__name__}")
        try:
            args, kwargs = _call_args(self.signature, payload)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(f"task {self.name}: {exc}") from None
        return self._payload(tuple(args), kwargs)

    def using(self, **options: Any) -> TaskFunction[P, R]:
        """The same task function with other enqueue options (``queue``, ``max_retry``,
        ``timeout``, ``deadline``, ``unique``, ``retention``, ``retry_delay``, ``headers``)."""
        bad = set(options) - _TASK_OPTIONS
        if bad:
            raise InvalidArgumentError(unknown_options("task option", bad, sorted(_TASK_OPTIONS)))
        clone = type(self).__new__(type(self))
        clone.__dict__.update(self.__dict__)
        clone.options = {**self.options, **options}
        return clone

    def s(self, *args: P.args, **kwargs: P.kwargs) -> Sig:
        """A call of the function not enqueued yet, for a workflow: ``chain(fetch.s(url),
        parse.s())`` (:mod:`asynqpy.workflows`; the function reads its parents' results with
        ``current_task().parent_results``)."""
        return Sig(self.name, self._payload(args, kwargs), **self.options)

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskInfo:
        """Enqueue a call of the function now; returns the task's :class:`TaskInfo`."""
        return self.app.client().enqueue(self.name, self._payload(args, kwargs), **self.options)

    def enqueue_in(self, delay: Seconds, *args: P.args, **kwargs: P.kwargs) -> TaskInfo:
        """Enqueue a call to run after ``delay`` (seconds or a timedelta)."""
        return self.app.client().enqueue(self.name, self._payload(args, kwargs), process_in=delay, **self.options)

    def enqueue_at(self, when: When, *args: P.args, **kwargs: P.kwargs) -> TaskInfo:
        """Enqueue a call to run at ``when`` (a datetime, naive = local time, or Unix seconds)."""
        return self.app.client().enqueue(self.name, self._payload(args, kwargs), process_at=when, **self.options)

    def call(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Enqueue a call and wait for its result, **without a limit**: as long as the task takes,
        its retries included, and forever if no worker serves its queue. Bound the wait with
        :meth:`call_within` ``(seconds, *args)`` (TimeoutError after; the task still runs);
        :meth:`using` ``(timeout=...)`` is each attempt's timeout, not the wait's. ``timeout=``
        here is refused (InvalidArgumentError pointing to call_within) unless the function has
        such a parameter."""
        self._no_wait_keyword(kwargs)
        return self.call_within(None, *args, **kwargs)

    def _no_wait_keyword(self, kwargs: dict[str, Any]) -> None:
        """``call(x, timeout=10)`` meant a bounded wait: say how, rather than "unexpected keyword
        argument 'timeout'" (unless the function takes ``timeout`` itself)."""
        params = self.signature.parameters
        if "timeout" in kwargs and not any(n == "timeout" or p.kind is inspect.Parameter.VAR_KEYWORD
                                           for n, p in params.items()):
            wait = kwargs["timeout"]
            raise InvalidArgumentError(f"task {self.name}: call() waits without a limit and takes no timeout: use "
                                       f"call_within({wait!r}, ...) to wait at most {wait!r} s for the result, or "
                                       f"using(timeout={wait!r}).call(...) to bound each attempt")

    def call_within(self, wait: float | None, *args: P.args, **kwargs: P.kwargs) -> R:
        """Enqueue a call and wait at most ``wait`` seconds for its result (TimeoutError after)."""
        out: R = self.app.client().call(self.name, self._payload(args, kwargs), timeout=wait, **self.options)
        return out

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> TaskInfo:
        """:meth:`enqueue`, awaited (through the app's AsyncClient)."""
        return await self.app.aclient().enqueue(self.name, self._payload(args, kwargs), **self.options)

    async def aenqueue_in(self, delay: Seconds, *args: P.args, **kwargs: P.kwargs) -> TaskInfo:
        """:meth:`enqueue_in`, awaited."""
        return await self.app.aclient().enqueue(self.name, self._payload(args, kwargs), process_in=delay,
                                                **self.options)

    async def aenqueue_at(self, when: When, *args: P.args, **kwargs: P.kwargs) -> TaskInfo:
        """:meth:`enqueue_at`, awaited."""
        return await self.app.aclient().enqueue(self.name, self._payload(args, kwargs), process_at=when,
                                                **self.options)

    async def acall(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """:meth:`call`, awaited (without a limit too: wrap it in ``asyncio.wait_for`` to bound it)."""
        self._no_wait_keyword(kwargs)
        out: R = await self.app.aclient().call(self.name, self._payload(args, kwargs), **self.options)
        return out


class AsyncTaskFunction(TaskFunction[P, Awaitable[T]], Generic[P, T]):
    """An ``async def`` task function: calling it gives its coroutine; ``call`` and ``acall``
    give what the coroutine returns."""

    def call(self, *args: P.args, **kwargs: P.kwargs) -> T:  # type: ignore[override]
        """See :meth:`TaskFunction.call`: no limit on the wait (:meth:`call_within` bounds it)."""
        self._no_wait_keyword(kwargs)
        return self.call_within(None, *args, **kwargs)

    def call_within(self, wait: float | None, *args: P.args, **kwargs: P.kwargs) -> T:  # type: ignore[override]
        out: T = self.app.client().call(self.name, self._payload(args, kwargs), timeout=wait, **self.options)
        return out

    async def acall(self, *args: P.args, **kwargs: P.kwargs) -> T:  # type: ignore[override]
        self._no_wait_keyword(kwargs)
        out: T = await self.app.aclient().call(self.name, self._payload(args, kwargs), **self.options)
        return out


class App:
    """Typed task functions, lifecycle hooks and per-process state around a :class:`ServeMux`.

    ``redis``: as for :class:`Client` (a URL, ``memory://name`` included, or a redis-py client).
    ``default_queue``: where task functions go unless they say otherwise. ``server_options``:
    :class:`ServerOptions` for :meth:`run` and ``asynqpy worker module:app`` (the command line's
    flags win). ``state``: a namespace for what the worker process shares between tasks (a database
    pool, an HTTP client), filled by ``on_startup`` hooks and emptied by ``on_shutdown`` hooks.
    ``name``: the app's name, owner of its periodic entries (default: the module that makes the App,
    the script's name when run as ``__main__``): a starting worker of the app removes the entries
    the app declared earlier and no longer declares (docs/cron.md). ``encryption``: a
    :class:`~asynqpy.KeyRing` its clients and servers encrypt payloads, results and logs with
    (docs/encryption.md). ``offload``: a blob store (:class:`~asynqpy.FileBlobStore`,
    :class:`~asynqpy.S3BlobStore`) its clients offload large payloads to and its servers read them
    from (docs/offload.md; with ``encryption`` the blobs hold ciphertext)."""

    def __init__(self, redis: Any = None, *, default_queue: str = "default", signing_key: Any = None,
                 name: str | None = None, encryption: Any = None, offload: Any = None,
                 **server_options: Any) -> None:
        self.name = validate_name("app name", name if name is not None else _caller_module(), 190)
        self._redis = redis
        self.default_queue = default_queue
        self.signing_key = signing_key
        self.encryption = check_ring(encryption)
        self.offload = check_store(offload)
        self.server_options = server_options
        self.mux = ServeMux()
        self.state = types.SimpleNamespace()
        self.startup: list[Hook] = []
        self.shutdown: list[Hook] = []
        self._task_queues: set[str] = set()
        self.functions: dict[str, TaskFunction[Any, Any]] = {}
        """The task functions declared with :meth:`task`, by task type (:func:`task_call`)."""
        _APPS.add(self)
        self.periodic_entries: list[Entry] = []
        self._client: Client | None = None
        self._aclient: AsyncClient | None = None
        self._aclient_loop: asyncio.AbstractEventLoop | None = None

    @property
    def redis(self) -> Any:
        """Where the app's tasks go: set it to point the app elsewhere (a test's Redis); the
        clients it made are dropped (closed when they were made from a URL)."""
        return self._redis

    @redis.setter
    def redis(self, value: Any) -> None:
        self._redis = value
        self.close()
        self._aclient = None  # made for an event loop that may be gone: not closed here

    # -- declaring -----------------------------------------------------------------------------

    @overload
    def task(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> AsyncTaskFunction[P, T]: ...

    @overload
    def task(self, fn: Callable[P, R], /) -> TaskFunction[P, R]: ...

    @overload
    def task(self, *, name: str | None = None, queue: str = ..., max_retry: int = ..., timeout: Seconds | None = ...,
             deadline: When | None = ..., unique: Seconds | None = ..., retention: Seconds = ...,
             retry_delay: Seconds | None = ..., headers: dict[str, str] | None = ...,
             sandbox: bool = ...) -> _Decorator: ...

    def task(self, *fns: Callable[..., Any], **options: Any) -> Any:
        """Make ``fn`` a task function (a decorator, with or without options): registered under
        ``name`` (default ``module.qualname``), enqueued with ``options`` (``queue``,
        ``max_retry``, ``timeout``, ``deadline``, ``unique``, ``retention``, ``retry_delay``,
        ``headers``). ``sandbox=True``: a worker runs it in a child process (docs/workers.md
        "Sandboxed handlers"); it must be a module-level function."""
        if len(fns) > 1:
            raise InvalidArgumentError("app.task takes one function")
        fn = fns[0] if fns else None
        name: str | None = options.pop("name", None)
        sandbox = options.pop("sandbox", False)
        if not isinstance(sandbox, bool):
            raise InvalidArgumentError(f"sandbox must be a bool, got {sandbox!r}")
        if name is not None and (not isinstance(name, str) or not name.strip()):
            raise InvalidArgumentError(f"a task function's name must be a non-empty string, got {name!r}")
        bad = set(options) - _TASK_OPTIONS
        if bad:
            raise InvalidArgumentError(unknown_options("task option", bad, sorted(_TASK_OPTIONS | {"name"})))
        options.setdefault("queue", self.default_queue)

        def make(f: Callable[..., Any]) -> Any:
            if not callable(f):
                raise InvalidArgumentError(f"a task function must be callable, got {f!r}")
            type_name = name or f"{f.__module__}.{f.__qualname__}"
            cls = AsyncTaskFunction if inspect.iscoroutinefunction(f) else TaskFunction
            tf = cls(self, f, type_name, dict(options))
            self.functions[type_name] = tf
            if sandbox:  # the child imports the module, where the name is this TaskFunction
                self.mux.handle(type_name, Sandboxed(f, local=self._handler(tf)))
            else:
                self.mux.handle(type_name, self._handler(tf))
            self._task_queues.add(options["queue"])
            return tf

        return make(fn) if fn is not None else _Decorator(make)

    def process(self, process_type: str, *, queue: str | None = None, history: int = 20,
                max_events: int = 0) -> Callable[[Any], Any]:
        """Register a processor for the durable processes of ``process_type`` (a decorator, as
        :meth:`ServeMux.process`; docs/processes.md). ``queue``: where its processes live (the
        app's default queue if None), served by ``app.run()`` and ``asynqpy worker module:app``."""
        q = validate_queue(queue if queue is not None else self.default_queue)

        def register(fn: Any) -> Any:
            self.mux.process(process_type, history=history, max_events=max_events)(fn)
            self._task_queues.add(q)
            return fn

        return register

    def durable(self, fn: Any = None, *, name: str | None = None, queue: str | None = None,
                retention: Any = "default", min_worker_version: str | None = None) -> Any:
        """Register a durable function (a decorator, as :meth:`ServeMux.durable`; docs/durable.md):
        its runs live in ``queue`` (the app's default queue if None), served by ``app.run()``;
        a finished run is kept ``retention`` (a timedelta or seconds; None: until removed; default
        7 days); ``min_worker_version``: only workers of that version or newer take its runs' inputs."""
        q = validate_queue(queue if queue is not None else self.default_queue)

        def register(f: Any) -> Any:
            self._task_queues.add(q)
            return self.mux.durable(f, name=name, queue=q, client=self.aclient, retention=retention,
                                    min_worker_version=min_worker_version)

        return register(fn) if fn is not None else register

    def periodic(self, task: TaskFunction[Any, Any], *, cron: str | None = None, every: float | None = None,
                 tz: str = "UTC", missed: str = "skip", name: str | None = None, args: tuple[Any, ...] = (),
                 kwargs: dict[str, Any] | None = None) -> Entry:
        """Run ``task(*args, **kwargs)`` periodically: on each tick of ``cron`` (in time zone
        ``tz``) or ``every`` seconds, with the task function's options (its queue, retries,
        timeout...). The app's workers schedule it (each tick enqueued once however many run);
        ``name`` (default: the task's name) identifies the entry in ``asynqpy cron ls``.
        ``missed``: as for :meth:`asynqpy.Scheduler.register`."""
        if not isinstance(task, TaskFunction):
            raise InvalidArgumentError(f"app.periodic takes a task function (made by @app.task), got {task!r}")
        options = dict(task.options)
        queue = options.pop("queue", self.default_queue)
        odd = set(options) - ENTRY_OPTIONS
        if odd:
            raise InvalidArgumentError(f"task {task.name}: {', '.join(sorted(odd))} cannot apply to a periodic "
                                       "task (each tick's task id is its own); use task.using() without it")
        entry = make_entry(name or task.name, task.name, task._payload(args, kwargs or {}), cron=cron, every=every,
                           tz=tz, queue=queue, missed=missed, **options)
        entries_of([*self.periodic_entries, entry])
        self.periodic_entries.append(entry)
        self._task_queues.add(queue)
        return entry

    @property
    def owner(self) -> str:
        """The owner recorded on this app's periodic entries: ``"app:<name>"``."""
        return f"app:{self.name}"

    def _handler(self, tf: TaskFunction[Any, Any]) -> Callable[[Task], Any]:
        sig, fn = tf.signature, tf.fn
        if inspect.iscoroutinefunction(fn):
            async def run_async(task: Task) -> Any:
                args, kwargs = _call_args(sig, task.payload)
                return await fn(*args, **kwargs)

            return run_async

        def run(task: Task) -> Any:
            args, kwargs = _call_args(sig, task.payload)
            return fn(*args, **kwargs)

        return run

    def on_startup(self, hook: Hook) -> Hook:
        """Run ``hook(app.state)`` (sync or async) when a worker process starts, before it takes a
        task; if it raises, the worker stops (the CLI: one line, exit code 2)."""
        self.startup.append(hook)
        return hook

    def on_shutdown(self, hook: Hook) -> Hook:
        """Run ``hook(app.state)`` when a worker process stops, after its last task."""
        self.shutdown.append(hook)
        return hook

    # -- clients and servers -------------------------------------------------------------------

    def client(self) -> Client:
        """The app's (lazily made, shared) :class:`Client`."""
        if self._client is None:
            self._client = Client(self.redis, signing_key=self.signing_key, encryption=self.encryption,
                                  offload=self.offload)
        return self._client

    def aclient(self) -> AsyncClient:
        """The app's :class:`AsyncClient` for the running event loop."""
        loop = asyncio.get_running_loop()
        if self._aclient is None or self._aclient_loop is not loop:
            self._aclient = AsyncClient(self.redis, signing_key=self.signing_key, encryption=self.encryption,
                                        offload=self.offload)
            self._aclient_loop = loop
        return self._aclient

    def server(self, **options: Any) -> Server:
        """A :class:`Server` for this app (its options, ``options`` winning), with its hooks."""
        opts = {**self.server_options, **options}
        opts.setdefault("queues", sorted(self._task_queues) or [self.default_queue])
        if self.periodic_entries:
            opts.setdefault("scheduler_entries", tuple(self.periodic_entries))
        opts.setdefault("scheduler_owner", self.owner)
        return Server(self.redis, signing_key=self.signing_key, encryption=self.encryption, offload=self.offload,
                      on_startup=[self._hook(h) for h in self.startup],
                      on_shutdown=[self._hook(h) for h in self.shutdown], **opts)

    def _hook(self, hook: Hook) -> Callable[[], Any]:
        """``hook`` as the server runs it: without arguments, named as the user's function."""
        def run() -> Any:
            return hook(self.state)

        run.__qualname__ = getattr(hook, "__qualname__", repr(hook))
        return run

    def run(self, **options: Any) -> None:
        """Serve this app's tasks until SIGTERM/SIGINT (see :meth:`Server.run`)."""
        self.server(**options).run(self.mux)

    def close(self) -> None:
        """Close the app's sync client (an AsyncClient is closed with :meth:`aclose`)."""
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        if self._aclient is not None:
            await self._aclient.close()
            self._aclient = None


def _caller_module() -> str:
    """The module that makes the App (two frames up): its ``__name__``, or for ``__main__`` the
    script's file name without ``.py`` (the same name as ``asynqpy worker script:app`` gives)."""
    name = str(sys._getframe(2).f_globals.get("__name__") or "app")
    if name == "__main__":
        path = getattr(sys.modules.get("__main__"), "__file__", None)
        if path:
            return os.path.splitext(os.path.basename(path))[0] or name
    return name


class _Decorator:
    """What ``@app.task(...)`` returns: applied to a function, a task function."""

    def __init__(self, make: Callable[[Callable[..., Any]], Any]) -> None:
        self._make = make

    @overload
    def __call__(self, fn: Callable[P, Coroutine[Any, Any, T]], /) -> AsyncTaskFunction[P, T]: ...

    @overload
    def __call__(self, fn: Callable[P, R], /) -> TaskFunction[P, R]: ...

    def __call__(self, fn: Callable[..., Any], /) -> Any:
        return self._make(fn)


def task_call(task: Any, args: tuple[Any, ...], options: dict[str, Any], app: App | None = None,
              what: str = "enqueue") -> tuple[str, Any, dict[str, Any]]:
    """The one rule every producer applies to what it is asked to enqueue (the App's task
    functions, the outbox, :class:`~asynqpy.contrib.django.outbox.DjangoOutbox`,
    ``enqueue_on_commit``, FastAPI's ``call_events``): the task type, payload and options to send.

    - a task function (``task``) with its arguments (``args``, ``options`` as keyword arguments):
      its name, the arguments checked against its signature and annotations, its declared
      options;
    - a task type with at most one payload (``args``) and the options of ``Client.enqueue``: if
      ``app`` (None: the one App of this process that declares it) declared a task function of
      that name, its declared options (``options`` win, as ``using()`` does) and the payload
      checked as the function's arguments; else as given. Apps of this process declaring the name
      with different options: InvalidArgumentError (say which with ``app=``).

    InvalidArgumentError (naming ``what``) for anything else. ``Client.enqueue`` itself sends
    what it is given: it is the layer under every producer."""
    if isinstance(task, TaskFunction):
        return task.name, task._payload(args, options), dict(task.options)
    if not isinstance(task, str) or len(args) > 1:
        raise InvalidArgumentError(f"{what}(task_function, *args) or {what}(task_type, payload, **options)")
    payload = args[0] if args else None
    declared = app.functions.get(task) if app is not None else declared_function(task)
    if declared is None:
        return task, payload, dict(options)
    return task, declared._check_payload(payload), {**declared.options, **options}


_APPS: weakref.WeakSet[App] = weakref.WeakSet()
"""Every App of this process (for a task type enqueued by name without an App: :func:`task_call`)."""


def declared_function(task_type: str) -> TaskFunction[Any, Any] | None:
    """The task function the Apps of this process declare as ``task_type``; None if none does.
    InvalidArgumentError if several declare it with different options."""
    found = [f for a in list(_APPS) if (f := a.functions.get(task_type)) is not None]
    if not found:
        return None
    if any(f.options != found[0].options for f in found[1:]):
        raise InvalidArgumentError(f"task type {task_type!r} is declared with different options by the apps "
                                   f"{sorted({f.app.name for f in found})}: say which (app=)")
    return found[0]
