"""The previous release, built for the tests that run it beside the current code (the rolling
upgrade, tests/test_upgrade_rolling.py): releases.toml names each release's version and commit; the
newest one is built from that commit (``git archive`` of this clone) into a venv of its own.

The venv: made by uv (as scripts/test installs; pip where uv is missing), holding that release's
asynqpy only; its dependencies (redis, msgpack, click, rich) are this test venv's, reached through
a ``.pth`` line (read-only: a venv's site-packages named by a ``.pth`` line is on ``sys.path``, its
own ``.pth`` files, like the editable install's, are not run), and so is the setuptools that builds
it (``--no-build-isolation``: nothing downloaded, ~1 s of CPU). It is cached under this venv
(``.venv/asynqpy-releases/<commit>-py<X.Y>``): a commit's source never changes, the dependencies are this
venv's own (a new ``.venv`` starts with no cache), and a build goes to a folder of its own, renamed
into place once it works (two test processes building at once: one keeps its copy).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RELEASES = ROOT / "releases.toml"


@dataclass(frozen=True)
class Release:
    version: str
    commit: str
    protocol: int


def releases() -> list[Release]:
    """Every release of releases.toml, oldest first."""
    text = RELEASES.read_text()
    try:
        import tomllib
    except ImportError:  # Python 3.10: the few fields, read by hand
        blocks = text.split("[[release]]")[1:]
        fields = [dict(re.findall(r'^(\w+) = "?([^"\n]*)"?$', b, re.MULTILINE)) for b in blocks]
    else:
        fields = tomllib.loads(text)["release"]
    return [Release(str(f["version"]), str(f["commit"]), int(f["protocol"])) for f in fields]


def has_commit(commit: str) -> bool:
    """Whether this clone holds ``commit`` (a shallow clone or a tarball may not)."""
    if not (ROOT / ".git").exists():
        return False
    res = subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{commit}^{{commit}}"], capture_output=True)
    return res.returncode == 0


def _uv() -> str | None:
    here = Path(sys.executable).parent / "uv"
    return str(here) if here.exists() else shutil.which("uv")


def build(release: Release) -> Path:
    """The python of a venv holding ``release`` (built, or taken from the cache)."""
    tag = f"py{sys.version_info.major}.{sys.version_info.minor}"
    cache = Path(sys.prefix if sys.prefix != sys.base_prefix else tempfile.gettempdir()) / "asynqpy-releases"
    final = cache / f"{release.commit}-{tag}"
    python = final / "bin" / "python"
    if (final / "ok").exists():
        return python
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=cache))
    try:
        src = work / "src"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", release.commit, "asynqpy", "cli", "lua",
                                  "pyproject.toml", "README.md"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        venv = work / "venv"
        uv = _uv()
        if uv:
            subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True, capture_output=True)
        else:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
        site = next((venv / "lib").glob("python*/site-packages"))
        (site / "_asynqpy_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
        if uv:
            cmd = [uv, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), "--no-deps",
                   "--no-build-isolation", f"{src}/"]
        else:
            cmd = [sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                   "--disable-pip-version-check", "--no-deps", "--no-build-isolation", "--no-compile", str(src)]
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=work)
        assert res.returncode == 0, f"building asynqpy {release.version} failed:\n{res.stdout}\n{res.stderr}"
        check = subprocess.run([str(venv / "bin" / "python"), "-c", "import asynqpy; print(asynqpy.__version__)"],
                               capture_output=True, text=True, cwd=work)
        assert check.stdout.strip() == release.version, (check.stdout, check.stderr)
        (venv / "ok").write_text(release.commit)
        # the venv's scripts name its folder: it is built where it stays (work/venv), then linked
        try:
            os.symlink(venv, final)
        except FileExistsError:  # another process built it meanwhile: use its copy
            shutil.rmtree(work, ignore_errors=True)
        return python
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
