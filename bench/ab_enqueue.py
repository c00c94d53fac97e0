"""A/B of single ``Client.enqueue`` between two source trees, beside a bare redis-py LPUSH (and
Huey's enqueue, given a Python that has huey), interleaved round by round: each round runs each
way in a fresh process, N calls (one task per call) to one queue, on a redis-server this starts.
Prints per way the best and median rate and the median client CPU per call (user + sys).

    python bench/ab_enqueue.py /tmp/trees/base /path/to/new [--n 5000] [--rounds 5] [--python PY]
                               [--huey-python bench/.venvs/huey/bin/python]

Each tree is put first on PYTHONPATH; PY must have asynqpy's dependencies but not asynqpy itself.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import redis

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
from redisproc import RedisProcess  # noqa: E402

CHILD = r'''
import sys, time, json
url, n, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if kind == "huey":
    from huey import RedisHuey
    app = RedisHuey("bench", url=url)
    @app.task(name="noop")
    def noop(i): pass
    noop(-1); f = noop
elif kind == "bare":
    import redis; r = redis.Redis.from_url(url); r.ping(); f = lambda i: r.lpush("bare", i)
else:
    from asynqpy import Client; c = Client(url); c.enqueue("warmup", None, queue="bench")
    f = lambda i: c.enqueue("noop", i, queue="bench")
t, c0 = time.perf_counter(), time.process_time()
for i in range(n): f(i)
print(json.dumps([n / (time.perf_counter() - t), (time.process_time() - c0) / n * 1e6]))
'''


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("base")
    p.add_argument("new")
    p.add_argument("--n", type=int, default=5000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--huey-python", default="")
    a = p.parse_args()
    py, base, new = (os.path.abspath(x) for x in (a.python, a.base, a.new))  # (the children run elsewhere)
    ways = {"base": (py, base), "new": (py, new), "bare": (py, new)}
    if a.huey_python:
        ways["huey"] = (os.path.abspath(a.huey_python), new)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    srv = RedisProcess()
    try:
        res: dict[str, list[list[float]]] = {k: [] for k in ways}
        for _ in range(a.rounds):
            for way, (py, tree) in ways.items():
                redis.Redis.from_url(srv.url).flushall()
                out = subprocess.run([py, "-c", CHILD, srv.url, str(a.n), way], env=dict(env, PYTHONPATH=tree),
                                     cwd=HERE / "peers",  # (not the caller's: ``-c`` puts it first on sys.path)
                                     capture_output=True, text=True, check=True)
                res[way].append(json.loads(out.stdout))
        for way, v in res.items():
            rates, cpu = sorted(x[0] for x in v), sorted(x[1] for x in v)
            print(f"{way:5} best {rates[-1]:8,.0f}/s  median {rates[len(rates) // 2]:8,.0f}/s  "
                  f"client CPU median {cpu[len(cpu) // 2]:6.1f} µs/call")
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
