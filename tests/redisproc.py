"""Start and stop real redis-server processes for tests, demos and benchmarks (loopback only)."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

_rng = random.Random()  # not the global one: a test may seed that


def _worker_ports() -> range | None:
    """Under pytest-xdist, this worker's own slice of ports 10000-19999 (a cluster node's bus port,
    10000 higher, falls in 20000-29999: below Linux's ephemeral range, which starts at 32768):
    servers that parallel workers start never race for one port, with each other or with the
    ephemeral ports of client connections. None when not under xdist (the kernel picks a port)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0") or 0)
    if not worker.startswith("gw") or not worker[2:].isdigit() or count < 1:
        return None
    size = 10000 // count
    start = 10000 + int(worker[2:]) % count * size
    return range(start, start + size)


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(below: int = 65536) -> int:
    """A free loopback port below ``below`` (under pytest-xdist, in this worker's own slice)."""
    ports = _worker_ports()
    if ports is not None:
        while True:
            port = _rng.choice(ports)
            if port < below and _bindable(port):
                return port
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < below:
            return port


def terminate(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM ``proc`` and wait for it; SIGKILL if it has not exited within 10 s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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
        self.dir = dir or Path(tempfile.mkdtemp(prefix="asynqpy-redis-"))
        self.tls, self.password = tls, password
        for attempt in range(3):  # a free port chosen here may be taken before redis-server binds it
            self.port = port or free_port()
            if self._start(exe):
                return
            if port is not None or attempt == 2:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not start")

    def _start(self, exe: str) -> bool:
        """Start redis-server on ``self.port`` and wait until it answers; False if it exited at
        once (its port was taken), RuntimeError if it neither answers nor exits within 10 s."""
        listen = ["--port", str(self.port)]
        tls = self.tls
        if tls:
            listen = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(tls.cert),
                      "--tls-key-file", str(tls.key), "--tls-ca-cert-file", str(tls.ca),
                      "--tls-auth-clients", "yes"]
        if self.password:
            listen += ["--requirepass", self.password]
        cmd = [exe, *listen, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(self.dir), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.url = self.url_for()
        deadline = time.monotonic() + 10
        while True:
            try:
                self.admin(socket_connect_timeout=0.2).ping()
                return True
            except redis.ConnectionError:
                if self.proc.poll() is not None:
                    return False
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not start") from None
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
        terminate(self.proc)
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def crash(self) -> None:
        """SIGKILL: no shutdown, no final write (a power cut, as far as Redis knows)."""
        self.proc.kill()
        self.proc.wait()

    def restart(self) -> RedisProcess:
        """A new redis-server on the same port, directory and arguments (after stop or crash)."""
        return RedisProcess(*self.args, port=self.port, dir=self.dir, tls=self.tls, password=self.password)


def free_cluster_port() -> int:
    """A free loopback port whose cluster-bus port (port + 10000, at most 65535) is free too."""
    while True:
        port = free_port(below=55536)
        if _bindable(port + 10000):
            return port


def wait_for(pred: Callable[[], bool], timeout: float, what: str) -> None:
    """Poll ``pred`` (Redis errors count as "not yet") until true; RuntimeError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if pred():
                return
        except (redis.RedisError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not reached within {timeout}s")
        time.sleep(0.05)


def _info(port: int, section: str) -> dict[str, Any]:
    r = redis.Redis(port=port, socket_timeout=2, socket_connect_timeout=1)
    try:
        if section == "cluster":
            return dict(r.cluster("info"))
        return dict(r.info(section))
    finally:
        r.close()


class RedisCluster:
    """A Redis Cluster on loopback ports: ``masters`` masters with ``replicas`` replicas each,
    created with ``redis-cli --cluster create``. The node timeout is short (``node_timeout`` ms),
    so a killed master's replica takes over within ~2-3 s. ``full_coverage``: Redis's default,
    every node refuses every command while some slot has no master (cluster_state:fail)."""

    def __init__(self, masters: int = 3, replicas: int = 1, node_timeout: int = 1000,
                 full_coverage: bool = True, extra: tuple[str, ...] = (), idle_hz: int | None = None) -> None:
        """``idle_hz``: Redis's ``hz`` once the cluster is healthy (set on each node then): its
        nodes join at the default pace (their handshakes and gossip move at each cron: at ``hz 1``
        a join took ~10 s idle, ~18 s in a loaded run and once over a minute), then idle quietly."""
        self.nodes: list[RedisProcess] = []
        self.node_timeout = node_timeout
        args = ("--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout),
                "--cluster-config-file", "nodes.conf",
                # "no": while a master is down, the other masters keep serving their slots
                "--cluster-require-full-coverage", "yes" if full_coverage else "no",
                # a replica may always take over, however long its link was down
                "--cluster-replica-validity-factor", "0",
                # replicas sync at once (Redis 7 waits 5 s for more replicas by default)
                "--repl-diskless-sync-delay", "0", *extra)
        try:
            for _ in range(masters * (1 + replicas)):
                self.nodes.append(RedisProcess(*args, port=free_cluster_port()))
            addrs = [f"127.0.0.1:{n.port}" for n in self.nodes]
            subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", str(replicas),
                            "--cluster-yes"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, timeout=60)
            self.wait_healthy(masters, replicas, timeout=30)
            if idle_hz is not None:
                for n in self.nodes:
                    redis.Redis(port=n.port).config_set("hz", idle_hz)
        except BaseException:
            self.stop()
            raise
        self.url = "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def live(self) -> list[RedisProcess]:
        return [n for n in self.nodes if n.proc.poll() is None]

    def roles(self) -> dict[int, str]:
        """port -> "master" or "slave", as each live node sees itself."""
        return {n.port: str(_info(n.port, "replication")["role"]) for n in self.live()}

    def masters(self) -> list[RedisProcess]:
        roles = self.roles()
        return [n for n in self.live() if roles.get(n.port) == "master"]

    def wait_healthy(self, masters: int, replicas: int, timeout: float) -> None:
        """Until every live node says cluster_state:ok and knows every live node, there are
        ``masters`` masters, and every replica's link to its master is up and in sync."""

        def healthy() -> bool:
            live = self.live()
            for n in live:
                ci = _info(n.port, "cluster")
                if ci.get("cluster_state") != "ok" or int(ci.get("cluster_known_nodes", 0)) < len(live):
                    return False
            roles = self.roles()
            if sum(1 for r in roles.values() if r == "master") != masters:
                return False
            if sum(1 for r in roles.values() if r == "slave") < masters * replicas:
                return False
            for port, role in roles.items():
                if role == "slave":
                    ri = _info(port, "replication")
                    if ri.get("master_link_status") != "up" or int(ri.get("master_sync_in_progress", 1)):
                        return False
            return True

        wait_for(healthy, timeout, "cluster healthy (state ok, replicas in sync)")

    def owner(self, key: str) -> RedisProcess:
        """The node that serves ``key``'s slot, as a live master sees the cluster now."""
        r = redis.Redis(port=self.masters()[0].port)
        try:
            slot = int(r.cluster("keyslot", key))
            for start, end, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    return next(n for n in self.nodes if n.port == int(master[1]))
        finally:
            r.close()
        raise RuntimeError(f"no node serves {key!r}")

    def wait_failover(self, dead: RedisProcess, key: str, timeout: float = 20) -> RedisProcess:
        """After ``dead`` was stopped or crashed: wait until another live node serves ``key``
        and every live node says cluster_state:ok; returns the new owner."""
        new: list[RedisProcess] = []

        def moved() -> bool:
            try:
                owner = self.owner(key)
            except (RuntimeError, redis.ConnectionError):  # the slot in no master's map for now (the
                return False  # dead master dropped, its replica not yet promoted), or the master asked gone
            if owner is dead or owner.proc.poll() is not None:
                return False
            new[:] = [owner]
            return all(_info(n.port, "cluster").get("cluster_state") == "ok" for n in self.live())

        wait_for(moved, timeout, f"failover of {key!r} away from port {dead.port}")
        return new[0]

    def flush(self) -> None:
        for n in self.masters():
            redis.Redis(port=n.port).flushall()

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


class SentinelProcess:
    """One Redis Sentinel (``redis-server <conf> --sentinel``) watching ``master`` as ``name``."""

    def __init__(self, name: str, master_port: int, quorum: int, down_after_ms: int = 1000) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed")
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="asynqpy-sentinel-"))
        conf = self.dir / "sentinel.conf"  # sentinel rewrites its config: a file of its own
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.dir}\n"
            f"sentinel monitor {name} 127.0.0.1 {master_port} {quorum}\n"
            f"sentinel down-after-milliseconds {name} {down_after_ms}\n"
            f"sentinel failover-timeout {name} 5000\n"
            f"sentinel parallel-syncs {name} 1\n"
        )
        self.proc = subprocess.Popen([exe, str(conf), "--sentinel"], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.STDOUT)
        try:
            wait_for(lambda: bool(redis.Redis(port=self.port, socket_connect_timeout=0.2).ping()), 10,
                     f"sentinel on port {self.port} up")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        terminate(self.proc)
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisSentinelGroup:
    """A master, ``replicas`` replicas and ``sentinels`` Sentinels (quorum: a majority) on loopback
    ports, for single-master high availability. ``url`` is asynqpy's ``redis+sentinel://`` URL."""

    def __init__(self, name: str = "mymaster", replicas: int = 1, sentinels: int = 3) -> None:
        self.name = name
        self.nodes: list[RedisProcess] = []
        self.sentinels: list[SentinelProcess] = []
        try:
            self.nodes.append(RedisProcess("--repl-diskless-sync-delay", "0"))
            master = self.nodes[0].port
            for _ in range(replicas):
                self.nodes.append(RedisProcess("--replicaof", "127.0.0.1", str(master),
                                               "--repl-diskless-sync-delay", "0"))
            for _ in range(sentinels):
                self.sentinels.append(SentinelProcess(name, master, quorum=sentinels // 2 + 1))
            self.wait_healthy(master, 30)
        except BaseException:
            self.stop()
            raise
        self.url = f"redis+sentinel://{','.join(f'127.0.0.1:{s.port}' for s in self.sentinels)}/{name}"

    def master_port(self) -> int:
        """The master's port, as the first live sentinel reports it."""
        for s in self.sentinels:
            try:
                r = redis.Redis(port=s.port, socket_timeout=2)
                return int(r.sentinel_get_master_addr_by_name(self.name)[1])
            except (redis.RedisError, OSError):
                continue
        raise RuntimeError("no sentinel answers")

    def node(self, port: int) -> RedisProcess:
        return next(n for n in self.nodes if n.port == port)

    def wait_healthy(self, master: int, timeout: float) -> None:
        """Until every sentinel names ``master``, knows the other sentinels and the replicas, and
        every live replica of ``master`` is in sync."""
        live = [n for n in self.nodes if n.proc.poll() is None and n.port != master]

        def healthy() -> bool:
            for s in self.sentinels:
                r = redis.Redis(port=s.port, socket_timeout=2)
                m = r.sentinel_master(self.name)
                if int(m["port"]) != master or "s_down" in m["flags"] or "o_down" in m["flags"]:
                    return False
                if int(m["num-other-sentinels"]) < len(self.sentinels) - 1 or int(m["num-slaves"]) < len(live):
                    return False
            for n in live:
                ri = _info(n.port, "replication")
                if ri.get("role") != "slave" or int(ri.get("master_port", 0)) != master \
                        or ri.get("master_link_status") != "up":
                    return False
            return True

        wait_for(healthy, timeout, f"sentinel group healthy with master :{master}")

    def stop(self) -> None:
        for s in self.sentinels:
            s.stop()
        for n in self.nodes:
            n.stop()
