"""The benchmark suite: asynqpy against the Python peers and a bare LPUSH/BRPOP loop, on one
redis-server this script starts on a free loopback port, in one run.

    python bench/run.py                      # every peer, default sizes (see --help)
    python bench/run.py --peers asynqpy,bare --n 20000
    python bench/run.py --smoke              # asynqpy only, tiny sizes (CI)

Each peer runs from its own virtualenv (bench/.venvs/<peer>, created on first use from the
``# requires:`` line of bench/peers/<peer>_.py). Completions are counted on a shared-memory board
(bench/common.py), never on the measured Redis. Redis is flushed between workloads. Results: a
table on stdout and JSON in bench/results/ (latest.json and a timestamped copy).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import redis

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests"))
from common import Board, new_board  # noqa: E402
from redisproc import RedisProcess  # noqa: E402

PEERS = ["asynqpy", "bare", "arq", "rq", "celery", "dramatiq", "huey", "saq", "taskiq", "bullmq", "asyrq"]
CLK = os.sysconf("SC_CLK_TCK")
# Every peer runs with its modules compiled, as pip installs them: an environment that sets
# PYTHONDONTWRITEBYTECODE would otherwise have the editable asynqpy (a source tree) compile each of
# its modules at every start, while the peers' site-packages hold their compiled modules.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


class Failed(Exception):
    pass


# -- peers and their virtualenvs ------------------------------------------------------------------


def adapter(peer: str) -> Path:
    return HERE / "peers" / f"{peer}_.py" if (HERE / "peers" / f"{peer}_.py").exists() else HERE / "peers" / f"{peer}.py"


def python_for(peer: str, reuse: bool) -> str:
    """The interpreter of the peer's venv, created (and its requirements installed) if missing."""
    if reuse and peer in ("asynqpy", "bare"):
        return sys.executable
    venv = HERE / ".venvs" / peer
    py = venv / "bin" / "python"
    first = adapter(peer).read_text().splitlines()[0]
    if not first.startswith("# requires:"):
        raise Failed(f"{adapter(peer).name} has no '# requires:' line")
    reqs = first.split(":", 1)[1].split("(")[0].split()
    if peer == "asynqpy":  # editable: every run measures the working tree, never a stale copy
        reqs = ["-e", str(ROOT)]
    stamp = venv / ".requires"
    if not py.exists() or not stamp.exists() or stamp.read_text() != " ".join(reqs):
        print(f"  creating {venv.relative_to(ROOT)}: pip install {' '.join(reqs)}", flush=True)
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check", *reqs], check=True)
        stamp.write_text(" ".join(reqs))
    if peer == "asynqpy":  # the editable tree's modules compiled, as a wheel install has them (see ENV)
        subprocess.run([str(py), "-m", "compileall", "-q", str(ROOT / "asynqpy")], check=True, env=ENV)
    return str(py)


def call(py: str, peer: str, command: str, url: str, board: str, *args: str, timeout: float = 600) -> dict[str, Any]:
    """Run an adapter command to completion; returns its RESULT json."""
    cmd = [py, str(adapter(peer)), command, "--url", url, "--board", board, *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(HERE / "peers"), env=ENV)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])  # type: ignore[no-any-return]
    raise Failed(f"{peer} {command} failed (exit {out.returncode}): {out.stderr.strip()[-600:]}")


class Worker:
    """A peer's worker process, stopped with SIGTERM (then SIGKILL)."""

    def __init__(self, py: str, peer: str, url: str, board: str, *args: str) -> None:
        cmd = [py, str(adapter(peer)), "worker", "--url", url, "--board", board, *args]
        self.log = open(HERE / "results" / f"worker-{peer}.log", "a")
        self.proc = subprocess.Popen(cmd, cwd=str(HERE / "peers"), stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env=ENV)

    def cpu_seconds(self) -> float:
        """utime + stime of the worker and all its descendants."""
        total = 0.0
        for pid in _tree(self.proc.pid):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                total += (int(fields[11]) + int(fields[12])) / CLK
            except (OSError, IndexError, ValueError):
                pass
        return total

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()

    def alive(self) -> bool:
        return self.proc.poll() is None


def _tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return out


# -- measuring ------------------------------------------------------------------------------------


def wait_count(board: Board, n: int, worker: Worker, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while board.count() < n:
        if not worker.alive():
            raise Failed("worker exited early (see bench/results/worker-*.log)")
        if time.monotonic() > deadline:
            raise Failed(f"timed out: {board.count()}/{n} tasks ran in {timeout:.0f}s")
        time.sleep(0.005)


def redis_cpu(r: redis.Redis) -> float:
    info = r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def count_client_commands(url: str, seconds: float) -> float:
    """Commands per second clients send, from MONITOR (commands run by scripts are not counted)."""
    parts = urlsplit(url)
    seen, buf = 0, b""
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379)) as s:
        s.sendall(b"MONITOR\r\n")
        s.settimeout(0.25)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                chunk = s.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                break
            buf += chunk
            *lines, buf = buf.split(b"\r\n")
            seen += sum(1 for line in lines if line.startswith(b"+") and b" [" in line and b" lua]" not in line)
    return seen / seconds


# -- workloads ------------------------------------------------------------------------------------


class Bench:
    def __init__(self, args: argparse.Namespace, url: str) -> None:
        self.a = args
        self.url = url
        self.r = redis.Redis.from_url(url)
        self.board_path = f"/dev/shm/asynqpy-bench-{os.getpid()}"
        new_board(self.board_path, 1).close()  # adapters may open it in any command

    def board(self, tasks: int) -> Board:
        return new_board(self.board_path, max(tasks, 1))

    def flush(self) -> None:
        self.r.flushall()
        self.r.config_resetstat()

    def enqueue(self, py: str, peer: str, mode: str, n: int) -> float:
        """Tasks per second, the best of ``--repeat`` runs (each into an empty Redis)."""
        best = 0.0
        for _ in range(self.a.repeat):
            self.flush()
            res = call(py, peer, "enqueue", self.url, self.board_path, "--n", str(n), "--mode", mode)
            best = max(best, n / res["seconds"])
        return best

    def drain(self, py: str, peer: str, n: int, *worker_args: str, prefilled: bool = False) -> dict[str, float]:
        """n tasks queued first (batch), then one worker starts; rate from first to last start."""
        board = self.board(n)
        if not prefilled:
            self.flush()
            call(py, peer, "enqueue", self.url, self.board_path, "--n", str(n), "--mode", "batch")
        used = float(self.r.info("memory")["used_memory"])
        w = Worker(py, peer, self.url, self.board_path, *worker_args)
        try:
            wait_count(board, 1, w, 120)
            c0, r0, w0 = board.count(), redis_cpu(self.r), w.cpu_seconds()
            k0 = sum(v["calls"] for v in self.r.info("commandstats").values())
            wait_count(board, n, w, self.a.timeout)
            done = board.count() - c0
            r1, w1 = redis_cpu(self.r), w.cpu_seconds()
            k1 = sum(v["calls"] for v in self.r.info("commandstats").values())
            first, last = board.span()
        finally:
            w.stop()
            board.close()
        return {
            "tasks_per_s": (n - 1) / max(last - first, 1e-9),
            "redis_cmds_per_task": (k1 - k0) / max(done, 1),
            "redis_cpu_us_per_task": (r1 - r0) * 1e6 / max(done, 1),
            "worker_cpu_ms_per_task": (w1 - w0) * 1e3 / max(done, 1),
            "used_memory": used,
        }

    def latency(self, py: str, peer: str, n: int, interval_ms: float, delay: float) -> dict[str, float] | None:
        self.flush()
        board = self.board(n)
        w = Worker(py, peer, self.url, self.board_path, "--concurrency", str(self.a.concurrency))
        try:
            time.sleep(self.a.warmup)  # let the worker start and go idle
            res = call(py, peer, "produce", self.url, self.board_path, "--n", str(n), "--interval-ms",
                       str(interval_ms), "--delay-s", str(delay))
            if "unsupported" in res:
                return None
            wait_count(board, n, w, 60 + delay)
            starts, enq = board.starts(n), board.enqueued(n)
        finally:
            w.stop()
            board.close()
        lat = [(s - e - delay) * 1000 for s, e in zip(starts, enq)]
        return {"p50_ms": pct(lat, 50), "p99_ms": pct(lat, 99), "max_ms": max(lat)}

    def first_task(self, py: str, peer: str, runs: int) -> dict[str, float]:
        """Seconds from spawning a worker process to its handler starting a task already queued
        (the queue holds one task; p50/min/max over ``runs`` starts, after one start not counted)."""
        times = []
        warm = 0 if self.a.smoke else 1  # (the smoke's workloads before this one compiled them: no figure is kept)
        for k in range(runs + warm):
            self.flush()
            board = self.board(1)
            call(py, peer, "enqueue", self.url, self.board_path, "--n", "1", "--mode", "single")
            t0 = time.perf_counter()
            w = Worker(py, peer, self.url, self.board_path, "--concurrency", str(self.a.concurrency))
            try:
                deadline = time.monotonic() + 60
                while board.count() < 1:
                    if not w.alive():
                        raise Failed("worker exited early (see bench/results/worker-*.log)")
                    if time.monotonic() > deadline:
                        raise Failed("timed out waiting for the first task")
                    time.sleep(0.0002)
                if k >= warm:  # the first start writes the compiled modules: not counted
                    times.append(time.perf_counter() - t0)
            finally:
                w.stop()
                board.close()
        return {"p50_ms": pct(times, 50) * 1000, "min_ms": min(times) * 1000, "max_ms": max(times) * 1000}

    def idle(self, py: str, peer: str) -> float:
        self.flush()
        board = self.board(1)
        w = Worker(py, peer, self.url, self.board_path, "--concurrency", str(self.a.concurrency))
        try:
            time.sleep(self.a.warmup + 1)
            if not w.alive():
                raise Failed("worker exited early")
            return count_client_commands(self.url, self.a.idle_seconds)
        finally:
            w.stop()
            board.close()

    def memory_per_task(self, py: str, peer: str, n: int) -> float:
        self.flush()
        before = float(self.r.info("memory")["used_memory"])
        call(py, peer, "enqueue", self.url, self.board_path, "--n", str(n), "--mode", "batch")
        return (float(self.r.info("memory")["used_memory"]) - before) / n


def run_peer(b: Bench, peer: str) -> dict[str, Any]:
    a = b.a
    py = python_for(peer, a.reuse_python)
    out: dict[str, Any] = {"describe": call(py, peer, "describe", b.url, "")}
    print(f"\n## {peer}: {out['describe'].get('version')}", flush=True)
    conc = ["--concurrency", str(a.concurrency)]
    steps: list[tuple[str, Any]] = [
        ("single_enqueue_per_s", lambda: b.enqueue(py, peer, "single", a.n_single)),
        ("batch_enqueue_per_s", lambda: b.enqueue(py, peer, "batch", a.n)),
        ("memory_bytes_per_task", lambda: b.memory_per_task(py, peer, a.n_memory)),
        ("drain", lambda: b.drain(py, peer, a.n, *conc)),
        ("drain_redis_write", lambda: b.drain(py, peer, a.n, *conc, "--redis-write")
         if out["describe"].get("redis_write") else None),
        ("first_task", lambda: b.first_task(py, peer, a.start_runs)),
        ("pickup", lambda: b.latency(py, peer, a.pickup_n, a.pickup_interval, 0.0)),
        ("scheduled", lambda: b.latency(py, peer, a.sched_n, a.pickup_interval, 1.0) if peer != "bare" else None),
        ("idle_cmds_per_s", lambda: b.idle(py, peer)),
    ]
    for name, fn in steps:
        try:
            out[name] = fn()
        except (Failed, subprocess.SubprocessError, redis.RedisError, OSError) as exc:
            out[name] = {"error": str(exc)[:300]}
        print(f"  {name}: {fmt(out[name])}", flush=True)
    return out


def run_asynqpy_extras(b: Bench) -> dict[str, Any]:
    """Workloads 9 (depth) and 10 (processes, concurrency 100 with sleeping handlers)."""
    a = b.a
    py = python_for("asynqpy", a.reuse_python)
    out: dict[str, Any] = {}
    conc = ["--concurrency", str(a.concurrency)]
    # the CI smoke (--smoke) runs one of each kind: it shows the workloads still run, not figures
    for procs in (2,) if a.smoke else (2, 4):
        out[f"drain_{procs}_processes"] = b.drain(py, "asynqpy", a.n, *conc, "--processes", str(procs))
        print(f"  drain with {procs} processes: {fmt(out[f'drain_{procs}_processes'])}", flush=True)
    out["drain_c100_sleep10ms"] = b.drain(py, "asynqpy", a.n_sleep, "--concurrency", "100", "--sleep-ms", "10")
    print(f"  drain, concurrency 100, 10 ms sleeps: {fmt(out['drain_c100_sleep10ms'])}", flush=True)
    for depth in (a.depth_small,) if a.smoke else (a.depth_small, a.depth_large):
        b.flush()
        t = time.perf_counter()
        call(py, "asynqpy", "enqueue", b.url, b.board_path, "--n", str(depth), "--mode", "batch", timeout=1800)
        fill = time.perf_counter() - t
        res = call(py, "asynqpy", "enqueue", b.url, b.board_path, "--n", str(a.n_single), "--mode", "single")
        single = a.n_single / res["seconds"]
        res = call(py, "asynqpy", "enqueue", b.url, b.board_path, "--n", str(a.n_single), "--mode", "batch")
        batch = a.n_single / res["seconds"]
        drained = b.drain(py, "asynqpy", min(a.n_depth_drain, depth + 2 * a.n_single), *conc, prefilled=True)
        out[f"depth_{depth}"] = {"single_enqueue_per_s": single, "batch_enqueue_per_s": batch,
                                 "drain_tasks_per_s": drained["tasks_per_s"], "fill_seconds": fill}
        print(f"  depth {depth}: {fmt(out[f'depth_{depth}'])}", flush=True)
    return out


def fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:,.1f}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt(x)}" for k, x in v.items())
    return str(v)


def _figure(results: dict[str, Any], peer: str, *path: str) -> float | None:
    v: Any = results["peers"].get(peer, {})
    for p in path:
        v = v.get(p) if isinstance(v, dict) else None
    return float(v) if isinstance(v, (int, float)) else None


def ratios(results: dict[str, Any]) -> str:
    """asynqpy against the best peer (the bare loop is no peer: it is the floor) for the issue's
    targets: drain with a handler that writes to Redis, single enqueue; first task after a worker
    start against the bare loop's."""
    lines = []
    for label, path in (("drain+write/s", ("drain_redis_write", "tasks_per_s")),
                        ("drain/s", ("drain", "tasks_per_s")),
                        ("single enq/s", ("single_enqueue_per_s",))):
        mine = _figure(results, "asynqpy", *path)
        others = [(p, _figure(results, p, *path)) for p in results["peers"] if p not in ("asynqpy", "bare")]
        best = max(((v, p) for p, v in others if v is not None), default=None)
        if mine is not None and best is not None:
            lines.append(f"  {label:14} asynqpy {mine:9,.0f}  best peer {best[1]} {best[0]:9,.0f}  "
                         f"{mine / best[0]:.2f}x")
    mine, bare = _figure(results, "asynqpy", "first_task", "p50_ms"), _figure(results, "bare", "first_task", "p50_ms")
    if mine is not None and bare is not None:
        lines.append(f"  first task     asynqpy {mine:6.0f} ms  bare loop {bare:6.0f} ms  {mine / bare:.2f}x")
    return "\nasynqpy against the best peer:\n" + "\n".join(lines) if lines else ""


def write_summary(results: dict[str, Any]) -> str:
    """The drain whose handler does one Redis write of its own, for every peer that has it."""
    rows = []
    for peer in results["peers"]:
        d = results["peers"].get(peer, {}).get("drain_redis_write")
        if isinstance(d, dict) and "tasks_per_s" in d:
            rows.append((peer, d))
    if not rows:
        return ""
    lines = ["\ndrain, the handler doing one Redis write of its own (INCR):"]
    for peer, d in rows:
        lines.append(f"  {peer:8} {d['tasks_per_s']:9,.0f} tasks/s  {d['redis_cmds_per_task']:5.2f} Redis commands/task  "
                     f"worker CPU {d['worker_cpu_ms_per_task'] * 1000:6.1f} µs/task  "
                     f"Redis CPU {d['redis_cpu_us_per_task']:5.1f} µs/task")
    return "\n".join(lines)


def table(results: dict[str, Any]) -> str:
    def g(peer: str, *path: str) -> str:
        v: Any = results["peers"].get(peer, {})
        for p in path:
            v = v.get(p) if isinstance(v, dict) else None
        if v is None:
            return "n/a"
        if isinstance(v, dict) and "error" in v:
            return "error"
        return f"{v:,.0f}" if isinstance(v, float) and v >= 100 else (f"{v:.2f}" if isinstance(v, float) else str(v))

    cols = [
        ("single enq/s", ("single_enqueue_per_s",)), ("batch enq/s", ("batch_enqueue_per_s",)),
        ("drain/s", ("drain", "tasks_per_s")), ("drain+write/s", ("drain_redis_write", "tasks_per_s")),
        ("first task ms", ("first_task", "p50_ms")), ("pickup p50 ms", ("pickup", "p50_ms")),
        ("p99", ("pickup", "p99_ms")), ("max", ("pickup", "max_ms")),
        ("sched late p50 ms", ("scheduled", "p50_ms")), ("max", ("scheduled", "max_ms")),
        ("idle cmd/s", ("idle_cmds_per_s",)), ("cmds/task", ("drain", "redis_cmds_per_task")),
        ("redis µs/task", ("drain", "redis_cpu_us_per_task")), ("worker ms/task", ("drain", "worker_cpu_ms_per_task")),
        ("bytes/task", ("memory_bytes_per_task",)),
    ]
    rows = [["peer"] + [c[0] for c in cols]]
    for peer in results["peers"]:
        rows.append([peer] + [g(peer, *c[1]) for c in cols])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))) + " |"
             for r in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of: " + ",".join(PEERS))
    p.add_argument("--n", type=int, default=20_000, help="tasks for batch enqueue and drain")
    p.add_argument("--n-single", type=int, default=20_000,
                   help="tasks for single enqueue (shorter runs are not steady on a small VM)")
    p.add_argument("--n-memory", type=int, default=100_000, help="pending tasks for the memory figure")
    p.add_argument("--n-sleep", type=int, default=5_000, help="tasks for the concurrency-100 sleeping drain")
    p.add_argument("--n-depth-drain", type=int, default=20_000)
    p.add_argument("--depth-small", type=int, default=1_000)
    p.add_argument("--depth-large", type=int, default=1_000_000)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--repeat", type=int, default=3, help="enqueue rates: best of this many runs")
    p.add_argument("--pickup-n", type=int, default=200)
    p.add_argument("--pickup-interval", type=float, default=20.0)
    p.add_argument("--sched-n", type=int, default=50)
    p.add_argument("--idle-seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=1.5)
    p.add_argument("--start-runs", type=int, default=5, help="worker starts timed for the first-task figure")
    p.add_argument("--timeout", type=float, default=600.0, help="longest wait for one drain")
    p.add_argument("--no-extras", action="store_true", help="skip asynqpy's depth/process workloads")
    p.add_argument("--reuse-python", action="store_true", help="run asynqpy and bare with this interpreter")
    p.add_argument("--smoke", action="store_true", help="CI: asynqpy only, tiny sizes, this interpreter")
    p.add_argument("--output", default=str(HERE / "results"))
    a = p.parse_args()
    if a.smoke:
        a.peers, a.reuse_python = "asynqpy,bare", True
        a.n, a.n_single, a.n_memory, a.n_sleep, a.n_depth_drain = 300, 200, 1000, 300, 300
        a.depth_small, a.depth_large, a.pickup_n, a.sched_n = 100, 2000, 20, 5
        a.idle_seconds, a.warmup, a.repeat, a.start_runs = 1.0, 0.5, 1, 1
    Path(a.output).mkdir(parents=True, exist_ok=True)
    (HERE / "results").mkdir(exist_ok=True)
    server = RedisProcess()
    bench = Bench(a, server.url)
    results: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "redis": bench.r.info("server")["redis_version"]},
        "settings": {k: v for k, v in vars(a).items() if k != "output"},
        "peers": {},
    }
    try:
        for peer in [x.strip() for x in a.peers.split(",") if x.strip()]:
            try:
                results["peers"][peer] = run_peer(bench, peer)
            except (Failed, subprocess.SubprocessError, OSError) as exc:
                results["peers"][peer] = {"error": str(exc)[:500]}
                print(f"  {peer}: {exc}", flush=True)
            (Path(a.output) / "partial.json").write_text(json.dumps(results, indent=2))
        if "asynqpy" in results["peers"] and not a.no_extras:
            print("\n## asynqpy alone", flush=True)
            try:
                results["asynqpy_extras"] = run_asynqpy_extras(bench)
            except (Failed, subprocess.SubprocessError, OSError) as exc:
                results["asynqpy_extras"] = {"error": str(exc)[:500]}
                print(f"  asynqpy extras: {exc}", flush=True)
    finally:
        server.stop()
        try:
            os.unlink(bench.board_path)
        except OSError:
            pass
    print("\n" + table(results))
    print(write_summary(results))
    print(ratios(results))
    text = json.dumps(results, indent=2)
    (Path(a.output) / "latest.json").write_text(text)
    (Path(a.output) / f"run-{results['when'].replace(':', '')}.json").write_text(text)
    print(f"\nwrote {Path(a.output) / 'latest.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
