"""The rules engine's loops (docs/rules.md): one per watcher of the configuration, in one asyncio
loop. Each takes events in batches from its input list into its taken list (``rules_take``, or
BLMOVE when the list is empty), runs the matching rules (their fetches concurrently, over httpx),
writes what they made (``rules_push`` for Resc's ``make``, the Client's ``enqueue_many`` for
``make_task``), then removes each event from the taken list (or moves it to the dead list with the
reason, ``rules_dead``). On start, a watcher first handles the events its taken list holds (a
crashed run's). Delivery is at least once: a crash between a task's write and its event's
removal makes the event run again (a ``set`` or ``unique_key`` guard then drops the duplicate).

Events are untrusted: one that is not UTF-8 text or is over ``max_event_bytes`` goes to the dead
list unmatched (its bytes kept: ``event_hex`` in the record); a batch's rules are searched in a
thread (the ``regex`` package releases the GIL), each event within ``match_timeout``, so a slow
pattern delays only its own watcher; fetches follow redirects only as the fetch's ``redirects``
allows.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from redis.exceptions import ClusterDownError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..core.model.errors import AsynqpyError, DuplicateTaskError, InvalidArgumentError, RedisFullError
from ..core.rules.config import (
    MATCH_TIME_BOUNDED,
    MAX_REDIRECTS,
    Config,
    Fetch,
    MatchTimeout,
    NewTask,
    Push,
    Rule,
    RuleError,
    Watcher,
    actions,
    bindings,
    match,
    redirect_allowed,
)
from ..core.spine.broker import Broker, Call
from ..redisio.executor import AsyncExecutor

log = logging.getLogger("asynqpy.rules")

TRANSIENT: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OSError, ClusterDownError,
                                          TryAgainError, RedisFullError)
"""Errors that are Redis's state, not the event's: the batch is handled again once Redis answers.
Any other error of a write (a CROSSSLOT list and set, a key of the wrong type) sends the event to
the dead list with it."""
BATCH = 100
IDLE_WAIT = 1.0  # seconds a watcher blocks on an empty input list before looking at its stop flag


def _shown(raw: bytes, limit: int | None = None) -> str:
    """An event as text for logs and the dead list: bytes that are not UTF-8 as ``\\xff``."""
    return (raw if limit is None else raw[:limit]).decode("utf-8", "backslashreplace")


def _clean(text: str) -> str:
    """Text redis-py can send (lone surrogates, e.g. from a fetch's JSON, as ``\\udcff``)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _not_text(value: Any) -> bool:
    """Whether a value holds a string that is not valid Unicode (a lone surrogate from a fetch's
    JSON): such a task cannot be written, its event goes to the dead list."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, Mapping):
        return any(_not_text(k) or _not_text(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return any(_not_text(v) for v in value)
    return False


class RulesMetrics:
    """What the engine counts; this base records nothing (see :func:`prometheus_rules_metrics`)."""

    enabled = False

    def event(self, watcher: str) -> None: ...
    def matched(self, watcher: str, rule: str) -> None: ...
    def made(self, watcher: str, rule: str, kind: str, n: int = 1) -> None: ...
    def dead(self, watcher: str) -> None: ...
    def fetched(self, rule: str, seconds: float, ok: bool) -> None: ...


class PrometheusRulesMetrics(RulesMetrics):
    """``asynqpy_rules_events_total{watcher}``, ``asynqpy_rules_matched_total{watcher,rule}``,
    ``asynqpy_rules_tasks_total{watcher,rule,kind}`` (kind: pushed, enqueued, duplicate),
    ``asynqpy_rules_dead_total{watcher}``, ``asynqpy_rules_fetch_seconds{rule,outcome}``."""

    enabled = True

    def __init__(self) -> None:
        from .metrics import DURATION_BUCKETS, prometheus

        pc = prometheus()
        self._pc = pc
        self.registry = pc.CollectorRegistry()
        reg = {"registry": self.registry}
        self._events = pc.Counter("asynqpy_rules_events", "Events taken from a watcher's input list.", ["watcher"],
                                  **reg)
        self._matched = pc.Counter("asynqpy_rules_matched", "Events a rule matched.", ["watcher", "rule"], **reg)
        self._made = pc.Counter("asynqpy_rules_tasks", "Tasks the rules made (pushed, enqueued) or dropped as "
                                "duplicates.", ["watcher", "rule", "kind"], **reg)
        self._dead = pc.Counter("asynqpy_rules_dead", "Events moved to the dead list.", ["watcher"], **reg)
        self._fetch = pc.Histogram("asynqpy_rules_fetch_seconds", "Seconds a rule's fetch took (retries included).",
                                   ["rule", "outcome"], buckets=DURATION_BUCKETS, **reg)
        self._httpd: Any = None

    def event(self, watcher: str) -> None:
        self._events.labels(watcher).inc()

    def matched(self, watcher: str, rule: str) -> None:
        self._matched.labels(watcher, rule).inc()

    def made(self, watcher: str, rule: str, kind: str, n: int = 1) -> None:
        self._made.labels(watcher, rule, kind).inc(n)

    def dead(self, watcher: str) -> None:
        self._dead.labels(watcher).inc()

    def fetched(self, rule: str, seconds: float, ok: bool) -> None:
        self._fetch.labels(rule, "ok" if ok else "failed").observe(seconds)

    def serve(self, port: int, host: str) -> None:
        self._httpd, _ = self._pc.start_http_server(port, host, registry=self.registry)

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None


@dataclass
class _Event:
    raw: bytes
    text: str  # "" for an event that goes to the dead list unmatched (error set)
    acts: list[Push | NewTask] = field(default_factory=list)
    error: str = ""
    rule: str = ""
    matched: list[tuple[Rule, dict[str, Any]]] = field(default_factory=list)

    @classmethod
    def of(cls, raw: bytes, max_bytes: int) -> _Event:
        """An event taken: its text, or why it goes to the dead list without being matched."""
        if len(raw) > max_bytes:
            return cls(raw, "", error=f"the event is {len(raw)} bytes, over max_event_bytes ({max_bytes})")
        try:
            return cls(raw, raw.decode("utf-8"))
        except UnicodeDecodeError as exc:
            return cls(raw, "", error=f"the event is not UTF-8 text ({exc.reason} at byte {exc.start})")


class Engine:
    """Runs a configuration's watchers until :meth:`stop` (or the ``stop`` event). ``redis``: an
    asyncio redis-py client. ``instance``: a name of this process, stable across its restarts,
    when several processes run one configuration: its taken lists are ``<taken>/<instance>`` (each
    process recovers its own). ``http``: an ``httpx.AsyncClient`` (made when a rule fetches).
    ``client``: the AsyncClient that enqueues make_task's tasks."""

    def __init__(self, config: Config, redis: Any, *, instance: str | None = None, batch: int = BATCH,
                 fetch_concurrency: int = 32, http: Any = None, metrics: RulesMetrics | None = None,
                 client: Any = None) -> None:
        self.config = config
        self.redis = redis
        self.exec = AsyncExecutor(redis)
        self.broker = Broker()
        self.instance = instance
        self.batch = batch
        self.fetch_slots = asyncio.Semaphore(fetch_concurrency)
        self.http = http
        self._own_http = False
        self.metrics = metrics or RulesMetrics()
        self._client = client
        self._stop = asyncio.Event()
        self.handled = 0

    def taken_of(self, w: Watcher) -> str:
        return w.taken_queue if self.instance is None else f"{w.taken_queue}/{self.instance}"

    def stop(self) -> None:
        """Ask the watchers to stop after their current batch."""
        self._stop.set()

    async def run(self) -> None:
        """Run until stopped; closes what it opened."""
        if self.http is None and any(r.fetch for w in self.config.watchers for r in w.rules):
            try:
                import httpx
            except ImportError:
                raise AsynqpyError("rules with fetch need httpx: pip install '.[rules]' (from a clone of "
                                   "asynqpy)") from None
            self.http = httpx.AsyncClient()  # redirects: followed by _fetch as each fetch's policy allows
            self._own_http = True
        if self._client is None and any(r.make_task for w in self.config.watchers for r in w.rules):
            raise AsynqpyError("rules with make_task need an asynqpy AsyncClient (client=)")
        log.info("rules engine started: %d watcher(s)%s", len(self.config.watchers),
                 f", instance {self.instance}" if self.instance else "")
        if not MATCH_TIME_BOUNDED:
            log.warning("the regex package is not installed: match_timeout does not apply, a slow rule on one event "
                        "stalls every watcher (pip install '.[rules]' (from a clone of asynqpy))")
        try:
            await asyncio.gather(*(self._watch(w) for w in self.config.watchers))
        finally:
            if self._own_http:
                await self.http.aclose()

    # -- one watcher ------------------------------------------------------------------------------

    async def _watch(self, w: Watcher) -> None:
        taken = self.taken_of(w)
        await self._recover(w, taken)
        delay = 0.05
        while not self._stop.is_set():
            try:
                events = await self._take(w, taken)
                if events:
                    await self._handle(w, taken, events)
                delay = 0.05
            except TRANSIENT as exc:
                log.warning("watcher %s: %s; retrying in %.2fs (taken events are handled then)", w.name, exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                await self._recover(w, taken)

    async def _recover(self, w: Watcher, taken: str) -> None:
        """Handle the events left in the taken list (a crashed run's, or a failed batch's), oldest
        first, before taking new ones."""
        while True:
            try:
                left = await self.exec.run(Call(lambda r: list(r), command=("LRANGE", taken, -self.batch, -1)))
                if not left:
                    return
                log.warning("watcher %s: handling %d event(s) left in %s", w.name, len(left), taken)
                await self._handle(w, taken, [x if isinstance(x, bytes) else str(x).encode() for x in reversed(left)])
                return await self._recover_rest(w, taken)
            except TRANSIENT as exc:
                if self._stop.is_set():
                    return
                log.warning("watcher %s: recovering %s: %s; retrying", w.name, taken, exc)
                await asyncio.sleep(0.5)

    async def _recover_rest(self, w: Watcher, taken: str) -> None:
        while True:
            left = await self.exec.run(Call(lambda r: list(r), command=("LRANGE", taken, -self.batch, -1)))
            if not left:
                return
            await self._handle(w, taken, [x if isinstance(x, bytes) else str(x).encode() for x in reversed(left)])

    async def _take(self, w: Watcher, taken: str) -> list[bytes]:
        got = await self.exec.run(self.broker.rules_take(w.input_queue, taken, self.batch))
        if got:
            return got
        ev = await self.redis.blmove(w.input_queue, taken, IDLE_WAIT, "RIGHT", "LEFT")
        return [ev if isinstance(ev, bytes) else str(ev).encode()] if ev is not None else []

    def _match(self, w: Watcher, events: Sequence[_Event]) -> None:
        """The rules each event matches (in a thread: regex's searches release the GIL)."""
        for ev in events:
            if ev.error:
                continue
            try:
                ev.matched = match(w, ev.text, self.config.match_timeout)
            except MatchTimeout as exc:
                ev.error, ev.rule = str(exc), exc.rule

    async def _handle(self, w: Watcher, taken: str, raws: Sequence[bytes]) -> None:
        events = [_Event.of(raw, self.config.max_event_bytes) for raw in raws]
        await asyncio.to_thread(self._match, w, events)
        work = []
        for ev in events:
            self.metrics.event(w.name)
            log.debug("<- %r in %s: %d rule(s) match%s", _shown(ev.raw, 200), w.input_queue, len(ev.matched),
                      f" ({ev.error})" if ev.error else "")
            for rule, env in ev.matched:
                self.metrics.matched(w.name, rule.name)
                if rule.fetch:
                    work.append(self._fetched(ev, rule, env))
                elif not ev.error:
                    try:
                        ev.acts += actions(rule, [env])
                    except RuleError as exc:
                        ev.error, ev.rule = str(exc), rule.name
        if work:
            await asyncio.gather(*work)
        for ev in events:
            bad = next((a for a in ev.acts if _not_text(vars(a))), None)
            if bad is not None and not ev.error:
                ev.error = "a task's text is not valid Unicode (a lone surrogate, from a fetch's JSON?)"
                ev.rule = bad.rule
        await self._write(w, taken, events)
        self.handled += len(events)

    async def _fetched(self, ev: _Event, rule: Rule, env: dict[str, Any]) -> None:
        try:
            responses = [await self._fetch(rule, f, env) for f in rule.fetch]
            acts = actions(rule, bindings(rule, env, responses))
        except RuleError as exc:
            if not ev.error:
                ev.error, ev.rule = str(exc), rule.name
            return
        ev.acts += acts

    async def _get(self, f: Fetch, url: str) -> Any:
        """GET ``url``, following redirects as ``f.redirects`` allows; a redirect it does not
        follow is the response (a 3xx)."""
        resp = await self.http.get(url, timeout=f.timeout, follow_redirects=False)
        for _ in range(MAX_REDIRECTS):
            nxt = resp.next_request if resp.is_redirect else None
            if nxt is None or not redirect_allowed(f.redirects, url, str(nxt.url)):
                break
            await resp.aclose()
            resp = await self.http.send(nxt, follow_redirects=False)
        return resp

    async def _fetch(self, rule: Rule, f: Fetch, env: dict[str, Any]) -> Any:
        url = f.url.render(env)
        started = time.monotonic()
        why = ""
        attempts = 0
        for attempt in range(f.retries + 1):
            if attempt:
                await asyncio.sleep(min(0.2 * 2 ** (attempt - 1), 5.0) * (0.5 + random.random()))
            attempts += 1
            try:
                async with self.fetch_slots:
                    resp = await self._get(f, url)
                if resp.is_redirect:
                    why = (f"HTTP {resp.status_code}: a redirect to {resp.headers.get('location', '')[:200]!r}, "
                           f"not followed (redirects: {f.redirects})")
                    break  # asking again gets the same redirect
                if resp.status_code >= 500 or resp.status_code == 429:
                    why = f"HTTP {resp.status_code}"
                    continue
                if resp.status_code >= 400:
                    why = f"HTTP {resp.status_code}"
                    break  # a client error does not get better by asking again
                value = resp.json()
                log.debug("   fetched %s: %s", url, str(value)[:200])
                self.metrics.fetched(rule.name, time.monotonic() - started, True)
                return value
            except ValueError:
                why = "the response is not JSON"
                break
            except Exception as exc:  # noqa: BLE001 - httpx's transport errors, timeouts
                why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        self.metrics.fetched(rule.name, time.monotonic() - started, False)
        raise RuleError(f"fetch {url} failed ({why}) after {attempts} attempt(s)")

    async def _write(self, w: Watcher, taken: str, events: list[_Event]) -> None:
        """The tasks first (a round trip for the pushes, one for the enqueues), then each event
        leaves the taken list (one more round trip): an event is removed only once its tasks are
        written."""
        todo = await self._push(w, events)
        if todo:
            await self._enqueue(w, todo)
        await self._end(w, taken, events)

    async def _push(self, w: Watcher, events: list[_Event]) -> list[tuple[_Event, NewTask]]:
        """Write the events' pushes and read the guards of their new tasks, in one round trip; a
        push that fails marks its event. Returns the new tasks to enqueue: those of events not
        failed whose guard is not set yet (the others are duplicates)."""
        calls, owners, news = self._acts(events)
        guarded = [(ev, t) for ev, t in news if t.set]
        checks = [Call(lambda r: r is not None, command=("ZSCORE", t.set, t.guard)) for _, t in guarded]
        results = await self.exec.run_many(calls + checks)
        self._pushed(w, owners, results)
        seen = set()
        for (_, t), res in zip(guarded, results[len(calls):]):
            if isinstance(res, Exception):
                self._transient(res)
            elif res:
                seen.add(id(t))
        for _, t in news:
            if id(t) in seen:
                self.metrics.made(w.name, t.rule, "duplicate")
        return [(ev, t) for ev, t in news if id(t) not in seen and not ev.error]

    def _acts(self, events: list[_Event]) -> tuple[list[Call[Any]], list[tuple[_Event, Push]],
                                                   list[tuple[_Event, NewTask]]]:
        """The acts of the events not failed: the push calls (and the act of each), the new tasks."""
        calls: list[Call[Any]] = []
        owners: list[tuple[_Event, Push]] = []
        news: list[tuple[_Event, NewTask]] = []
        for ev in events:
            if ev.error:
                continue
            for a in ev.acts:
                if isinstance(a, Push):
                    calls.append(self.broker.rules_push(a.queue, a.task.encode(), a.set))
                    owners.append((ev, a))
                else:
                    news.append((ev, a))
        return calls, owners, news

    def _pushed(self, w: Watcher, owners: list[tuple[_Event, Push]], results: list[Any]) -> None:
        """Each push's result: counted (pushed, or a duplicate), or its event marked failed."""
        for (ev, a), res in zip(owners, results):
            if isinstance(res, Exception):
                self._transient(res)
                ev.error, ev.rule = f"pushing to {a.queue!r}: {res}", a.rule
            else:
                self.metrics.made(w.name, a.rule, "pushed" if res else "duplicate")
                log.debug("   -> %r pushed to %s" if res else "   -> %r already in %s", a.task,
                          a.queue if res else a.set)

    async def _enqueue(self, w: Watcher, todo: list[tuple[_Event, NewTask]]) -> None:
        """Enqueue the new tasks (one call; one by one if asynqpy refuses one of them), then set the
        guards of those enqueued; one that fails marks its event."""
        infos = await self._enqueue_many([(t.type, t.payload, t.options) for _, t in todo])
        adds: list[Call[Any]] = []
        for (ev, t), info in zip(todo, infos):
            if isinstance(info, DuplicateTaskError):
                self.metrics.made(w.name, t.rule, "duplicate")
            elif isinstance(info, Exception):
                self._transient(info)
                ev.error, ev.rule = f"enqueueing a {t.type!r} task: {info}", t.rule
            else:
                self.metrics.made(w.name, t.rule, "enqueued")
                log.debug("   -> task %s (%s) enqueued in %s", info.id, t.type, info.queue)
                if t.set:
                    adds.append(Call(int, command=("ZADD", t.set, int(time.time()), t.guard)))
        if adds:
            for res in await self.exec.run_many(adds):
                if isinstance(res, Exception):
                    self._transient(res)

    async def _enqueue_many(self, items: list[tuple[str, Any, dict[str, Any]]]) -> list[Any]:
        """Each item's TaskInfo or exception."""
        try:
            return list(await self._client.enqueue_many(items, return_exceptions=True))
        except InvalidArgumentError:  # an item asynqpy refuses (checked before any is sent): one by one
            infos: list[Any] = []
            for item in items:
                try:
                    infos += await self._client.enqueue_many([item], return_exceptions=True)
                except InvalidArgumentError as exc:
                    infos.append(exc)
            return infos

    async def _end(self, w: Watcher, taken: str, events: list[_Event]) -> None:
        """Each event leaves the taken list: removed, or moved to the dead list with why (a
        failed one); the listener channel, if any, is told (one round trip)."""
        ends: list[Call[Any]] = []
        channel = self.config.listener_channel
        for ev in events:
            if ev.error:
                ends.append(self._dead(w, taken, ev))
            else:
                ends.append(Call(int, command=("LREM", taken, 1, ev.raw)))
            if channel:
                ends += [Call(int, command=("PUBLISH", channel, f"{taken} TRIGGER {ev.text} -> {a.task}"))
                         for a in ev.acts if isinstance(a, Push)]
                ends.append(Call(int, command=("PUBLISH", channel, f"{taken} DONE {ev.text or _shown(ev.raw)}")))
        for res in await self.exec.run_many(ends):
            if isinstance(res, Exception):
                self._transient(res)

    def _dead(self, w: Watcher, taken: str, ev: _Event) -> Call[Any]:
        """The move of a failed event to the watcher's dead list, with its record (logged)."""
        rec = {"event": ev.text or _shown(ev.raw), "error": _clean(ev.error), "rule": _clean(ev.rule),
               "watcher": w.name, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        if not ev.text:  # unmatched: kept as bytes when not UTF-8 (rules_redrive puts them back)
            try:
                ev.raw.decode("utf-8")
            except UnicodeDecodeError:
                rec["event_hex"] = ev.raw.hex()
        record = json.dumps(rec, ensure_ascii=False)
        log.warning("watcher %s: event %r goes to %s: rule %r: %s", w.name, _shown(ev.raw, 200), w.dead_queue,
                    ev.rule, ev.error)
        self.metrics.dead(w.name)
        return self.broker.rules_dead(taken, w.dead_queue, ev.raw, record)

    @staticmethod
    def _transient(exc: Exception) -> None:
        """A Redis outage or a full Redis is not the event's fault: raised, so the batch is
        handled again (its events are still in the taken list) once Redis answers."""
        if isinstance(exc, TRANSIENT):
            raise exc
