"""``asynqpy``: run workers, enqueue tasks, inspect and control queues, tasks and servers.

The command tree: ``worker``, ``enqueue``, ``stats``, ``queue ...``, ``task ...``, ``process ...``, ``server ...``
(and ``dash``, registered by cli/dash.py). User errors (bad arguments, unknown queue or task, a
task in a state that forbids the action, Redis unreachable) print one line on stderr and exit with
code 2; anything unexpected exits with 1.
"""

from __future__ import annotations

import gc
import importlib
import json
import logging
import re
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import click

from asynqpy.core.handlers.mux import ServeMux
from asynqpy.core.model.errors import InvalidArgumentError
from asynqpy.core.spine.keys import validate_queue_or_pattern
from asynqpy.worker.logs import configure_logging
from asynqpy.worker.settings import SETTING, SETTINGS, Bool, Choice, Flag, Int, OrNone, Seconds, Setting

from .common import (
    SafePath,
    UserError,
    When,
    echo,
    emit_json,
    encryption_keys_option,
    encryption_ring,
    json_option,
    redis_url_option,
    signing_key_option,
    signing_keys,
    user_errors,
)
from .loading import import_failure, load_mux

if TYPE_CHECKING:
    from asynqpy import App

__all__ = ["UserError", "import_failure", "load_mux", "main", "redis_url_option", "user_errors"]

LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
FC = TypeVar("FC", bound=Callable[..., Any])


def version() -> str:
    """The installed package's version (importlib.metadata), else ``asynqpy.__version__``."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("asynqpy")
    except PackageNotFoundError:
        import asynqpy

        return str(getattr(asynqpy, "__version__", "unknown"))


def parse_queues(spec: str) -> dict[str, int]:
    """'critical=6,default=3,low' -> {'critical': 6, 'default': 3, 'low': 1}; a name may be a
    pattern ('tenant-*=1': every queue that matches, present and future)."""
    out: dict[str, int] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, weight = part.partition("=")
        try:
            queue = validate_queue_or_pattern(name.strip())
        except InvalidArgumentError as exc:
            raise UserError(f"--queues: {exc}") from None
        try:
            out[queue] = int(weight) if weight else 1
        except ValueError:
            raise UserError(f"bad queue weight in {part!r}: expected name=integer") from None
    if not out:
        raise UserError("--queues needs at least one queue")
    return out


# -- option types ------------------------------------------------------------------------------


class TimeoutSeconds(click.ParamType):  # type: ignore[type-arg]
    """Seconds > 0, or 0 / 'none' for no limit (converted to 0.0)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            number = float(value)
        elif str(value).strip().lower() in ("none", "no", "off", "unlimited"):
            return 0.0
        else:
            try:
                number = float(value)
            except ValueError:
                self.fail(f"{value!r} is not a number of seconds or 'none'", param, ctx)
        if not number >= 0 or number == float("inf"):
            self.fail(f"{value!r} must be 0 or more seconds (0 or 'none': no limit)", param, ctx)
        return number


def enqueue_flags() -> dict[str, str]:
    """The library's option names and the enqueue command's flags for them (from the option
    table, asynqpy/core/model/options.py; ``queue`` is left out: messages name queues as a word)."""
    from asynqpy.core.model.options import SPEC

    return {**{o.name: o.flag for o in SPEC if o.flag and o.name != "queue"}, "payload": "--payload"}


def flag_names(message: str, flags: dict[str, str]) -> str:
    """A library error message with option names replaced by the command's flags (and Python
    words a command line has no use for dropped)."""
    message = message.replace(" or a timedelta", "").replace("a datetime or Unix seconds", "a time or Unix seconds")
    return re.sub(r"\b(" + "|".join(map(re.escape, flags)) + r")\b(?! \w+ must)",
                  lambda m: flags[m.group(1)], message)


# -- commands ----------------------------------------------------------------------------------


def _set_log_level(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        logging.getLogger().setLevel(value.upper())


def log_level_param() -> click.Option:
    """``--log-level`` for a subcommand (``asynqpy worker ... --log-level debug`` works too)."""
    return click.Option(["--log-level"], default=None, expose_value=False, callback=_set_log_level,
                        type=click.Choice(LOG_LEVELS, case_sensitive=False),
                        help="Log level (also accepted before the command).")


class LazyGroup(click.Group):
    """A command group whose subcommands are imported when first used (``lazy``: name ->
    'module:attribute', relative to this package), so ``asynqpy worker`` does not import the
    inspection commands, the dashboard or rich. Each command gets ``--log-level`` when loaded."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = self.lazy.pop(cmd_name, None)
        if target is not None:
            module, _, attr = target.partition(":")
            cmd = getattr(importlib.import_module(module, __package__), attr)
            for leaf in _every_command(cmd):
                leaf.params.append(log_level_param())
            self.add_command(cmd, cmd_name)
        return super().get_command(ctx, cmd_name)


def _print_version(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from asynqpy.core.spine.protocol import OLDEST_READ, PROTOCOL_VERSION

        reads = f"{OLDEST_READ} to {PROTOCOL_VERSION}" if OLDEST_READ < PROTOCOL_VERSION else f"{PROTOCOL_VERSION}"
        echo(f"asynqpy {version()} (wire protocol {PROTOCOL_VERSION}; reads {reads}: docs/releases.md)")
        ctx.exit()


@click.group(cls=LazyGroup, lazy={
    "stats": ".stats:stats", "queue": ".queue:queue", "task": ".task:task", "server": ".server:server",
    "dash": ".dash:dash", "events": ".events:events", "cron": ".cron:cron", "scheduler": ".cron:scheduler",
    "metrics": ".metrics:metrics", "web": ".web:web", "process": ".processes:process",
    "rules": ".rules:rules", "outbox": ".outbox:outbox", "upgrade": ".upgrade:upgrade",
    "durable": ".durable:durable", "keys": ".encryption:keys", "tenant": ".encryption:tenant",
})
@click.option("--version", "-V", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Print asynqpy's version and the wire protocol it speaks, and exit.")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(LOG_LEVELS, case_sensitive=False),
              help="Log level: DEBUG, INFO, WARNING or ERROR (also accepted after the command).")
@click.option("--log-format", default="text", show_default=True, type=click.Choice(["text", "json"]),
              help="Log lines as text, or as one JSON object per line (also accepted after `worker`).")
def main(log_level: str, log_format: str) -> None:
    """asynqpy: a task queue on Redis."""
    configure_logging(log_level, log_format)


def _set_log_format(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        configure_logging(logging.getLevelName(logging.getLogger().level), value)


class _OneLineErrors(click.Command):
    """A command whose bad flag values (out of range, not a number, not a choice) are one line on
    stderr and exit code 2, as its other user errors; the environment variable is named when the
    value came from it."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.BadParameter as exc:
            message, param = exc.format_message(), exc.param
            if param is not None and param.name and \
                    ctx.get_parameter_source(param.name) is not click.core.ParameterSource.ENVIRONMENT:
                message = message.replace(f" (env var: '{getattr(param, 'envvar', '')}')", "")
            raise UserError(message) from None


def _setting_option(s: Setting) -> Callable[[FC], FC]:
    """The ``asynqpy worker`` flag of setting ``s`` (its row of the settings table): the setting's
    name is the parameter's, its environment variable is read when the flag is not given, and a
    flag not given leaves the setting to the App or to ServerOptions' default."""
    flag = cast(Flag, s.flag)
    names = [flag.name if flag.off is None else f"{flag.name}/{flag.off}", *([flag.short] if flag.short else [])]
    kw: dict[str, Any] = {"envvar": flag.env, "show_envvar": True, "metavar": flag.metavar,
                          "help": flag.help or s.doc.replace("`", "") + ".", **_flag_kind(s, flag)}
    return click.option(*names, s.name, **kw)


def _flag_kind(s: Setting, flag: Flag) -> dict[str, Any]:
    """The click type, default and shown default of setting ``s``'s flag, from its check."""
    check = s.check.inner if isinstance(s.check, OrNone) else s.check
    shown: str | bool = s.shown.replace("`", "") if s.shown else s.default is not None
    default = None if s.shown else s.default  # a flag left at its default is not passed on (given_settings)
    if isinstance(check, Bool) or check.type.startswith("bool"):
        return {"is_flag": True, "default": None if flag.off else False}
    if isinstance(check, Seconds) and s.check is not check:  # a duration with a "none": 0 or 'none'
        return {"type": TimeoutSeconds(), "default": None,
                "help": (flag.help or s.doc) + f" [default: {default:g}]."}
    kind: Any = None
    if isinstance(check, Int):
        kind = click.IntRange(check.low, check.high)
    elif isinstance(check, Seconds):
        low = 0.0 if flag.least is None else flag.least
        kind = click.FloatRange(min=low, min_open=flag.least is None and not check.zero_ok)
    elif isinstance(check, Choice):
        kind = click.Choice(check.choices)
    return {"type": kind, "show_default": shown, "default": default}


def settings_flags(command: FC) -> FC:
    """Add the worker's flags: one per setting of the settings table that has one, in table order."""
    for s in reversed([s for s in SETTINGS if s.flag is not None]):
        command = _setting_option(s)(command)
    return command


def given_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The settings whose flag was given (on the command line, or its environment variable),
    checked by their rows; a bad value is a UserError naming the flag. A flag left out is not
    in it: the App's setting, else ServerOptions' default, holds."""
    source = click.get_current_context().get_parameter_source
    out: dict[str, Any] = {}
    for s in SETTINGS:
        if s.flag is None or source(s.name) in (None, click.core.ParameterSource.DEFAULT):
            continue
        value = values[s.name]
        if s.name == "queues":
            value = parse_queues(value)
        elif isinstance(s.check, OrNone) and isinstance(s.check.inner, Seconds):
            value = value or None  # 0: none
        try:
            out[s.name] = s.check(s.name, value)
        except InvalidArgumentError as exc:
            raise UserError(f"{s.flag.name}: {exc}") from None
    return out


@main.command(cls=_OneLineErrors)
@click.argument("target")
@settings_flags
@click.option("--processes", default=1, show_default=True, type=click.IntRange(min=1),
              help="Run N worker processes under a supervisor that restarts crashed ones.")
@click.option("--loop", "loop", default="asyncio", show_default=True, type=click.Choice(["asyncio", "uvloop"]),
              help="The event loop: asyncio, or uvloop (pip install '.[uvloop]' in asynqpy's "
                   "repository).")
@click.option("--log-format", default=None, type=click.Choice(["text", "json"]), expose_value=False,
              callback=_set_log_format, help="Log lines as text or JSON (also accepted before the command).")
@click.option("--outbox", "outbox_db", default=None, metavar="DB_URL",
              help="Also relay the transactional outbox of this database (SQLAlchemy URL) to Redis, in a thread "
                   "of this worker (of the supervisor with --processes N): as `asynqpy outbox relay --db`; its "
                   "password from --db-password-file or $ASYNQPY_DB_PASSWORD, not the URL (the relay verifies the "
                   "rows' signatures with the App's or --signing-key-file's keys).")
@click.option("--db-password-file", type=SafePath(dir_okay=False), default=None, envvar="ASYNQPY_DB_PASSWORD_FILE",
              help="A file whose first line is the --outbox database's password (default $ASYNQPY_DB_PASSWORD_FILE, "
                   "else $ASYNQPY_DB_PASSWORD holds it).")
@click.option("--supervised", is_flag=True, hidden=True,
              help="Run as one of --processes N's processes (the supervisor passes it): SIGTERM/SIGINT only "
                   "start the graceful shutdown; the supervisor's SIGUSR2 stops now.")
@click.option("--offload-dir", type=SafePath(file_okay=False), envvar="ASYNQPY_OFFLOAD_DIR", default=None,
              help="Directory of offloaded payloads (a FileBlobStore shared with the producers; default: the "
                   "App's offload=): read before the handler, deleted when the task leaves (docs/offload.md).")
@signing_key_option
@encryption_keys_option
@redis_url_option
@user_errors
def worker(target: str, processes: int, loop: str, outbox_db: str | None, db_password_file: str | None,
           supervised: bool, offload_dir: str | None, signing_key_file: str | None,
           encryption_keys_file: str | None, redis_url: str,
           **settings: Any) -> None:
    """Run a worker serving TARGET: a ServeMux or an App (module:attribute, e.g. tasks:mux or
    tasks:app; the module is looked up in the current directory first). An App brings its task
    functions' queues, its hooks, its server options and its Redis URL (the flags given win).
    Every setting's flag is also read from its environment variable (ASYNQPY_CONCURRENCY...)."""
    keys = signing_keys(signing_key_file)  # checked before any child process starts
    given = given_settings(settings)  # the flags given, checked: before any child process starts
    if "health_port" in given and processes > 1:
        raise UserError("--health-port serves one worker process's probes: run one process per container "
                        "(or per probe port) rather than --processes N")
    _check_loop(loop)
    found = load_mux(target)  # with --processes too: a broken TARGET fails here, not in every child
    app = None if isinstance(found, ServeMux) else found
    mux = found if isinstance(found, ServeMux) else found.mux
    redis_url = _redis_url(app, redis_url)
    queues: Any = given.pop("queues", None) or (app.server().options.queues if app else {"default": 1})
    if app is not None and keys is None:  # the App's key: its server's and its relay's (before either is made)
        keys = app.signing_key
    ring = _ring_of(app, encryption_keys_file)  # (the App's when no file or environment gives one)
    relay = None
    if outbox_db is not None and not supervised:  # one relay: here, or in the supervisor
        from .outbox import make_relay

        relay = make_relay(outbox_db, redis_url, keys, flag="--outbox", password_file=db_password_file)
        relay.start()
    if processes > 1:
        _supervise(processes, given)
    extra = _app_options(app) if app is not None else {}  # the App's own options, unless a flag was given
    from asynqpy.server import Server

    server = Server(redis_url, queues=queues, signing_key=keys, encryption=ring, offload=_offload(offload_dir, app),
                    **{"freeze_heap": True, **extra, **given})
    # What the start-up made (modules, the app, the scripts: ~10^5 objects that live as long as the
    # process) leaves the collector's generations: a collection no longer walks them (a drain's worker
    # -3 to -6 % of its instructions a task: docs/workers.md, "The event loop"); and again once warm
    # (freeze_heap: what the first task's imports made). Only this process, which is the worker and
    # nothing else: a Server embedded in an application leaves its heap alone.
    gc.freeze()
    try:
        server.run(mux, loop=loop, supervised=supervised)
    finally:
        if relay is not None:
            relay.stop()


def _ring_of(app: Any, path: str | None) -> Any:
    """The worker's key ring: --encryption-keys's, $ASYNQPY_ENCRYPTION_KEYS's, else the App's."""
    ring = encryption_ring(path)
    return app.encryption if ring is None and app is not None else ring


def _check_loop(loop: str) -> None:
    """``--loop uvloop`` needs uvloop (checked before any child process starts)."""
    if loop == "uvloop":
        try:
            import uvloop  # noqa: F401
        except ImportError:
            raise UserError("--loop uvloop needs uvloop: pip install '.[uvloop]' in asynqpy's repository") from None


def _offload(offload_dir: str | None, app: App | None) -> Any:
    """The worker's blob store: --offload-dir's, else the App's (docs/offload.md), else None."""
    if offload_dir:
        from asynqpy.worker.blobs import FileBlobStore

        return FileBlobStore(offload_dir)
    return app.offload if app is not None else None


def _redis_url(app: App | None, redis_url: str) -> str:
    """The App's Redis URL when it has one and --redis-url was not given, else ``redis_url``."""
    source = click.get_current_context().get_parameter_source
    if app is not None and source("redis_url") is click.core.ParameterSource.DEFAULT and isinstance(app.redis, str):
        return app.redis
    return redis_url


def _app_options(app: App) -> dict[str, Any]:
    """The server options an App brings: its own, its hooks, its periodic entries and owner."""
    extra = {**app.server_options, "on_startup": [app._hook(h) for h in app.startup],
             "on_shutdown": [app._hook(h) for h in app.shutdown]}
    if app.periodic_entries:
        extra["scheduler_entries"] = tuple(app.periodic_entries)
    extra["scheduler_owner"] = app.owner
    return extra


def _supervise(processes: int, given: dict[str, Any]) -> None:
    """Run ``processes`` copies of this worker command under a supervisor; exits with its code."""
    from asynqpy.worker.supervisor import supervise

    argv = [a for a in sys.argv[1:]]
    if "fair_dispatch" not in given:
        argv.append("--fair")  # spread bursts over the processes
    metrics = None
    if given.get("metrics_port") is not None:
        from asynqpy.worker.metrics import prometheus

        try:
            prometheus()
        except InvalidArgumentError as exc:
            raise UserError(f"--metrics-port: {exc}") from None
        metrics = (given.get("metrics_host", SETTING["metrics_host"].default), given["metrics_port"])
    sys.exit(supervise(processes, _child_argv(argv), metrics=metrics))


def _child_argv(argv: list[str]) -> list[str]:
    """The worker command line for one child: the same, without --processes, with --supervised
    (worker/supervisor.py: how one signal gives one graceful shutdown), and without the outbox's
    flags (the supervisor alone relays: its database URL is not passed again to each child)."""
    out: list[str] = []
    skip = False
    dropped = ("--processes", "--outbox", "--db-password-file")
    for a in argv:
        if skip:
            skip = False
            continue
        if a in dropped:
            skip = True
            continue
        if a.startswith(tuple(f"{d}=" for d in dropped)):
            continue
        out.append(a)
    return [sys.executable, "-m", "asynqpy.cli.main", *out, "--supervised"]


@main.command()
@click.argument("task_type")
@click.option("--payload", default=None, help="The payload as JSON, e.g. '{\"user_id\": 42}' (default: none).")
@click.option("--queue", "-q", default="default", show_default=True, help="The queue to put the task in.")
@click.option("--in", "process_in", default=None, type=float, help="Run after this many seconds (default: now).")
@click.option("--at", "process_at", default=None, type=When(),
              help="Run at this time: Unix seconds or ISO 8601 (2026-05-01T09:30 is local time; "
                   "2026-05-01T09:30Z or +02:00 give the zone).")
@click.option("--max-retry", default=25, show_default=True, type=int,
              help="Retries after the first attempt before the task is archived.")
@click.option("--timeout", default=None, type=TimeoutSeconds(),
              help="Seconds per attempt; 0 or 'none': no limit (default: the worker's --default-timeout).")
@click.option("--unique", default=None, type=float,
              help="Reject another task with the same queue, type and payload for this many seconds.")
@click.option("--task-id", default=None, help="The task's id (default: a random one).")
@click.option("--retention", default=0.0, show_default=True, type=float,
              help="Seconds to keep the task, with its result, once it succeeded (see `task inspect`).")
@click.option("--group", default=None, help="Aggregation group: the task waits there until a server aggregates it.")
@click.option("--priority", default=None, type=int,
              help="0 (lowest) to 9 (highest); default 5. Higher priorities of a queue run first.")
@click.option("--unique-key", default=None,
              help="Deduplicate by this key (instead of type and payload) for --unique seconds or 24 h.")
@click.option("--throttle", default=None, type=float,
              help="Drop the task if one with the same key was enqueued less than this many seconds ago.")
@click.option("--debounce", default=None, type=float,
              help="Run this many seconds after the last enqueue with the same key (a waiting one is replaced).")
@click.option("--workers", "workers", default=None,
              help="Only these workers (their --name, comma-separated) may run the task.")
@click.option("--runs", default=None, type=int,
              help="The task must succeed on this many distinct workers (each runs it once).")
@click.option("--after", "after", multiple=True,
              help="Wait until this task completed (repeatable): ID (in --queue) or QUEUE/ID.")
@click.option("--on-parent-failure", default=None, type=click.Choice(["cancel", "run", "ignore"]),
              help="With --after: what a failed parent does to this task (default: cancel).")
@click.option("--key", default=None, help="Serial key: tasks of the queue with this key run one at a time, in order.")
@click.option("--tenant", default=None,
              help="The task's tenant: the queue hands pending tasks out in turns across tenants (docs/tenants.md).")
@click.option("--min-worker-version", default=None, metavar="VERSION",
              help="Only workers of this version or newer run it (--worker-version; docs/deploy.md).")
@json_option
@signing_key_option
@encryption_keys_option
@redis_url_option
@user_errors
def enqueue(task_type: str, payload: str | None, as_json: bool, signing_key_file: str | None,
            encryption_keys_file: str | None, redis_url: str, **flags: Any) -> None:
    """Enqueue a task of TASK_TYPE."""
    try:
        value = json.loads(payload) if payload is not None else None
    except json.JSONDecodeError as exc:
        raise UserError(f"--payload is not valid JSON: {exc}") from None
    options = _enqueue_options(flags)
    from asynqpy.client import Client

    ring = encryption_ring(encryption_keys_file)
    with Client(redis_url, signing_key=signing_keys(signing_key_file), encryption=ring) as client:
        try:
            info = client.enqueue(task_type, value, **options)
        except InvalidArgumentError as exc:
            raise UserError(flag_names(str(exc), enqueue_flags())) from None
    _warn_unserved(redis_url, info.queue)
    if as_json:
        emit_json(info)
        return
    when = f" (due {info.next_process_at:%Y-%m-%d %H:%M:%S} UTC)" if info.next_process_at else ""
    replaced = f", replacing {info.replaced}" if info.replaced else ""
    echo(f"enqueued {info.id} to {info.queue}: {info.state.value}{when}{replaced}")


_FLAG_VALUES: dict[str, Callable[[Any, dict[str, Any]], Any]] = {
    "timeout": lambda v, flags: v or None,  # 0: no limit
    "workers": lambda v, flags: [w.strip() for w in v.split(",") if w.strip()],
    "after": lambda v, flags: [tuple(a.split("/", 1)) if "/" in a else (flags["queue"], a) for a in v],
}
"""The flags whose value the library takes in another form: flag -> (value, all flags) -> option."""


def _enqueue_options(flags: dict[str, Any]) -> dict[str, Any]:
    """The enqueue command's flags as library options (each flag is named after its option; a
    flag not given is left out, so the library's default applies)."""
    if flags["process_in"] is not None and flags["process_at"] is not None:
        raise UserError("give --in or --at, not both")
    if not flags["after"] and flags["on_parent_failure"] is not None:
        raise UserError("--on-parent-failure applies with --after")
    given = {name: value for name, value in flags.items() if value is not None and value != ()}
    return {name: _FLAG_VALUES[name](value, flags) if name in _FLAG_VALUES else value
            for name, value in given.items()}


def _warn_unserved(redis_url: str, queue: str) -> None:
    """A warning on stderr when workers are running and none serves ``queue`` (a typo in -q, or a
    queue nobody deployed a worker for), naming the closest queue they serve."""
    import time

    from asynqpy.core.model.errors import AsynqpyError
    from asynqpy.core.server import record as server_record
    from asynqpy.core.spine.keys import SERVERS, server_info, similar_queue
    from asynqpy.inspector import Inspector
    from asynqpy.redisio.connection import REDIS_ERRORS

    quiet: tuple[type[Exception], ...] = (AsynqpyError, *REDIS_ERRORS, ValueError, KeyError, TypeError)
    served: set[str] = set()
    try:  # read-only commands a producer's ACL allows (Inspector.servers() also prunes the registry)
        with Inspector(redis_url) as insp:
            ids = insp.redis.zrange(SERVERS, int(time.time() * 1000), "+inf", byscore=True)
            servers = [raw for raw in (insp.redis.get(server_info(i.decode())) for i in ids) if raw is not None]
        for raw in servers:
            served |= set(server_record.unpack(raw).queues)
    except quiet:  # the task is enqueued: this is only advice
        return
    if servers and queue not in served:
        meant = similar_queue(queue, served)
        hint = f"; did you mean {meant!r}?" if meant else f" (they serve {', '.join(sorted(served))})"
        echo(f"asynqpy: warning: no running worker serves queue {queue!r}{hint}", err=True)


def _every_command(cmd: click.Command) -> list[click.Command]:
    """``cmd`` if it is a command, else every command under the group (loaded ones)."""
    if not isinstance(cmd, click.Group):
        return [cmd]
    return [leaf for sub in cmd.commands.values() for leaf in _every_command(sub)]


for _cmd in _every_command(main):
    _cmd.params.append(log_level_param())

if __name__ == "__main__":
    main()
