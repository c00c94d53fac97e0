"""``asynqpy rules CONFIG``: the rules engine (docs/rules.md); ``--check`` validates only."""

from __future__ import annotations

import click

from .common import UserError, echo, user_errors


@click.command()
@click.argument("config")
@click.option("--check", is_flag=True, help="Only check the configuration (each problem: file:line: place: message).")
@click.option("--redrive", is_flag=True, help="Move every watcher's dead events back to its input list, and exit.")
@click.option("--instance", default=None, metavar="NAME",
              help="This process's name, when several run one configuration: its taken lists are <taken>/NAME "
                   "(keep it across restarts).")
@click.option("--batch", default=100, show_default=True, type=click.IntRange(1, 10_000),
              help="Most events a watcher takes per round trip.")
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=None,
              help="Serve Prometheus metrics on this port (the metrics extra).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True, help="The address to serve metrics on.")
@click.option("--health-port", default=None, metavar="PORT",
              help="Serve health probes, GET /livez and /readyz (Redis reached), on this port.")
@click.option("--health-host", default="127.0.0.1", show_default=True, help="The address --health-port binds.")
@click.option("--redis-url", default=None,
              help="Redis URL (default: the configuration's redis.url, else $ASYNQPY_REDIS_URL or "
                   "redis://localhost:6379/0).")
@user_errors
def rules(config: str, check: bool, redrive: bool, instance: str | None, batch: int, metrics_port: int | None,
          metrics_host: str, health_port: str | None, health_host: str, redis_url: str | None) -> None:
    """Run the watchers of CONFIG (Hjson, JSON or TOML; a Resc configuration runs unchanged): each
    takes events from its input list and turns them into tasks by its rules, until SIGTERM or
    SIGINT. Set --log-level DEBUG to see each event and task."""
    from asynqpy.rules import Rules, load_config
    from asynqpy.rules import redrive as redrive_dead

    conf = load_config(config)
    if redrive:
        for name, n in redrive_dead(conf, redis_url).items():
            echo(f"{name}: {n} dead event(s) moved back to the input list")
        return
    if check:
        n = sum(len(w.rules) for w in conf.watchers)
        echo(f"{config}: ok ({len(conf.watchers)} watcher(s), {n} rule(s))")
        return
    if instance is not None and (not instance or "/" in instance or not instance.isprintable()):
        raise UserError(f"--instance must be a non-empty printable name without '/', got {instance!r}")
    if health_port is not None and (not health_port.isdigit() or int(health_port) > 65535):
        raise UserError(f"--health-port must be a port number (0-65535), got {health_port!r}")
    Rules(conf, redis_url, instance=instance, batch=batch, metrics_port=metrics_port, metrics_host=metrics_host,
          health_port=None if health_port is None else int(health_port), health_host=health_host).run()
