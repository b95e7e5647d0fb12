"""Every host file is read through exporter/host/hostfile.py: non-blocking, regular files only,
bounded. A plain open() of /proc, sysfs or cgroupfs blocks on a FIFO until a writer comes and
reads a device or a sparse file without end (issue 41), so this walks the exporter's source tree
and fails on any plain read outside hostfile.py: open(), Path.open/read_text/read_bytes,
io.open, os.fdopen, and os.open whose flags do not carry O_NONBLOCK (hostfile.OPEN_FLAGS).

Reads of files that are not the host's are allowed by name, each with its reason."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.paths import REPO

EXPORTER = REPO / "exporter"
READER = "exporter/host/hostfile.py"

# (file, enclosing function's qualified name) -> why the plain read is not a host read
ALLOWED: dict[tuple[str, str], str] = {
    ("exporter/__init__.py", "_version"): "the checkout's own pyproject.toml, not a host file",
    ("exporter/sources/power/cpumodel/data.py", "tables"): (
        "the package's own data file (importlib.resources), not a host file"
    ),
}

_PLAIN_METHODS = {"read_text", "read_bytes", "fdopen"}
_NONBLOCKING = {"O_NONBLOCK", "OPEN_FLAGS"}


@dataclass(frozen=True)
class PlainRead:
    file: str
    function: str
    line: int
    call: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line} in {self.function or '<module>'}: {self.call}"


def _names(node: ast.AST) -> set[str]:
    found: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            found.add(sub.attr)
    return found


def _plain(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id == "open"
    if not isinstance(func, ast.Attribute):
        return False
    if func.attr in _PLAIN_METHODS:
        return True
    if func.attr != "open":
        return False
    # os.open is the non-blocking reader's own primitive when its flags carry O_NONBLOCK
    owner = func.value
    if isinstance(owner, ast.Name) and owner.id == "os":
        flags = call.args[1:2] or [k.value for k in call.keywords if k.arg == "flags"]
        return not any(_names(f) & _NONBLOCKING for f in flags)
    return True


class _Finder(ast.NodeVisitor):
    def __init__(self, file: str) -> None:
        self.file = file
        self.scope: list[str] = []
        self.found: list[PlainRead] = []

    def visit(self, node: ast.AST) -> None:
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            self.scope.append(node.name)
            self.generic_visit(node)
            self.scope.pop()
            return
        if isinstance(node, ast.Call) and _plain(node):
            self.found.append(
                PlainRead(self.file, ".".join(self.scope), node.lineno, ast.unparse(node.func))
            )
        self.generic_visit(node)


def plain_reads(root: Path) -> Iterator[PlainRead]:
    for path in sorted(root.rglob("*.py")):
        file = path.relative_to(root.parent).as_posix()
        if file == READER or "/podresources/api_pb2" in file:
            continue
        finder = _Finder(file)
        finder.visit(ast.parse(path.read_text(encoding="utf-8"), file))
        yield from finder.found


def test_no_plain_host_reads_outside_the_reader() -> None:
    found = [r for r in plain_reads(EXPORTER) if (r.file, r.function) not in ALLOWED]
    assert not found, "read host files through exporter/host/hostfile.py:\n" + "\n".join(
        map(str, found)
    )


def test_every_allowed_read_is_still_there() -> None:
    """An entry whose read is gone (converted, moved, renamed) leaves the list."""
    seen = {(r.file, r.function) for r in plain_reads(EXPORTER)}
    assert not set(ALLOWED) - seen


def test_the_walk_finds_each_kind_of_plain_read(tmp_path: Path) -> None:
    """The finder itself: each way of reading a file plainly is caught, the bounded ones not."""
    source = tmp_path / "exporter" / "sample.py"
    source.parent.mkdir()
    source.write_text(
        "import os\n"
        "from exporter.host.hostfile import OPEN_FLAGS, read_bounded\n"
        "def a(p):\n    return open(p).read()\n"
        "def b(p):\n    return p.read_text()\n"
        "def c(p):\n    return p.read_bytes()\n"
        "def d(p):\n    with p.open('rb') as f:\n        return f.read()\n"
        "def e(p):\n    return os.open(p, os.O_RDONLY)\n"
        "def f(p):\n    return os.fdopen(3)\n"
        "def ok1(p):\n    return os.open(p, OPEN_FLAGS)\n"
        "def ok2(p):\n    return os.open(p, os.O_RDONLY | os.O_NONBLOCK)\n"
        "def ok3(p):\n    return read_bounded(p, 10)\n"
    )
    found = {r.function for r in plain_reads(tmp_path / "exporter")}
    assert found == {"a", "b", "c", "d", "e", "f"}
