#!/usr/bin/env python3
"""Fuzz the state machines with random draws (docs/internals-testing.md, "Fuzzing the models").

CI runs the cross-feature model, the model plus, and the queue, process and keyed machines with
fixed (derandomized) draws: the same examples every run, so a red run can be replayed. This runs
them with fresh random draws, batch after batch, for as long as it is given, on its own
redis-server (or ``--url``, or fakeredis with ``--fake``), and stops at the first failure:

    .venv/bin/python scripts/fuzz.py --minutes 30                # every machine in turn
    .venv/bin/python scripts/fuzz.py --minutes 10 --machines plus --out plus-failure.txt

A failure prints the check that failed and writes to ``--out`` (default ``fuzz-failure.txt``) the
steps hypothesis gives (each rule and its draws) and, for the models, their whole trace (each
action and what it met), from which a scenario of the model plus (tests/test_model_plus.py
SCENARIOS) replays it step by step; exit status 1. A batch of a few examples at a time: the
models draw from what Redis holds (the ids clients generate are seeded for each machine:
tests/test_model.py ``_SeededIds``); a batch hypothesis cannot replay exactly
(``FlakyStrategyDefinition``) is counted as skipped, not as a failure. Exit status 0 when the
time ran out (or SIGTERM stopped it, after its batch) with no failure.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

import fakeredis  # noqa: E402
import redis  # noqa: E402
from hypothesis import HealthCheck, Phase, settings  # noqa: E402
from hypothesis.errors import FlakyFailure, FlakyStrategyDefinition  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

log = logging.getLogger("fuzz")

MACHINES = ("plus", "model", "queue", "process", "keyed")
STOP: list[bool] = []
"""Set by SIGTERM: the run stops after its batch (a few seconds), as when its time ran out."""


def machine(name: str) -> Any:
    """The state machine class of ``name``."""
    if name == "plus":
        import test_model_plus

        return test_model_plus.PlusMachine
    if name == "model":
        import test_model

        return test_model.CrossMachine
    if name == "queue":
        import test_state_machine

        return test_state_machine.QueueMachine
    if name == "process":
        import test_process_machine

        return test_process_machine.ProcessMachine
    import test_keyed_machine

    return test_keyed_machine.KeyedMachine


def traced(cls: Any, traces: list[list[str]]) -> Any:
    """``cls`` whose examples leave their trace (the models keep one) in ``traces`` as they end."""

    class Traced(cls):  # type: ignore[misc, valid-type]
        def teardown(self) -> None:
            traces[:] = [list(map(str, getattr(self, "trace", [])))]
            super().teardown()

    Traced.__name__ = cls.__name__
    return Traced


def bind(cls: Any, factory: Any) -> None:
    """Point a machine at the Redis ``factory()`` makes (the models take a factory, the queue machine a client)."""
    cls.redis_factory = staticmethod(factory)
    cls.client = factory()


def run(names: list[str], factory: Any, seconds: float, examples: int, steps: int, out: Path) -> int:
    """Batches of ``examples`` random examples of each machine in turn until ``seconds`` passed;
    1 at the first failure (written to ``out``), else 0."""
    until = time.monotonic() + seconds
    ran = skipped = 0
    i = 0
    while time.monotonic() < until and not STOP:
        name = names[i % len(names)]
        i += 1
        traces: list[list[str]] = []
        cls = traced(machine(name), traces)
        bind(cls, factory)
        s = settings(max_examples=examples, stateful_step_count=steps, deadline=None, derandomize=False,
                     database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck))
        try:
            run_state_machine_as_test(cls, settings=s)
            ran += 1
        except FlakyStrategyDefinition:
            skipped += 1
        except Exception as exc:  # noqa: BLE001 - a failed check (or a script's error): the finding
            text = "".join(traceback.format_exception(exc))
            if isinstance(exc, FlakyFailure) and exc.exceptions:  # failed once, not on hypothesis's replay: the first
                exc = exc.exceptions[0]  # failure is the finding (the replay met other ids, other times)
            trace = "\n".join(traces[0]) if traces and traces[0] else "(no trace: this machine keeps none)"
            out.write_text(f"machine: {name}\n\n{text}\nthe example's whole trace:\n{trace}\n")
            log.error("%s failed after %d batches: %s", name, ran, str(exc).splitlines()[0][:300])
            log.error("written to %s", out)
            return 1
    log.info("no failure: %d batches of %d examples (%d steps at most), %d skipped (a batch hypothesis could "
             "not replay)", ran, examples, steps, skipped)
    return 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--machines", default=",".join(MACHINES), help=f"a comma-separated subset of {','.join(MACHINES)}")
    ap.add_argument("--examples", type=int, default=6, help="examples a batch")
    ap.add_argument("--steps", type=int, default=60, help="steps an example, at most")
    ap.add_argument("--url", help="a Redis to use (it is flushed); default: a redis-server of its own")
    ap.add_argument("--fake", action="store_true", help="fakeredis instead of a redis-server")
    ap.add_argument("--out", type=Path, default=Path("fuzz-failure.txt"))
    a = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("asynqpy").setLevel(logging.CRITICAL)
    names = [n.strip() for n in a.machines.split(",") if n.strip()]
    unknown = [n for n in names if n not in MACHINES]
    if unknown or not names:
        ap.error(f"unknown machine(s) {unknown}: choose among {', '.join(MACHINES)}")
    signal.signal(signal.SIGTERM, lambda *_: STOP.append(True))  # (the batch ends, then its redis-server is stopped)
    proc = None
    if a.fake:
        server = fakeredis.FakeServer()

        def factory() -> Any:
            return fakeredis.FakeRedis(server=server)
    else:
        url = a.url
        if url is None:
            from redisproc import RedisProcess

            proc = RedisProcess()
            url = proc.url

        def factory() -> Any:
            return redis.Redis.from_url(url)
    try:
        code = run(names, factory, a.minutes * 60, a.examples, a.steps, a.out)
    finally:
        if proc is not None:
            proc.stop()
    sys.exit(code)


if __name__ == "__main__":
    main()
