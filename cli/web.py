"""``asynqpy web``: the web console (the ``web`` extra: FastAPI, uvicorn, Jinja2)."""

from __future__ import annotations

import ipaddress
import os

import click

from asynqpy.core.model.errors import InvalidArgumentError

from .common import (
    SafePath,
    UserError,
    echo,
    encryption_keys_option,
    encryption_ring,
    redis_url_option,
    signing_key_option,
    signing_keys,
    user_errors,
)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="The port to serve on.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="The address to bind; anything but loopback needs --auth-file or --auth-env.")
@click.option("--read-only", is_flag=True, help="Show everything, change nothing (every action is refused).")
@click.option("--auth-file", type=SafePath(dir_okay=False), default=None,
              help="A file holding 'basic:USER:PASSWORD' or 'bearer:TOKEN': every request must carry it.")
@click.option("--auth-env", default=None, metavar="VAR",
              help="The same, from the environment variable VAR.")
@click.option("--refresh", type=click.FloatRange(min=0.5), default=2.0, show_default=True,
              help="Seconds between the pages' live updates.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="Another name (or IP address) the console answers to, repeatable; by default only the --host "
                   "address and localhost: a request for any other Host is refused (DNS rebinding). "
                   "'*.example.com': its subdomains; '*': any name (only behind a proxy that checks Host).")
@signing_key_option
@encryption_keys_option
@redis_url_option
@user_errors
def web(port: int, host: str, read_only: bool, auth_file: str | None, auth_env: str | None, refresh: float,
        allowed_hosts: tuple[str, ...], signing_key_file: str | None, encryption_keys_file: str | None,
        redis_url: str) -> None:
    """Serve the web console (queues, tasks, servers, periodic tasks; a REST API under /api) on
    http://HOST:PORT until stopped."""
    if auth_file and auth_env:
        raise UserError("give --auth-file or --auth-env, not both")
    spec = None
    if auth_file:
        try:
            with open(auth_file) as f:
                spec = f.read()
        except OSError as exc:
            raise UserError(f"cannot read --auth-file {auth_file!r}: {exc.strerror or exc}") from None
    elif auth_env:
        spec = os.environ.get(auth_env)
        if spec is None:
            raise UserError(f"--auth-env: the environment variable {auth_env} is not set")
    try:
        from asynqpy.web import Auth, create_app
        from asynqpy.web.app import host_patterns

        auth = Auth.parse(spec) if spec is not None else None
        if auth is None and not _loopback(host):
            raise UserError(f"binding {host} (not loopback) needs --auth-file or --auth-env")
        hosts = host_patterns([host, "localhost", *allowed_hosts])
        app = create_app(redis_url, read_only=read_only, auth=auth, refresh=refresh,
                         signing_key=signing_keys(signing_key_file), allowed_hosts=hosts,
                         encryption=encryption_ring(encryption_keys_file))
    except InvalidArgumentError as exc:
        raise UserError(str(exc)) from None
    import uvicorn

    echo(f"asynqpy web console on http://{host}:{port}/{' (read-only)' if read_only else ''}; "
               f"it answers to Host {', '.join(hosts)} (more with --allowed-host)")
    from asynqpy.web.serving import config

    uvicorn.Server(config(app, host, port, log_level="warning")).run()  # (idle connections bounded)
