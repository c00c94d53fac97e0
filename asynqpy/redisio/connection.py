"""Making Redis clients from URLs.

Every Client, AsyncClient, Server and Inspector takes a URL (or an existing redis-py client):

- ``redis://[user:pass@]host:port[/db]``, ``rediss://`` (TLS), ``unix://path``: one Redis server;
- ``redis+cluster://[user:pass@]host:port[,host:port...]`` (``rediss+cluster://``): a Redis Cluster,
  reached through any of the listed nodes (the client discovers the rest and follows failovers);
- ``redis+sentinel://[user:pass@]host:port[,host:port...]/<master name>[/db]``
  (``rediss+sentinel://``): the master a group of Redis Sentinels monitors, looked up again after
  a failover. The credentials apply to the master (and replicas); sentinels are asked without
  credentials (pass a client made with ``redis.sentinel.Sentinel`` for other setups); TLS and the
  TLS query options apply to both;
- ``memory://<name>``: an in-process store (fakeredis with Lua, ``pip install '.[memory]' in asynqpy's repository``),
  running the same scripts, shared by every client made from the same URL in this process: for
  examples and tests (see the pytest plugin, :mod:`asynqpy.testing`).

Connection options, TLS ones included, go as query parameters
(``rediss://host:6380/0?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required``, also
``ssl_certfile``/``ssl_keyfile`` for a client certificate), for every form alike. A bad URL, a TLS
file that does not exist or a bad ``ssl_cert_reqs`` raise :class:`~asynqpy.errors.InvalidArgumentError`
before anything connects. Error messages never repeat the URL (it may hold a password).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aredis
from hiredis import pack_command
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.cluster import ClusterNode
from redis.connection import parse_url as _parse_url
from redis.exceptions import ClusterDownError, RedisClusterException, RedisError, TryAgainError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.sentinel import Sentinel

from ..core.model.errors import InvalidArgumentError

try:  # redis-py 8: a connection reads its library's version from the package metadata when made
    from redis.driver_info import DriverInfo
except ImportError:  # pragma: no cover - older redis-py reads it once, at import
    _DRIVER: dict[str, Any] = {}
else:  # given once here (the same version): a worker makes ~10 connections as it starts, ~1 ms each
    _DRIVER = {"driver_info": DriverInfo(lib_version=redis.__version__)}

DEFAULT_URL = "redis://localhost:6379/0"

REDIS_ERRORS: tuple[type[Exception], ...] = (RedisError, RedisClusterException, OSError)
"""What a call may raise when Redis (or a cluster node) is unreachable or refuses it. redis-py's
cluster client raises a few (no node serves a slot) outside RedisError."""

RETRYABLE: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, OSError, ClusterDownError,
                                          TryAgainError, RedisClusterException)
"""Errors after which a call may succeed if sent again: Redis unreachable, or a cluster slot with
no serving master for the moment (a failover under way)."""


def default_url() -> str:
    """``$ASYNQPY_REDIS_URL``, else redis://localhost:6379/0."""
    return os.environ.get("ASYNQPY_REDIS_URL") or DEFAULT_URL


parse_url = cast(Callable[[str], dict[str, Any]], _parse_url)

TLS_FILES = ("ssl_ca_certs", "ssl_ca_path", "ssl_certfile", "ssl_keyfile")
CERT_REQS = ("none", "optional", "required")


def check_url(url: str) -> None:
    """Refuse, with :class:`InvalidArgumentError`, TLS query options that cannot work."""
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items() if v}
    for name in TLS_FILES:
        if name in query and not os.path.exists(query[name]):
            raise InvalidArgumentError(f"{name} in the Redis URL: no such file or directory: {query[name]!r}")
    if query.get("ssl_cert_reqs", "required") not in CERT_REQS:
        raise InvalidArgumentError(f"ssl_cert_reqs in the Redis URL must be one of {', '.join(CERT_REQS)}")


def _multi_host(url: str, kind: str) -> tuple[list[tuple[str, int]], dict[str, Any], str] | None:
    """For ``redis+<kind>://`` and ``rediss+<kind>://`` URLs: the (host, port) list, the connection
    keyword arguments (query options, credentials, TLS) and the URL's path; None for other URLs."""
    scheme, _, rest = url.partition("://")
    if scheme not in (f"redis+{kind}", f"rediss+{kind}"):
        return None
    parts = urlsplit("redis://" + rest)
    netloc = parts.netloc.rsplit("@", 1)
    kwargs: dict[str, Any] = {}
    if parts.query:  # connection options, parsed as redis-py parses a single node's URL
        options = parse_url("redis://localhost?" + parts.query)
        kwargs.update({k: v for k, v in options.items() if k not in ("host", "port", "db")})
    if len(netloc) == 2:
        user, _, password = netloc[0].partition(":")
        kwargs.update(username=unquote(user) or None, password=unquote(password) or None)
    nodes = _host_ports(netloc[-1], kind)
    if scheme.startswith("rediss"):
        kwargs["ssl"] = True
    return nodes, kwargs, parts.path


def _host_ports(hosts: str, kind: str) -> list[tuple[str, int]]:
    """The (host, port) list of a multi-host URL's ``h1:p1,h2,...``: a host left out is
    localhost, a port left out the kind's default (26379 for Sentinel, else 6379)."""
    nodes = []
    for hp in hosts.split(","):
        host, _, port = hp.rpartition(":")
        if not host:  # "h" without a port, or ":p"
            host, port = (hp, "") if ":" not in hp else ("", port)
        try:
            nodes.append((host or "localhost", int(port or (26379 if kind == "sentinel" else 6379))))
        except ValueError:
            raise InvalidArgumentError(f"bad port in {kind} URL host {hp!r}") from None
    return nodes


def _sentinel_parts(url: str) -> tuple[list[tuple[str, int]], str, dict[str, Any]] | None:
    """(sentinels, master name, master connection kwargs) of a Sentinel URL, None for others."""
    parts = _multi_host(url, "sentinel")
    if parts is None:
        return None
    nodes, kwargs, path = parts
    segments = [unquote(x) for x in path.split("/") if x]
    if not 1 <= len(segments) <= 2:
        raise InvalidArgumentError("a Sentinel URL names its master: redis+sentinel://host:port[,host:port]/<master>[/db]")
    if len(segments) == 2:
        try:
            kwargs["db"] = int(segments[1])
        except ValueError:
            raise InvalidArgumentError(f"bad database number {segments[1]!r} in Sentinel URL") from None
    return nodes, segments[0], kwargs


def is_cluster(client: Any) -> bool:
    return isinstance(client, (redis.RedisCluster, aredis.RedisCluster))


REDIS_PY_SOCKET_TIMEOUT = 5.0
"""redis-py's default socket (read) timeout when none is given."""


class _HiredisPacking:
    """Mixed into an asyncio redis-py connection class: commands are packed by hiredis (C), as
    redis-py's sync connections already do, instead of redis-py's Python packer, which cost a
    worker about a quarter of its CPU per task. Anything hiredis cannot pack (redis-py raises
    DataError for it) goes to redis-py's packer."""

    def pack_command(self, *args: Any) -> list[bytes]:
        first = args[0]
        if isinstance(first, str) and " " in first:  # "CONFIG GET": words are separate arguments
            args = (*first.split(), *args[1:])
        elif isinstance(first, bytes) and b" " in first:
            args = (*first.split(), *args[1:])
        try:
            return [pack_command(args)]
        except TypeError:
            return super().pack_command(*args)  # type: ignore[misc, no-any-return]


_PACKING_CLASSES: dict[type, type] = {}


def _pack_with_hiredis(pool: Any) -> None:
    """Make the connections ``pool`` creates from now on pack commands with hiredis."""
    base = pool.connection_class
    cls = _PACKING_CLASSES.get(base)
    if cls is None:
        cls = _PACKING_CLASSES[base] = type(base.__name__, (_HiredisPacking, base), {})
    pool.connection_class = cls


_memory_servers: dict[str, Any] = {}
_memory_lock = threading.Lock()


def _memory(url: str, aio: bool) -> Any:
    """A client of the in-process store ``memory://<name>`` (fakeredis with Lua: the same scripts
    run), one store per name in this process, shared by every client made from the URL."""
    try:
        import fakeredis
    except ImportError:
        raise InvalidArgumentError("memory:// URLs need fakeredis with Lua: "
                                   "pip install '.[memory]' in asynqpy's repository") from None
    from .memory import install

    install()  # each script compiled once, as Redis does (redisio/memory.py)
    name = url.partition("://")[2].strip("/") or "default"
    with _memory_lock:
        server = _memory_servers.get(name)
        if server is None:
            server = _memory_servers[name] = fakeredis.FakeServer()
    return (fakeredis.FakeAsyncRedis if aio else fakeredis.FakeRedis)(server=server)


def _make(url_or_client: Any, aio: bool, socket_timeout: float | None) -> Any:
    if url_or_client is not None and not isinstance(url_or_client, str):
        return url_or_client
    url = url_or_client or default_url()
    if url.startswith("memory://"):
        return _memory(url, aio)
    opts: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": socket_timeout}
    if not url.startswith("unix:"):  # a TCP option: redis-py's Unix socket connection refuses it
        opts["socket_keepalive"] = True
    try:
        url.encode()  # a lone surrogate (undecodable bytes in argv) fails later, deep in the socket code
    except UnicodeEncodeError:
        raise InvalidArgumentError("bad Redis URL: it is not valid (UTF-8 encodable) text") from None
    check_url(url)
    try:
        cluster = _multi_host(url, "cluster")
        if cluster:
            return _cluster_client(cluster[0], cluster[1], aio, opts)
        sentinel = _sentinel_parts(url)
        if sentinel:
            return _sentinel_client(*sentinel, aio, opts)
        return _single_client(url, aio, opts)
    except ValueError as exc:  # not the URL itself: it may hold a password
        raise InvalidArgumentError(f"bad Redis URL: {exc}") from None


MAX_OPEN_CONNECTIONS = 10_000
"""The most connections a client made from a URL opens to one server (a cluster client: to one
node): one per thread that uses a sync client (its executor keeps a thread's connection,
redisio/executor.py), one per concurrent call of an asyncio one, up to Redis's own default
``maxclients``. redis-py's default, 100, refuses the 101st at once ("Too many connections"). A
blocking pool (a call waits for a free connection) was measured: its checkout cost the worker
~10 % more CPU a lone dequeue call (its condition and timeout), so connections are reused from
the pool's free list and opened past it, as redis-py did before its version 6."""


def _cluster_client(nodes: list[tuple[str, int]], kwargs: dict[str, Any], aio: bool, opts: dict[str, Any]) -> Any:
    """A Redis Cluster client starting from ``nodes`` (the sync client connects at once: no node
    answering raises RedisConnectionError)."""
    node: Any = AsyncClusterNode if aio else ClusterNode
    cls: Any = aredis.RedisCluster if aio else redis.RedisCluster
    try:
        return cls(startup_nodes=[node(h, p) for h, p in nodes], max_connections=MAX_OPEN_CONNECTIONS,
                   **{**opts, **kwargs})
    except RedisClusterException as exc:
        raise RedisConnectionError(f"cannot connect to the Redis Cluster: {exc}") from None


def _sentinel_client(nodes: list[tuple[str, int]], master: str, kwargs: dict[str, Any], aio: bool,
                     opts: dict[str, Any]) -> Any:
    """A client of the master ``master`` as the Sentinels ``nodes`` name it (they are reached with
    the socket and TLS options, the master with every option)."""
    to_sentinels = {**opts, **{k: v for k, v in kwargs.items() if k.startswith("ssl")}}
    manager: Any = (AsyncSentinel if aio else Sentinel)(nodes, sentinel_kwargs=to_sentinels, **{**opts, **kwargs})
    return manager.master_for(master, redis_class=aredis.Redis if aio else redis.Redis,
                              max_connections=MAX_OPEN_CONNECTIONS)


def _single_client(url: str, aio: bool, opts: dict[str, Any]) -> Any:
    """A client of one Redis server (an asyncio one packs its commands with hiredis), its pool
    holding up to :data:`MAX_OPEN_CONNECTIONS`."""
    single: Any = aredis.Redis if aio else redis.Redis
    pool_cls: Any = aredis.ConnectionPool if aio else redis.ConnectionPool
    pool = pool_cls.from_url(url, max_connections=MAX_OPEN_CONNECTIONS, **opts, **_DRIVER)
    client = single.from_pool(pool)
    if aio:
        _pack_with_hiredis(client.connection_pool)
    return client


def sync_client(url_or_client: Any = None, *, socket_timeout: float | None = REDIS_PY_SOCKET_TIMEOUT) -> Any:
    """A sync redis-py client for a URL (None = :func:`default_url`; the forms are in the module
    docstring), or the client given."""
    return _make(url_or_client, False, socket_timeout)


def async_client(url_or_client: Any = None, *, socket_timeout: float | None = REDIS_PY_SOCKET_TIMEOUT) -> Any:
    """An asyncio redis-py client for a URL (None = :func:`default_url`), or the client given.
    A server's client needs a socket timeout above its longest blocking wait (``idle_timeout``)."""
    return _make(url_or_client, True, socket_timeout)


def read_timeout(client: Any) -> float:
    """The socket read timeout of a redis-py client (inf = none): blocking commands must return
    before it, or the client gives up on them with a TimeoutError."""
    for holder in (getattr(client, "connection_pool", None), client):
        kwargs = getattr(holder, "connection_kwargs", None)
        if isinstance(kwargs, dict):
            value = kwargs.get("socket_timeout", REDIS_PY_SOCKET_TIMEOUT)
            return float("inf") if value is None else float(value)
    return REDIS_PY_SOCKET_TIMEOUT
