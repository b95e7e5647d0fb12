"""`wattprobe top` in a real 80x24 terminal (tmux): fixture trees, the fake NVML, keys, signals.

A background thread plays a busy node: RAPL counters, process CPU ticks and GPU energy counters
advance every 0.1 s. GPU 1 (pod C alone) draws the most, then GPU 0 (pods A and B); among CPU
users the nginx pod (5f1c3e2a) works most, then 7a8b9c0d, then 9e8d7c6b.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.app.top.render import WORKLOAD_COLUMNS
from tests.app.top.busynode import BUSY_PODS, BusyNode
from tests.app.top.tmux import EXITED, Tmux
from tests.conftest import StartExporter
from tests.sources.gpu.nvml.build import SCENARIO_ENV
from tests.sources.gpu.nvml.pods import H100_PODS, add_pods
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.fixturehost import FixtureHost

TOP = [sys.executable, "-m", "exporter", "top"]


@pytest.fixture
def h100(host: FixtureHost, tmp_path: Path) -> Scenario:
    add_pods(host, H100_PODS)
    return Scenario.from_fixture("h100x8-timesliced", tmp_path / "h100.nvml")


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[Tmux]:
    term = Tmux(tmp_path / "tmux")
    yield term
    term.close()


def nvml_env(fake_nvml_dir: Path, scenario: Scenario) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(fake_nvml_dir), SCENARIO_ENV: str(scenario.path)}


def table_rows(lines: list[str], header: str) -> list[str]:
    """The rows under a table header, up to the first line that is not a row."""
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 1 :]:
        # a blank line, "+N more", the footer or the next section's title ends the table
        if not line.strip() or line.startswith(("sources:", "+", "PODS ", "CONTAINERS ")):
            break
        rows.append(line)
    return rows


def first_column(rows: list[str]) -> list[str]:
    # on 80 columns the name column is what the fixed columns after it leave
    width = 80 - sum(WORKLOAD_COLUMNS) - len(WORKLOAD_COLUMNS)
    return [row[:width].strip() for row in rows]


def assert_fits_80x24(tmux: Tmux, lines: list[str]) -> None:
    assert tmux.size.strip() == "80x24"
    # -J joins rows the terminal wrapped: 24 rows means nothing was wider than 80 columns,
    # and the title on the first row means nothing scrolled
    assert len(lines) == 24, "\n".join(lines)
    assert lines[0].startswith("wattprobe top")
    assert lines[-1].strip().endswith("q  quit")


def quit_and_check_terminal(tmux: Tmux) -> None:
    tmux.keys("q")
    lines = tmux.wait_for_text(EXITED, timeout=15)
    assert f"{EXITED}0" in "\n".join(lines), "\n".join(lines) + tmux.stderr()
    assert not any("wattprobe top" in line for line in lines)  # the alternate screen is gone
    before, after = tmux.stty_before_and_after()
    assert before == after, "the terminal settings were not restored"
    assert "Traceback" not in tmux.stderr()


def test_top_in_process_shows_gpus_and_pods_sorts_and_quits(
    host: FixtureHost, h100: Scenario, fake_nvml_dir: Path, tmux: Tmux
) -> None:
    with BusyNode(host, h100):
        args = [*TOP, *host.args(), "--interval", "0.5s", "--power.idle", "0"]
        tmux.start(args, nvml_env(fake_nvml_dir, h100))
        lines = tmux.wait_for(
            lambda ls: any(line.startswith(BUSY_PODS[0]) for line in ls), "the busiest pod"
        )
        assert_fits_80x24(tmux, lines)
        gpus = table_rows(lines, "GPU ")
        assert [row.split()[0] for row in gpus] == [str(i) for i in range(8)]
        assert all("H100 80GB HBM3" in row and "/700 W" in row for row in gpus)
        assert "85%" in gpus[0] and "520/700 W" in gpus[0]
        assert any(line.startswith("package x2") and "rapl" in line for line in lines)
        assert "PODS by CPU power" in "\n".join(lines)
        assert first_column(table_rows(lines, "POD "))[:3] == BUSY_PODS
        assert any(line.startswith("sources:") and "nvml ok" in line for line in lines)

        tmux.keys("g")
        lines = tmux.wait_for_text("PODS by GPU power")
        rows = table_rows(lines, "POD ")
        # GPU 1 belongs to pod C alone; GPU 0 is shared by A (SM 60 %) and B (SM 20 %)
        assert first_column(rows)[0] == "pod 000000c3"
        assert rows[0].split()[-1] == "1"
        assert first_column(rows).index("pod 000000a1") < first_column(rows).index("pod 000000b2")

        tmux.keys("n")
        lines = tmux.wait_for_text("PODS by name")
        names = first_column(table_rows(lines, "POD "))
        assert names == sorted(names) and len(names) >= 5

        tmux.keys("v")
        lines = tmux.wait_for_text("CONTAINERS by name")
        assert all(
            "/" in row or "processes" in row or row.startswith("container ")
            for row in first_column(table_rows(lines, "CONTAINER "))
        )
        assert_fits_80x24(tmux, lines)

        tmux.resize(100, 30)  # SIGWINCH: the screen is laid out again for the new size
        lines = tmux.wait_for(lambda ls: len(ls) == 30 and "q  quit" in ls[-1], "a 100x30 screen")
        assert lines[0].startswith("wattprobe top") and max(len(line) for line in lines) <= 100
        assert len(table_rows(lines, "GPU ")) == 8
        quit_and_check_terminal(tmux)


def test_top_from_a_running_exporter(
    host: FixtureHost,
    h100: Scenario,
    fake_nvml_dir: Path,
    exporter: StartExporter,
    tmux: Tmux,
) -> None:
    with BusyNode(host, h100):
        proc = exporter(
            *host.args(),
            *("--interval", "0.4s", "--power.idle", "0"),
            env=nvml_env(fake_nvml_dir, h100),
        )
        url = proc.url  # no path: top adds /metrics
        tmux.start([*TOP, "--from", url, "--interval", "0.2s"], {})
        lines = tmux.wait_for(
            lambda ls: any(line.startswith(BUSY_PODS[0]) for line in ls), "the busiest pod"
        )
        assert_fits_80x24(tmux, lines)
        assert f"{url}/metrics" in lines[0]
        assert len(table_rows(lines, "GPU ")) == 8
        assert first_column(table_rows(lines, "POD "))[:3] == BUSY_PODS
        tmux.keys("g")
        lines = tmux.wait_for_text("PODS by GPU power")
        assert first_column(table_rows(lines, "POD "))[0] == "pod 000000c3"

        proc.stop()  # the exporter goes away: top says so and keeps the last numbers
        lines = tmux.wait_for_text(f"cannot read {url}/metrics: Connection refused; retrying")
        assert first_column(table_rows(lines, "POD "))[0] == "pod 000000c3"
        assert_fits_80x24(tmux, lines)
        quit_and_check_terminal(tmux)


def test_top_without_power_sensors_or_gpus_says_what_is_missing(
    host: FixtureHost, tmux: Tmux
) -> None:
    shutil.rmtree(host.sysfs / "class" / "powercap")
    shutil.rmtree(host.sysfs / "class" / "hwmon")
    with BusyNode(host, None):
        # no libnvidia-ml.so.1 anywhere on the library path, and no /proc/driver/nvidia
        tmux.start([*TOP, *host.args(), "--interval", "0.5s"], {"LD_LIBRARY_PATH": ""})
        lines = tmux.wait_for_text("ESTIMATED")
        assert_fits_80x24(tmux, lines)
        sources = next(line for line in lines if line.startswith("sources:"))
        # what the node lacks comes last, one group, cut at 80 columns after hwmon here
        assert "  n/a: rapl hwmon " in sources
        assert not any(line.startswith("GPU ") for line in lines)  # no GPU table at all
        assert first_column(table_rows(lines, "POD "))[:3] == BUSY_PODS
        quit_and_check_terminal(tmux)


def stty_of(tty: str) -> str:
    return subprocess.run(
        ["stty", "-a", "-F", tty], capture_output=True, text=True, timeout=10, check=True
    ).stdout


def process_state(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2]


def test_top_gives_the_terminal_back_on_ctrl_z_and_fg_takes_it_again(
    host: FixtureHost, tmux: Tmux
) -> None:
    with BusyNode(host, None):
        tmux.start_shell({"LD_LIBRARY_PATH": ""})
        tmux.wait_for_text("$")
        tmux.type_line(f"stty -a > {tmux.dir}/stty.before")
        tmux.run_in_shell([*TOP, *host.args(), "--interval", "0.5s"])
        tmux.wait_for_text("PODS by CPU power")
        tty = tmux.pane_tty
        assert " -icanon " in stty_of(tty)  # cbreak while running
        pid = tmux.pid()

        tmux.keys("C-z")
        lines = tmux.wait_for_text("Stopped")
        assert not any("wattprobe top" in line for line in lines)  # back on the normal screen
        assert process_state(pid) == "T"

        tmux.type_line("fg")
        tmux.wait_for_text("PODS by CPU power")
        assert " -icanon " in stty_of(tty)
        assert_fits_80x24(tmux, tmux.screen())

        tmux.keys("q")
        deadline = time.monotonic() + 15
        while Path(f"/proc/{pid}").exists():
            assert time.monotonic() < deadline, "top did not quit"
            time.sleep(0.1)
        # bash keeps the settings a program leaves behind when it exits normally
        tmux.type_line(f"stty -a > {tmux.dir}/stty.after")
        deadline = time.monotonic() + 10
        while not (tmux.dir / "stty.after").exists() or not (tmux.dir / "stty.after").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.1)
        before, after = tmux.stty_before_and_after()
        assert before == after
        assert "Traceback" not in tmux.stderr()


def test_top_gives_the_terminal_back_on_sigterm(host: FixtureHost, tmux: Tmux) -> None:
    with BusyNode(host, None):
        tmux.start([*TOP, *host.args(), "--interval", "0.5s"], {"LD_LIBRARY_PATH": ""})
        tmux.wait_for_text("PODS by CPU power")
        assert " -icanon " in stty_of(tmux.pane_tty)
        os.kill(tmux.pid(), signal.SIGTERM)
        lines = tmux.wait_for_text(EXITED, timeout=15)
        assert f"{EXITED}0" in "\n".join(lines)
        before, after = tmux.stty_before_and_after()
        assert before == after
        assert "Traceback" not in tmux.stderr()
