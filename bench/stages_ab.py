"""Two versions of the Lua scripts, A and B, side by side on one redis-server: the server's µs per
task of the dequeue script and of the done script, for a drained queue (dequeue ``batch`` at a
time, then done for the same batch), each phase run alternately with A's scripts and B's so that a
shared machine's load falls on both alike. Made for the dequeue's rebuild as stages (issue 43
item 2: no regression beyond noise); any change of the scripts whose KEYS and ARGV stay the same
can be compared so.

    python bench/stages_ab.py --a /tmp/lua_before --b lua [--n 2000] [--rounds 10] [--batches 1,20]

A and B are copies of ``lua/`` (``git worktree`` or ``git show`` of a past commit into a scratch
folder); the calls are built by the current ``Broker`` (their KEYS and ARGV must be the same in A
and B) and sent as EVALSHA of each version's own SHA. Figures: EVALSHA ``usec`` from INFO
commandstats, per task, for each phase; the median and the least of the rounds are printed.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
from pathlib import Path
from typing import Any

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

from asynqpy import Client, Inspector  # noqa: E402
from asynqpy.core import codec  # noqa: E402
from asynqpy.core.spine.broker import Broker, Call, Done  # noqa: E402
from asynqpy.core.spine.scripts import load_dir  # noqa: E402

Q = "ab"
LEASE_MS = 60000


def _usec(r: redis.Redis) -> float:
    stats = r.info("commandstats")
    return float(sum(v["usec"] for k, v in stats.items() if k == "cmdstat_evalsha"))


def _run(r: redis.Redis, shas: dict[str, str], call: Call[Any]) -> Any:
    return call.parse(r.execute_command("EVALSHA", shas[call.script], len(call.keys), *call.keys, *call.args))


def _phase(r: redis.Redis, shas: dict[str, str], n: int, batch: int) -> tuple[float, float]:
    """µs per task of dequeue and of done, draining ``n`` tasks ``batch`` at a time."""
    r.delete(*r.keys(f"asynqpy:{{{Q}}}:*") or ["-"])
    with Inspector(r) as insp:
        insp.set_events(Q, 0)
    with Client(r) as c:
        for start in range(0, n, 1000):
            c.enqueue_many([("t", i) for i in range(start, min(n, start + 1000))], queue=Q)
    b = Broker()
    taken: list[tuple[str, bytes]] = []
    r.config_resetstat()
    while True:
        got = _run(r, shas, b.dequeue(Q, batch, LEASE_MS, "tok00001"))
        taken += list(got.tasks)
        if not got.tasks:
            break
    deq = _usec(r) / max(1, len(taken))
    items = [Done(i, "tok00001", codec.decode(m), progressed=False) for i, m in taken]
    r.config_resetstat()
    for i in range(0, len(items), batch):
        _run(r, shas, b.done_many(Q, items[i:i + batch]))
    done = _usec(r) / max(1, len(items))
    return deq, done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--a", required=True, help="a copy of lua/ (say, before the change)")
    ap.add_argument("--b", required=True, help="another (say, after)")
    ap.add_argument("--n", type=int, default=2000, help="tasks a phase (default 2000)")
    ap.add_argument("--rounds", type=int, default=10, help="phases of each version (default 10)")
    ap.add_argument("--batches", default="1,20", help="batch sizes (default 1,20)")
    args = ap.parse_args()
    logging.getLogger("asynqpy").setLevel(logging.CRITICAL)
    server = RedisProcess()
    try:
        r = redis.Redis.from_url(server.url)
        versions = {}
        for name, d in (("A", args.a), ("B", args.b)):
            scripts = load_dir(Path(d))
            versions[name] = {s: r.script_load(scripts[s].source) for s in ("dequeue", "done")}
        print(f"{'batch':>5} {'ver':>3} | {'deq median':>10} {'least':>6} | {'done median':>11} {'least':>6}  (µs per task)")
        for batch in (int(x) for x in args.batches.split(",")):
            got: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
            for _ in range(args.rounds):
                for name in ("A", "B"):
                    got[name].append(_phase(r, versions[name], args.n, batch))
            for name in ("A", "B"):
                deq, done = [x[0] for x in got[name]], [x[1] for x in got[name]]
                print(f"{batch:>5} {name:>3} | {statistics.median(deq):>10.2f} {min(deq):>6.2f} |"
                      f" {statistics.median(done):>11.2f} {min(done):>6.2f}")
    finally:
        server.stop()


if __name__ == "__main__":
    main()
