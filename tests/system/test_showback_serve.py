"""End to end: `wattprobe serve` on the fixture host with --showback.config. The file is changed
on disk and the next intervals serve the new settings; a bad file keeps the old ones served with
the reload gauge at 0; a bad flag or file at start is exit status 2 and one line."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.running import REPO, ExporterProcess, Samples, parse_samples, select

PRICE = "wattprobe_energy_price_per_kwh"
RELOAD_OK = "wattprobe_showback_config_last_reload_successful"
RELOAD_AT = "wattprobe_showback_config_last_reload_success_timestamp_seconds"


def replace_file(path: Path, text: str) -> None:
    """As the kubelet updates a ConfigMap volume: a new file renamed into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def wait_for(proc: ExporterProcess, ok: object, what: str, timeout: float = 30.0) -> Samples:
    """Scrape each new interval until ok(samples) holds (the file is reread once per render)."""
    assert callable(ok)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        samples = parse_samples(proc.wait_next_interval())
        if ok(samples):
            return samples
    raise AssertionError(f"{what}: not served within {timeout}s:\n{proc.log()}")


def one(samples: Samples, name: str, **labels: str) -> float | None:
    found = list(select(samples, name, **labels).values())
    assert len(found) <= 1, found
    return found[0] if found else None


def test_serve_rereads_the_file_and_keeps_the_last_good_one(
    host: FixtureHost, exporter: StartExporter, tmp_path: Path
) -> None:
    path = tmp_path / "showback.yaml"
    replace_file(
        path,
        "pue: 1.3\nenergy_price: 0.21\ngpu_hour_prices:\n"
        "  - resource: nvidia.com/gpu\n    price: 0.75\n",
    )
    proc = exporter(
        *host.args(),
        "--interval",
        "200ms",
        "--showback.currency",
        "EUR",
        "--showback.carbon-intensity",
        "350",
        "--showback.config",
        str(path),
    )
    proc.wait_for("/readyz")
    first = parse_samples(proc.wait_next_interval())
    assert one(first, "wattprobe_node_pue") == 1.3
    assert one(first, PRICE, currency="EUR") == 0.21
    assert one(first, "wattprobe_carbon_intensity_grams_per_kwh") == 350.0
    gpu = select(first, "wattprobe_gpu_hour_price")
    assert gpu == {
        frozenset({("currency", "EUR"), ("model", ""), ("resource", "nvidia.com/gpu")}): 0.75
    }
    assert one(first, RELOAD_OK) == 1.0
    started_at = one(first, RELOAD_AT)
    assert started_at is not None and abs(started_at - time.time()) < 300

    # an edit on disk: served within an interval or two, no restart, no signal
    replace_file(path, "pue: 1.45\nenergy_price: 0.19 EUR\ncarbon_intensity: 120\n")
    changed = wait_for(proc, lambda s: one(s, "wattprobe_node_pue") == 1.45, "the new PUE")
    assert one(changed, PRICE, currency="EUR") == 0.19
    assert one(changed, "wattprobe_carbon_intensity_grams_per_kwh") == 120.0
    assert select(changed, "wattprobe_gpu_hour_price") == {}  # the file no longer prices GPUs
    assert one(changed, RELOAD_OK) == 1.0
    reloaded_at = one(changed, RELOAD_AT)
    assert reloaded_at is not None and started_at is not None and reloaded_at >= started_at

    # a bad file: the last good settings stay, the gauge says 0, the log says why in one line
    replace_file(path, "pue: 0.7\nenergy_price: -1 EUR\n")
    refused = wait_for(proc, lambda s: one(s, RELOAD_OK) == 0.0, "the refusal")
    assert one(refused, "wattprobe_node_pue") == 1.45
    assert one(refused, PRICE, currency="EUR") == 0.19
    assert one(refused, RELOAD_AT) == reloaded_at
    later = parse_samples(proc.wait_next_interval())
    assert one(later, RELOAD_OK) == 0.0 and one(later, "wattprobe_node_pue") == 1.45
    lines = [line for line in proc.log().splitlines() if "showback config" in line]
    assert [line for line in lines if "refused" in line] == [
        next(line for line in lines if "refused" in line)
    ], lines  # once per change, not once per interval
    assert "energy_price: -1 is negative" in proc.log()
    assert proc.proc.poll() is None

    # SIGHUP rereads the file at once, changed or not: the same file is refused once more
    proc.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 30
    while proc.log().count("showback config") < len(lines) + 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "SIGHUP: re-reading showback config" in proc.log()
    assert proc.log().count("refused, still serving the previous one") == 2, proc.log()
    assert one(parse_samples(proc.metrics()), "wattprobe_node_pue") == 1.45


def _serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", "serve", "--web.listen-address", "127.0.0.1:0", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (("--showback.pue", "0.95"), "0.95 is not a PUE"),
        (("--showback.energy-price", "NaN EUR"), "nan is not a finite number"),
        (
            ("--showback.energy-price", "0.2 EUR", "--showback.currency", "USD"),
            "two currencies",
        ),
        (("--showback.config", "{file}"), "colour: unknown key"),
    ],
)
def test_a_bad_setting_at_start_is_exit_2_and_one_line(
    tmp_path: Path, args: tuple[str, ...], reason: str
) -> None:
    path = tmp_path / "showback.yaml"
    path.write_text("colour: blue\n")
    result = _serve(*(a.replace("{file}", str(path)) for a in args))
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("wattprobe: error: "), lines
    assert reason in lines[0]
