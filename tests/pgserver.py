"""Start and stop a throw-away PostgreSQL server for tests, demos and benchmarks (loopback only),
as :mod:`redisproc` starts redis-server: ``initdb`` into a temporary directory, then ``postgres``
on a free port (under pytest-xdist, in the worker's own slice of ports), its unix socket in the
same directory, without fsync (nothing is kept: a crash of the machine loses nothing of value).

PostgreSQL refuses to run as root: as root, the data directory is given to the ``nobody`` user
and the server runs as that user (``subprocess.Popen(user=...)``, the same process id: a test may
SIGKILL it). The binaries are found on PATH or in Debian's ``/usr/lib/postgresql/<version>/bin``
(Debian's ``postgresql`` package does not put ``initdb`` on PATH)."""

from __future__ import annotations

import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from redisproc import free_port

_USER = "nobody"


def pg_bin(name: str) -> str | None:
    """The path of PostgreSQL's ``name`` binary (initdb, postgres), or None if not installed."""
    for d in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(p.split("/")[-2]), reverse=True):
        if os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return shutil.which(name)


def available() -> bool:
    """Are initdb and postgres installed?"""
    return pg_bin("initdb") is not None and pg_bin("postgres") is not None


class PostgresProcess:
    """One PostgreSQL server on 127.0.0.1:<free port>, database ``postgres``, user ``postgres``
    (trust authentication: loopback and the directory's socket only). :attr:`url` is its
    SQLAlchemy URL (psycopg 3); :meth:`url_for` gives other drivers' URLs. :meth:`restart` starts
    it again on the same port and data (after :meth:`stop` or :meth:`crash`)."""

    def __init__(self, port: int | None = None) -> None:
        initdb, postgres = pg_bin("initdb"), pg_bin("postgres")
        if initdb is None or postgres is None:
            raise RuntimeError("PostgreSQL (initdb, postgres) is not installed")
        self.exe = postgres
        self.dir = Path(tempfile.mkdtemp(prefix="asynqpy-pg-"))
        self.data = self.dir / "data"
        self.as_user = _USER if os.geteuid() == 0 else None
        if self.as_user:
            shutil.chown(self.dir, _USER)
        subprocess.run([initdb, "-D", str(self.data), "-A", "trust", "-U", "postgres", "-E", "UTF8", "--no-sync",
                        "--no-instructions"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                       timeout=120, user=self.as_user)
        for attempt in range(3):  # a free port chosen here may be taken before postgres binds it
            self.port = port or free_port()
            if self._start():
                return
            if port is not None or attempt == 2:
                self.stop()
                raise RuntimeError(f"postgres on port {self.port} did not start: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            return (self.dir / "log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def _start(self) -> bool:
        """Start postgres on ``self.port`` and wait until it accepts connections; False if it
        exited at once (its port was taken)."""
        cmd = [self.exe, "-D", str(self.data), "-p", str(self.port), "-h", "127.0.0.1", "-k", str(self.dir),
               "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
               "-c", "max_connections=200", "-c", "shared_buffers=32MB", "-c", "logging_collector=off"]
        with open(self.dir / "log", "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, user=self.as_user,
                                         start_new_session=True)
        self.url = self.url_for("postgresql+psycopg")
        deadline = time.monotonic() + 30
        while True:
            if self.ready():
                return True
            if self.proc.poll() is not None:
                return False
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"postgres on port {self.port} did not start: {self._log_tail()}")
            time.sleep(0.05)

    def ready(self) -> bool:
        """Does the server accept a connection and run a query?"""
        import psycopg

        try:
            with psycopg.connect(self.dsn, connect_timeout=1) as c:
                c.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    @property
    def dsn(self) -> str:
        """The libpq connection string (psycopg.connect)."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def url_for(self, driver: str = "postgresql+psycopg", database: str = "postgres") -> str:
        """A SQLAlchemy URL of this server with ``driver`` (``postgresql+asyncpg``, ...)."""
        return f"{driver}://postgres@127.0.0.1:{self.port}/{database}"

    def create_database(self, name: str) -> str:
        """Create database ``name`` (dropped first if it exists); its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            c.execute(f'CREATE DATABASE "{name}"')
        return self.url_for(database=name)

    def stop(self, keep_dir: bool = False) -> None:
        """Fast shutdown (SIGINT: sessions ended, a clean checkpoint); SIGKILL if it hangs."""
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                self.crash()
        if not keep_dir:
            shutil.rmtree(self.dir, ignore_errors=True)

    def crash(self) -> None:
        """SIGKILL the server and its backends (its process group): a power cut, as it sees it."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()

    def restart(self) -> None:
        """Start it again on the same port and data directory (after :meth:`stop` with
        ``keep_dir=True``, or :meth:`crash`)."""
        if not self._start():
            raise RuntimeError(f"postgres on port {self.port} did not restart: {self._log_tail()}")
