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
first line says which fix it reverts, the second ``expect:`` what the model's failure says),
small enough to still apply as the scripts change around it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import traceback
from pathlib import Path

import hypothesis
import pytest
import redis
from hypothesis import Phase, settings
from hypothesis.stateful import get_state_machine_test

from asynqpy.core.errors import AsynqpyError
from asynqpy.core.scripts import load_scripts

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = int(os.environ.get("ASYNQPY_MUTANT_EXAMPLES", "100"))
"""Examples per run at most (ASYNQPY_MUTANT_EXAMPLES; the fast tier's run of the model has 40; a run stops at its first
failure). The run is
derandomized from the model's source, so any edit to CrossMachine draws other examples: at 60 a
mutant was missed now and then after such an edit (each is caught in most 60-example runs, not
all); 100 catches each of them."""
MUTANTS = sorted((ROOT / "tests" / "mutants").glob("*.patch"))
PLUS_MUTANTS = sorted((ROOT / "tests" / "mutants" / "plus").glob("*.patch"))
"""Mutants of what the model plus drives (deploy holds, tenant rates: tests/test_model_plus.py)."""
SEEDED_EXAMPLES = 3
"""Examples of a seeded run (:data:`CATCHES`)."""
CATCHES: dict[str, int] = {  # (derandomized: examples until caught, its test process's CPU; then by the seed)
    "cancel_key": 0,  # 53 examples, 7.7 s
    "own_write_blocked": 1,  # 38 examples, 6.1 s
    "snoozed_holder_stale": 0,  # 108 examples, 18.9 s
    "tenant_cap": 7,  # 48 examples, 11.3 s
    "tenant_resume": 85,  # 129 examples, 28.7 s
    "held_spend_rate": 8,  # plus: 38 examples, 11.1 s
    "held_wait": 29,  # plus: 127 examples, 24.4 s
    "no_rebase": 0,  # plus: 45 examples, 11.3 s
}
"""Mutant -> a seed whose first :data:`SEEDED_EXAMPLES` examples catch it (by the check its header
expects), found by ``python tests/test_model_mutants.py [mutant ...]``. The derandomized run finds
most mutants within 10 examples but some only after 50 to 100 (the slowest tests of the suite);
the seeded run finds each in 1 to 3. An edit to the model's rules may change what a seed draws:
then the seeded run misses and the test runs the derandomized one as well, as without a seed (the
test says so; refresh the seeds). A mutant without a seed runs the derandomized run alone."""


def run_model_on(lua: Path, url: str, plus: bool = False, seed: int | None = None) -> tuple[str, str, float]:
    """Run the model (``plus``: the model plus deploy holds and tenant rates) with the scripts of ``lua`` on the
    Redis at ``url``, without shrinking (a mutant run only needs a failure); returns (result,
    output, seconds). ``seed``: a run of :data:`SEEDED_EXAMPLES` examples drawn from that seed
    (see :data:`CATCHES`) instead of the derandomized run of :data:`EXAMPLES`. Any other error (a
    script that does not load, a defect of the model itself) is raised: the test fails with it."""
    import test_model  # (tests/ is on sys.path: tests/conftest.py)
    import test_model_plus

    run_settings = settings(test_model.SETTINGS, max_examples=EXAMPLES if seed is None else SEEDED_EXAMPLES,
                            phases=[Phase.explicit, Phase.reuse, Phase.generate])
    machine = test_model_plus.PlusMachine if plus else test_model.CrossMachine
    machine.redis_factory = staticmethod(lambda: redis.Redis.from_url(url))
    # (what run_state_machine_as_test runs: the same examples, derandomized from the machine's source)
    run = get_state_machine_test(machine, settings=run_settings)
    if seed is not None:
        run = hypothesis.seed(seed)(run)  # (a seed outranks derandomize)
    before = os.environ.get("ASYNQPY_LUA_DIR")
    os.environ["ASYNQPY_LUA_DIR"] = str(lua)
    load_scripts.cache_clear()  # (scripts are loaded once per process: now from the mutant's copy)
    t0 = time.monotonic()
    try:
        run()
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
    lua, plus = lua_copy(tmp_path, patch), patch in PLUS_MUTANTS
    why, expect = header(patch)
    seed = CATCHES.get(patch.stem)
    if seed is not None:  # first the examples known to catch it; if they no longer do, the full run
        result, out, took = run_model_on(lua, redis_url, plus=plus, seed=seed)
        print(f"{patch.stem}: {result} in {took:.1f} s by seed {seed}")
        if result == "caught" and any(e in out for e in expect):
            return
        print(f"{patch.stem}: seed {seed} no longer catches it (refresh CATCHES: python tests/test_model_mutants.py)")
    result, out, took = run_model_on(lua, redis_url, plus=plus)
    print(f"{patch.stem}: {result} in {took:.1f} s ({why})")
    assert result == "caught", f"{patch.stem} ({why}) was not caught ({result}):\n{out[-4000:]}"
    assert any(e in out for e in expect), f"{patch.stem} was caught, but not by what it breaks ({expect}):\n{out[-4000:]}"


def header(patch: Path) -> tuple[str, list[str]]:
    """A mutant's first two lines: which fix it reverts, and ``expect: a | b``: what the model's
    failure says (one of them), so that it is caught by the check it breaks."""
    lines = patch.read_text().splitlines()
    assert lines[1].startswith("expect: "), patch.name
    return lines[0], [e.strip() for e in lines[1][len("expect: "):].split("|")]


def test_every_mutant_says_what_it_reverts() -> None:
    assert MUTANTS and PLUS_MUTANTS
    for p in MUTANTS + PLUS_MUTANTS:
        why, expect = header(p)
        assert why.startswith(("issue 29", "issue 30", "issue 32", "issue 34", "issue 42")) and expect and all(expect), p.name
    assert set(CATCHES) <= {p.stem for p in MUTANTS + PLUS_MUTANTS}, "a seed for a mutant that is gone (CATCHES)"


def find_seeds(names: list[str], tries: int = 300) -> None:
    """Print a :data:`CATCHES` entry for each mutant (``names``: those; none: every one): the first
    seed whose :data:`SEEDED_EXAMPLES` examples catch it by the check it expects, on a redis-server
    of its own."""
    import sys
    import tempfile

    from redisproc import RedisProcess

    server = RedisProcess()
    try:
        for patch in MUTANTS + PLUS_MUTANTS:
            if names and patch.stem not in names:
                continue
            lua = lua_copy(Path(tempfile.mkdtemp(prefix="asynqpy-mutant-")), patch)
            _, expect = header(patch)
            t0 = time.monotonic()
            for seed in range(tries):
                result, out, _ = run_model_on(lua, server.url, plus=patch in PLUS_MUTANTS, seed=seed)
                if result == "caught" and any(e in out for e in expect):
                    print(f"    {patch.stem!r}: {seed},  # {time.monotonic() - t0:.0f} s to find", flush=True)
                    break
            else:
                print(f"    # {patch.stem}: no seed of {tries} catches it", file=sys.stderr, flush=True)
            shutil.rmtree(lua.parent, ignore_errors=True)
    finally:
        server.stop()


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(ROOT / "tests"))
    find_seeds(sys.argv[1:])
