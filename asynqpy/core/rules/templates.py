"""The rules engine's templates, sans I/O (docs/rules.md): ``${name}`` variables in a string, in a
JSON value and in a fetch URL, where a variable is percent-encoded and cannot change the URL's
scheme, host, port or path segments (:class:`UrlTemplate`), and which redirects a fetch follows.
The configuration that holds them is :mod:`.config`."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote, urlsplit

from ..model.errors import AsynqpyError

VAR = re.compile(r"\$\{([\w.]+)\}")
"""A template variable: ``${name}`` or ``${name.path.to.field}`` (Resc's syntax)."""


class RuleError(AsynqpyError):
    """An event a rule could not turn into tasks (a variable the event does not provide, a fetch
    that kept failing, a task refused): the event goes to the dead list with this reason."""



@dataclass(frozen=True)
class Template:
    """``"trt/${process_id}/${child.productId}"``: rendered with the event's variables."""

    src: str
    names: tuple[str, ...]

    @classmethod
    def of(cls, src: str) -> Template:
        return cls(src, tuple(VAR.findall(src)))

    @property
    def whole(self) -> str | None:
        """The variable, if the template is exactly one ``${...}`` (its value keeps its type)."""
        m = VAR.fullmatch(self.src)
        return m.group(1) if m else None

    def render(self, env: Mapping[str, Any]) -> str:
        return VAR.sub(lambda m: text_of(lookup(env, m.group(1))), self.src)

    def value(self, env: Mapping[str, Any]) -> Any:
        whole = self.whole
        return lookup(env, whole) if whole is not None else self.render(env)


def lookup(env: Mapping[str, Any], name: str) -> Any:
    """The value of ``name`` (``a.b.0.c``: fields of objects, indexes of lists); RuleError if
    the event does not provide it."""
    root, *path = name.split(".")
    if root not in env or env[root] is None:
        raise RuleError(f"no value for ${{{name}}}")
    v = env[root]
    for part in path:
        if isinstance(v, Mapping) and part in v:
            v = v[part]
        elif isinstance(v, list) and part.isdigit() and int(part) < len(v):
            v = v[int(part)]
        else:
            raise RuleError(f"no value for ${{{name}}} (no {part!r} in {text_of(v)[:80]})")
    if v is None:
        raise RuleError(f"no value for ${{{name}}} (null)")
    return v


def text_of(v: Any) -> str:
    """A value in a string template: text as is, numbers as JSON writes them, else JSON."""
    if isinstance(v, str):
        return v
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
    return json.dumps(v, separators=(",", ":"), ensure_ascii=False)


def render_json(value: Any, env: Mapping[str, Any]) -> Any:
    """A JSON value whose strings are templates (a string that is exactly one ``${...}`` takes
    the variable's value, of any JSON type)."""
    if isinstance(value, str):
        return Template.of(value).value(env)
    if isinstance(value, list):
        return [render_json(v, env) for v in value]
    if isinstance(value, dict):
        return {str(k): render_json(v, env) for k, v in value.items()}
    return value


def _json_names(value: Any) -> list[str]:
    if isinstance(value, str):
        return list(Template.of(value).names)
    if isinstance(value, list):
        return [n for v in value for n in _json_names(v)]
    if isinstance(value, dict):
        return [n for v in value.values() for n in _json_names(v)]
    return []


URL_HEAD = re.compile(r"(?i)(https?)://([^/?#]*)")
"""A fetch URL's scheme and authority (user info, host, port): written in the configuration."""
HOST_VALUE = re.compile(r"[A-Za-z0-9_-]+")
"""What a variable in a URL's host may be: part of one name (no '.', ':', '@', '/')."""


def _encoded(v: Any, name: str) -> str:
    try:
        return quote(text_of(v), safe="")
    except UnicodeEncodeError:
        raise RuleError(f"${{{name}}} is not valid Unicode text (a lone surrogate)") from None


@dataclass(frozen=True)
class UrlTemplate:
    """A fetch's URL: ``"http://orders/api/${order}?customer=${c}"``. Its scheme and authority are
    the configuration's: a variable may only be in the host's name, where its value must be
    letters, digits, '-' and '_' (it cannot add a name, a port or user info). With ``escape``
    (the default), a variable in the path is percent-encoded as one segment's text (a '/' or '?'
    is data; a segment that would be '.' or '..' is refused), and in the query or the fragment as
    a value (``&``, ``=``, ``#`` are data). ``escape=False``: pasted as is there (Resc's way: the
    event can change the path and the query)."""

    src: str
    names: tuple[str, ...]
    escape: bool = True

    @classmethod
    def of(cls, src: str, escape: bool = True) -> UrlTemplate:
        """ValueError (the message says why) for a URL a variable could move to another host."""
        m = URL_HEAD.match(src)
        if m is None:
            raise ValueError("must start with http:// or https:// (a variable cannot choose the scheme)")
        userinfo, _, hostport = m.group(2).rpartition("@")
        if hostport.startswith("["):  # an IPv6 address
            host, _, port = hostport[1:].partition("]")
            if VAR.search(host):
                raise ValueError("a variable cannot be in an IPv6 address")
        else:
            host, _, port = hostport.partition(":")
        if VAR.search(userinfo) or VAR.search(port):
            raise ValueError("a variable may be in the host's name, the path, the query or the fragment, not in "
                             "the user info or the port")
        if not host:
            raise ValueError("names no host")
        return cls(src, tuple(VAR.findall(src)), escape)

    def render(self, env: Mapping[str, Any]) -> str:
        """The URL for these variables; RuleError for a value that cannot be there."""
        head_end = URL_HEAD.match(self.src).end()  # type: ignore[union-attr]  # checked in of()
        head = VAR.sub(lambda m: self._host_value(env, m.group(1)), self.src[:head_end])
        rest = self.src[head_end:]
        if not self.escape:
            return head + Template.of(rest).render(env)
        cut = min((i for i in (rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
        segments = []
        for seg in rest[:cut].split("/"):
            out = VAR.sub(lambda m: _encoded(lookup(env, m.group(1)), m.group(1)), seg)
            if out != seg and unquote(out) in (".", ".."):
                raise RuleError(f"the URL path segment {seg!r} would be {out!r} (a move up the path)")
            segments.append(out)
        tail = VAR.sub(lambda m: _encoded(lookup(env, m.group(1)), m.group(1)), rest[cut:])
        return head + "/".join(segments) + tail

    @staticmethod
    def _host_value(env: Mapping[str, Any], name: str) -> str:
        v = text_of(lookup(env, name))
        if not HOST_VALUE.fullmatch(v):
            raise RuleError(f"${{{name}}} is {v[:80]!r}: a value in a URL's host may only have letters, digits, "
                            "'-' and '_'")
        return v


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlsplit(url)
    scheme = u.scheme.lower()
    try:
        port = u.port
    except ValueError:
        port = -1
    return scheme, (u.hostname or "").lower(), port if port is not None else {"http": 80, "https": 443}.get(scheme)


def redirect_allowed(policy: str, start: str, target: str) -> bool:
    """Whether a fetch of ``start`` may follow a redirect to ``target`` under its ``redirects``
    policy: ``any``; ``none``; ``same-origin``: the same scheme, host and port, or from http to
    https on the same host with the default ports."""
    if policy == "any":
        return True
    if policy == "none":
        return False
    a, b = _origin(start), _origin(target)
    return a == b or (a[1] == b[1] and a[1] != "" and (a[0], a[2], b[0], b[2]) == ("http", 80, "https", 443))
