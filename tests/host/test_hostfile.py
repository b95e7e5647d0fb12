"""No host read can block: FIFOs, sockets, devices and directories are refused at once, with a
reason; reads are bounded. Every call runs on a thread joined with a timeout, so a regression
fails the test instead of hanging the suite."""

from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from exporter.host.files import NOT_A_FILE, fault_for, read_int, read_text, reason_for
from exporter.host.hostfile import NotRegularFile, read_bounded
from exporter.kube.cdi import CdiScanner
from exporter.model.readings import SourceError
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.support.fixturehost import FixtureHost
from tests.support.paths import FIXTURES

SPEC = json.dumps(
    {
        "cdiVersion": "0.6.0",
        "kind": "nvidia.com/gpu",
        "devices": [
            {"name": "gpu0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia0"}]}}
        ],
    }
)


def returns(fn: Callable[[], Any], timeout_s: float = 20.0) -> Any:
    """fn's result or exception; fails (not hangs) when fn does not return."""
    out: list[Any] = []

    def run() -> None:
        try:
            out.append(("value", fn()))
        except BaseException as exc:
            out.append(("error", exc))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"{fn} blocked"
    return out[0]


def fifo(path: Path) -> None:
    os.mkfifo(path)


def unix_socket(path: Path) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.close()  # the socket file stays


def char_device(path: Path) -> None:
    os.mknod(path, 0o600 | 0o020000, os.makedev(1, 3))  # like /dev/null


def directory(path: Path) -> None:
    path.mkdir()


KINDS: dict[str, Callable[[Path], None]] = {
    "FIFO": fifo,
    "socket": unix_socket,
    "character device": char_device,
    "directory": directory,
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("reader", [read_int, read_text, lambda p: read_bounded(p, 100)])
def test_not_a_regular_file_is_refused_at_once(
    tmp_path: Path, kind: str, reader: Callable[[str], Any]
) -> None:
    path = tmp_path / "energy_uj"
    KINDS[kind](path)
    what, got = returns(lambda: reader(str(path)))
    assert what == "error"
    if kind == "socket":  # open() of a socket file fails in the kernel (ENXIO) before fstat
        assert isinstance(got, OSError)
        return
    assert isinstance(got, NotRegularFile) and got.kind == kind
    assert reason_for(got) == NOT_A_FILE and fault_for(got) == NOT_A_FILE


def test_a_fifo_with_a_writer_that_never_writes_does_not_block(tmp_path: Path) -> None:
    path = tmp_path / "energy_uj"
    os.mkfifo(path)
    writer = os.open(path, os.O_RDWR)  # a writer is present: a blocking read would wait forever
    try:
        what, got = returns(lambda: read_int(str(path)))
        assert what == "error" and isinstance(got, NotRegularFile)
    finally:
        os.close(writer)


def test_reads_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"7" * 100_000)
    assert len(read_bounded(str(path), 4096)) == 4096
    with pytest.raises(ValueError, match="too long"):
        read_int(str(path))


def test_an_attribute_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "real").write_text("5\n")
    (tmp_path / "energy_uj").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        read_int(str(tmp_path / "energy_uj"))  # sysfs attributes are never symlinks
    assert read_bounded(str(tmp_path / "energy_uj"), 10) == b"5\n"  # where following is right


def test_cdi_skips_fifos_sockets_and_devices(tmp_path: Path) -> None:
    """The reported hang: a FIFO named *.yaml blocked CdiScanner.scan() forever."""
    (tmp_path / "a-good.json").write_text(SPEC)
    fifo(tmp_path / "b-fifo.yaml")
    unix_socket(tmp_path / "c-socket.json")
    char_device(tmp_path / "d-null.yaml")
    what, index = returns(CdiScanner([tmp_path]).scan)
    assert what == "value"
    assert index.specs == 1 and "nvidia.com/gpu=gpu0" in index.devices
    problems = {Path(p.path).name: p.reason for p in index.problems}
    assert problems == dict.fromkeys(
        ("b-fifo.yaml", "c-socket.json", "d-null.yaml"), "not a regular file"
    )


def test_cdi_spec_swapped_for_a_fifo_between_listing_and_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race the listing cannot see: the file read is a FIFO by then. Refused, not waited on."""
    spec = tmp_path / "a.yaml"
    spec.write_text(SPEC)
    scanner = CdiScanner([tmp_path])
    real_load = scanner._load

    def swap(path: Path) -> Any:
        path.unlink()
        os.mkfifo(path)
        return real_load(path)

    monkeypatch.setattr(scanner, "_load", swap)
    what, index = returns(scanner.scan)
    assert what == "value" and index.specs == 0
    assert [p.reason for p in index.problems] == ["unreadable: not a regular file (FIFO)"]


def test_procfs_with_fifos_answers_at_once(tmp_path: Path) -> None:
    """A FIFO as /proc/stat fails the CPU read with a reason; one as a process's stat hides only
    that process; neither waits."""
    host = FixtureHost.copy_of(FIXTURES, tmp_path / "host")
    source = ProcfsSource(host.procfs)
    pids = {t.pid for t in source.tasks()}
    victim = 1000
    assert victim in pids
    for path in (host.procfs / "stat", host.procfs / str(victim) / "stat"):
        path.unlink()
        os.mkfifo(path)
    what, got = returns(source.cpu_times)
    assert what == "error" and isinstance(got, SourceError)
    assert "not a regular file" in got.detail
    what, tasks = returns(ProcfsSource(host.procfs).tasks)
    assert what == "value"
    assert {t.pid for t in tasks} == pids - {victim}
