"""What `check` and `serve` tell an operator, on this machine's own /proc and /sys, under the
conditions an operator meets: root without CAP_BPF and CAP_PERFMON (capabilities dropped with
setpriv, as tests/system/test_least_privilege.py does), a VM whose PID 1 is not called systemd, the
estimate switched off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from exporter.sources.activity.procfs.source import HOST_PID_NS
from tests.support.ebpfparts import explicit_ebpf_refusal, require_ebpf
from tests.support.realparts import require_binary
from tests.support.running import REPO

SCHEMA = json.loads((REPO / "docs" / "check.schema.json").read_text())
# what deploy/base/agent/daemonset.yaml adds, and what it deliberately leaves out (docs/install.md)
MANIFEST_FIX = "CAP_BPF and CAP_PERFMON"
WITHOUT_EBPF_CAPS = "--bounding-set=-bpf,-perfmon,-sys_admin"


def check_json(*args: str, prefix: tuple[str, ...] = ()) -> dict[str, Any]:
    proc = subprocess.run(
        [*prefix, sys.executable, "-m", "exporter", "check", "--json", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    document: dict[str, Any] = json.loads(proc.stdout)
    jsonschema.validate(document, SCHEMA)
    return document


def source(document: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(s for s in document["sources"] if s["source"] == name)
    return found


@pytest.mark.real
def test_root_without_bpf_capabilities_is_told_what_is_missing_and_the_manifest_fix() -> None:
    require_ebpf()
    setpriv = require_binary("setpriv")
    document = check_json(prefix=(setpriv, WITHOUT_EBPF_CAPS, "--"))
    ebpf = source(document, "ebpf")
    assert ebpf["status"] == "fail" and ebpf["reason"] == "permission denied", ebpf
    # it is root: the detail says so and names what is missing, never "run as root"
    assert ebpf["detail"].startswith("uid 0 (root) without CAP_BPF and CAP_PERFMON"), ebpf
    assert "run as root" not in ebpf["fix"] and "privileged" not in ebpf["fix"]
    # the one fix the shipped manifests apply; DAC_READ_SEARCH is deliberately not granted
    assert MANIFEST_FIX in ebpf["fix"] and "DAC_READ_SEARCH" not in ebpf["fix"], ebpf
    # auto falls back: the summary says which activity source serve would use
    assert document["activity_source"] == "procfs"
    assert document["activity"] == ["procfs"]
    # serve says the same when eBPF is asked for
    line = explicit_ebpf_refusal([setpriv, WITHOUT_EBPF_CAPS, "--"])
    assert "uid 0 (root) without CAP_BPF and CAP_PERFMON" in line, line
    assert ebpf["fix"] in line and "DAC_READ_SEARCH" not in line, line


@pytest.mark.real
def test_with_the_capabilities_ebpf_is_the_activity_source_in_use() -> None:
    require_ebpf()
    document = check_json()
    assert source(document, "ebpf")["ok"], source(document, "ebpf")
    assert document["activity_source"] == "ebpf"
    # a source that works has nothing to fix: null, not a sentence
    assert all(s["fix"] is None for s in document["sources"] if s["ok"])
    # --activity.source procfs (the dotted name) switches eBPF off: procfs is in use
    document = check_json("--activity.source", "procfs")
    assert source(document, "ebpf")["status"] == "disabled"
    assert document["activity_source"] == "procfs"


def test_the_container_proc_hint_follows_the_pid_namespace_not_init_s_name() -> None:
    """This machine's own /proc: PID 1 is in the host's PID namespace whatever it is called (a
    VM's init need not be systemd; this one's is process_api), so there is no container hint.
    Where /proc/1/ns/pid cannot be read (a sandbox may refuse it even to root) nothing is
    guessed either."""
    try:
        if os.readlink("/proc/1/ns/pid") != HOST_PID_NS:
            pytest.skip("this test runs in a container's PID namespace")
    except PermissionError:
        pass
    procfs = source(check_json(), "procfs")
    assert procfs["ok"] and "container's own /proc" not in procfs["found"], procfs


@pytest.mark.real
def test_a_container_s_own_proc_gets_the_hint(tmp_path: Path) -> None:
    """In a new PID namespace with its own /proc (what a pod without hostPID sees), PID 1 names
    another namespace: the hint says to use hostPID."""
    unshare = require_binary("unshare")
    if os.geteuid() != 0:
        pytest.skip("needs root to unshare a PID namespace")
    # unshare's --mount-proc: /proc of the new namespace, where `python` is PID 1's child
    document = check_json(
        "--no-collector.nvml", prefix=(unshare, "--pid", "--fork", "--mount-proc", "--")
    )
    procfs = source(document, "procfs")
    assert "not the host's PID namespace" in procfs["found"], procfs
    assert "hostPID" in procfs["found"]
