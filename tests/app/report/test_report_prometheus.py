"""`wattprobe report` against Debian's prometheus holding a known past (tests/support/reportdata):
the figures are asserted exactly against hand sums, the HTML page is opened in headless Chromium.

The known past, 2025-03-01..2025-03-02 (48 h; 1 W for 48 h = 0.048 kWh):

| node | PUE | EUR/kWh | g/kWh | alpha W | beta W | gamma W | node row W (measured - pods) |
|---|---|---|---|---|---|---|---|
| a | 1.5 | 0.2 | 300 | 60+5 CPU, 150 GPU = 215 | 40 CPU, 30 GPU idle = 70 | | 460 - 285 = 175 |
| b | 1.2 | 0.3 | 100 | | 30 | 10+2 = 12 | 100 - 42 = 58 |
| c | - | - | - | 20 | | | 50 - 20 = 30 |

Node a measures package 2 x (80+20 | 100) = 200 W, dram 20 W (its core zone, inside package, is
not added) and GPUs 200 + 40 W: 460 W. So alpha = 235 W x 0.048 = 11.28 kWh; facility
(215 x 1.5 + 20) x 0.048 = 16.44 kWh; cost 215 x 1.5 x 0.2 x 0.048 = 3.096 EUR (node c has no
price: 20 W x 0.048 = 0.96 kWh unpriced); carbon 215 x 1.5 x 0.048 x 300 g = 4.644 kg.
beta: 100 W = 4.8 kWh; facility (70 x 1.5 + 30 x 1.2) x 0.048 = 6.768; cost (105 x 0.2 + 36 x 0.3)
x 0.048 = 1.5264; carbon (105 x 300 + 36 x 100) x 0.048 / 1000 = 1.6848 kg.
gamma: 12 W = 0.576 kWh; facility 0.6912; cost 14.4 x 0.3 x 0.048 = 0.20736 -> 0.2074;
carbon 14.4 x 0.048 x 100 / 1000 = 0.06912 kg. node row: 263 W = 12.624 kWh; facility
(262.5 + 69.6 + 30) x 0.048 = 17.3808; cost (52.5 + 20.88) x 0.048 = 3.52224 -> 3.5222; carbon
(262.5 x 300 + 69.6 x 100) x 0.048 / 1000 = 4.11408 kg; unpriced 30 x 0.048 = 1.44 kWh.
GPUs: alpha holds GPU 0 (50% busy), beta GPU 1 (never busy), both the whole 48 h at 2.5 EUR/h
(the H100 model's price): 48 h and 120 EUR each. GPU 1's idle hours: a minute counts while the
idle alert fires, once its condition held at every minute point from an hour before (61 points);
the data starts 2025-03-01 00:00, so the first such minute is 01:00 and day one has
1440 - 59 = 1381, day two 1440: 2821 min = 47.0167 h, x 2.5 = 117.5417 EUR.
MIG devices on node a's GPU 2 (MIG mode), both held by alpha the whole 48 h: a 1g.10gb at its
resource's 0.5 EUR/h (24 EUR) and a 3g.40gb at 3/7 of the H100's 2.5 EUR/h (48 x 2.5 x 3/7 =
51.4286 EUR): alpha 144 GPU-hours, 120 + 24 + 51.4286 = 195.4286 EUR.
"""

from __future__ import annotations

import os
import pty
import re
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.app.cli import main
from tests.support.monitoringstack import Daemon
from tests.support.realparts import require_binary
from tests.support.reportdata import fleet, start_filled_prometheus

pytestmark = [pytest.mark.real, pytest.mark.slow]

PERIOD = "2025-03-01..2025-03-02"
EXPECTED_CSV = """\
namespace,kwh,facility_kwh,cost_EUR,carbon_kg,unpriced_kwh,gpu_hours,gpu_cost_EUR,idle_gpu_hours,idle_gpu_cost_EUR,unpriced_gpu_hours
alpha,11.280000,16.440000,3.0960,4.644000,0.960000,144.0000,195.4286,0.0000,0.0000,0.0000
beta,4.800000,6.768000,1.5264,1.684800,0.000000,48.0000,120.0000,47.0167,117.5417,0.0000
gamma,0.576000,0.691200,0.2074,0.069120,0.000000,0.0000,0.0000,0.0000,0.0000,0.0000
(node),12.624000,17.380800,3.5222,4.114080,1.440000,0.0000,0.0000,0.0000,0.0000,0.0000
(total),29.280000,41.280000,8.3520,10.512000,2.400000,192.0000,315.4286,47.0167,117.5417,0.0000
"""


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    daemon = start_filled_prometheus(tmp_path_factory.mktemp("report-prom"), fleet())
    yield daemon
    daemon.stop()


def report(prometheus: Daemon, *args: str) -> int:
    try:
        main(["report", "--prometheus", prometheus.url, *args])
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_csv_figures_are_the_hand_sums(
    prometheus: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.csv"
    assert report(prometheus, "--period", PERIOD, "--out", str(out)) == 0
    assert out.read_text() == EXPECTED_CSV
    # what the figures leave out is said, since a CSV has no room for it
    assert capsys.readouterr().err.splitlines() == [
        "wattprobe: note: no PUE for c: their facility energy is their IT energy "
        "(no overhead counted)",
        "wattprobe: note: no carbon intensity for c: their energy has no carbon figure",
        "wattprobe: note: no energy price for c: their energy has no cost (column unpriced_kwh)",
    ]


def test_the_node_row_makes_the_total_the_measured_energy(
    prometheus: Daemon, tmp_path: Path
) -> None:
    """Independently of the report: Prometheus' own sum of the nodes' attributed zones and GPUs."""
    out = tmp_path / "r.csv"
    assert report(prometheus, "--period", PERIOD, "--out", str(out)) == 0
    total = next(line for line in out.read_text().splitlines() if line.startswith("(total),"))
    # (460 + 100 + 50) W x 48 h
    assert total.split(",")[1] == "29.280000"


def test_partial_data_is_one_line_and_exit_1(
    prometheus: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.csv"
    # job "gappy": its node has no samples on 2025-03-02
    status = report(
        prometheus,
        "--period",
        "2025-03-01..2025-03-03",
        "--selector",
        'job="gappy"',
        "--out",
        str(out),
    )
    err = capsys.readouterr().err
    assert status == 1
    assert err == (
        "wattprobe: error: partial data: no energy data at all on 2025-03-02 (Prometheus down or "
        "retention too short? --allow-partial writes the report anyway, with these notes)\n"
    )
    assert not out.exists()
    # days before Prometheus holds anything
    status = report(prometheus, "--period", "2025-02-27..2025-03-02", "--out", str(out))
    assert status == 1
    assert "no energy data at all on 2025-02-27, 2025-02-28" in capsys.readouterr().err


def test_a_node_gap_among_other_nodes_names_the_node(
    prometheus: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.csv"
    status = report(
        prometheus,
        "--period",
        "2025-03-01..2025-03-03",
        "--selector",
        'job=~"gappy|wattprobe"',
        "--out",
        str(out),
    )
    assert status == 1
    assert "node d has no energy data on 2025-03-02" in capsys.readouterr().err
    status = report(
        prometheus,
        "--period",
        "2025-03-01..2025-03-03",
        "--selector",
        'job=~"gappy|wattprobe"',
        "--allow-partial",
        "--out",
        str(out),
    )
    assert status == 0
    assert "delta," in out.read_text()


def test_a_refused_query_is_one_line(
    prometheus: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = report(
        prometheus, "--period", PERIOD, "--selector", "job=", "--out", str(tmp_path / "r.csv")
    )
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith(
        f"wattprobe: error: Prometheus at {prometheus.url} refused a query: bad_data: "
    )
    assert err.count("\n") == 1


def _console_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def _chromium(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    binary = require_binary("chromium")
    return subprocess.run(
        [
            binary,
            "--headless",
            "--disable-gpu",
            "--no-sandbox",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_html_renders_in_chromium_without_console_errors(
    prometheus: Daemon, tmp_path: Path
) -> None:
    page = tmp_path / "report.html"
    assert report(prometheus, "--period", PERIOD, "--format", "html", "--out", str(page)) == 0
    html = page.read_text()
    # self-contained: no script, nothing fetched
    assert "<script" not in html
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)

    # the console check itself: a page that logs an error is caught
    bad = tmp_path / "bad.html"
    bad.write_text(
        '<!DOCTYPE html><html><body><script>console.error("seen")</script></body></html>'
    )
    assert _console_lines(_chromium(tmp_path, "--dump-dom", bad.as_uri()).stderr)

    dom = _chromium(tmp_path, "--dump-dom", page.as_uri())
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console_lines(dom.stderr) == []
    # what the browser built: the table's rows and the five plots, with their figures
    assert dom.stdout.count("<svg") == 5
    for cell in ("11.280000", "117.5417", "(node)", "47.02 h"):
        assert cell in dom.stdout

    shot = tmp_path / "shot.png"
    taken = _chromium(tmp_path, f"--screenshot={shot}", "--window-size=1200,1800", page.as_uri())
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert _console_lines(taken.stderr) == []
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (1200, 1800)
    assert len(data) > 50_000  # text, table and bars: a blank page of this size is 10 kB


def test_png_for_chat(prometheus: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "report.png"
    # the format follows the file's suffix
    assert report(prometheus, "--period", PERIOD, "--out", str(out)) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", data[16:24]) == (900, 1200)  # 9 x 12 in at 100 dpi


def test_node_batches_give_the_same_figures(prometheus: Daemon, tmp_path: Path) -> None:
    out = tmp_path / "r.csv"
    # and the selector may be written with PromQL's braces
    args = ("--nodes-per-query", "1", "--selector", '{job="wattprobe"}')
    assert report(prometheus, "--period", PERIOD, *args, "--out", str(out)) == 0
    assert out.read_text() == EXPECTED_CSV


def test_progress_bar_on_a_terminal(prometheus: Daemon, tmp_path: Path) -> None:
    """On a terminal (a pty here) rich draws a bar per chunk: 2 days x 3 node batches."""
    main_fd, tty_fd = pty.openpty()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "exporter",
                "report",
                "--prometheus",
                prometheus.url,
                "--period",
                PERIOD,
                "--nodes-per-query",
                "1",
                "--out",
                str(tmp_path / "r.csv"),
            ],
            stderr=tty_fd,
            stdout=subprocess.DEVNULL,
            env={**os.environ, "COLUMNS": "120", "TERM": "xterm"},
        )
        os.close(tty_fd)
        seen = b""
        while True:
            try:
                chunk = os.read(main_fd, 4096)
            except OSError:  # the pty closes when the process ends
                break
            if not chunk:
                break
            seen += chunk
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(main_fd)
    text = seen.decode(errors="replace")
    assert "querying Prometheus" in text
    assert "6/6" in text  # the bar's final state, drawn before it is cleared
    assert "2025-03-02, nodes 3/3" in text


def test_nothing_there_is_one_line(
    prometheus: Daemon, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = report(
        prometheus,
        "--period",
        PERIOD,
        "--selector",
        'job="elsewhere"',
        "--out",
        str(tmp_path / "r.csv"),
    )
    assert status == 1
    assert capsys.readouterr().err == (
        'wattprobe: error: no wattprobe_node_energy_joules_total{job="elsewhere"} in '
        f"{PERIOD}: wrong Prometheus, selector or period?\n"
    )
