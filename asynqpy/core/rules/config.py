"""The rules engine, sans I/O (docs/rules.md): its configuration (a Resc config runs unchanged),
templates, and what an event turns into.

A *watcher* takes events (strings) from an input list into its taken list, one atomic move each;
every *rule* whose ``on`` regular expression matches an event runs: its named groups, the event
(``input_task``) and what its ``fetch`` requests returned are variables for its ``make``
(Resc's: a templated string pushed to a templated list, guarded by a templated sorted set) and
``make_task`` (asynqpy's: a task with a templated type, payload and options). The event leaves
the taken list once all its rules ran, or goes to the watcher's dead list with the reason.

Untrusted events: an event that is not UTF-8 text or is over ``max_event_bytes`` goes to the dead
list unmatched; a rule's search of an event is bounded by ``match_timeout`` (with the ``regex``
package, the ``rules`` extra); a variable in a fetch URL is percent-encoded and cannot change its
scheme, host, port or path segments (:class:`UrlTemplate`).

This module parses and checks the configuration (:func:`parse_config`; every problem is a
:class:`ConfigError` naming the file, the line where it can be found, and the place in the
document); the templates are :mod:`.templates` (their names importable from here too); the I/O
(Redis, HTTP) is in :mod:`asynqpy.worker.rules`.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.errors import AsynqpyError, InvalidArgumentError
from ..spine.keys import validate_queue
from .templates import (
    VAR as VAR,
)
from .templates import (
    RuleError as RuleError,
)
from .templates import (
    Template as Template,
)
from .templates import (
    UrlTemplate as UrlTemplate,
)
from .templates import (
    _json_names,
)
from .templates import (
    lookup as lookup,
)
from .templates import (
    redirect_allowed as redirect_allowed,
)
from .templates import (
    render_json as render_json,
)
from .templates import (
    text_of as text_of,
)

INPUT = "input_task"

TOP_KEYS = {"redis", "watchers", "listener_channel", "task_set", "max_event_bytes", "match_timeout"}
REDIS_KEYS = {"url"}
WATCHER_KEYS = {"input_queue", "taken_queue", "dead_queue", "rules", "name"}
RULE_KEYS = {"name", "on", "fetch", "make", "todo", "make_task"}
FETCH_KEYS = {"url", "returns", "timeout", "retries", "escape", "redirects"}
MAKE_KEYS = {"name", "task", "queue", "set"}
MAKE_TASK_KEYS = {"name", "type", "payload", "queue", "set", "task_id", "unique_key", "unique", "process_in",
                  "priority", "max_retry", "timeout", "retention", "retry_delay", "key", "headers"}
TEXT_OPTIONS = ("task_id", "unique_key", "key")
NUMBER_OPTIONS = {"unique": (1, None), "process_in": (0, None), "priority": (0, 9), "max_retry": (0, None),
                  "timeout": (0.001, None), "retention": (0, None), "retry_delay": (0, None)}
DEFAULT_FETCH_TIMEOUT = 10.0
DEFAULT_FETCH_RETRIES = 3
DEFAULT_MAX_EVENT_BYTES = 65_536
"""Events longer than this go to the dead list unmatched (``max_event_bytes``)."""
DEFAULT_MATCH_TIMEOUT = 0.1
"""Seconds the rules of a watcher may spend searching one event (``match_timeout``)."""
REDIRECTS = ("same-origin", "none", "any")
"""A fetch's ``redirects``: followed to the same scheme, host and port (and http -> https on the
default ports) by default; never; or to any host."""
MAX_REDIRECTS = 10

try:  # the rules extra: a regular expression engine whose searches take a timeout
    import regex as _regex
except ImportError:  # pragma: no cover - the rules extra installs it
    _regex = None

MATCH_TIME_BOUNDED = _regex is not None
"""True when rules are searched with the ``regex`` package (``match_timeout`` applies); with the
standard ``re`` only, a search's time is not bounded (the engine warns at start)."""
_REGEX_ERRORS: tuple[type[Exception], ...] = (re.error,) if _regex is None else (re.error, _regex.error)


def compile_rule(src: str) -> Any:
    """A rule's ``on`` pattern, compiled with ``regex`` (re's syntax, searches with a timeout) when
    it is installed, else with ``re``; ``re.error``/``regex.error`` if it is not valid."""
    return (_regex or re).compile(src)


class ConfigError(AsynqpyError):
    """A problem in a rules configuration: ``file:line: place: message``."""

    def __init__(self, file: str, line: int | None, place: str, message: str) -> None:
        self.file, self.line, self.place, self.message = file, line, place, message
        where = f"{file}:{line}" if line else file
        super().__init__(f"{where}: {place}: {message}" if place else f"{where}: {message}")


class MatchTimeout(RuleError):
    """Searching an event took the rules over ``match_timeout``: the event goes to the dead list.
    ``rule``: the rule whose search was stopped."""

    def __init__(self, message: str, rule: str) -> None:
        super().__init__(message)
        self.rule = rule


# -- the configuration ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Fetch:
    """An HTTP GET whose JSON response is bound to ``returns`` (a list: one binding per element)."""

    url: UrlTemplate
    returns: str
    timeout: float = DEFAULT_FETCH_TIMEOUT
    retries: int = DEFAULT_FETCH_RETRIES
    redirects: str = "same-origin"


@dataclass(frozen=True)
class Make:
    """Resc's make: the string ``task`` pushed (LPUSH) to the list ``queue``, unless it is in the
    sorted set ``set`` (it is added there, scored with the time in seconds, as Resc does)."""

    task: Template
    queue: Template
    set: Template | None = None
    name: str = ""


@dataclass(frozen=True)
class MakeTask:
    """asynqpy's extension: enqueue a task (type, payload, queue and options, all templated);
    with ``set``, not if the task's ``type payload`` text is in that sorted set (added after)."""

    type: Template
    payload: Any = None
    queue: Template | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    set: Template | None = None
    name: str = ""


@dataclass(frozen=True)
class Rule:
    name: str
    on: Any  # a compiled pattern (regex's, or re's: compile_rule)
    fetch: tuple[Fetch, ...] = ()
    make: tuple[Make, ...] = ()
    make_task: tuple[MakeTask, ...] = ()


@dataclass(frozen=True)
class Watcher:
    input_queue: str
    taken_queue: str
    dead_queue: str
    rules: tuple[Rule, ...]
    name: str = ""


@dataclass(frozen=True)
class Config:
    watchers: tuple[Watcher, ...]
    redis_url: str | None = None
    listener_channel: str | None = None
    file: str = "<config>"
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    match_timeout: float = DEFAULT_MATCH_TIMEOUT


class _Parser:
    def __init__(self, text: str, file: str) -> None:
        self.src, self.file = text, file

    def line(self, *anchors: Any) -> int | None:
        """Best effort: the line of the last anchor found, each searched after the one before
        (a string value as written, or a key followed by ':' or '=')."""
        pos, found = 0, None
        for a in anchors:
            if a is None or a == "":
                continue
            s = str(a)
            pat = re.compile(rf"(?<![\w-])[\"']?{re.escape(s)}[\"']?\s*[:=]") if re.fullmatch(r"\w+", s) else None
            m = pat.search(self.src, pos) if pat else None
            i = m.start() if m else self.src.find(json.dumps(s)[1:-1], pos)
            if i < 0:
                i = self.src.find(s, pos)
            if i >= 0:
                pos, found = i + 1, self.src.count("\n", 0, i) + 1
        return found

    def fail(self, place: str, message: str, *anchors: Any) -> ConfigError:
        return ConfigError(self.file, self.line(*anchors), place, message)

    def obj(self, v: Any, place: str, keys: set[str], *anchors: Any) -> dict[str, Any]:
        if not isinstance(v, dict):
            raise self.fail(place, f"must be an object, got {_kind(v)}", *anchors)
        unknown = sorted(set(v) - keys)
        if unknown:
            raise self.fail(place, f"unknown key {unknown[0]!r} (known: {', '.join(sorted(keys))})", *anchors,
                            unknown[0])
        return v

    def text(self, v: Any, place: str, *anchors: Any, empty: bool = False) -> str:
        if not isinstance(v, str) or (not v and not empty):
            raise self.fail(place, f"must be a non-empty string, got {_kind(v)}", *anchors)
        return v

    def number(self, v: Any, place: str, lo: float, hi: float | None, *anchors: Any, integer: bool = False) -> Any:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= lo and (
            hi is None or v <= hi) and (not integer or float(v).is_integer())
        if not ok:
            rng = f"from {lo:g} to {hi:g}" if hi is not None else f">= {lo:g}"
            raise self.fail(place, f"must be {'an integer' if integer else 'a number'} {rng}, got {v!r}", *anchors)
        return int(v) if integer else v

    def template(self, v: Any, place: str, known: set[str], fetched: set[str], *anchors: Any) -> Template:
        t = Template.of(self.text(v, place, *anchors))
        self.names(t.names, place, known, fetched, *anchors)
        return t

    def names(self, names: Sequence[str], place: str, known: set[str], fetched: set[str], *anchors: Any) -> None:
        for n in names:
            root = n.split(".")[0]
            if root in fetched or (n in known and "." not in n):
                continue
            offered = sorted(known | {f"{f}.<field>" for f in fetched})
            raise self.fail(place, f"${{{n}}} is not a variable of this rule (it has: {', '.join(offered)})",
                            *anchors, "${" + n + "}")

    def config(self, data: Any) -> Config:
        top = self.obj(data, "", TOP_KEYS)
        url = None
        if "redis" in top:
            r = self.obj(top["redis"], "redis", REDIS_KEYS, "redis")
            if "url" in r:
                url = self.text(r["url"], "redis.url", "redis", "url")
        channel = None
        if top.get("listener_channel") is not None:
            channel = self.text(top["listener_channel"], "listener_channel", "listener_channel")
        task_set = None
        if top.get("task_set") is not None:  # Resc's older global set: the default set of every make
            task_set = self.text(top["task_set"], "task_set", "task_set")
        ws = top.get("watchers")
        if not isinstance(ws, list) or not ws:
            raise self.fail("watchers", "must be a non-empty list of watchers", "watchers")
        max_event = self.number(top.get("max_event_bytes", DEFAULT_MAX_EVENT_BYTES), "max_event_bytes", 1,
                                2**29, "max_event_bytes", integer=True)
        match_timeout = self.number(top.get("match_timeout", DEFAULT_MATCH_TIMEOUT), "match_timeout", 0.001, 3600,
                                    "match_timeout")
        watchers = [self.watcher(w, f"watchers[{i}]", task_set) for i, w in enumerate(ws)]
        inputs = {w.input_queue for w in watchers}
        seen: set[str] = set()
        for i, w in enumerate(watchers):
            if w.taken_queue in seen or w.taken_queue in inputs:
                raise self.fail(f"watchers[{i}].taken_queue", f"{w.taken_queue!r} is another watcher's list: each "
                                "watcher needs a taken list of its own", w.taken_queue)
            seen.add(w.taken_queue)
        return Config(tuple(watchers), url, channel, self.file, max_event, float(match_timeout))

    def watcher(self, v: Any, place: str, task_set: str | None) -> Watcher:
        w = self.obj(v, place, WATCHER_KEYS, "watchers")
        inq = self.text(w.get("input_queue"), f"{place}.input_queue", "input_queue")
        anchor = inq
        taken = self.text(w["taken_queue"], f"{place}.taken_queue", anchor, "taken_queue") \
            if "taken_queue" in w else f"{inq}/taken"
        dead = self.text(w["dead_queue"], f"{place}.dead_queue", anchor, "dead_queue") \
            if "dead_queue" in w else f"{inq}/dead"
        if taken == inq or dead in (inq, taken):
            raise self.fail(place, "input_queue, taken_queue and dead_queue must be three different lists", anchor)
        rs = w.get("rules")
        if not isinstance(rs, list) or not rs:
            raise self.fail(f"{place}.rules", "must be a non-empty list of rules", anchor, "rules")
        rules = tuple(self.rule(r, f"{place}.rules[{i}]", anchor, task_set) for i, r in enumerate(rs))
        name = w.get("name") or inq
        return Watcher(inq, taken, dead, rules, str(name))

    def rule(self, v: Any, place: str, anchor: str, task_set: str | None) -> Rule:
        if isinstance(v, dict) and isinstance(v.get("name"), str):
            anchor = v["name"]
        r = self.obj(v, place, RULE_KEYS, anchor)
        name = r.get("name", "<anonymous rule>")
        if not isinstance(name, str):
            raise self.fail(f"{place}.name", f"must be a string, got {_kind(name)}", anchor, "name")
        on = self.pattern(r.get("on"), f"{place}.on", anchor)
        known = {INPUT, *on.groupindex}
        fv = r.get("fetch", [])
        if not isinstance(fv, list):
            raise self.fail(f"{place}.fetch", "must be a list of fetches", anchor, "fetch")
        fetches = [self.fetch(f, f"{place}.fetch[{i}]", known, anchor) for i, f in enumerate(fv)]
        fetched = {f.returns for f in fetches}
        if "make" in r and "todo" in r:
            raise self.fail(place, "give make or todo (its older name), not both", anchor, "todo")
        key = "make" if "make" in r else "todo"
        makes = [self.make(m, f"{place}.{key}{suffix}", key, known, fetched, anchor, task_set)
                 for suffix, m in _one_or_list(r.get(key))]
        tasks = [self.make_task(m, f"{place}.make_task{suffix}", known, fetched, anchor)
                 for suffix, m in _one_or_list(r.get("make_task"))]
        if not makes and not tasks:
            raise self.fail(place, "a rule needs make (or todo) or make_task", anchor)
        return Rule(name, on, tuple(fetches), tuple(makes), tuple(tasks))

    def pattern(self, v: Any, place: str, anchor: str) -> Any:
        """A rule's ``on``, compiled (:func:`compile_rule`)."""
        src = self.text(v, place, anchor, "on")
        try:
            return compile_rule(src)
        except _REGEX_ERRORS as exc:
            raise self.fail(place, f"not a valid regular expression: {exc}", anchor, "on") from None

    def fetch(self, v: Any, place: str, known: set[str], anchor: str) -> Fetch:
        """One of a rule's fetches: its url may use the event's variables, its ``returns`` names a new one."""
        fo = self.obj(v, place, FETCH_KEYS, anchor, "fetch")
        src = self.template(fo.get("url"), f"{place}.url", known, set(), anchor, "fetch", "url").src
        escape = fo.get("escape", True)
        if not isinstance(escape, bool):
            raise self.fail(f"{place}.escape", f"must be true or false, got {escape!r}", anchor, "escape")
        try:
            url = UrlTemplate.of(src, escape)
        except ValueError as exc:
            raise self.fail(f"{place}.url", str(exc), anchor, "fetch", "url") from None
        redirects = fo.get("redirects", "same-origin")
        if redirects not in REDIRECTS:
            raise self.fail(f"{place}.redirects", f"must be one of {', '.join(REDIRECTS)}, got {redirects!r}",
                            anchor, "redirects")
        returns = self.text(fo.get("returns"), f"{place}.returns", anchor, "fetch", "returns")
        if not re.fullmatch(r"[A-Za-z_]\w*", returns) or returns in known:
            raise self.fail(f"{place}.returns", f"must be a new variable name (letters, digits, _), got {returns!r}",
                            anchor, "returns")
        timeout = self.number(fo.get("timeout", DEFAULT_FETCH_TIMEOUT), f"{place}.timeout", 0.001, 3600, anchor,
                              "timeout")
        retries = self.number(fo.get("retries", DEFAULT_FETCH_RETRIES), f"{place}.retries", 0, 100, anchor,
                              "retries", integer=True)
        return Fetch(url, returns, float(timeout), retries, redirects)

    def make(self, v: Any, place: str, key: str, known: set[str], fetched: set[str], anchor: str,
             task_set: str | None) -> Make:
        """One of a rule's makes (``key``: "make", or "todo", its older name)."""
        mo = self.obj(v, place, MAKE_KEYS, anchor, key)
        task = self.template(mo.get("task", "${input_task}"), f"{place}.task", known, fetched, anchor, key)
        queue = self.template(mo.get("queue"), f"{place}.queue", known, fetched, anchor, key, "queue")
        sv = mo.get("set", task_set)
        tset = self.template(sv, f"{place}.set", known, fetched, anchor, "set") if sv is not None else None
        return Make(task, queue, tset, str(mo.get("name", "")))

    def make_task(self, v: Any, place: str, known: set[str], fetched: set[str], anchor: str) -> MakeTask:
        m = self.obj(v, place, MAKE_TASK_KEYS, anchor, "make_task")
        ttype = self.template(m.get("type"), f"{place}.type", known, fetched, anchor, "make_task", "type")
        payload = m.get("payload")
        self.names(_json_names(payload), f"{place}.payload", known, fetched, anchor, "payload")
        queue = None
        if "queue" in m:
            queue = self.template(m["queue"], f"{place}.queue", known, fetched, anchor, "make_task", "queue")
            if not queue.names:
                try:
                    validate_queue(queue.src)
                except InvalidArgumentError as exc:
                    raise self.fail(f"{place}.queue", str(exc), anchor, "queue") from None
        options: dict[str, Any] = {}
        for k in TEXT_OPTIONS:
            if k in m:
                options[k] = self.template(m[k], f"{place}.{k}", known, fetched, anchor, k)
        for k, (lo, hi) in NUMBER_OPTIONS.items():
            if k in m:
                options[k] = self.number(m[k], f"{place}.{k}", lo, hi, anchor, k,
                                         integer=k in ("priority", "max_retry"))
        if "headers" in m:
            h = m["headers"]
            if not isinstance(h, dict) or not all(isinstance(x, str) for x in h.values()):
                raise self.fail(f"{place}.headers", "must be an object of strings", anchor, "headers")
            self.names(_json_names(h), f"{place}.headers", known, fetched, anchor, "headers")
            options["headers"] = h
        tset = self.template(m["set"], f"{place}.set", known, fetched, anchor, "set") if "set" in m else None
        return MakeTask(ttype, payload, queue, options, tset, str(m.get("name", "")))


def _one_or_list(v: Any) -> list[tuple[str, Any]]:
    """The items of a key that takes one item or a list of them, each with the suffix that
    places it ("[i]" in a list, "" alone); none for a missing key."""
    if v is None:
        return []
    if isinstance(v, list):
        return [(f"[{i}]", x) for i, x in enumerate(v)]
    return [("", v)]


def _kind(v: Any) -> str:
    if v is None:
        return "nothing"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(v), type(v).__name__)


def parse_text(text: str, file: str = "<config>") -> Any:
    """The document in ``text``: TOML for a ``.toml`` file, else Hjson (which reads JSON too)."""
    if file.endswith(".toml"):
        import tomllib

        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            m = re.search(r"line (\d+)", str(exc))
            raise ConfigError(file, int(m.group(1)) if m else None, "", f"not valid TOML: {exc}") from None
    try:
        import hjson
    except ImportError:
        raise InvalidArgumentError("the rules engine reads Hjson with the hjson package: pip install "
                                   "'.[rules]' (from a clone of asynqpy)") from None
    try:
        return _plain(hjson.loads(text))
    except hjson.HjsonDecodeError as exc:
        raise ConfigError(file, exc.lineno, "", f"not valid Hjson/JSON: {exc.msg}") from None


def _plain(v: Any) -> Any:
    """hjson's ordered dicts as plain dicts, recursively."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def parse_config(data: Any, text: str = "", file: str = "<config>") -> Config:
    """Check a parsed configuration and build it; ConfigError for the first problem."""
    return _Parser(text, file).config(data)


def load_config(path: str | Path) -> Config:
    """Read and check a configuration file (Hjson, JSON or TOML)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), None, "", f"cannot read it: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ConfigError(str(path), None, "", "not UTF-8 text") from None
    except (UnicodeEncodeError, ValueError) as exc:  # a name no file can have (a lone surrogate, a NUL)
        raise ConfigError(repr(str(path)), None, "", f"cannot read it: not a file name ({exc})") from None
    return parse_config(parse_text(text, str(path)), text, str(path))


# -- what an event becomes ------------------------------------------------------------------------


@dataclass(frozen=True)
class Push:
    """A string pushed to a list (Resc's make), unless in ``set``."""

    rule: str
    queue: str
    task: str
    set: str | None


@dataclass(frozen=True)
class NewTask:
    """An asynqpy task to enqueue (make_task), unless its ``guard`` is in ``set``."""

    rule: str
    type: str
    payload: Any
    options: dict[str, Any]
    set: str | None
    guard: str


def match(watcher: Watcher, event: str, timeout: float | None = None) -> list[tuple[Rule, dict[str, Any]]]:
    """The rules an event matches, each with its variables (the event, the named groups).
    ``timeout``: the seconds all the searches of the event may take (with the ``regex`` package;
    :class:`MatchTimeout` past them; the search releases the GIL, so it can run in a thread)."""
    out = []
    deadline = None if timeout is None or _regex is None else time.monotonic() + timeout
    for rule in watcher.rules:
        if deadline is None:
            m = rule.on.search(event)
        else:
            try:
                m = rule.on.search(event, timeout=max(deadline - time.monotonic(), 1e-6), concurrent=True)
            except TimeoutError:
                raise MatchTimeout(f"searching the event with rule {rule.name!r} took over match_timeout "
                                   f"({timeout:g} s)", rule.name) from None
        if m is not None:
            env: dict[str, Any] = {INPUT: event}
            env.update({k: v for k, v in m.groupdict().items() if v is not None})
            out.append((rule, env))
    return out


def bindings(rule: Rule, env: dict[str, Any], fetched: Sequence[Any]) -> list[dict[str, Any]]:
    """The variable sets a rule makes tasks for: the event's alone without fetches; with
    fetches, one per element each fetch returned (a list response: each element; an object:
    itself), as Resc does (the fetches are independent: their bindings add up)."""
    if not rule.fetch:
        return [env]
    out = []
    for f, response in zip(rule.fetch, fetched):
        for element in response if isinstance(response, list) else [response]:
            out.append({**env, f.returns: element})
    return out


def actions(rule: Rule, envs: Sequence[Mapping[str, Any]]) -> list[Push | NewTask]:
    """What a rule does for each variable set (RuleError for a variable missing at run time)."""
    out: list[Push | NewTask] = []
    for env in envs:
        for m in rule.make:
            out.append(Push(rule.name, m.queue.render(env), m.task.render(env),
                            m.set.render(env) if m.set is not None else None))
        for t in rule.make_task:
            ttype = t.type.render(env)
            payload = render_json(t.payload, env)
            options: dict[str, Any] = {}
            if t.queue is not None:
                options["queue"] = t.queue.render(env)
            for k, v in t.options.items():
                if isinstance(v, Template):
                    options[k] = v.render(env)
                elif k == "headers":
                    options[k] = {str(hk): Template.of(hv).render(env) for hk, hv in v.items()}
                else:
                    options[k] = v
            guard = f"{ttype} {json.dumps(payload, sort_keys=True, separators=(',', ':'), default=str)}"
            out.append(NewTask(rule.name, ttype, payload, options, t.set.render(env) if t.set is not None else None,
                               guard))
    return out
