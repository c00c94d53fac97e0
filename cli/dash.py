"""``asynqpy dash``: a live terminal dashboard (rich Live on the alternate screen).

One loop: read Redis every ``--refresh`` seconds (one pipelined ``all_queue_info``, ``servers``,
and in the queue view one ``list_tasks`` page, the queue's count of durable processes and, when
it has tenants, the first page of them (TENANTS_NAMED):
O(queues + page size) per refresh, whatever the queues' depth; the queues' memory only every
``MEMORY_EVERY`` seconds), render, and wait for keys with ``select`` until the next read. A key
that changes the task page wanted reads that page at once. Redis lost while running: the footer
shows the error, the last data stays on screen, and the next refresh tries again.
"""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Protocol
from urllib.parse import urlsplit, urlunsplit

import click
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError
from rich.console import RenderableType
from rich.live import Live

from asynqpy import Inspector
from asynqpy.core.model.errors import AsynqpyError
from asynqpy.core.model.task import TaskInfo, TaskState
from asynqpy.core.tenants.plans import TenantInfo

from .common import UserError, redis_url_option, user_errors
from .common import console as safe_console
from .dash_render import TENANTS_NAMED, Snapshot, page_size_for, render
from .dash_state import DashState, Throughput
from .terminal import RawKeys

if TYPE_CHECKING:
    from asynqpy import Process, QueueInfo, ServerInfo

KEY_POLL = 0.25
"""Longest wait for keys between two checks of the terminal's size."""
MEMORY_EVERY = 30.0
"""Seconds the queues' memory reading is reused between refreshes (as the web console does): the
other refreshes read the counts only."""


class Source(Protocol):
    """What the dashboard reads (an :class:`asynqpy.Inspector`)."""

    def all_queue_info(self, memory: bool = True) -> list[QueueInfo]: ...

    def servers(self) -> list[ServerInfo]: ...

    def list_tasks(self, queue: str, state: TaskState | str, page: int = 1,
                   page_size: int = 30) -> list[TaskInfo]: ...
    def processes(self, queue: str, start: int = 0, count: int = 100,
                  status: str | None = None) -> tuple[int, list[Process]]: ...

    def tenants(self, queue: str, *, after: str = "", count: int = 100) -> list[TenantInfo]: ...


class Keys(Protocol):
    def read(self, timeout: float) -> list[str]: ...


def describe(exc: Exception) -> str:
    """One line for a failed read."""
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError, OSError)):
        return f"cannot reach Redis: {exc}"
    if isinstance(exc, RedisError):
        return f"Redis error: {exc}"
    return str(exc)


RECOVERABLE = (RedisError, OSError, AsynqpyError)
"""Read failures the dashboard shows and retries instead of exiting."""


class Dash:
    """The dashboard without a terminal: state, last snapshot, throughput, and the loop."""

    def __init__(self, source: Source, *, refresh: float, label: str,
                 clock: Callable[[], float] = time.monotonic,
                 wallclock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.source = source
        self.refresh = refresh
        self.label = label
        self.clock = clock
        self.wallclock = wallclock
        self.state = DashState()
        self.snap = Snapshot()
        self.rates = Throughput()
        self._asked: tuple[str, TaskState, int, int] | None = None
        self._memory: dict[str, int | None] = {}
        self._memory_at = float("-inf")

    def read_all(self) -> None:
        """One refresh: every queue's info, the live servers, the task page on screen."""
        try:
            queues = self._queue_infos()
            self.rates.add(self.clock(), queues)
            self.snap.queues = queues
            self.state.sync(queues)
            self.snap.servers = self.source.servers()
            self._read_tasks()
            self._read_processes()
        except RECOVERABLE as exc:
            self.snap.error = describe(exc)
        else:
            self.snap.error = None
            self.snap.updated = self.wallclock()

    def _queue_infos(self) -> list[QueueInfo]:
        """Every queue's info, with a memory reading at most MEMORY_EVERY seconds old (None for a
        queue not read yet)."""
        now = self.clock()
        if now - self._memory_at >= MEMORY_EVERY:
            queues = self.source.all_queue_info(memory=True)
            self._memory = {q.queue: q.memory_bytes for q in queues}
            self._memory_at = now
            return queues
        return [replace(q, memory_bytes=self._memory.get(q.queue)) for q in self.source.all_queue_info(memory=False)]

    def read_page(self) -> None:
        """Read the task page the user just asked for (after a key)."""
        try:
            self._read_tasks()
            if self.snap.processes is None or self.snap.processes[0] != self.state.queue:
                self._read_processes()  # a queue just opened: its processes now, not at the next refresh
        except RECOVERABLE as exc:
            self.snap.error = describe(exc)

    def _read_tasks(self) -> None:
        want = self.state.want()
        self._asked = want
        if want is None:
            return
        queue, state, page, size = want
        self.snap.tasks = self.source.list_tasks(queue, state, page=page, page_size=size)
        self.snap.tasks_for = want

    def _read_processes(self) -> None:
        """In the queue view, how many durable processes the open queue has (O(1): the count of
        its index and the newest one)."""
        queue = self.state.queue if self.state.want() is not None else None
        if queue is None:
            self.snap.processes = self.snap.tenants = None
            return
        self.snap.processes = (queue, self.source.processes(queue, 0, 1)[0])
        info = next((q for q in self.snap.queues if q.queue == queue), None)
        # its first tenants by name, when it has any (one page of TENANTS_NAMED: O(log n))
        self.snap.tenants = (queue, self.source.tenants(queue, count=TENANTS_NAMED)) if info and info.tenants else None

    def screen(self, width: int, height: int) -> RenderableType:
        now = self.snap.updated or self.wallclock()
        return render(self.state, self.snap, self.rates, width=width, height=height, now=now,
                      source=self.label)

    def run(self, keys: Keys, show: Callable[[RenderableType], None], size: Callable[[], tuple[int, int]],
            clear: Callable[[], None] = lambda: None) -> None:
        """Refresh, draw and handle keys until the user quits. ``show`` draws a screen, ``size``
        gives the terminal's (width, height), ``clear`` wipes it (Ctrl-L)."""
        next_read = 0.0
        drawn: tuple[int, int] | None = None
        while not self.state.quit:
            width, height = size()
            self.state.page_size = page_size_for(height)
            if self.clock() >= next_read:
                self.read_all()
                next_read = self.clock() + self.refresh
                drawn = None
            elif self.state.want() not in (None, self._asked):
                self.read_page()
                drawn = None
            if self.state.redraw:
                self.state.redraw = False
                clear()
                drawn = None
            if drawn != (width, height):
                show(self.screen(width, height))
                drawn = (width, height)
            for key in keys.read(max(0.0, min(KEY_POLL, next_read - self.clock()))):
                self.state.handle(key, self.snap.queues)
                drawn = None


def safe_url(url: str) -> str:
    """The URL with its password hidden."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def run_in_terminal(source: Source, refresh: float, label: str) -> None:
    """The dashboard on this process's terminal: raw keys on stdin, rich Live on stdout. The
    terminal's settings and screen are restored however this returns (q, Ctrl-C, an exception)."""
    console = safe_console(highlight=True)  # (stored text escaped: cli/common visible)
    board = Dash(source, refresh=refresh, label=label)
    old_term = signal.signal(signal.SIGTERM, _exit_on_sigterm)
    try:
        with RawKeys(sys.stdin) as keys, Live(console=console, screen=True, auto_refresh=False,
                                              redirect_stdout=False, redirect_stderr=False) as live:
            try:
                board.run(keys, lambda r: live.update(r, refresh=True), lambda: (console.width, console.height),
                          clear=console.clear)
            except KeyboardInterrupt:
                pass
    finally:
        signal.signal(signal.SIGTERM, old_term)


def _exit_on_sigterm(signum: int, frame: object) -> None:
    """SIGTERM unwinds like an exception, so the terminal is restored on the way out."""
    raise SystemExit(128 + signum)


@click.command()
@click.option("--refresh", default=2.0, show_default=True, type=click.FloatRange(min=0.5),
              help="Seconds between two reads of Redis.")
@redis_url_option
@user_errors
def dash(refresh: float, redis_url: str) -> None:
    """Live dashboard: queues, throughput, servers; pick a queue to page through its tasks.

    Keys: arrows or j/k select, Enter opens a queue, left/right or h/l or 1-8 switch the task
    state, n/p page, Esc goes back, ? shows help, q quits.
    """
    try:
        insp = Inspector(redis_url)
    except ValueError as exc:
        raise UserError(f"bad Redis URL: {exc}") from None
    try:
        insp.all_queue_info(memory=False)  # Redis unreachable: one line on stderr, exit 2 (user_errors)
        if not (sys.stdin.isatty() and sys.stdout.isatty()):
            raise UserError("dash needs a terminal (stdin and stdout must be a tty)")
        run_in_terminal(insp, refresh, safe_url(redis_url))
    finally:
        insp.close()
