"""What every ``asynqpy`` command shares: the error policy (one line on stderr, exit 2 for user
errors, 1 for anything unexpected), the ``--redis-url`` / ``--json`` / ``--full`` options, JSON
conversion, and how payloads and times are shown (80-column friendly)."""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import click
from redis.exceptions import AuthenticationError, NoPermissionError, RedisError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from asynqpy.core.model.errors import AsynqpyError, QueueNotEmptyError
from asynqpy.core.security.signing import load_keys
from asynqpy.core.text.humanize import BIDI
from asynqpy.core.text.humanize import ago as ago  # (re-exported: the formats of every command)
from asynqpy.core.text.humanize import duration as duration
from asynqpy.core.text.humanize import latency as latency
from asynqpy.core.text.humanize import utc as utc
from asynqpy.core.text.humanize import visible as visible  # (the one place: stored text on a terminal)
from asynqpy.core.text.jsontext import jsonable
from asynqpy.redisio.connection import default_url

if TYPE_CHECKING:  # rich and the Inspector load with the commands that use them
    from rich.console import Console, RenderableType

    from asynqpy import Inspector

F = TypeVar("F", bound=Callable[..., Any])

PAYLOAD_WIDTH = 40
"""Characters of a payload shown in a listing (``--full``: all)."""


class UserError(click.ClickException):
    """A user error: one line on stderr, exit code 2."""

    exit_code = 2

    def show(self, file: Any = None) -> None:
        echo(f"asynqpy: error: {self.message}", err=True)


def ask(question: str) -> None:
    """Ask a yes/no question on stderr (default no); a "no", or no answer at all (no terminal, the
    input closed), stops the command with exit 2 and nothing done (``--yes`` skips the question)."""
    try:
        if click.confirm(question, default=False, err=True):
            return
    except click.Abort:
        raise UserError("nothing done (no answer; --yes skips the question)") from None
    raise UserError("nothing done")


def user_errors(fn: F) -> F:
    """Turn library and connection errors into one line on stderr and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except QueueNotEmptyError as exc:
            raise UserError(str(exc).replace("use force", "use --force")) from None
        except AuthenticationError as exc:  # redis-py's, or asynqpy's RedisAuthError (one too)
            cause = exc.__cause__ if isinstance(exc.__cause__, AuthenticationError) else exc
            if "required" in str(cause) or "already authenticated" in str(cause):
                raise UserError("Redis requires a password: put it in the URL, redis://[user]:password@host") from None
            raise UserError(f"Redis refused the credentials: {cause}") from None
        except AsynqpyError as exc:
            raise UserError(str(exc)) from None
        except NoPermissionError as exc:
            raise UserError(f"Redis refused a command to this user (ACL): {exc}") from None
        except (RedisConnectionError, RedisTimeoutError) as exc:
            raise UserError(f"cannot reach Redis: {exc}") from None
        except RedisError as exc:
            raise UserError(f"Redis error: {exc}") from None

    return wrapper  # type: ignore[return-value]


class SafePath(click.Path):
    """click's Path, with a path holding a NUL byte, or text the file system's encoding cannot
    write (a lone surrogate), refused as a bad parameter (exit 2): click's own checks stat the path
    and let the ValueError or UnicodeEncodeError out (exit 1, found by tests/test_fuzz.py)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, (str, bytes)) and ("\x00" in value if isinstance(value, str) else b"\x00" in value):
            self.fail(f"{value!r} is not a path (it holds a NUL byte)", param, ctx)
        if isinstance(value, str):
            try:
                os.fsencode(value)
            except UnicodeEncodeError:
                self.fail(f"{value!r} is not a path (the file system's encoding cannot write it)", param, ctx)
        return super().convert(value, param, ctx)


redis_url_option = click.option(
    "--redis-url", default=default_url, show_default="$ASYNQPY_REDIS_URL or redis://localhost:6379/0",
    help="Redis URL (redis://[user:password@]host:port/db, rediss:// for TLS, unix://, "
         "redis+cluster://h:p,h:p, redis+sentinel://h:p,h:p/master); TLS options as query parameters, "
         "e.g. rediss://h:6380/0?ssl_ca_certs=ca.pem.",
)
signing_key_option = click.option(
    "--signing-key-file", type=SafePath(dir_okay=False), envvar="ASYNQPY_SIGNING_KEY_FILE", default=None,
    help="File of HMAC signing keys, one per line (the first signs, all verify); "
         "default $ASYNQPY_SIGNING_KEY_FILE. A worker with keys runs only tasks signed with one of them.",
)


encryption_keys_option = click.option(
    "--encryption-keys", "encryption_keys_file", type=SafePath(dir_okay=False), default=None,
    help="JSON file of encryption keys: key id -> hex key, the newest last (it encrypts; all decrypt); "
         "default $ASYNQPY_ENCRYPTION_KEYS (such a JSON object, or the path of such a file). docs/encryption.md.",
)


def encryption_ring(path: str | None) -> Any:
    """The key ring of an --encryption-keys file, else of $ASYNQPY_ENCRYPTION_KEYS (None without
    either). A bad file: InvalidArgumentError (one line, exit 2)."""
    from asynqpy.core.security.encryption import KeyRing

    return KeyRing.from_file(path) if path is not None else KeyRing.from_env()


def signing_keys(path: str | None) -> list[bytes] | None:
    """The keys of a --signing-key-file (None without one)."""
    return None if path is None else load_keys(path)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (for scripts).")
full_option = click.option("--full", is_flag=True, help="Show payloads, results and errors in full.")


@contextmanager
def inspector(redis_url: str, signing_key: list[bytes] | None = None, encryption: Any = None,
              offload: Any = None) -> Iterator[Inspector]:
    """An Inspector on ``redis_url`` (with ``signing_key``, if given; with ``encryption``, else the
    key ring of $ASYNQPY_ENCRYPTION_KEYS if set: encrypted values shown decrypted; with the blob
    store ``offload``, if given), closed after use."""
    from asynqpy.inspector import Inspector

    insp = Inspector(redis_url, signing_key=signing_key, encryption=encryption or encryption_ring(None),
                     offload=offload)
    try:
        yield insp
    finally:
        insp.close()


# -- stored text on a terminal ---------------------------------------------------------------------
#
# Every piece of text the CLI prints may hold stored text (a payload, a type, an error, a task's logs,
# a tenant, a result, a queue or server name) that a producer or a handler wrote, and an escape
# sequence in it would drive the operator's terminal (retitle it, clear it, rewrite lines above,
# write the clipboard with OSC 52). ``visible`` (core/text/humanize.py: the worker's text log lines use it
# too) is the one place that makes such text harmless: each
# control character (C0 but newline and tab, DEL, C1) and each bidirectional override is shown as
# an escape (\x1b, \u202e). Everything the CLI prints goes through it: the rich consoles of
# ``console()`` (every segment they render, tables and the dashboard included, but the console's
# own control codes), ``echo`` (the plain lines), the JSON of ``json_text`` (as \u escapes, still
# JSON), and the writes that bypass rich (logs, tracebacks, the plain queue table).

_JSON_CONTROLS = {c: f"\\u{c:04x}" for c in (0x7F, *range(0x80, 0xA0), *BIDI)}  # (json.dumps escapes C0)


def echo(message: str = "", err: bool = False) -> None:
    """click.echo of a line that may hold stored text (:func:`visible`)."""
    click.echo(visible(message), err=err)


def json_text(value: Any, indent: int | None = None) -> str:
    """``value`` as JSON for a terminal: DEL, C1 controls and bidirectional overrides as \\u
    escapes too (json.dumps escapes only C0 ones), so the text is the same JSON."""
    return json.dumps(jsonable(value), indent=indent, ensure_ascii=False, default=str).translate(_JSON_CONTROLS)


_SAFE_CONSOLE: Any = None


def console(**options: Any) -> Console:
    """A rich console on stdout (80 columns unless the terminal says otherwise) that renders
    stored text through :func:`visible`: every string it lays out, and every segment it
    renders but its own control codes (the dashboard's Live screen included). Markup is off
    (a stored "[link=...]" stays text): a line of the CLI's own markup is printed with
    ``markup=True`` and its stored parts ``rich.markup.escape``d."""
    global _SAFE_CONSOLE
    if _SAFE_CONSOLE is None:
        from rich.console import Console
        from rich.segment import Segment

        class SafeConsole(Console):
            def render_str(self, text: str, **kwargs: Any) -> Any:  # (laid out escaped: widths hold)
                return super().render_str(visible(text), **kwargs)

            def render(self, renderable: Any, options: Any = None) -> Any:  # (a Text built by hand too)
                for seg in super().render(renderable, options):
                    if seg.control is None and seg.text:
                        text = visible(seg.text)
                        if text != seg.text:
                            seg = Segment(text, seg.style)
                    yield seg

        _SAFE_CONSOLE = SafeConsole
    opts: dict[str, Any] = {"highlight": False, "soft_wrap": False, "markup": False, **options}
    return _SAFE_CONSOLE(**opts)  # type: ignore[no-any-return]


_TRAILING_SPACE = re.compile(r"[ \t]+((?:\x1b\[[0-9;]*m)*)$", re.MULTILINE)


def show(out: Console, renderable: RenderableType) -> None:
    """Print ``renderable`` (a table, usually) without the spaces rich pads lines with at the end
    (style codes after them are kept)."""
    with out.capture() as captured:
        out.print(renderable)
    out.file.write(_TRAILING_SPACE.sub(r"\1", captured.get()))
    out.file.flush()


# -- JSON ----------------------------------------------------------------------------------------




def emit_json(value: Any) -> None:
    click.echo(json_text(value, indent=2))


# -- display -------------------------------------------------------------------------------------


def payload_text(value: Any, full: bool = False, width: int = PAYLOAD_WIDTH) -> str:
    """A decoded payload (or result) as one line of JSON-ish text, truncated to ``width`` unless
    ``full``: bytes show as their Python repr (nested bytes as a quoted repr), None as '-'."""
    if value is None:
        return "-"
    from asynqpy.core.security.encryption import Encrypted

    if isinstance(value, Encrypted):  # no key for it: said so (docs/encryption.md)
        return f"encrypted (key {value.kid})"
    if isinstance(value, (bytes, bytearray)):
        text = repr(bytes(value))
    else:
        text = json.dumps(value, ensure_ascii=False, default=lambda o: repr(o) if isinstance(o, bytes) else str(o))
    return clip(text, full, width)


def clip(text: str, full: bool, width: int) -> str:
    text = " ".join(visible(text).split())
    return text if full or len(text) <= width else text[: width - 1] + "…"


def retried(n: int, max_retry: int) -> str:
    """Retries so far out of the most allowed ('2/25': failed twice, may be retried 23 more
    times); the same in task ls, task inspect and the dashboard."""
    return f"{n}/{max_retry}"


def timeout_text(timeout: float | None) -> str:
    """A task's per-attempt timeout: None (or a negative value, from older versions) is the
    server's default_timeout, 0 no limit."""
    if timeout is None or timeout < 0:
        return "server default"
    return "none" if timeout == 0 else f"{timeout:g}s"


def fit(text: str, room: int) -> str:
    """``text`` cut to ``room`` characters with an ellipsis (at least one character kept)."""
    room = max(1, room)
    return text if len(text) <= room else text[: room - 1] + "…"


def size(n: int | None) -> str:
    """Bytes as 1.2 KiB / 3.4 MiB; '?' when unknown."""
    if n is None:
        return "?"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


class When(click.ParamType):  # type: ignore[type-arg]
    """A point in time: Unix seconds, or an ISO 8601 date/time. A time without a zone is local
    time (as the library takes naive datetimes); 'Z' or '+02:00' give the zone."""

    name = "time"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | datetime:
        if isinstance(value, (int, float, datetime)):
            return value
        text = str(value).strip()
        try:
            return float(text)
        except ValueError:
            pass
        if text[-1:] in ("Z", "z"):
            text = text[:-1] + "+00:00"
        try:
            when = datetime.fromisoformat(text)
        except ValueError:
            self.fail(f"{value!r} is neither Unix seconds nor an ISO 8601 time such as 2026-05-01T09:30 "
                      "(local time), 2026-05-01T09:30Z or 2026-05-01 09:30+02:00", param, ctx)
        if when.tzinfo is not None:
            return when
        try:
            return when.astimezone()  # naive: local time
        except (ValueError, OverflowError, OSError):
            self.fail(f"{value!r} is out of range", param, ctx)
