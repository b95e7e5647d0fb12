"""Mutation testing of the billing code with mutmut 2 (`make mutate`, docs/testing.md).

mutmut 2 writes each mutant into the source file it tests, so it never runs in the checkout: the
repository's code is copied into build/mutate/tree (a file that changed replaces the copy, a
mutant a killed run left behind included) and mutmut runs there, one group at a time (the
group's modules against the group's tests, tests/mutate/groups.py). Its cache,
build/mutate/tree/.mutmut-cache, keeps every verdict: a rerun tests only mutants of lines that
changed, and survivors again when a test changed. Summary: build/mutate/summary.txt.

    python -m tests.mutate                  # every group
    python -m tests.mutate attribution idle # some groups
    python -m tests.mutate --list           # the groups
    python -m tests.mutate --summary        # the cache's figures, nothing run
"""

from __future__ import annotations

import argparse
import difflib
import filecmp
import os
import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.mutate.groups import BY_NAME, GROUPS, Group

REPO = Path(__file__).resolve().parents[2]
COPIED = ("pyproject.toml", "exporter", "tests", "alerts", "dashboards", "docs")
SKIP = {"__pycache__", ".hypothesis", ".pytest_cache", ".mypy_cache", "node_modules"}
# mutmut's statuses, as its cache stores them
KILLED, SURVIVED, TIMEOUT, SUSPICIOUS, SKIPPED, UNTESTED = (
    "ok_killed",
    "bad_survived",
    "bad_timeout",
    "ok_suspicious",
    "skipped",
    "untested",
)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.is_symlink() or path.exists():
        path.unlink()


def sync(src: Path, dst: Path) -> None:
    """Make dst a copy of src: changed files replaced, removed ones removed, links kept."""
    if src.is_symlink():
        if not (dst.is_symlink() and os.readlink(dst) == os.readlink(src)):
            _remove(dst)
            dst.symlink_to(os.readlink(src))
        return
    if not src.is_dir():
        if dst.is_symlink() or dst.is_dir():
            _remove(dst)
        if not dst.exists() or not filecmp.cmp(src, dst, shallow=False):
            shutil.copy2(src, dst)
        return
    if dst.is_symlink() or (dst.exists() and not dst.is_dir()):
        _remove(dst)
    dst.mkdir(parents=True, exist_ok=True)
    names = {p.name for p in src.iterdir() if p.name not in SKIP}
    for extra in dst.iterdir():
        if extra.name not in names and extra.name not in SKIP:
            _remove(extra)
    for name in sorted(names):
        sync(src / name, dst / name)


def forget_baseline(cache: Path) -> None:
    """mutmut keeps one baseline test time for the whole cache and stops a mutant's tests at 10
    times it: each group has tests of its own, so each measures its own baseline."""
    if cache.exists():
        with sqlite3.connect(cache) as db:
            db.execute("DELETE FROM MiscData WHERE key = 'baseline_time_elapsed'")


def run_group(tree: Path, group: Group, python: str) -> tuple[int, float]:
    runner = shlex.join([python, "-m", "tests.mutate.runner", *group.runner_args])
    cmd = [
        python,
        "-m",
        "mutmut",
        "run",
        "--paths-to-mutate",
        ",".join(group.mutate),
        "--tests-dir",
        "tests",
        "--runner",
        runner,
        "--simple-output",
        "--no-progress",
        "--test-time-multiplier",
        "3",
        "--test-time-base",
        "30",
    ]
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env |= {"PYTHONPATH": str(tree), "WATTPROBE_HYPOTHESIS_PROFILE": "mutate"}
    forget_baseline(tree / ".mutmut-cache")
    print(f"== {group.name}: {', '.join(group.mutate)}", flush=True)
    print(f"   runner: {runner}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=tree, env=env, check=False)
    return proc.returncode, time.monotonic() - started


def retest(cache: Path, group: Group) -> int:
    """Mark the group's survivors untested, so that mutmut runs them again (after a change of
    runner; mutmut itself retests them only when a file under tests/ changed)."""
    if not cache.exists():
        return 0
    with sqlite3.connect(cache) as db:
        marks = ",".join("?" * len(group.mutate))
        cur = db.execute(
            f"UPDATE Mutant SET status = ? WHERE status IN (?, ?, ?) AND line IN "
            f"(SELECT l.id FROM Line l JOIN SourceFile s ON l.sourcefile = s.id "
            f"WHERE s.filename IN ({marks}))",
            (UNTESTED, SURVIVED, TIMEOUT, SUSPICIOUS, *group.mutate),
        )
        return cur.rowcount


def counts(cache: Path) -> dict[str, dict[str, int]]:
    """file -> status -> mutants, from mutmut's cache."""
    out: dict[str, dict[str, int]] = {}
    if not cache.exists():
        return out
    with sqlite3.connect(cache) as db:
        rows = db.execute(
            "SELECT s.filename, m.status, COUNT(*) FROM Mutant m "
            "JOIN Line l ON m.line = l.id JOIN SourceFile s ON l.sourcefile = s.id "
            "GROUP BY s.filename, m.status"
        ).fetchall()
    for filename, status, n in rows:
        out.setdefault(str(filename), {})[str(status)] = int(n)
    return out


def survivors(cache: Path) -> list[tuple[str, int, str, str, int]]:
    """(file, line number, status, line, index) of every mutant tested and not killed."""
    if not cache.exists():
        return []
    with sqlite3.connect(cache) as db:
        rows = db.execute(
            'SELECT s.filename, l.line_number, m.status, l.line, m."index" FROM Mutant m '
            "JOIN Line l ON m.line = l.id JOIN SourceFile s ON l.sourcefile = s.id "
            "WHERE m.status IN (?, ?, ?) ORDER BY s.filename, l.line_number, m.id",
            (SURVIVED, TIMEOUT, SUSPICIOUS),
        ).fetchall()
    return [(str(f), int(n), str(st), str(line), int(i)) for f, n, st, line, i in rows]


def mutant_diff(root: Path, filename: str, line_number: int, line: str, index: int) -> list[str]:
    """The mutant's changed lines, made by mutmut from the checkout's (unmutated) source: one
    process for all survivors, where `mutmut show` is one process each."""
    from mutmut import Context, RelativeMutationID, mutate  # noqa: PLC0415 (test tool only)

    source = (root / filename).read_text()
    mutation = RelativeMutationID(line, index, line_number, filename)
    mutated, _ = mutate(Context(source=source, mutation_id=mutation, filename=filename))
    return [
        d
        for d in difflib.unified_diff(source.splitlines(), mutated.splitlines(), lineterm="", n=0)
        if d[:1] in "+-" and d[:3] not in ("---", "+++")
    ]


def summary(tree: Path) -> str:
    cache = tree / ".mutmut-cache"
    lines = [
        f"{'file':<46} {'mutants':>7} {'killed':>6} {'survived':>8} {'timeout':>7} "
        f"{'suspicious':>10} {'untested':>8}"
    ]
    for filename, by_status in sorted(counts(cache).items()):
        total = sum(by_status.values())
        lines.append(
            f"{filename:<46} {total:>7} {by_status.get(KILLED, 0):>6} "
            f"{by_status.get(SURVIVED, 0):>8} {by_status.get(TIMEOUT, 0):>7} "
            f"{by_status.get(SUSPICIOUS, 0):>10} "
            f"{by_status.get(UNTESTED, 0) + by_status.get(SKIPPED, 0):>8}"
        )
    for filename, line_number, status, line, index in survivors(cache):
        lines.append(f"\n{status} {filename}:{line_number + 1}")
        diff = mutant_diff(REPO, filename, line_number, line, index)
        lines.extend(f"    {d}" for d in diff)
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutate", description=__doc__)
    parser.add_argument("groups", nargs="*", help="groups to run (default: all, in order)")
    parser.add_argument("--list", action="store_true", help="list the groups and exit")
    parser.add_argument("--summary", action="store_true", help="print the cache's figures only")
    parser.add_argument(
        "--retest",
        action="store_true",
        help="run the survivors again",
    )
    parser.add_argument("--out", type=Path, default=REPO / "build" / "mutate")
    args = parser.parse_args(argv)
    if args.list:
        for g in GROUPS:
            print(f"{g.name:<20} {' '.join(g.mutate)}\n{'':<20} tests: {' '.join(g.tests)}")
        return 0
    unknown = [name for name in args.groups if name not in BY_NAME]
    if unknown:
        parser.error(f"unknown group(s) {', '.join(unknown)}; --list shows them")
    tree = args.out / "tree"
    python = sys.executable
    worst = 0
    if not args.summary:
        tree.mkdir(parents=True, exist_ok=True)
        for name in COPIED:
            sync(REPO / name, tree / name)
        for group in [BY_NAME[n] for n in args.groups] or list(GROUPS):
            if args.retest:
                print(f"== {group.name}: {retest(tree / '.mutmut-cache', group)} to retest")
            rc, took = run_group(tree, group, python)
            print(f"== {group.name}: mutmut exit {rc} in {took:.0f} s", flush=True)
            worst |= rc
    text = summary(tree)
    (args.out / "summary.txt").parent.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.txt").write_text(text)
    print(text)
    return 1 if worst & 1 else 0


if __name__ == "__main__":
    sys.exit(main())
