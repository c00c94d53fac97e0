"""The Redis key schema: the only module that formats key names.

Every key of a queue carries the hash tag ``{queue}``, so one queue lives in one Redis Cluster slot
and every script, which only touches one queue, can be run on a cluster.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from .errors import InvalidArgumentError

PREFIX = "asynqpy"
ALL_QUEUES = f"{PREFIX}:queues"
"""SET of every queue name ever written to (clients and servers register their queues)."""
SERVERS = f"{PREFIX}:servers"
"""ZSET server id -> expiry (ms) of its heartbeat; readers skip expired members."""

_QUEUE_RE = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")


_valid: set[str] = set()


def validate_queue(name: object) -> str:
    """Return ``name`` if it is a valid queue name, else raise :class:`InvalidArgumentError`.

    A queue name is 1-128 characters from ``A-Z a-z 0-9 _ . : -`` (no braces: they would break the
    hash tag that keeps a queue in one cluster slot).
    """
    if isinstance(name, str) and name in _valid:
        return name
    if not isinstance(name, str) or not _QUEUE_RE.match(name):
        raise InvalidArgumentError(
            f"invalid queue name {name!r}: use 1-128 characters from A-Z a-z 0-9 _ . : -"
        )
    if len(_valid) < 10_000:
        _valid.add(name)
    return name


def server_info(server_id: str) -> str:
    """STRING holding a live server's description (msgpack), with a TTL refreshed by heartbeats."""
    return f"{PREFIX}:server:{server_id}"


@dataclass(frozen=True)
class QueueKeys:
    """The keys of one queue. See docs/architecture.md for what each holds."""

    name: str

    @property
    def base(self) -> str:
        return f"{PREFIX}:{{{self.name}}}:"

    @property
    def tasks(self) -> str:
        """HASH task id -> state char (+ lease token when active) + encoded message."""
        return self.base + "t"

    @property
    def pending(self) -> str:
        return self.base + "pending"

    @property
    def lease(self) -> str:
        """ZSET of active task ids -> lease expiry (ms, Redis clock)."""
        return self.base + "lease"

    @property
    def scheduled(self) -> str:
        return self.base + "scheduled"

    @property
    def retry(self) -> str:
        return self.base + "retry"

    @property
    def archived(self) -> str:
        return self.base + "archived"

    @property
    def completed(self) -> str:
        return self.base + "completed"

    @property
    def paused(self) -> str:
        return self.base + "paused"

    @property
    def wake(self) -> str:
        """LIST idle workers BLPOP on; a token means pending may have work."""
        return self.base + "wake"

    @property
    def tick(self) -> str:
        """LIST forwarders BLPOP on; a token means the earliest due time moved up."""
        return self.base + "tick"

    @property
    def processed(self) -> str:
        return self.base + "processed"

    @property
    def failed(self) -> str:
        return self.base + "failed"

    def processed_on(self, day: date) -> str:
        return f"{self.base}processed:{day.isoformat()}"

    def failed_on(self, day: date) -> str:
        return f"{self.base}failed:{day.isoformat()}"

    def lock(self, digest: str) -> str:
        """Uniqueness lock; ``digest`` '' gives the never-set placeholder used by non-unique tasks."""
        return f"{self.base}u:{digest}"


_cache: dict[str, QueueKeys] = {}


def queue_keys(name: str) -> QueueKeys:
    """Return the (cached) key set of queue ``name``, validating the name once."""
    keys = _cache.get(name)
    if keys is None:
        keys = _cache[name] = QueueKeys(validate_queue(name))
    return keys
