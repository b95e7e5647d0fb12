"""Start-up progress: a self-rewriting line on a terminal, plain log lines elsewhere."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import select
import subprocess
import sys
import time

import pytest

from exporter.app import progress as progress_module
from exporter.app.progress import Progress, TerminalProgress, progress_for
from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.running import REPO, free_port


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_off_a_terminal_a_quick_step_logs_its_end_only(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="wattprobe")
    progress = progress_for(io.StringIO())
    assert type(progress) is Progress
    with progress.step("compiling eBPF programs"):
        assert progress.active == "compiling eBPF programs"
    assert progress.active == ""
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and messages[0].startswith("compiling eBPF programs: done (")


def test_off_a_terminal_a_slow_step_says_it_is_waiting(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    caplog.set_level(logging.INFO, logger="wattprobe")
    monkeypatch.setattr(progress_module, "SLOW_S", 0.05)
    progress = Progress()
    with progress.step("compiling eBPF programs", expected_s=3):
        deadline = time.monotonic() + 5
        while not caplog.records and time.monotonic() < deadline:
            time.sleep(0.01)
    messages = [r.getMessage() for r in caplog.records]
    assert messages[0] == "compiling eBPF programs... (about 3s)"
    assert messages[1].startswith("compiling eBPF programs: done (")


def test_a_failed_step_leaves_the_report_to_its_caller(caplog: pytest.LogCaptureFixture) -> None:
    """`serve --activity-source ebpf` without privileges must stay one line on stderr."""
    caplog.set_level(logging.INFO, logger="wattprobe")
    progress = Progress()
    with pytest.raises(RuntimeError), progress.step("compiling eBPF programs"):
        raise RuntimeError("no headers")
    assert not caplog.records
    assert progress.active == ""


def test_on_a_terminal_the_line_rewrites_itself_and_clears() -> None:
    clock = Clock()
    out = Tty()
    progress = TerminalProgress(out, clock)
    progress.begin("measuring the first interval", expected_s=5)
    clock.now += 2.5
    progress._draw()  # what the spinner thread does every 0.1 s
    progress.end("ready")
    progress.close()
    text = out.getvalue()
    assert "\r\x1b[K| measuring the first interval... 0.0s of ~5s" in text
    assert "measuring the first interval... 2.5s of ~5s" in text
    assert text.endswith("\r\x1b[K")  # the line is gone; the outcome is a log line
    assert "\n" not in text


def test_a_log_record_clears_the_line_first() -> None:
    clock = Clock()
    out = Tty()
    handler = logging.StreamHandler(out)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        progress = progress_for(out)
        assert isinstance(progress, TerminalProgress)
        progress._clock = clock
        progress.begin("compiling eBPF programs")
        logging.getLogger("wattprobe.test").warning("headers from /lib/modules")
        progress._draw()  # within the quiet time after a record: no redraw
        after_record = out.getvalue()
        clock.now += 1.0
        progress._draw()
        progress.close()
    finally:
        root.removeHandler(handler)
    assert "compiling eBPF programs... 0.0s\r\x1b[Kheaders from /lib/modules\n" in after_record
    assert after_record.endswith("headers from /lib/modules\n")
    assert out.getvalue()[len(after_record) :].startswith(
        "\r\x1b[K- compiling eBPF programs... 1.0s"
    )


def test_serve_on_a_terminal_shows_the_first_interval_filling(host: FixtureHost) -> None:
    """The real thing: `wattprobe serve` with its stderr on a pseudo-terminal."""
    master, slave = pty.openpty()
    port = free_port()
    proc = subprocess.Popen(
        [
            *(sys.executable, "-m", "exporter", "serve", *host.args(), "--interval", "1.5s"),
            *("--web.listen-address", f"127.0.0.1:{port}"),
        ],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    os.close(slave)
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while b"measuring the first interval: ready" not in seen:
            assert time.monotonic() < deadline, seen.decode(errors="replace")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError:
                    break
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        os.close(master)
    text = seen.decode(errors="replace")
    # bcc's compile is a step too; the fixture /proc is not live, so eBPF gives up and says so
    # the first frame drawn: its spinner and time depend on when the process got the CPU
    assert re.search(
        r"\r\x1b\[K[|/\\-] compiling and loading the eBPF programs\.\.\. \d+\.\ds", text
    )
    assert "eBPF activity source unavailable (procfs not live" in text
    assert re.search(r"\r\x1b\[K[|/\\-] measuring the first interval\.\.\. \d\.\ds of ~1\.5s", text)
    assert "measuring the first interval: ready (" in text
    assert "Traceback" not in text


def test_serve_off_a_terminal_logs_plain_lines(host: FixtureHost, exporter: StartExporter) -> None:
    proc = exporter(*host.args(), "--interval", "1.5s")  # longer than progress.SLOW_S
    proc.wait_for("/readyz")
    deadline = time.monotonic() + 10
    while "ready (" not in proc.log() and time.monotonic() < deadline:
        time.sleep(0.05)
    log = proc.log()
    assert "measuring the first interval... (about 1.5s)" in log
    assert "measuring the first interval: ready (" in log
    assert "\x1b[" not in log
