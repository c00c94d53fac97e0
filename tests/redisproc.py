"""Start and stop real redis-server processes for tests, demos and benchmarks (loopback only)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def free_port(below: int = 65536) -> int:
    """A free loopback port below ``below``."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port < below:
            return port


class RedisProcess:
    """One redis-server on 127.0.0.1:<free port>, without persistence unless args say otherwise."""

    def __init__(self, *args: str, port: int | None = None, dir: Path | None = None) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError("redis-server is not installed")
        self.args = args
        self.port = port or free_port()
        self.dir = dir or Path(tempfile.mkdtemp(prefix="asynqpy-redis-"))
        cmd = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--dir", str(self.dir), *args]
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self.url = f"redis://127.0.0.1:{self.port}/0"
        deadline = time.monotonic() + 10
        while True:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.2).ping()
                return
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not start")
                time.sleep(0.02)

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
        return RedisProcess(*self.args, port=self.port, dir=self.dir)


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
