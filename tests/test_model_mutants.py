"""The cross-feature model (tests/test_model.py) catches each state defect of issue 29, and each it
found itself since, when its fix is reverted: each ``tests/mutants/*.patch`` (its first line says which fix it reverts) is applied
to a copy of ``lua/``, the scripts are loaded from that copy (``ASYNQPY_LUA_DIR``, the script cache
cleared before and after) and the model runs on the session's redis-server in this process, which
must fail with a broken invariant (an AssertionError) or a refusal the model did not expect (an
asynqpy error), not with a script that does not load; and the failure must be the one the mutant's
header says it breaks (its ``expect:`` line), so a failure the model would find in the scripts as
they are is not taken for a catch. (The model runs on the scripts as they are in
tests/test_model.py, on fakeredis and on redis-server; a 100-example run of it here as well cost
20 s of CPU and showed nothing those do not.)

The mutants run on redis-server, not fakeredis: the same model and examples (derandomized), the
same catches, at ~60 % of the CPU (a script's own Redis calls run in Redis, not in fakeredis's
Python); and in the test process, not a fresh interpreter each (~1 s of CPU each for the imports).
A mutated script has its own SHA, so it never stands in for the script as it is on that server.

Slow (one model run per mutant, without shrinking): ``python -m pytest -m slow tests/test_model_mutants.py``.
The mutants under ``tests/mutants/plus/`` revert fixes of what came since (deploy holds, tenant
rates): they run on the model plus (tests/test_model_plus.py: the same machine plus those).
To add a mutant: a unified diff of one file under ``lua/`` (paths ``a/<file>``, ``b/<file>``, the
first line says which fix it reverts, the second ``expect:`` what the model's failure says, an
optional third ``scenario: NAME`` a scenario of the model plus that meets it: run first, so the
catch does not depend on what the derandomized examples draw, and is fast), small enough to
still apply as the scripts change around it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import traceback
from pathlib import Path

import pytest
import redis
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from asynqpy.core.model.errors import AsynqpyError
from asynqpy.core.spine.scripts import load_scripts

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = int(os.environ.get("ASYNQPY_MUTANT_EXAMPLES", "100"))
"""Examples per run at most (ASYNQPY_MUTANT_EXAMPLES; the fast tier's run of the model has 40; a run stops at its first
failure). The run is
derandomized from the model's source, so any edit to CrossMachine draws other examples: at 60 a
mutant was missed now and then after such an edit (each is caught in most 60-example runs, not
all); 100 catches each of them."""
SCENARIOS = os.environ.get("ASYNQPY_MUTANT_SCENARIOS", "1") == "1"
"""Run each mutant's scenario first (ASYNQPY_MUTANT_SCENARIOS=0: the drawn examples alone, to see
what the model's draws catch by themselves)."""
MUTANTS = sorted((ROOT / "tests" / "mutants").glob("*.patch"))
PLUS_MUTANTS = sorted((ROOT / "tests" / "mutants" / "plus").glob("*.patch"))
"""Mutants of what the model plus drives (deploy holds, tenant rates: tests/test_model_plus.py)."""


def run_model_on(lua: Path, url: str, plus: bool = False, scenario: str = "") -> tuple[str, str, float]:
    """Run the model (``plus``: the model plus deploy holds and tenant rates) with the scripts of ``lua`` on the
    Redis at ``url``, without shrinking (a mutant run only needs a failure); returns (result,
    output, seconds). ``scenario``: first run that scenario of the model plus
    (test_model_plus.SCENARIOS: a meeting driven step by step, every check after each), then,
    if it caught nothing, the model's drawn examples. Any other error (a script that does not
    load, a defect of the model itself) is raised: the test fails with it."""
    import test_model  # (tests/ is on sys.path: tests/conftest.py)
    import test_model_plus

    run_settings = settings(test_model.SETTINGS, max_examples=EXAMPLES,
                            phases=[Phase.explicit, Phase.reuse, Phase.generate])
    before = os.environ.get("ASYNQPY_LUA_DIR")
    os.environ["ASYNQPY_LUA_DIR"] = str(lua)
    load_scripts.cache_clear()  # (scripts are loaded once per process: now from the mutant's copy)
    t0 = time.monotonic()
    try:
        if scenario:
            test_model_plus.run_scenario(scenario, lambda: redis.Redis.from_url(url))
        if plus:
            test_model_plus.PlusMachine.redis_factory = staticmethod(lambda: redis.Redis.from_url(url))
            run_state_machine_as_test(test_model_plus.PlusMachine, settings=run_settings)
        else:
            test_model.run_model(lambda: redis.Redis.from_url(url), run_settings)
        result, out = "passed", ""
    except (AssertionError, AsynqpyError) as exc:
        result, out = "caught", "".join(traceback.format_exception(exc))
    finally:
        if before is None:
            os.environ.pop("ASYNQPY_LUA_DIR", None)
        else:
            os.environ["ASYNQPY_LUA_DIR"] = before
        load_scripts.cache_clear()  # the tests after this one get lua/ as it is
    return result, out, time.monotonic() - t0


def lua_copy(tmp_path: Path, patch: Path | None) -> Path:
    lua = tmp_path / "lua"
    shutil.copytree(ROOT / "lua", lua)
    if patch is not None:
        done = subprocess.run(["patch", "-p1", "--batch", "--forward", "-d", str(lua), "-i", str(patch)],
                              capture_output=True, text=True)
        assert done.returncode == 0, f"{patch.name} no longer applies to lua/ (rewrite it):\n{done.stdout}{done.stderr}"
    return lua


@pytest.mark.slow
@pytest.mark.one_process
@pytest.mark.real
@pytest.mark.parametrize("patch", MUTANTS + PLUS_MUTANTS, ids=[p.stem for p in MUTANTS + PLUS_MUTANTS])
def test_the_model_catches_a_reverted_fix(tmp_path: Path, patch: Path, redis_url: str) -> None:
    why, expect, scenario = header(patch)
    result, out, took = run_model_on(lua_copy(tmp_path, patch), redis_url, plus=patch in PLUS_MUTANTS,
                                     scenario=scenario if SCENARIOS else "")
    print(f"{patch.stem}: {result} in {took:.1f} s ({why})")
    assert result == "caught", f"{patch.stem} ({why}) was not caught ({result}):\n{out[-4000:]}"
    assert any(e in out for e in expect), f"{patch.stem} was caught, but not by what it breaks ({expect}):\n{out[-4000:]}"


def header(patch: Path) -> tuple[str, list[str], str]:
    """A mutant's first two lines: which fix it reverts, and ``expect: a | b``: what the model's
    failure says (one of them), so that it is caught by the check it breaks; and an optional
    third, ``scenario: NAME``: the scenario of the model plus that meets what it breaks
    (test_model_plus.SCENARIOS), run before the drawn examples ('' = none)."""
    lines = patch.read_text().splitlines()
    assert lines[1].startswith("expect: "), patch.name
    scenario = lines[2][len("scenario: "):].strip() if lines[2].startswith("scenario: ") else ""
    return lines[0], [e.strip() for e in lines[1][len("expect: "):].split("|")], scenario


def test_every_mutant_says_what_it_reverts() -> None:
    assert MUTANTS and PLUS_MUTANTS
    import test_model_plus

    for p in MUTANTS + PLUS_MUTANTS:
        why, expect, scenario = header(p)
        issues = ("issue 29", "issue 30", "issue 32", "issue 34", "issue 42", "issue 43", "issue 45", "issue 46")
        assert why.startswith(issues) and expect and all(expect), p.name
        assert not scenario or scenario in test_model_plus.SCENARIOS, (p.name, scenario)
