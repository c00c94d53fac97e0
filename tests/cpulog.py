"""Sums the CPU log of a test run (``ASYNQPY_TEST_CPU_LOG=DIR``, tests/conftest.py): per phase, per
file and per block, so a run's budget (docs/internals-testing.md) is read in CPU seconds, which a
machine loaded by other jobs does not move as much as it moves wall time.

    ASYNQPY_TEST_CPU_LOG=/tmp/cpu bash scripts/test; python tests/cpulog.py /tmp/cpu [N]
"""

from __future__ import annotations

import sys
from collections import defaultdict
from pathlib import Path

SLOW = ("tests/faults/",)


def main(folder: str, top: int = 25) -> None:
    phases: dict[str, float] = defaultdict(float)
    tests: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    wall: dict[str, float] = defaultdict(float)
    for path in Path(folder).glob("*.tsv"):
        for line in path.read_text(encoding="utf-8").splitlines():
            nodeid, when, cpu, secs = line.rsplit("\t", 3)
            phases[when] += float(cpu)
            tests[nodeid][when] += float(cpu)
            wall[nodeid] += float(secs)
    total = {n: sum(p.values()) for n, p in tests.items()}
    print(f"{len(tests)} tests, {sum(total.values()):.0f}s cpu, {sum(wall.values()):.0f}s wall (summed over processes)")
    print("per phase: " + ", ".join(f"{w} {c:.0f}s" for w, c in sorted(phases.items())))
    files: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for n, c in total.items():
        f = files[n.split("::")[0]]
        f[0] += c
        f[1] += 1
    print("per file (cpu s, tests):")
    for f, (c, k) in sorted(files.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {c:7.1f} {int(k):4d}  {f}")
    big = {n for n, c in total.items() if c >= 3.0}
    small = [c for n, c in total.items() if n not in big]
    print(f"tests of 3 s cpu or more: {len(big)}, {sum(total[n] for n in big):.0f}s; the other {len(small)}: "
          f"{sum(small):.0f}s ({sum(small) / max(len(small), 1):.3f}s each; setup "
          f"{sum(tests[n]['setup'] for n in tests if n not in big):.0f}s, call "
          f"{sum(tests[n]['call'] for n in tests if n not in big):.0f}s, teardown "
          f"{sum(tests[n]['teardown'] for n in tests if n not in big):.0f}s)")
    children = Path(folder) / "children.log"
    if children.exists():
        kinds: dict[str, list[float]] = defaultdict(lambda: [0, 0, 0.0])
        for line in children.read_text(encoding="utf-8", errors="replace").splitlines():
            _, what, argv = (line.split("\t", 2) + ["", ""])[:3]
            if what != "start" and not what.replace(".", "", 1).isdigit():
                continue  # (a line two processes wrote at once)
            words = argv.split()
            kind = " ".join(w for w in words[1:4] if not w.startswith("-") or w == "-m")[:60]
            k = kinds[kind]
            if what == "start":
                k[0] += 1
            else:
                k[1] += 1
                k[2] += float(what)
        n = sum(int(k[0]) for k in kinds.values())
        print(f"interpreters started: {n}; of those that exited (not killed): "
              f"{sum(int(k[1]) for k in kinds.values())}, {sum(k[2] for k in kinds.values()):.0f}s cpu")
        for kind, (started, ended, cpu) in sorted(kinds.items(), key=lambda kv: -kv[1][0])[:top]:
            print(f"  {int(started):5d} started, {int(ended):5d} exited, {cpu:6.1f}s cpu  {kind}")
    print("most cpu:")
    for n, c in sorted(total.items(), key=lambda kv: -kv[1])[:top]:
        print(f"  {c:7.2f}s cpu {wall[n]:7.2f}s wall  {n}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 25)
