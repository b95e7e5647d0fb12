from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time

import pytest

from exporter.model.config import IdlePower, parse_duration, parse_listen_address
from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.running import REPO


def wattprobe(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--interval", "5x"], "--interval"),
        (["--web.listen-address", "nope"], "--web.listen-address"),
        (["--power.idle", "package=lots"], "--power.idle"),
        (["--attribution.idle", "everything"], "--attribution.idle"),
        (["--web.telemetry-path", "metrics"], "--web.telemetry-path"),
        (["--web.telemetry-path", "/healthz"], "--web.telemetry-path"),
        (["--web.telemetry-path", "/readyz"], "--web.telemetry-path"),
        (["--web.telemetry-path", "/"], "--web.telemetry-path"),
        (["--web.telemetry-path", "/m?x=1"], "--web.telemetry-path"),
        (["--web.telemetry-path", "/m etrics"], "--web.telemetry-path"),
        (["--web.max-connections", "0"], "--web.max-connections"),
        (["--web.max-header-bytes", "10"], "--web.max-header-bytes"),
        (["--web.max-header-bytes", "1023"], "--web.max-header-bytes"),
        (["--estimate.max-watts", "-3"], "--estimate.max-watts"),
    ],
)
def test_bad_flag_value_is_one_line_naming_the_flag(args: list[str], flag: str) -> None:
    result = wattprobe("serve", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert flag in lines[0] and "Traceback" not in result.stderr


def test_env_vars_set_flags(host: FixtureHost, exporter: StartExporter) -> None:
    proc = exporter(
        *host.args(),
        env={
            "WATTPROBE_WEB_TELEMETRY_PATH": "/m",
            "WATTPROBE_COLLECTOR_PROCESS": "true",
            "WATTPROBE_INTERVAL": "200ms",
        },
    )
    proc.wait_for("/readyz")
    status, body = proc.get("/m")
    assert status == 200, body
    assert "wattprobe_process_energy_joules_total" in body
    assert proc.get("/metrics")[0] == 404


def test_check_on_fixture_tree_passes_and_reports_sources(host: FixtureHost) -> None:
    result = wattprobe("check", "--json", *host.args())
    assert result.returncode == 0, result.stdout + result.stderr
    report = {s["source"]: s for s in json.loads(result.stdout)["sources"]}
    assert report["rapl"]["ok"] and "6 zones" in report["rapl"]["found"]
    assert report["hwmon"]["ok"]
    assert report["procfs"]["ok"] and "22 processes" in report["procfs"]["found"]
    assert "standby" in report["estimated"]["found"]


def test_check_fails_without_an_activity_source(host: FixtureHost) -> None:
    result = wattprobe(
        "check", "--path.sysfs", str(host.sysfs), "--path.procfs", str(host.root / "missing")
    )
    assert result.returncode == 1
    assert "FAIL procfs" in result.stdout and "fix:" in result.stdout


def test_parsers() -> None:
    assert parse_duration("1m30s") == 90.0
    assert parse_duration("250ms") == 0.25
    assert parse_duration("7") == 7.0
    assert parse_listen_address(":28390") == ("", 28390)
    assert parse_listen_address("[::1]:9000") == ("::1", 9000)
    idle = IdlePower.parse("package=20,dram=3.5,*=1")
    assert (idle.for_zone("package"), idle.for_zone("dram"), idle.for_zone("gpu")) == (
        20.0,
        3.5,
        1.0,
    )
    assert IdlePower.parse("auto").for_zone("package") is None
    for bad in ("0s", "-1s", "1x", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)


def _statuses(result: subprocess.CompletedProcess[str]) -> dict[str, str]:
    assert "Traceback" not in result.stderr, result.stderr
    return {s["source"]: s["status"] for s in json.loads(result.stdout)["sources"]}


@pytest.mark.parametrize("flag", ["--activity.source", "--activity-source"])
def test_activity_source_has_a_dotted_name_and_keeps_the_old_one(
    host: FixtureHost, flag: str
) -> None:
    result = wattprobe("check", "--json", *host.args(), flag, "procfs")
    assert _statuses(result)["ebpf"] == "disabled"
    assert json.loads(result.stdout)["activity_source"] == "procfs"


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--no-collector.estimated"], {}),
        (["--no-collector.estimate"], {}),  # the flag's first name, kept as an alias
        ([], {"WATTPROBE_COLLECTOR_ESTIMATED": "false"}),
        ([], {"WATTPROBE_COLLECTOR_ESTIMATE": "false"}),
    ],
)
def test_the_estimate_is_called_estimated_and_the_old_flag_still_works(
    host: FixtureHost, args: list[str], env: dict[str, str]
) -> None:
    on = wattprobe("check", "--json", *host.args())
    assert _statuses(on)["estimated"] == "ok"
    off = wattprobe("check", "--json", *host.args(), *args, env={**os.environ, **env})
    assert _statuses(off)["estimated"] == "disabled"


LOGFMT_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|\S+)')


@pytest.mark.parametrize("log_format", ["json", "logfmt", "plain"])
def test_log_format(host: FixtureHost, log_format: str) -> None:
    """Every line serve writes on stderr is one record in the chosen format (a few intervals
    at debug level: start-up, sources, intervals, shutdown)."""
    flags = ["--interval", "200ms", "--web.listen-address", "127.0.0.1:0"]
    flags += ["--activity.source", "procfs", "--log.level", "debug", "--log.format", log_format]
    serve = subprocess.Popen(
        [sys.executable, "-m", "exporter", "serve", *host.args(), *flags],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)
    serve.terminate()
    _out, stderr = serve.communicate(timeout=30)
    assert serve.returncode == 0, stderr
    lines = stderr.splitlines()
    assert len(lines) >= 3, stderr
    for line in lines:
        if log_format == "json":
            record = json.loads(line)
            assert set(record) >= {"ts", "level", "logger", "msg"}, record
            assert record["level"] in ("debug", "info", "warn", "error")
            assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", record["ts"])
        elif log_format == "logfmt":
            fields = dict(LOGFMT_FIELD.findall(line))
            assert list(fields)[:4] == ["ts", "level", "logger", "msg"], line
            assert LOGFMT_FIELD.sub("", line).strip() == "", line  # nothing outside key=value
            msg = fields["msg"]
            if msg.startswith('"'):
                assert isinstance(json.loads(msg), str)
        else:
            assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING) ", line)
