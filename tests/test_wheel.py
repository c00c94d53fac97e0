"""The built wheel is complete and works on its own: it is built from a copy of the source tree,
installed into a fresh virtualenv, and that venv's ``asynqpy`` command and a one-task round trip
(enqueue, a Server runs the handler) work against the real redis-server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".venv", ".demo", ".mypy_cache",
    "node_modules",  # clients/node/ (tests/test_node_client.py installs it): 28 MB the wheel never holds
)

ROUND_TRIP = textwrap.dedent('''
    import asyncio, sys
    from pathlib import Path

    import asynqpy
    from asynqpy import Client, Server, ServeMux

    # The installed copy is used, not the source tree.
    assert Path(asynqpy.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), asynqpy.__file__
    # ... and it finds its Lua scripts inside the installed package.
    from asynqpy.redisio.scripts import load_scripts
    assert {"enqueue", "dequeue", "done"} <= set(load_scripts()), "Lua scripts not found in the installed package"

    URL = sys.argv[1]

    async def main() -> None:
        mux = ServeMux()
        ran = asyncio.Event()
        got = []

        @mux.handle("wheel:ping")
        async def ping(task):
            got.append(task.payload)
            ran.set()

        with Client(URL) as client:
            client.enqueue("wheel:ping", {"hello": "wheel"}, queue="wheelq")
        server = Server(URL, queues=["wheelq"], concurrency=2, lease=2, heartbeat_interval=0.5,
                        shutdown_timeout=1)
        task = asyncio.create_task(server.arun(mux))
        try:
            await asyncio.wait_for(ran.wait(), 20)
        finally:
            server.stop()
            await asyncio.wait_for(task, 10)
        assert got == [{"hello": "wheel"}], got

    asyncio.run(main())
    print("OK")
''')


def _run(cmd: list[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def test_wheel_contents_install_cli_and_round_trip(tmp_path: Path, redis_url: str) -> None:
    # 1. Build the wheel from a clean copy (a stale build/ in the checkout must not leak into it).
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    dist = tmp_path / "dist"
    # --no-isolation: the test venv's setuptools (the test extra pins one that builds wheels on its
    # own) instead of a fresh build environment installed for each run
    _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(dist), str(src)], cwd=tmp_path,
         timeout=180)
    wheels = list(dist.glob("asynqpy-*.whl"))
    assert len(wheels) == 1, wheels
    wheel = wheels[0]

    # 2. Its contents: the Lua scripts (with includes), the CLI inside the package, py.typed.
    names = set(zipfile.ZipFile(wheel).namelist())
    lua_src = sorted(p.name for p in (ROOT / "lua").glob("*.lua"))
    include_src = sorted(p.name for p in (ROOT / "lua" / "includes").glob("*.lua"))
    assert lua_src and include_src
    for name in lua_src:
        assert f"asynqpy/lua/{name}" in names
    for name in include_src:
        assert f"asynqpy/lua/includes/{name}" in names
    for name in ("asynqpy/cli/main.py", "asynqpy/cli/__init__.py", "asynqpy/py.typed", "asynqpy/__init__.py",
                 "asynqpy/contrib/fastapi.py", "asynqpy/contrib/django/management/commands/asynqpy_worker.py"):
        assert name in names, name
    tops = {n.split("/", 1)[0] for n in names}
    assert not any(n.startswith("cli/") for n in names), "a top-level cli package leaked into the wheel"
    assert {t for t in tops if not t.endswith(".dist-info")} == {"asynqpy"}, tops
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "asynqpy = asynqpy.cli.main:main" in zipfile.ZipFile(wheel).read(entry_points).decode()

    # 3. A fresh venv with only the wheel (and its dependencies from the index), installed by this
    # interpreter's pip into it (``pip --python``: no pip of its own to bootstrap into the venv).
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    # (--no-compile: under scripts/test, processes read bytecode only from PYTHONPYCACHEPREFIX, never
    # pip's; and pip's compile only warns about a module that does not compile: nothing relied on it)
    # With uv where scripts/test installed it (the same index, the same packages): pip's resolve and
    # install took 5 to 8 s of CPU of the suite's budget (issue 43), uv's well under one.
    uv = Path(sys.executable).parent / "uv"
    if uv.exists() and os.environ.get("ASYNQPY_NO_UV") != "1":
        _run([str(uv), "pip", "install", "-q", "--python", str(py), str(wheel)], cwd=tmp_path, timeout=300, env=env)
    else:
        _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--disable-pip-version-check", "-q",
              "--no-compile", str(wheel)], cwd=tmp_path, timeout=300, env=env)

    # 4. The console script.
    out = _run([str(venv / "bin" / "asynqpy"), "--help"], cwd=tmp_path, env=env)
    assert "Usage" in out

    # 5. A one-task round trip, run by the venv's python outside the source tree.
    script = tmp_path / "round_trip.py"
    script.write_text(ROUND_TRIP)
    out = _run([str(py), str(script), redis_url], cwd=tmp_path, timeout=60, env=env)
    assert out.strip().splitlines()[-1] == "OK", out
