"""Start and stop real redis-server processes for tests, demos and benchmarks (loopback only)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis


def free_port(below: int = 65536) -> int:
    """A free loopback port below ``below``."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < below:
            return port


@dataclass(frozen=True)
class TlsFiles:
    """A throw-away CA and a server certificate it signed (for 127.0.0.1 and localhost), and a
    client certificate signed by the same CA."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path


def make_tls_files(directory: Path) -> TlsFiles:
    """Generate :class:`TlsFiles` in ``directory`` with the openssl command (EC keys, valid 1 day)."""
    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True, timeout=60)

    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *key, "-days", "1", "-subj", "/CN=asynqpy test CA", "-keyout", "ca.key", "-out", "ca.crt")
    (directory / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    for name, cn in (("server", "localhost"), ("client", "asynqpy test client")):
        run("req", *key, "-subj", f"/CN={cn}", "-keyout", f"{name}.key", "-out", f"{name}.csr")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
            "-days", "1", "-out", f"{name}.crt", *(["-extfile", "san.ext"] if name == "server" else []))
    d = directory
    return TlsFiles(d / "ca.crt", d / "server.crt", d / "server.key", d / "client.crt", d / "client.key")


class RedisProcess:
    """One redis-server on 127.0.0.1:<free port>, without persistence unless args say otherwise.

    ``tls``: serve TLS only on that port, to clients presenting a certificate of the CA (the URL
    carries the CA, the client certificate and its key). ``password``: the default user's password
    (``requirepass``); the URL carries it. :meth:`admin` is a client of the default user."""

    def __init__(self, *args: str, port: int | None = None, dir: Path | None = None, tls: TlsFiles | None = None,
                 password: str | None = None) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed")
        self.args = args
        self.port = port or free_port()
        self.dir = dir or Path(tempfile.mkdtemp(prefix="asynqpy-redis-"))
        self.tls, self.password = tls, password
        listen = ["--port", str(self.port)]
        if tls:
            listen = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(tls.cert),
                      "--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca),
                      "--tls-auth-clients", "yes"]
        if password:
            listen += ["--requirepass", password]
        cmd = [exe, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(self.dir), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.url = self.url_for()
        deadline = time.monotonic() + 10
        while True:
            try:
                self.admin(socket_connect_timeout=0.2).ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not start")
                time.sleep(0.02)

    def url_for(self, user: str | None = None, password: str | None = None) -> str:
        """A URL of this server, as ``user`` (None = the default user) with ``password`` (None =
        the server's password), carrying the TLS files when it serves TLS."""
        password = self.password if password is None and user is None else password
        auth = f"{user or ''}:{password}@" if password is not None else ""
        if self.tls:
            t = self.tls
            return (f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={t.ca}&ssl_cert_reqs=required"
                    f"&ssl_certfile={t.client_cert}&ssl_keyfile={t.client_key}")
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def admin(self, **kwargs: Any) -> redis.Redis:
        """A client of the default user."""
        return redis.Redis.from_url(self.url, **kwargs)

    def stop(self, keep_dir: bool = False) -> None:
        """SIGTERM (Redis shuts down cleanly, flushing its AOF), SIGKILL if it hangs."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def crash(self) -> None:
        """SIGKILL: no shutdown, no final write (a power cut, as far as Redis knows)."""
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> RedisProcess:
        """A new redis-server on the same port, directory and arguments (after stop or crash)."""
        return RedisProcess(*self.args, port=self.port, dir=self.dir, tls=self.tls, password=self.password)


class RedisCluster:
    """A Redis Cluster of ``masters`` masters on loopback ports, created with redis-cli."""

    def __init__(self, masters: int = 3) -> None:
        self.nodes: list[RedisProcess] = []
        try:
            for _ in range(masters):
                # a node's cluster bus listens on port + 10000, which must stay <= 65535
                self.nodes.append(RedisProcess("--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
                                               "--cluster-config-file", "nodes.conf",
                                               port=free_port(below=55536)))
            addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
            subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "0", "--cluster-yes"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=60)
            deadline = time.monotonic() + 30
            while True:
                infos = [redis.Redis(port=n.port).cluster("info") for n in self.nodes]
                if all(i.get("cluster_state") == "ok" for i in infos):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("cluster did not reach state ok")
                time.sleep(0.1)
        except BaseException:
            self.stop()
            raise
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def flush(self) -> None:
        for n in self.nodes:
            redis.Redis(port=n.port).flushall()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()
