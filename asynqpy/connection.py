"""Making Redis clients from URLs.

``redis://``, ``rediss://`` (TLS) and ``unix://`` URLs give a single-node client;
``redis+cluster://host:port[,host:port...]`` (or ``rediss+cluster://``) gives a Redis Cluster client.
An existing redis-py client may be passed instead of a URL. Credentials go in the URL
(``redis://user:password@host``); connection options, TLS ones included, as query parameters
(``rediss://host:6380/0?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required``, also
``ssl_certfile``/``ssl_keyfile`` for a client certificate), for single nodes and clusters alike.
A bad URL, a TLS file that does not exist or a bad ``ssl_cert_reqs`` raise
:class:`~asynqpy.errors.InvalidArgumentError` before anything connects. Error messages never
repeat the URL (it may hold a password).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, cast
from urllib.parse import parse_qs, unquote, urlsplit

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.cluster import ClusterNode
from redis.connection import parse_url as _parse_url

from .errors import InvalidArgumentError

DEFAULT_URL = "redis://localhost:6379/0"


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


def _cluster_parts(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]] | None:
    scheme, _, rest = url.partition("://")
    if scheme not in ("redis+cluster", "rediss+cluster"):
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
    nodes = []
    for hp in netloc[-1].split(","):
        host, _, port = hp.rpartition(":")
        nodes.append((host or "localhost", int(port or 6379)))
    if scheme.startswith("rediss"):
        kwargs["ssl"] = True
    return nodes, kwargs


def is_cluster(client: Any) -> bool:
    return isinstance(client, (redis.RedisCluster, aredis.RedisCluster))


REDIS_PY_SOCKET_TIMEOUT = 5.0
"""redis-py's default socket (read) timeout when none is given."""


def _make(url_or_client: Any, single: Any, cluster: Any, node: Any, socket_timeout: float | None) -> Any:
    if url_or_client is not None and not isinstance(url_or_client, str):
        return url_or_client
    url = url_or_client or default_url()
    opts = {"socket_connect_timeout": 5, "socket_keepalive": True, "socket_timeout": socket_timeout}
    check_url(url)
    try:
        parts = _cluster_parts(url)
        if parts:
            nodes, kwargs = parts
            return cluster(startup_nodes=[node(h, p) for h, p in nodes], **{**opts, **kwargs})
        return single.from_url(url, **opts)
    except ValueError as exc:  # not the URL itself: it may hold a password
        raise InvalidArgumentError(f"bad Redis URL: {exc}") from None


def sync_client(url_or_client: Any = None, *, socket_timeout: float | None = REDIS_PY_SOCKET_TIMEOUT) -> Any:
    """A sync redis-py client for a URL (None = :func:`default_url`), or the client given."""
    return _make(url_or_client, redis.Redis, redis.RedisCluster, ClusterNode, socket_timeout)


def async_client(url_or_client: Any = None, *, socket_timeout: float | None = REDIS_PY_SOCKET_TIMEOUT) -> Any:
    """An asyncio redis-py client for a URL (None = :func:`default_url`), or the client given.
    A server's client needs a socket timeout above its longest blocking wait (``idle_timeout``)."""
    return _make(url_or_client, aredis.Redis, aredis.RedisCluster, AsyncClusterNode, socket_timeout)


def read_timeout(client: Any) -> float:
    """The socket read timeout of a redis-py client (inf = none): blocking commands must return
    before it, or the client gives up on them with a TimeoutError."""
    for holder in (getattr(client, "connection_pool", None), client):
        kwargs = getattr(holder, "connection_kwargs", None)
        if isinstance(kwargs, dict):
            value = kwargs.get("socket_timeout", REDIS_PY_SOCKET_TIMEOUT)
            return float("inf") if value is None else float(value)
    return REDIS_PY_SOCKET_TIMEOUT
