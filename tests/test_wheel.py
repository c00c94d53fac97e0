"""The packages are complete and work on their own (issue 47 #3): the sdist is built from a copy of
the source tree and the wheel from the sdist (``python -m build``: its default, so a file the sdist
lacks is missing from the wheel too), their metadata and contents checked, the wheel installed into
a fresh virtualenv, and that venv runs the demo (scripts/demo's worker and producer,
examples/demo_*.py copied outside the tree) against the real redis-server.

``python -m build`` rather than ``uv build``: ``build`` is in the test extra (uv is optional in
scripts/test: ASYNQPY_NO_UV=1), both run the same setuptools backend (the cost), and with
``--no-isolation`` it builds with the test venv's setuptools, nothing downloaded. The install uses
uv where scripts/test installed it (seconds, where pip took ~15 s of CPU), else pip."""

from __future__ import annotations

import email.parser
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

import asynqpy

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
IGNORE = shutil.ignore_patterns(
    ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".venv", ".demo", ".mypy_cache",
    "node_modules",  # clients/node/ (tests/test_node_client.py installs it): 28 MB the wheel never holds
)

INSTALLED = textwrap.dedent('''
    import sys
    from pathlib import Path

    import asynqpy
    from asynqpy.redisio.scripts import load_scripts

    # The installed copy is used, not the source tree, and it finds its Lua scripts inside it.
    assert Path(asynqpy.__file__).resolve().is_relative_to(Path(sys.prefix).resolve()), asynqpy.__file__
    assert {"enqueue", "dequeue", "done"} <= set(load_scripts()), "Lua scripts not found in the installed package"
    print(asynqpy.__version__)
''')


def _run(cmd: list[str], cwd: Path, timeout: float = 120, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc.stdout


def _expected_files() -> dict[str, str]:
    """Source file -> its path in the installed package: every module of asynqpy/ and cli/, every Lua
    script and include, the console's templates and static files, py.typed."""
    out = {str(p.relative_to(ROOT)): str(p.relative_to(ROOT)) for p in (ROOT / "asynqpy").rglob("*")
           if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}
    out.update({str(p.relative_to(ROOT)): "asynqpy/" + str(p.relative_to(ROOT)) for top in ("cli", "lua")
                for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in (".py", ".lua")})
    return out


def _metadata(text: str) -> email.message.Message:
    return email.parser.Parser().parsestr(text)


@pytest.mark.slow(cost=2)  # (its lane's weight: tests/conftest.py _lane_cost)
def test_sdist_and_wheel_contents_metadata_install_and_demo(tmp_path: Path, redis_url: str) -> None:
    # 1. The sdist from a clean copy (a stale build/ in the checkout must not leak into it), the wheel
    # from the sdist. --no-isolation: the test venv's setuptools (the test extra pins one that builds
    # wheels on its own) instead of a fresh build environment installed for each run.
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=IGNORE)
    dist = tmp_path / "dist"
    _run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(src)], cwd=tmp_path, timeout=240)
    (sdist,), (wheel,) = list(dist.glob("asynqpy-*.tar.gz")), list(dist.glob("asynqpy-*.whl"))
    import tomllib  # (Python 3.11: the tests' interpreter; asynqpy runs on 3.10)

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert sdist.name == f"asynqpy-{asynqpy.__version__}.tar.gz" and wheel.name.startswith(
        f"asynqpy-{asynqpy.__version__}-py3-none-any"), (sdist, wheel)

    # 2. Their contents: every module, Lua script and include, template, static file and py.typed.
    expected = _expected_files()
    assert any(k.startswith("lua/includes/") for k in expected) and any(k.endswith(".html") for k in expected)
    assert "asynqpy/py.typed" in expected and any(k.startswith("asynqpy/web/static/") for k in expected)
    with tarfile.open(sdist) as tar:
        in_sdist = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
        pkg_info = tar.extractfile(f"asynqpy-{asynqpy.__version__}/PKG-INFO").read().decode()  # type: ignore[union-attr]
    assert set(expected) | {"pyproject.toml", "README.md"} <= in_sdist, sorted(set(expected) - in_sdist)
    names = set(zipfile.ZipFile(wheel).namelist())
    assert set(expected.values()) <= names, sorted(set(expected.values()) - names)
    for name in ("asynqpy/contrib/fastapi.py", "asynqpy/contrib/django/management/commands/asynqpy_worker.py"):
        assert name in names, name
    tops = {n.split("/", 1)[0] for n in names}
    assert not any(n.startswith("cli/") for n in names), "a top-level cli package leaked into the wheel"
    assert {t for t in tops if not t.endswith(".dist-info")} == {"asynqpy"}, tops
    read = zipfile.ZipFile(wheel).read
    info = next(n for n in names if n.endswith(".dist-info/METADATA")).rsplit("/", 1)[0]
    assert "asynqpy = asynqpy.cli.main:main" in read(f"{info}/entry_points.txt").decode()
    assert "asynqpy = asynqpy.testing" in read(f"{info}/entry_points.txt").decode()  # the pytest plugin

    # 3. Their metadata: pyproject.toml's, the same in both.
    meta = _metadata(read(f"{info}/METADATA").decode())
    assert (meta["Name"], meta["Version"], meta["Requires-Python"]) == ("asynqpy", asynqpy.__version__, ">=3.10")
    assert meta["Summary"] == project["description"] and meta["Description-Content-Type"] == "text/markdown"
    required = [d for d in meta.get_all("Requires-Dist") or [] if "extra ==" not in d]
    assert sorted(required) == sorted(project["dependencies"]), required
    assert set(meta.get_all("Provides-Extra") or []) == set(project["optional-dependencies"])
    assert "# asynqpy" in (meta.get_payload() or ""), "the README is not the long description"
    sdist_meta = _metadata(pkg_info)
    assert (sdist_meta["Name"], sdist_meta["Version"]) == (meta["Name"], meta["Version"])

    # 4. A fresh venv with only the wheel (and its dependencies from the index).
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=tmp_path)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    uv = Path(sys.executable).parent / "uv"
    if uv.exists() and os.environ.get("ASYNQPY_NO_UV") != "1":  # (pip: 5 to 8 s of CPU, uv under one)
        _run([str(uv), "pip", "install", "-q", "--python", str(py), str(wheel)], cwd=tmp_path, timeout=300, env=env)
    else:  # (--no-compile: under scripts/test, processes read bytecode only from PYTHONPYCACHEPREFIX)
        _run([sys.executable, "-m", "pip", "--python", str(py), "install", "--disable-pip-version-check", "-q",
              "--no-compile", str(wheel)], cwd=tmp_path, timeout=300, env=env)
    (tmp_path / "installed.py").write_text(INSTALLED)
    assert _run([str(py), str(tmp_path / "installed.py")], cwd=tmp_path, env=env).strip() == asynqpy.__version__
    assert asynqpy.__version__ in _run([str(venv / "bin" / "asynqpy"), "--version"], cwd=tmp_path, env=env)

    # 5. The demo (scripts/demo's worker and producer) against the installed wheel, outside the tree.
    demo = tmp_path / "demo"
    demo.mkdir()
    for name in ("demo_tasks.py", "demo_producer.py"):
        shutil.copy(ROOT / "examples" / name, demo / name)
    with open(tmp_path / "worker.log", "wb") as log:
        worker = subprocess.Popen([str(venv / "bin" / "asynqpy"), "worker", "demo_tasks:mux", "--queues",
                                   "critical=6,default=3,low=1", "--concurrency", "10", "--redis-url", redis_url],
                                  cwd=demo, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        _run([str(py), "demo_producer.py", "--redis-url", redis_url, "--timeout", "30"], cwd=demo, env=env, timeout=90)
        out = _run([str(venv / "bin" / "asynqpy"), "stats", "--redis-url", redis_url], cwd=demo, env=env)
        assert "critical" in out and "low" in out, out
    finally:
        worker.send_signal(signal.SIGTERM)
        rc = worker.wait(30)
    assert rc == 0, (tmp_path / "worker.log").read_text()[-3000:]
