"""ServeMux: routes a task to a handler by its type, through middleware.

Matching follows asynq: an exact pattern wins; otherwise the longest registered pattern that is a
prefix of the type (``"email:"`` matches ``"email:deliver"``). Middleware wraps every handler,
the not-found handler included; the first registered is the outermost.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, overload

from ..model.errors import HandlerNotFoundError, InvalidArgumentError
from ..model.task import Task
from ..spine.keys import validate_name
from .sandbox import Sandboxed

AsyncHandler = Callable[[Task], Awaitable[Any]]
SyncHandler = Callable[[Task], Any]
Handler = AsyncHandler | SyncHandler
Middleware = Callable[[AsyncHandler], AsyncHandler]


async def not_found(task: Task) -> None:
    """The default handler for a type nothing is registered for."""
    raise HandlerNotFoundError(f"no handler registered for task type {task.type!r}")


class ServeMux:
    """Maps task types to handlers. Handlers are ``async def f(task)`` (run on the event loop) or
    plain ``def f(task)`` (run on the server's bounded thread pool)."""

    def __init__(self) -> None:
        self._exact: dict[str, Handler] = {}
        self._prefixes: list[tuple[str, Handler]] = []  # longest first
        self._middleware: list[Middleware] = []

    @overload
    def handle(self, pattern: str, *, sandbox: bool = ...) -> Callable[[Handler], Handler]: ...

    @overload
    def handle(self, pattern: str, handler: Handler, *, sandbox: bool = ...) -> Handler: ...

    def handle(self, pattern: str, handler: Handler | None = None, *, sandbox: bool = False) -> Any:
        """Register ``handler`` for ``pattern``; without ``handler``, a decorator. ``sandbox``:
        run it in a child process of the server's pool (a timeout kills it for real, a crash
        fails only its task; docs/workers.md "Sandboxed handlers"): it must be a module-level
        function of an importable module (InvalidArgumentError otherwise)."""
        if not isinstance(pattern, str) or not pattern.strip():
            raise InvalidArgumentError("a handler pattern must be a non-empty string")
        validate_name("handler pattern", pattern, 256)
        if pattern in self._exact:
            raise InvalidArgumentError(f"a handler is already registered for {pattern!r}")

        def register(fn: Handler) -> Handler:
            if not callable(fn):
                raise InvalidArgumentError(f"handler for {pattern!r} is not callable")
            entry: Any = Sandboxed(fn) if sandbox else fn
            self._exact[pattern] = entry
            self._prefixes.append((pattern, entry))
            self._prefixes.sort(key=lambda p: len(p[0]), reverse=True)
            return fn

        return register(handler) if handler is not None else register

    def process(self, process_type: str, *, history: int = 20, max_events: int = 0) -> Callable[[Any], Any]:
        """Register a processor for the durable processes of ``process_type`` (a decorator;
        docs/processes.md): ``fn(process, input) -> Step | None``, async or plain. Its inputs are
        tasks of type ``process:<process_type>``. ``history``: how many of the process's latest
        events the processor gets in ``process.history``. ``max_events``: keep at most this many
        of a process's latest events (older ones are deleted as new ones are appended, in the
        same script; 0 = keep them all)."""
        from ..processes.model import ProcessHandler, task_type, validate_type

        pattern = task_type(validate_type(process_type))

        def register(fn: Any) -> Any:
            if not callable(fn):
                raise InvalidArgumentError(f"the processor of {process_type!r} is not callable")
            self.handle(pattern, ProcessHandler(process_type, fn, history, max_events))
            return fn

        return register

    def durable(self, fn: Any = None, *, name: str | None = None, queue: str = "default",
                client: Any = None, retention: Any = "default", min_worker_version: str | None = None) -> Any:
        """Register a durable function (docs/durable.md): ``async def f(ctx: Durable, *args)``;
        a decorator, with or without arguments. Returns the :class:`~asynqpy.core.durable.function.DurableFunction`
        that ``client.start`` takes. ``name``: its name (default: module.qualname); its runs are
        processes of type ``durable.<name>``. ``client``: the AsyncClient its ``ctx.task`` enqueues
        with (or a function returning it). ``retention``: how long a finished run is kept (a
        timedelta or seconds; None: until removed; default 7 days). ``min_worker_version``: the
        version gate of its runs (only workers of that version or newer take their inputs; a
        ``client.start`` option of the same name overrides it)."""
        from ..durable.function import DurableFunction
        from ..durable.life import Managed
        from ..durable.replay import MAX_HISTORY
        from ..durable.tasks import NOTIFY, notify_handler
        from ..processes.model import ProcessHandler, task_type

        get = client if client is None or callable(client) and not hasattr(client, "enqueue") else (lambda: client)

        def register(f: Any) -> DurableFunction:
            d = Managed(f, name, queue, get, retention, min_worker_version)
            self.handle(task_type(d.type), ProcessHandler(d.type, d.process, MAX_HISTORY, checkpoints=True))
            if get is not None and NOTIFY not in self._exact:
                self.handle(NOTIFY, notify_handler(get))
            return d

        return register(fn) if fn is not None else register

    def use(self, *middleware: Middleware) -> None:
        """Add middleware: ``mw(next_handler) -> handler``, both async callables taking a Task."""
        for mw in middleware:
            if not callable(mw):
                raise InvalidArgumentError("middleware must be callable")
            self._middleware.append(mw)

    @property
    def middleware(self) -> list[Middleware]:
        return list(self._middleware)

    def match(self, task_type: str) -> Handler | None:
        """The handler registered for ``task_type`` (exact, else longest prefix), or None."""
        fn = self._exact.get(task_type)
        if fn is not None:
            return fn
        for pattern, fn in self._prefixes:
            if task_type.startswith(pattern):
                return fn
        return None

    @property
    def patterns(self) -> list[str]:
        return sorted(self._exact)
