"""The rules engine (docs/rules.md): turn events on Redis lists into tasks, reliably, from a
Resc-style configuration (Hjson, JSON or TOML).

    from asynqpy.rules import Rules

    Rules("rules.hjson").run()          # until SIGTERM / SIGINT; or: await Rules(...).arun()

``asynqpy rules CONFIG`` does the same from the command line; ``asynqpy rules --check CONFIG``
only checks the configuration.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path
from typing import Any

from .client import AsyncClient
from .core.model.errors import InvalidArgumentError
from .core.rules.config import Config, ConfigError, RuleError, load_config, parse_config, parse_text
from .redisio.connection import async_client
from .worker.probes import Probes, RedisReach
from .worker.rules import Engine, PrometheusRulesMetrics, RulesMetrics

__all__ = ["Config", "ConfigError", "RuleError", "Rules", "check", "load_config", "parse_config", "parse_text",
           "redrive"]


def check(path: str | Path) -> Config:
    """Read and check a configuration; ConfigError (``file:line: place: message``) if wrong."""
    return load_config(path)


def redrive(config: Config | str | Path, redis: Any = None, batch: int = 1000) -> dict[str, int]:
    """Move every watcher's dead events back to its input list (oldest first), to go through the
    rules again (after the fetched service is back, a rule fixed). Returns the count per watcher.
    A record of the dead list that is not the engine's JSON stops its watcher's move there."""
    from .core.spine.broker import Broker
    from .redisio.connection import sync_client
    from .redisio.executor import SyncExecutor

    conf = config if isinstance(config, Config) else load_config(config)
    r = sync_client(redis if redis is not None else conf.redis_url)
    ex, b = SyncExecutor(r), Broker()
    out: dict[str, int] = {}
    try:
        for w in conf.watchers:
            total = 0
            while True:
                n = ex.run(b.rules_redrive(w.dead_queue, w.input_queue, batch))
                total += n
                if n < batch:
                    break
            out[w.name] = total
    finally:
        if not hasattr(redis, "execute_command"):
            r.close()
    return out


class Rules:
    """A configuration's watchers, ready to run. ``config``: a path or a :class:`Config`.
    ``redis``: a URL or an asyncio redis-py client (default: the configuration's ``redis.url``,
    else ``$ASYNQPY_REDIS_URL`` or redis://localhost:6379/0). ``instance``: this process's name
    when several run one configuration (each then has taken lists of its own, ``<taken>/<name>``;
    keep the name across restarts so a restarted process handles what it left). ``batch``: most
    events taken per round trip. ``metrics_port``: serve Prometheus metrics there (the
    ``metrics`` extra). ``health_port``: serve ``GET /livez`` and ``/readyz`` there (as a
    worker's, worker/probes.py: ready while a PING every second reaches Redis)."""

    def __init__(self, config: Config | str | Path, redis: Any = None, *, instance: str | None = None,
                 batch: int = 100, fetch_concurrency: int = 32, metrics_port: int | None = None,
                 metrics_host: str = "127.0.0.1", health_port: int | None = None,
                 health_host: str = "127.0.0.1") -> None:
        self.config = config if isinstance(config, Config) else load_config(config)
        if instance is not None and (not isinstance(instance, str) or not instance or "/" in instance
                                     or not instance.isprintable()):
            raise ConfigError(self.config.file, None, "instance", f"must be a non-empty name without '/', got "
                              f"{instance!r}")
        if isinstance(batch, bool) or not isinstance(batch, int) or not 1 <= batch <= 10_000:
            raise ConfigError(self.config.file, None, "batch", f"must be an int from 1 to 10000, got {batch!r}")
        self._redis_arg = redis if redis is not None else self.config.redis_url
        self.instance = instance
        self.batch = batch
        self.fetch_concurrency = fetch_concurrency
        self.metrics_port = metrics_port
        self.metrics_host = metrics_host
        if health_port is not None and (isinstance(health_port, bool) or not isinstance(health_port, int)
                                        or not 0 <= health_port <= 65535):
            raise InvalidArgumentError(f"health_port must be a port number (0-65535), got {health_port!r}")
        self.health_port, self.health_host = health_port, health_host
        self._engine: Engine | None = None
        self._stopping = False

    def stop(self) -> None:
        """Stop after the batch each watcher is handling (thread-safe from a signal handler)."""
        self._stopping = True
        if self._engine is not None:
            self._engine.stop()

    @property
    def handled(self) -> int:
        """Events handled so far (tasks written, or moved to the dead list)."""
        return self._engine.handled if self._engine is not None else 0

    async def arun(self) -> None:
        """Run the watchers in this event loop until :meth:`stop`."""
        redis = async_client(self._redis_arg, socket_timeout=30)
        own = not hasattr(self._redis_arg, "execute_command")
        metrics: RulesMetrics | None = None
        if self.metrics_port is not None:
            pm = PrometheusRulesMetrics()
            pm.serve(self.metrics_port, self.metrics_host)
            metrics = pm
        client = AsyncClient(redis) if any(r.make_task for w in self.config.watchers for r in w.rules) else None
        self._engine = Engine(self.config, redis, instance=self.instance, batch=self.batch,
                              fetch_concurrency=self.fetch_concurrency, metrics=metrics, client=client)
        if self._stopping:
            self._engine.stop()
        probes, pinger = None, None
        if self.health_port is not None:
            probes, pinger = self._probes(redis)
        try:
            await self._engine.run()
        finally:
            if probes is not None and pinger is not None:
                pinger.cancel()
                probes.stop()
            if client is not None:
                await client.close()
            if isinstance(metrics, PrometheusRulesMetrics):
                metrics.close()
            if own:
                await redis.aclose()

    def _probes(self, redis: Any) -> tuple[Probes, asyncio.Task[None]]:
        """The health probes (``health_port``) and the task that PINGs Redis for them."""
        reach = RedisReach(redis)

        probes = Probes(self.health_host, self.health_port or 0, 10.0, lambda: {
            "redis": reach.reached, "registered": True, "status": "stopping" if self._stopping else "running"})
        try:
            probes.start(asyncio.get_running_loop())
        except OSError as exc:
            raise InvalidArgumentError(f"health_port: cannot serve the probes on {self.health_host}:"
                                       f"{self.health_port}: {exc.strerror or exc}") from None
        return probes, asyncio.create_task(reach.run())

    def run(self) -> None:
        """Run until SIGTERM or SIGINT (each stops after the current batch)."""

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self.stop)
            await self.arun()

        asyncio.run(main())
