"""Instructions redis-server runs per call of ``enqueue.lua``, counted by callgrind: load-independent,
so two source trees compare on a loaded machine where µs do not (issue 45).

    python bench/script_ir.py TREE [TREE ...] [--prologue] [--fcall] [--n1 200] [--n2 1200]

For each tree (a directory holding ``asynqpy/`` and ``lua/``) a redis-server runs under
``valgrind --tool=callgrind`` twice, with N1 and N2 calls of the tree's flattened ``enqueue`` (a
real call's keys and arguments, a new id each time); (Ir(N2) - Ir(N1)) / (N2 - N1) is the cost of
one call, networking and the inner commands included (start-up and shutdown cancel out).
``--prologue`` also times the script cut before its body (``return 1`` after the prologue and the
includes' definitions: what every call pays before doing anything), and ``return 1`` itself.
``--script enqueue_lone`` measures the lone producer's quick call instead (lua/enqueue_lone.lua).
``--fcall`` also times the call as a Redis Function (FCALL of the tree's ``enqueue`` library, loaded
before: core/spine/library.py), where the tree has libraries. Needs valgrind; each server run takes
some seconds per 100 calls.
"""

from __future__ import annotations

import argparse
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any

import redis


def scripts_of(tree: str) -> Any:
    """The scripts of ``tree`` (its asynqpy package first on sys.path while they load)."""
    sys.path.insert(0, tree)
    for m in [m for m in sys.modules if m.startswith("asynqpy")]:
        del sys.modules[m]
    from asynqpy.core.spine import scripts as S

    out = S.load_dir(S._lua_dir())
    sys.path.pop(0)
    return out


def _port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port: int = s.getsockname()[1]
    s.close()
    return port


def instructions(source: str, n: int, function: str = "", name: str = "enqueue") -> int:
    """Ir of a callgrind'ed redis-server that ran ``source`` ``n`` times with an enqueue's inputs (a
    library's ``function`` with FCALL when named, else the script with EVALSHA); ``name``: the
    script, ``enqueue`` or the lone producer's ``enqueue_lone``."""
    from asynqpy.core.model import options as opts
    from asynqpy.core.spine.broker import Broker

    port = _port()
    out = os.path.join(tempfile.gettempdir(), f"asynqpy-cg.{port}")
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "redis-server",
                             "--port", str(port), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    r = redis.Redis(port=port)
    for _ in range(600):
        try:
            r.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.1)
    sha = "" if function else r.script_load(source)
    if function:
        r.execute_command("FUNCTION", "LOAD", "REPLACE", source)
    broker, p = Broker(), opts.prepare("noop", 1, queue="bench", now=time.time())
    lone = broker.enqueue_lone("bench") if name == "enqueue_lone" else None
    for _ in range(n):
        c = (lone(opts.new_task_id(), p.data) if lone is not None
             else broker.enqueue("bench", opts.new_task_id(), p.msg, data=p.data, check_id=False))
        if function:
            r.execute_command("FCALL", function, len(c.keys), *c.keys, *c.args)
        else:
            r.evalsha(sha, len(c.keys), *c.keys, *c.args)
    try:
        r.shutdown(nosave=True)
    except redis.ConnectionError:
        pass
    proc.wait()
    with open(out) as f:
        text = f.read()
    os.remove(out)
    m = re.search(r"^(?:summary|totals): (\d+)", text, re.MULTILINE)
    assert m is not None, "no callgrind totals"
    return int(m.group(1))


def per_call(source: str, n1: int, n2: int, function: str = "", name: str = "enqueue") -> int:
    return (instructions(source, n2, function, name) - instructions(source, n1, function, name)) // (n2 - n1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("trees", nargs="+")
    ap.add_argument("--prologue", action="store_true")
    ap.add_argument("--fcall", action="store_true")
    ap.add_argument("--n1", type=int, default=200)
    ap.add_argument("--n2", type=int, default=1200)
    ap.add_argument("--script", choices=("enqueue", "enqueue_lone"), default="enqueue",
                    help="the script measured (enqueue_lone: the lone producer's quick call; its tree must have it)")
    a = ap.parse_args()
    name = a.script
    for tree in a.trees:
        script = scripts_of(tree)[name]
        src = script.source
        print(f"{tree}: {name} {per_call(src, a.n1, a.n2, '', name):,} Ir/call (EVALSHA), "
              f"{src.count('local function')} local functions, {len(src):,} bytes", flush=True)
        if a.fcall and getattr(script, "function", ""):
            print(f"{tree}: {name} {per_call(script.library, a.n1, a.n2, script.function, name):,} Ir/call (FCALL)",
                  flush=True)
        if a.prologue:
            cut = src[:src.index("local id")] + "\nreturn 1"
            print(f"{tree}: its prologue and definitions alone {per_call(cut, a.n1, a.n2):,} Ir/call", flush=True)
    if a.prologue:
        print(f"return 1 (same keys and arguments): {per_call('return 1', a.n1, a.n2):,} Ir/call")


if __name__ == "__main__":
    main()
