"""Making Redis clients from URLs.

``redis://``, ``rediss://`` (TLS) and ``unix://`` URLs give a single-node client;
``redis+cluster://host:port[,host:port...]`` (or ``rediss+cluster://``) gives a Redis Cluster client.
An existing redis-py client may be passed instead of a URL.
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

import redis
import redis.asyncio as aredis
from redis.asyncio.cluster import ClusterNode as AsyncClusterNode
from redis.cluster import ClusterNode
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException

from .errors import InvalidArgumentError

DEFAULT_URL = "redis://localhost:6379/0"


def default_url() -> str:
    """``$ASYNQPY_REDIS_URL``, else redis://localhost:6379/0."""
    return os.environ.get("ASYNQPY_REDIS_URL") or DEFAULT_URL


def _cluster_parts(url: str) -> tuple[list[tuple[str, int]], dict[str, Any]] | None:
    scheme, _, rest = url.partition("://")
    if scheme not in ("redis+cluster", "rediss+cluster"):
        return None
    parts = urlsplit("redis://" + rest)
    netloc = parts.netloc.rsplit("@", 1)
    kwargs: dict[str, Any] = {}
    if len(netloc) == 2:
        user, _, password = netloc[0].partition(":")
        kwargs.update(username=user or None, password=password or None)
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
    opts: dict[str, Any] = {"socket_connect_timeout": 5, "socket_timeout": socket_timeout}
    if not url.startswith("unix:"):  # a TCP option: redis-py's Unix socket connection refuses it
        opts["socket_keepalive"] = True
    try:
        url.encode()  # a lone surrogate (undecodable bytes in argv) fails later, deep in the socket code
        parts = _cluster_parts(url)
        if not parts:
            return single.from_url(url, **opts)
    except ValueError as exc:  # redis-py, int() and encode() say what is wrong with the URL
        raise InvalidArgumentError(f"invalid Redis URL {url!r}: {exc}") from None
    nodes, kwargs = parts
    try:
        return cluster(startup_nodes=[node(h, p) for h, p in nodes], **kwargs, **opts)
    except RedisClusterException as exc:  # the sync client connects here: no node answered as a cluster
        raise RedisConnectionError(f"cannot connect to the Redis Cluster at {url!r}: {exc}") from None


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
