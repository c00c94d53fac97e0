"""``asynqpy events``: the lifecycle events of queues, printed as they are kept or as they happen."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from queue import Queue

import click

from asynqpy import Inspector, TaskEvent
from asynqpy.core.results.events import EVENTS, last_id

from .common import (
    UserError,
    When,
    echo,
    inspector,
    json_option,
    json_text,
    payload_text,
    redis_url_option,
    user_errors,
)

_AGO = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _since(text: str | None) -> datetime | None:
    """--since: '10m' (ago), an ISO time (local time when it has no zone, as ``--at`` and the
    library read naive times; 'Z' or '+02:00' give the zone), or nothing (all kept)."""
    if text is None:
        return None
    m = _AGO.match(text)
    if m:
        return datetime.now(timezone.utc) - timedelta(seconds=float(m[1]) * _UNIT[m[2]])
    try:
        when = When().convert(text, None, None)
    except click.BadParameter:
        raise UserError(f"--since: {text!r} is neither a duration like 10m / 2h / 1d nor an ISO time") from None
    if isinstance(when, float):
        raise UserError(f"--since: {text!r} is neither a duration like 10m / 2h / 1d nor an ISO time")
    return when


def _line(e: TaskEvent) -> str:
    parts = [f"{e.time:%Y-%m-%d %H:%M:%S.%f}"[:-3], e.queue, f"{e.event:<9}", e.task_id, e.type]
    if e.attempt is not None:
        parts.append(f"attempt={e.attempt}")
    if e.due is not None:
        parts.append(f"due={e.due:%H:%M:%S}")
    if e.error:
        parts.append(f"error={e.error}")
    if e.event == "progress":
        parts.append(f"progress={payload_text(e.value, width=60)}")
    return " ".join(parts)


def _merged(insp: Inspector, queues: list[str], since: datetime | None) -> Iterator[TaskEvent]:
    """The kept events of several queues, oldest first."""
    events: list[TaskEvent] = []
    for q in queues:
        events += insp.events(q, since=since)
    return iter(sorted(events, key=lambda e: (e.time, e.stream_id)))


def _followed(redis_url: str, queues: list[str], since: dict[str, datetime | str | None]) -> Iterator[TaskEvent]:
    """Every queue followed by a thread of its own (queues may live on different cluster nodes),
    their events merged as they arrive; each from its ``since``."""
    out: Queue[TaskEvent | BaseException] = Queue()

    def follow(q: str) -> None:
        try:
            with inspector(redis_url) as insp:
                for e in insp.events(q, since=since[q], follow=True):
                    out.put(e)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            out.put(exc)

    for q in queues:
        threading.Thread(target=follow, args=(q,), daemon=True, name=f"events-{q}").start()
    while True:
        item = out.get()
        if isinstance(item, BaseException):
            raise item
        yield item


@click.command()
@click.option("--queue", "-q", "queues", multiple=True, help="A queue to show (repeatable; default: every queue).")
@click.option("--type", "-t", "types", multiple=True, help="Only tasks of this type (repeatable).")
@click.option("--event", "-e", "kinds", multiple=True, type=click.Choice(EVENTS, case_sensitive=False),
              help="Only this event (repeatable).")
@click.option("--since", help="From when: a duration ago (30s, 10m, 2h, 1d) or an ISO time (local time if no "
              "zone, as --at; 2026-05-01T09:30Z for UTC); default: every event kept, or with --follow from now.")
@click.option("--follow", "-f", is_flag=True, help="Keep printing new events as they happen (Ctrl-C to stop).")
@json_option
@redis_url_option
@user_errors
def events(queues: tuple[str, ...], types: tuple[str, ...], kinds: tuple[str, ...], since: str | None,
           follow: bool, as_json: bool, redis_url: str) -> None:
    """Show the lifecycle events of tasks: enqueued, scheduled, active, progress, completed, retry,
    archived, deleted, cancelled, lease_expired, waiting, blocked... (one line each, or JSON lines
    with --json). --follow without --since starts now: only new events."""
    start = _since(since)
    kinds = tuple(k.lower() for k in kinds)
    with inspector(redis_url) as insp:
        names = list(queues) or insp.queues()
        for q in names:
            insp.events_max_len(q)  # checks the name (a bad one is a one-line error, exit 2)
        if follow:
            # without --since: from each queue's newest event kept, not the whole stream
            begin: dict[str, datetime | str | None] = {
                q: start if since is not None else insp._exec.run(last_id(q)) for q in names}
            stream = _followed(redis_url, names, begin)
        else:
            stream = _merged(insp, names, start)
        try:
            for e in stream:
                if (types and e.type not in types) or (kinds and e.event not in kinds):
                    continue
                click.echo(json_text(e)) if as_json else echo(_line(e))
        except KeyboardInterrupt:
            pass
