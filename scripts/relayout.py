"""Rewrite imports and module paths after modules of the package moved (issue 44 #3).

The moves are the table of ``docs/internals-layout.md`` (rows ``| asynqpy.old | asynqpy.new |``).
Run it on a branch that has the moved files (after merging the branch that moved them): every
Python file under asynqpy/, cli/, tests/, bench/, scripts/, examples/ and every text file under
docs/ and lua/ (and README.md, mkdocs.yml) has

- its absolute module names (``asynqpy.core.codec``, in imports, strings and prose) and paths
  (``asynqpy/core/codec.py``, ``core/codec.py``) replaced by the new ones;
- its relative imports (``from .broker import Call`` in a moved module, ``from ..core import
  codec, flows``) read at the module's new place where they mean something there
  (rewritten already), else at its old one (where they were written), and written again relative
  to its new place; a ``from PACKAGE import a, b`` split by the modules' new packages,
  each kept under its old name (``from ..workflows import plans as flows``), so no body changes.

Running it twice changes nothing the second time. Some new packages have an old module's name
(``asynqpy.core.cron`` was a module, is a package holding ``entries``): such a name is left alone
only where one of the package's modules follows it (``asynqpy.core.cron.entries``, ``from
asynqpy.core.cron import entries``), so write the package itself as a path (``core/cron/``).
Then ``ruff check --fix --select I`` sorts the imports again.
Usage: ``python scripts/relayout.py [FILES...]`` (default: the folders above).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "internals-layout.md"
ROW = re.compile(r"^\|\s*`?(asynqpy(?:\.\w+)+)`?\s*\|\s*`?(asynqpy(?:\.\w+)+)`?\s*\|", re.M)
FROM = re.compile(r"^(?P<indent>[ \t]*)from[ \t]+(?P<mod>\.*[\w.]*)[ \t]+import[ \t]+"
                  r"(?P<names>\([^)]*\)|[^\n]*(?:\\\n[^\n]*)*)", re.M)


def load_table(text: str | None = None) -> dict[str, str]:
    """Old module -> new module, from the table of docs/internals-layout.md."""
    return dict(ROW.findall(TABLE.read_text(encoding="utf-8") if text is None else text))


def module_of(path: Path) -> str | None:
    """The dotted name of a module of the package (cli/ is installed as asynqpy.cli), else None."""
    try:
        rel = path.resolve().relative_to(ROOT)
    except ValueError:
        return None
    parts = list(rel.with_suffix("").parts)
    if parts[0] == "cli":
        parts[0:1] = ["asynqpy", "cli"]
    elif parts[0] != "asynqpy":
        return None
    if parts[-1] == "__init__":
        parts.pop()
        parts.append("__init__")
    return ".".join(parts)


def _package(module: str) -> list[str]:
    """The package a module's relative imports start from (a package's ``__init__``: itself)."""
    return module.split(".")[:-1]


def _resolve(mod: str, package: list[str]) -> str:
    level = len(mod) - len(mod.lstrip("."))
    if not level:
        return mod
    base = package[:len(package) - level + 1]
    rest = mod[level:]
    return ".".join(base + ([rest] if rest else []))


def _relative(target: str, package: list[str]) -> str:
    parts = target.split(".")
    common = 0
    while common < min(len(parts), len(package)) and parts[common] == package[common]:
        common += 1
    return "." * (len(package) - common + 1) + ".".join(parts[common:])


class Relayout:
    """The rewrite for one table of moves."""

    def __init__(self, moves: dict[str, str]) -> None:
        self.moves = moves
        self.back = {new: old for old, new in moves.items()}
        self.modules: set[str] = set()  # what is on disk now: modules, and packages (their __init__)
        self.packages: set[str] = set()
        for path in list((ROOT / "asynqpy").rglob("*.py")) + list((ROOT / "cli").glob("*.py")):
            name = module_of(path)
            if name and name.endswith(".__init__"):
                self.packages.add(name.removesuffix(".__init__"))
            elif name:
                self.modules.add(name)
        # an old name that is also a new package (asynqpy.core.cron): not when a new member follows
        members: dict[str, set[str]] = {}
        for new in moves.values():
            head, _, tail = new.rpartition(".")
            members.setdefault(head, set()).add(tail)
        self.members = members
        alts = []
        for old in sorted(moves, key=len, reverse=True):
            skip = members.get(old)
            names = "|".join(sorted(skip)) if skip else ""
            guard = f"(?!\\.(?:{names})\\b)(?! import \\(?\\s*(?:{names})\\b)" if skip else ""
            alts.append(re.escape(old) + r"(?!\w)" + guard)
        self.dotted = re.compile("|".join(alts)) if alts else None
        paths = []
        for old in sorted(moves, key=len, reverse=True):
            rel = old.split(".", 1)[1].replace(".", "/")  # core/codec
            paths.append(re.escape(rel))
        self.pathre = re.compile(r"(?<![\w/.])(asynqpy/)?(" + "|".join(paths) + r")\.py\b") if paths else None
        self.path_map = {old.split(".", 1)[1].replace(".", "/"): new.split(".", 1)[1].replace(".", "/")
                         for old, new in moves.items()}

    def text(self, text: str) -> str:
        """Absolute dotted names and paths."""
        if self.dotted:
            text = self.dotted.sub(lambda m: self.moves[m.group(0)], text)
        if self.pathre:
            text = self.pathre.sub(lambda m: (m.group(1) or "") + self.path_map[m.group(2)] + ".py", text)
        return text

    def _valid_now(self, origin: str, names: list[str]) -> bool:
        """Whether ``from origin import names`` means what it says in today's tree: a module that is
        there, or a package whose named modules are there and did not move (``from ..core import
        cron`` names the old module asynqpy.core.cron, though a package has that name now)."""
        if origin in self.modules:
            return origin not in self.moves  # an old module kept as a shim (asynqpy.core.signing) is moved too
        return origin in self.packages and bool(names) and all(
            f"{origin}.{n}" in self.modules | self.packages and f"{origin}.{n}" not in self.moves for n in names)

    def _origin(self, mod: str, names: list[str], old_pkg: list[str], new_pkg: list[str]) -> str:
        """Where a relative import points: read at the module's new place when it means something
        there (it was written there, or rewritten already), else at its old place."""
        if not mod.startswith("."):
            return mod
        here = _resolve(mod, new_pkg)
        return here if self._valid_now(here, names) else _resolve(mod, old_pkg)

    def python(self, text: str, module: str | None) -> str:
        """A Python file: relative imports (for modules of the package), then :meth:`text`."""
        if module:
            new_pkg = _package(module)
            old_module = self.back.get(module.removesuffix(".__init__"), None)
            if old_module is not None and module.endswith(".__init__"):
                old_module += ".__init__"
            old_pkg = _package(old_module or module)
            text = FROM.sub(lambda m: self._from(m, old_pkg, new_pkg), text)
        else:
            text = FROM.sub(lambda m: self._from(m, None, None), text)
        return self.text(text)

    def _from(self, m: re.Match[str], old_pkg: list[str] | None, new_pkg: list[str] | None) -> str:
        mod, names, indent = m.group("mod"), m.group("names"), m.group("indent")
        relative = mod.startswith(".")
        if relative and (old_pkg is None or new_pkg is None):
            return m.group(0)

        def spell(target: str) -> str:
            return _relative(target, new_pkg or []) if relative else target

        plain = names.strip()
        if plain.startswith("("):
            plain = plain[1:-1]
        items = [i.strip() for i in plain.replace("\\\n", " ").split(",") if i.strip()]
        if any("#" in i for i in items):
            items = []
        origin = self._origin(mod, [i.partition(" as ")[0].strip() for i in items], old_pkg or [], new_pkg or [])
        if not origin.startswith("asynqpy"):
            return m.group(0)
        inside = self.members.get(origin)
        if inside and items and all(i.partition(" as ")[0].strip() in inside for i in items):
            return m.group(0)  # the new package (asynqpy.core.holds) and its modules, already moved
        moved = []
        for item in items:
            name, _, alias = item.partition(" as ")
            name, alias = name.strip(), alias.strip()
            full = f"{origin}.{name}"
            if full in self.moves:
                moved.append((name, alias, self.moves[full]))
        if moved:
            kept = [i for i in items if f"{origin}.{i.partition(' as ')[0].strip()}" not in self.moves]
            lines = []
            if kept:
                lines.append(f"{indent}from {spell(self.moves.get(origin, origin))} import {', '.join(kept)}")
            for name, alias, new in moved:
                head, _, tail = new.rpartition(".")
                local = alias or name
                lines.append(f"{indent}from {spell(head)} import {tail}" + (f" as {local}" if local != tail else ""))
            return "\n".join(lines)
        new_origin = self.moves.get(origin, origin)
        if relative:
            spelled = spell(new_origin)
            if spelled == mod:
                return m.group(0)
        else:
            spelled = new_origin
        return f"{indent}from {spelled} import {names}"


def targets() -> list[Path]:
    out: list[Path] = []
    for folder in ("asynqpy", "cli", "tests", "bench", "scripts", "examples"):
        out += sorted((ROOT / folder).rglob("*.py"))
    for folder in ("docs", "lua"):
        out += sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".md", ".lua", ".txt", ".yml"))
    # not pyproject.toml: its package list names the new packages (asynqpy.core.cron), as old modules were named
    out += [ROOT / n for n in ("README.md", "mkdocs.yml") if (ROOT / n).exists()]
    # the table, this script and the names test name the old modules on purpose
    keep = {TABLE.resolve(), Path(__file__).resolve(), (ROOT / "tests" / "test_names.py").resolve()}
    return [p for p in out if p.resolve() not in keep]


def main(argv: list[str]) -> int:
    tool = Relayout(load_table())
    changed = 0
    for path in [Path(a) for a in argv] or targets():
        text = path.read_text(encoding="utf-8")
        new = tool.python(text, module_of(path)) if path.suffix == ".py" else tool.text(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            changed += 1
            print(f"rewrote {path.relative_to(ROOT) if path.is_absolute() else path}")
    print(f"{changed} file(s) rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
