"""FCALL against EVALSHA, in Redis's own instructions per task (callgrind: the same whatever the
machine's load), for the hottest scripts (issue 45): a single enqueue, and a drain's dequeue and
done at a given batch size (B tasks per call, as a worker with B free slots sends them).

    python bench/fcall_ir.py [--n 600] [--batches 1,20]
    python bench/fcall_ir.py --fixed      # what a call costs before its body: keys, K, an inner command

For each way of calling (``evalsha``: the script's flattened source, its helpers made at every
call; ``fcall``: its Redis Functions library, loaded once, core/spine/library.py) a redis-server
runs under ``valgrind --tool=callgrind``; every script and library is loaded first, then the
counts are zeroed and each phase is counted alone: ``enqueue`` (N single enqueues through the
executor's direct path), and per batch size B ``dequeue`` (N tasks, B per call) then ``done`` (the
same tasks, B per call, ``Broker.done_many``). Prints Ir per task of each phase and each way, and
FCALL's change. Needs valgrind.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis

from asynqpy.core.model.codec import Message
from asynqpy.core.spine.broker import Broker, Done
from asynqpy.redisio.executor import SyncExecutor
from asynqpy.redisio.scripts import load_functions, load_scripts

Q = "fi"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ir(out: Path) -> int:
    total = 0
    for f in out.parent.glob(out.name + "*"):
        for line in f.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
    return total


class Counted:
    """A callgrind'ed redis-server whose count is read per phase (zeroed before, dumped after)."""

    def __init__(self) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="fcall-ir-"))
        self.out = self.tmp / "cg.out"
        port = _port()
        self.proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}",
                                      "redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                      "--appendonly", "no", "--dir", str(self.tmp), "--lua-time-limit", "0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.r = redis.Redis(port=port, socket_timeout=300)
        for _ in range(600):
            try:
                self.r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)

    def phase(self, fn: Any) -> int:
        for f in self.tmp.glob("cg.out*"):
            f.unlink()
        subprocess.run(["callgrind_control", "--zero", str(self.proc.pid)], check=True, capture_output=True)
        fn()
        subprocess.run(["callgrind_control", "--dump", str(self.proc.pid)], check=True, capture_output=True)
        return _ir(self.out)

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)
        shutil.rmtree(self.tmp, ignore_errors=True)


def measure(way: str, n: int, batches: list[int]) -> dict[str, float]:
    c = Counted()
    try:
        for s in load_scripts().values():
            c.r.script_load(s.source)
        load_functions(c.r)
        x, b = SyncExecutor(c.r), Broker()
        x.functions = way == "fcall"
        out = {"enqueue": c.phase(lambda: [x.run(b.enqueue(Q, f"e{i}", Message("t"))) for i in range(n)]) / n}
        c.r.delete(*c.r.keys("*"))
        for size in batches:
            x.run_many([b.enqueue(Q, f"t{size}-{i}", Message("t")) for i in range(n)])
            taken: list[tuple[str, bytes]] = []

            def take(size: int = size, taken: list[tuple[str, bytes]] = taken) -> None:
                while len(taken) < n:
                    taken.extend(x.run(b.dequeue(Q, size, 600_000, "tok00001")).tasks)

            def done(size: int = size, taken: list[tuple[str, bytes]] = taken) -> None:
                for i in range(0, n, size):
                    x.run(b.done_many(Q, [Done(id, "tok00001", Message("t")) for id, _ in taken[i:i + size]]))

            out[f"dequeue B={size}"] = c.phase(take) / n
            out[f"done B={size}"] = c.phase(done) / n
            if c.r.hlen(f"asynqpy:{{{Q}}}:t"):
                sys.exit("the done phase left tasks")
        return out
    finally:
        c.close()


_NAMES = "abcdefghijklmnopqr"
_FIXED = "\n".join([
    "#!lua name=fixed",
    "local K2 = {}",
    "redis.register_function('noop', function(KEYS, ARGV) return 1 end)",
    "redis.register_function('made', function(KEYS, ARGV) local K = {"
    + ", ".join(f"{c} = KEYS[{i}]" for i, c in enumerate(_NAMES, 1)) + "} return 1 end)",
    "redis.register_function('kept', function(KEYS, ARGV) "
    + " ".join(f"K2.{c} = KEYS[{i}]" for i, c in enumerate(_NAMES, 1)) + " return 1 end)",
    "redis.register_function('hget', function(KEYS, ARGV) redis.call('HGET', KEYS[1], 'x') return 1 end)",
    ""])


def fixed(n: int) -> None:
    """What an FCALL costs before its body's work (``--fixed``): a PING, a function that returns at
    once with 1 and with 18 keys (as an enqueue names), the 18 keys made a table at each call (the
    prologue's ``K`` before it was kept by the library) and set as fields of a kept one, and one
    HGET from Lua. Every asynqpy library is loaded first (they share one Lua state)."""
    c = Counted()
    try:
        load_functions(c.r)
        c.r.execute_command("FUNCTION", "LOAD", "REPLACE", _FIXED)
        keys = [f"asynqpy:{{{Q}}}:k{i}" for i in range(18)]
        args = ["1", "abc", "0", "x" * 60]
        rows = [("PING", lambda: c.r.execute_command("PING")),
                ("FCALL, return 1, 1 key", lambda: c.r.execute_command("FCALL", "noop", 1, keys[0], *args)),
                ("FCALL, return 1, 18 keys", lambda: c.r.execute_command("FCALL", "noop", 18, *keys, *args)),
                ("18 keys, a table made", lambda: c.r.execute_command("FCALL", "made", 18, *keys, *args)),
                ("18 keys, a kept table's fields", lambda: c.r.execute_command("FCALL", "kept", 18, *keys, *args)),
                ("1 key, one HGET in Lua", lambda: c.r.execute_command("FCALL", "hget", 1, keys[0], *args))]
        for label, fn in rows:
            ir = c.phase(lambda fn=fn: [fn() for _ in range(n)]) / n
            print(f"{label:34s} {ir:9,.0f} instructions per call", flush=True)
    finally:
        c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--batches", default="1,20")
    ap.add_argument("--fixed", action="store_true", help="what an FCALL costs before its body (see fixed())")
    a = ap.parse_args()
    if shutil.which("valgrind") is None:
        sys.exit("valgrind (callgrind) is not installed")
    if a.fixed:
        fixed(a.n)
        return
    batches = [int(v) for v in a.batches.split(",")]
    got = {way: measure(way, a.n, batches) for way in ("evalsha", "fcall")}
    for phase in got["evalsha"]:
        e, f = got["evalsha"][phase], got["fcall"][phase]
        print(f"{phase:14s} EVALSHA {e / 1000:8.1f} k  FCALL {f / 1000:8.1f} k instructions per task  "
              f"({(f - e) / e:+.0%})", flush=True)


if __name__ == "__main__":
    main()
