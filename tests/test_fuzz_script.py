"""scripts/fuzz.py, the state machines with random draws (docs/internals-testing.md, "Fuzzing the
models"): a run with no failure says so and exits 0; a machine whose check fails stops it with
exit status 1 and the failing example (its steps and its whole trace) written out."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import fakeredis
import pytest
from hypothesis.stateful import RuleBasedStateMachine, rule

ROOT = Path(__file__).resolve().parent.parent


def _fuzz() -> Any:
    spec = importlib.util.spec_from_file_location("fuzz_script", ROOT / "scripts" / "fuzz.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fuzz_script"] = mod
    spec.loader.exec_module(mod)
    return mod


class Broken(RuleBasedStateMachine):
    """A machine whose check fails once it wrote a key three times."""

    redis_factory: Any = None

    def __init__(self) -> None:
        super().__init__()
        self.r = self.redis_factory()
        self.r.flushall()
        self.trace: list[str] = []

    @rule()
    def write(self) -> None:
        n = self.r.incr("n")
        self.trace.append(f"write -> {n}")
        assert n < 3, f"written {n} times"


def test_a_run_with_no_failure_exits_0(tmp_path: Path) -> None:
    fuzz = _fuzz()
    server = fakeredis.FakeServer()
    out = tmp_path / "failure.txt"
    assert fuzz.run(["queue"], lambda: fakeredis.FakeRedis(server=server), 0.5, 2, 10, out) == 0
    assert not out.exists()


def test_a_failed_check_stops_the_run_with_its_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fuzz = _fuzz()
    monkeypatch.setattr(fuzz, "machine", lambda name: Broken)
    server = fakeredis.FakeServer()
    out = tmp_path / "failure.txt"
    assert fuzz.run(["broken"], lambda: fakeredis.FakeRedis(server=server), 60, 5, 10, out) == 1
    text = out.read_text()
    assert "machine: broken" in text and "written 3 times" in text
    assert "write -> 1\nwrite -> 2\nwrite -> 3" in text  # the example's whole trace
