"""`wattprobe check` as a subprocess: every source with what it found, or why not and the fix;
the JSON document validated against docs/check.schema.json; exit 0 only when power and activity
can be measured, 1 when not, 2 on a usage error."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from exporter.app.check import (
    FIX_UNKNOWN,
    MOUNT_PROCFS,
    MOUNT_SYSFS,
    POWER,
    CheckResult,
    Finding,
    SourceCheck,
    run_checks,
)
from exporter.app.check.report import report, text_lines
from exporter.model.config import Config
from exporter.model.spec import BuildContext
from exporter.sources.gpu.nvml.check import MOUNT_LIBRARIES
from exporter.sources.power.rapl import FIX_PERMISSION, FIX_RAPL_BARE_METAL, FIX_RAPL_VM
from tests.sources.gpu.nvml.build import SCENARIO_ENV
from tests.sources.gpu.nvml.pods import H100_PODS, add_pods
from tests.sources.gpu.nvml.scenario import Scenario
from tests.support.drmhost import RDNA3, write_card
from tests.support.fixturehost import FixtureHost
from tests.support.paths import FIXTURES
from tests.support.realparts import require_binary, require_root
from tests.support.running import REPO, free_port

SCHEMA = json.loads((REPO / "docs" / "check.schema.json").read_text())
H100_UUID_0 = "GPU-5c8e1f3a-2b4d-4e6f-8a1b-3c5d7e9f0a01"


@dataclass
class Checked:
    code: int
    report: dict[str, Any]
    text: str  # the same check's human output

    def source(self, name: str) -> dict[str, Any]:
        found: list[dict[str, Any]] = [s for s in self.report["sources"] if s["source"] == name]
        assert len(found) == 1, f"{name}: {self.report['sources']}"
        return found[0]

    def names(self) -> list[str]:
        return [s["source"] for s in self.report["sources"]]


def wattprobe(
    args: Sequence[str], env: Mapping[str, str] | None = None, user: int | None = None
) -> subprocess.CompletedProcess[str]:
    prefix: list[str] = []
    if user is not None:
        setpriv = require_binary("setpriv")
        prefix = [setpriv, f"--reuid={user}", f"--regid={user}", "--clear-groups"]
    return subprocess.run(
        [*prefix, sys.executable, "-m", "exporter", *args],
        cwd=REPO,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def check(*args: str, env: Mapping[str, str] | None = None, user: int | None = None) -> Checked:
    """`check --json` and `check` with the same arguments; the JSON is schema-checked."""
    as_json = wattprobe(["check", "--json", *args], env, user)
    assert "Traceback" not in as_json.stderr, as_json.stderr
    document = json.loads(as_json.stdout)
    jsonschema.validate(document, SCHEMA)
    assert document["exit_code"] == as_json.returncode
    assert document["ok"] is (as_json.returncode == 0)
    as_text = wattprobe(["check", *args], env, user)
    assert as_text.returncode == as_json.returncode
    assert "Traceback" not in as_text.stderr, as_text.stderr
    return Checked(as_json.returncode, document, as_text.stdout)


@pytest.fixture
def h100(host: FixtureHost, tmp_path: Path) -> Scenario:
    add_pods(host, H100_PODS)
    return Scenario.from_fixture("h100x8-timesliced", tmp_path / "h100.nvml")


def nvml_env(fake_nvml_dir: Path, scenario: Scenario) -> dict[str, str]:
    return {"LD_LIBRARY_PATH": str(fake_nvml_dir), SCENARIO_ENV: str(scenario.path)}


NO_NVML = {"LD_LIBRARY_PATH": ""}  # this machine has no libnvidia-ml.so.1 of its own


@pytest.mark.smoke
def test_everything_present(host: FixtureHost, h100: Scenario, fake_nvml_dir: Path) -> None:
    # eBPF attaches to the live kernel, which the fixture /proc is not: it is switched off here
    # (it has its own cases below and in tests/sources/activity/test_ebpf_real.py)
    args = [*host.args(), "--activity-source", "procfs"]
    write_card(host.sysfs, RDNA3)  # and an AMD GPU beside the NVIDIA ones
    result = check(*args, env=nvml_env(fake_nvml_dir, h100))
    assert result.code == 0
    assert result.report["schema_version"] == 1
    assert result.report["power"] == ["rapl", "hwmon", "estimated", "nvml", "drm"]
    drm = result.source("drm")
    assert drm["status"] == "ok" and drm["found"] == f"1 GPUs: {RDNA3.pci} (amd)"
    assert drm["items"][0].startswith(f"card0 {RDNA3.pci} AMD GPU 0x744c (amdgpu) [amdgpu]: ")
    assert result.report["activity"] == ["procfs"]
    assert result.names()[:6] == ["procfs", "ebpf", "rapl", "hwmon", "estimated", "nvml"]
    assert result.source("ebpf")["status"] == "disabled"

    procfs = result.source("procfs")
    assert procfs["status"] == "ok" and procfs["kind"] == "activity"
    # 8 pods in the fixture tree, 5 more for the GPU scenario
    assert procfs["found"] == "4 CPUs, 27 processes, 19 in containers (13 pods)"
    assert "pod 5f1c3e2a-8b4d-4c6e-9f0a-1b2c3d4e5f60: 3 processes" in procfs["items"]

    rapl = result.source("rapl")
    assert rapl["status"] == "ok" and rapl["found"].startswith("6 zones: package (intel-rapl:0)")
    assert rapl["items"][0] == "package intel-rapl:0 (package-0), wraps at 262143 J"
    assert rapl["items"][-1] == (
        "left out: intel-rapl-mmio:0 (package-0), the same counter as its MSR zone"
    )
    hwmon = result.source("hwmon")
    assert hwmon["items"] == [
        "power_meter_power1 (ACPI000D:00, power reading)",
        "amdgpu_ppt (0000:03:00.0, power reading), at most 203 W",  # its power1_cap
        "i915_energy1 (0000:00:02.0, energy counter)",
    ]
    assert result.source("estimated")["found"].startswith("standby: measured power is available")
    nvml = result.source("nvml")
    assert nvml["status"] == "ok"
    assert len(nvml["items"]) == 8
    assert nvml["items"][0] == f"0 NVIDIA H100 80GB HBM3 (MIG off) {H100_UUID_0}"

    lines = result.text.splitlines()
    # the widest name (podresources) sets the column: every row's text starts at the same place
    assert lines[0].startswith("OK   procfs       4 CPUs")
    assert "OK   nvml         driver 550.54.15" in result.text
    assert "                  - 0 NVIDIA H100 80GB HBM3 (MIG off)" in result.text
    assert "FAIL" not in result.text and "n/a" not in result.text
    # nothing to fix on a working source: fix and hint are null, not a sentence
    assert all(s["fix"] is None and s["hint"] is None for s in result.report["sources"] if s["ok"])
    assert result.report["activity_source"] == "procfs"
    assert "off  ebpf         disabled" in result.text
    rows = [line for line in lines if line[:4].strip() in ("OK", "FAIL", "n/a", "off")]
    assert [row.split()[1] for row in rows] == result.names()
    assert all(row[17] == " " and row[18] != " " for row in rows), rows
    assert lines[-1] == (
        "ready: power measured by rapl, hwmon, nvml, drm; per-process activity from procfs (exit 0)"
    )


def test_no_rapl_is_not_applicable_not_a_failure(host: FixtureHost) -> None:
    shutil.rmtree(host.sysfs / "class" / "powercap")
    result = check(*host.args(), env=NO_NVML)
    assert result.code == 0
    rapl = result.source("rapl")
    assert rapl["status"] == "absent" and rapl["ok"] is False and rapl["reason"] == "absent"
    assert "no RAPL zones" in rapl["detail"]
    assert result.report["power"] == ["hwmon", "estimated"]
    assert any(
        line.startswith("n/a  rapl         absent: no RAPL zones")
        for line in result.text.splitlines()
    )
    assert "FAIL rapl" not in result.text
    assert "hint: no RAPL here" in result.text  # no cpuinfo in the fixture: the generic hint


@pytest.mark.parametrize(
    ("flags", "fix"),
    [("fpu vme hypervisor", FIX_RAPL_VM), ("fpu vme msr", FIX_RAPL_BARE_METAL)],
)
def test_no_rapl_hint_depends_on_vm_or_bare_metal(host: FixtureHost, flags: str, fix: str) -> None:
    shutil.rmtree(host.sysfs / "class" / "powercap")
    (host.procfs / "cpuinfo").write_text(
        f"processor\t: 0\nvendor_id\t: GenuineIntel\nflags\t\t: {flags}\n"
    )
    result = check(*host.args(), env=NO_NVML)
    assert result.source("rapl")["status"] == "absent"
    # nothing to fix: the JSON's fix is null, what it means is the hint
    assert result.source("rapl")["fix"] is None
    assert result.source("rapl")["hint"] == fix
    if fix == FIX_RAPL_VM:
        assert "hwmon or the estimate is used" in fix
        # with the estimate switched off (its old flag name still works) the hint does not
        # promise it
        result = check(*host.args(), "--no-collector.estimate", env=NO_NVML)
        hint = result.source("rapl")["hint"]
        assert result.source("estimated")["status"] == "disabled"
        assert "estimate is used" not in hint and "the estimate is off" in hint, hint


def test_a_faulted_zone_and_sensor_are_named_with_their_fault(host: FixtureHost) -> None:
    (host.rapl_dir("intel-rapl:0:0") / "energy_uj").write_text("9" * 400 + "\n")
    host.hwmon_file("hwmon2", "power1_input").write_text("junk\n")
    result = check(*host.args(), env=NO_NVML)
    rapl = result.source("rapl")
    assert rapl["status"] == "ok" and rapl["found"].startswith("5 zones: package (intel-rapl:0)")
    assert "core intel-rapl:0:0 (core), wraps at 262143 J: out of range" in rapl["items"]
    assert "dram intel-rapl:0:1 (dram), wraps at 65713 J" in rapl["items"]
    hwmon = result.source("hwmon")
    assert hwmon["found"].startswith("2 sensors: power_meter_power1")
    assert "amdgpu_ppt (0000:03:00.0, power reading), at most 203 W: garbage" in hwmon["items"]


def test_no_sysfs_is_a_failure_with_the_mount_to_fix(host: FixtureHost) -> None:
    missing = host.root / "no-sys"
    result = check("--path.sysfs", str(missing), "--path.procfs", str(host.procfs), env=NO_NVML)
    for name in ("rapl", "hwmon"):
        entry = result.source(name)
        assert entry["status"] == "fail" and entry["reason"] == "no sysfs"
        assert entry["fix"] == MOUNT_SYSFS
    assert result.source("estimated")["found"].startswith("in use: no power sensor found")
    assert result.code == 0  # the estimate still measures power, and says so
    assert "power estimated (no sensor works)" in result.text.splitlines()[-1]
    assert "FAIL rapl" in result.text and f"fix: {MOUNT_SYSFS}" in result.text


def test_rapl_unreadable_without_privileges_names_the_capability() -> None:
    require_root()  # to drop to nobody with setpriv, as a container without privileges runs
    # pytest's own temporary directories are private to root: this copy is readable by nobody
    with tempfile.TemporaryDirectory(prefix="wattprobe-check-") as tmp:
        os.chmod(tmp, 0o755)
        host = FixtureHost.copy_of(FIXTURES, Path(tmp) / "host")
        for zone in (host.sysfs / "class" / "powercap").iterdir():
            energy = zone / "energy_uj"
            if energy.exists():
                energy.chmod(0o400)  # as the kernel has it since 5.10
        result = check(*host.args(), env=NO_NVML, user=65534)
    rapl = result.source("rapl")
    assert rapl["status"] == "fail" and rapl["reason"] == "permission denied"
    assert rapl["fix"] == FIX_PERMISSION and "CAP_DAC_READ_SEARCH" in rapl["fix"]
    assert result.code == 0  # hwmon still measures
    assert "FAIL rapl         permission denied:" in result.text


def test_no_nvml_library_on_a_node_without_nvidia_driver_is_absent(host: FixtureHost) -> None:
    result = check(*host.args(), env=NO_NVML)
    nvml = result.source("nvml")
    assert nvml["status"] == "absent" and nvml["reason"] == "absent"
    assert "no NVIDIA driver" in nvml["detail"]
    assert result.code == 0
    assert "n/a  nvml" in result.text and "hint: no NVIDIA driver on this node" in result.text


def test_no_nvml_library_with_the_driver_loaded_is_a_failure(host: FixtureHost) -> None:
    (host.procfs / "driver" / "nvidia").mkdir(parents=True)  # the kernel driver is there
    result = check(*host.args(), env=NO_NVML)
    nvml = result.source("nvml")
    assert nvml["status"] == "fail" and nvml["reason"] == "library not found"
    assert nvml["fix"] == MOUNT_LIBRARIES and "NVIDIA_VISIBLE_DEVICES=all" in nvml["fix"]
    assert result.code == 0  # CPU power is still measured
    assert "FAIL nvml         library not found" in result.text
    assert f"fix: {MOUNT_LIBRARIES}" in result.text


def test_without_an_activity_source_exit_1(host: FixtureHost) -> None:
    result = check("--path.sysfs", str(host.sysfs), "--path.procfs", str(host.root / "missing"))
    assert result.code == 1
    procfs = result.source("procfs")
    assert procfs["status"] == "fail" and procfs["fix"] == MOUNT_PROCFS
    assert result.report["activity"] == []
    assert result.text.splitlines()[-1] == (
        "not ready: no activity source works; see the fixes above (exit 1)"
    )


def test_without_a_power_source_exit_1(host: FixtureHost) -> None:
    off = [f"--no-collector.{name}" for name in ("rapl", "hwmon", "estimated", "nvml")]
    result = check(*host.args(), *off)
    assert result.code == 1
    for name in ("rapl", "hwmon", "estimated", "nvml"):
        entry = result.source(name)
        assert entry["status"] == "disabled"
        assert entry["fix"] is None and entry["hint"] == f"--collector.{name} to enable"
    assert "off  rapl         disabled" in result.text
    assert "not ready: no power source works" in result.text


def test_usage_errors_exit_2_with_one_line() -> None:
    for args in (["--activity-source", "magic"], ["--estimate.max-watts", "-1"], ["--bogus"]):
        result = wattprobe(["check", *args])
        assert result.returncode == 2, result
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Traceback" not in result.stderr


def test_a_crashing_check_is_reported_not_raised(host: FixtureHost) -> None:
    def broken(_config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
        raise KeyError("surprise")

    def fine(_config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
        return Finding.works("1 thing", ["thing"])

    config = Config(procfs=host.procfs, sysfs=host.sysfs)
    results = run_checks(
        config, [SourceCheck("broken", POWER, broken), SourceCheck("fine", "activity", fine)]
    )
    assert results[0].status == "fail" and results[0].reason == "internal error"
    assert "KeyError" in results[0].detail and results[0].fix
    assert results[1].ok
    document = report(results)
    jsonschema.validate(document, SCHEMA)
    assert document["exit_code"] == 1
    assert "FAIL broken     internal error: KeyError: 'surprise'" in "\n".join(text_lines(results))


def test_a_failure_without_a_known_fix_still_gets_one(host: FixtureHost) -> None:
    def vague(_config: Config, _earlier: Sequence[CheckResult], _context: BuildContext) -> Finding:
        return Finding(False, reason="weird", detail="something odd")

    (result,) = run_checks(Config(procfs=host.procfs), [SourceCheck("x", POWER, vague)])
    assert result.fix == FIX_UNKNOWN


# -- the eBPF and kubelet entries ---------------------------------------------------------
# These cases exercise the real eBPF and kubelet entries of `check`; each fails if the situation
# it sets up does not make the source fail, or if the entry is gone.


def require_entry(result: Checked, name: str) -> dict[str, Any]:
    if name not in result.names():
        pytest.fail(f"`check` lost its {name!r} entry: {result.names()}")
    return result.source(name)


@pytest.fixture
def hidden_bcc(tmp_path: Path) -> Iterator[dict[str, str]]:
    """A PYTHONPATH whose `bcc` cannot be imported, as on a node without python3-bpfcc."""
    shadow = tmp_path / "no-bcc" / "bcc"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise ImportError(\"No module named 'bcc' (hidden by the wattprobe test)\")\n"
    )
    yield {"PYTHONPATH": str(shadow.parent)}


def test_ebpf_unavailable(hidden_bcc: dict[str, str]) -> None:
    # this machine's own /proc, /sys and cgroup tree, as eBPF needs: only bcc is missing
    result = check(env={**NO_NVML, **hidden_bcc})
    ebpf = require_entry(result, "ebpf")
    assert ebpf["kind"] == "activity"
    assert ebpf["status"] == "fail", f"bcc was hidden, yet eBPF reports {ebpf}"
    assert ebpf["reason"] and ebpf["detail"]
    assert ebpf["reason"] == "no bcc", ebpf
    assert "python3-bpfcc" in ebpf["fix"]  # the package to install
    assert result.code == 0  # /proc still measures activity
    assert result.report["activity"] == ["procfs"]
    assert "FAIL ebpf" in result.text and "fix:" in result.text


def test_kubelet_unreachable(host: FixtureHost) -> None:
    closed = free_port()  # nothing listens here
    url = f"https://127.0.0.1:{closed}"
    args = ["--kube.pod-source", "kubelet", "--kube.kubelet-url", url, "--kube.node-name", "n1"]
    run = wattprobe(["check", "--json", *host.args(), *args], NO_NVML)
    assert run.returncode != 2, f"`check` does not take the kubelet flags: {run.stderr}"
    result = check(*host.args(), *args, env=NO_NVML)
    kubelet = require_entry(result, "kubelet")
    assert kubelet["kind"] not in (POWER, "activity")
    assert kubelet["status"] == "fail", f"the kubelet at {url} is unreachable, yet {kubelet}"
    assert kubelet["reason"] and f"127.0.0.1:{closed}" in kubelet["detail"]
    assert kubelet["fix"]
    assert result.code == 0  # names are useful, not required to measure
    assert "FAIL kubelet" in result.text
