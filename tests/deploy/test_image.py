"""The agent image, built by `make image`'s builder (deploy/image/build.py) and run for real.

The amd64 image runs under podman with runc exactly as the default DaemonSet runs it: its
capabilities, read-only root, host PID namespace, uid 0, unconfined seccomp, no privilege
escalation, its env and its host paths mounted read-only (all read from the built manifest, not
restated here). It must serve /metrics with eBPF up, and `wattprobe check` must pass inside the
running container (as `kubectl exec` would run it). The arm64 image runs under qemu-user-static
and prints its version. The SBOM is checked against CycloneDX's schema and against what dpkg in
the image says is installed; a second build from the same inputs must give the same digests.

Cost: the Debian layers are cached by their inputs (WATTPROBE_IMAGE_CACHE, default
~/.cache/wattprobe-image), so only a fresh machine runs mmdebstrap (amd64 about 30 s, arm64 about
3.5 min under qemu on a loaded 2-core machine); the runs take about a minute.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from packageurl import PackageURL

from tests.deploy.manifests import REPO, build, containers, one
from tests.support.realparts import missing, require_binary, require_root
from tests.support.running import free_port, parse_samples, select

pytestmark = pytest.mark.slow

# fixed, so that the cached Debian layers (keyed by it) serve every run on a machine
EPOCH = "1764115200"  # 2025-11-26T00:00:00Z
CACHE = Path(os.environ.get("WATTPROBE_IMAGE_CACHE", Path.home() / ".cache" / "wattprobe-image"))
RUNC = "/usr/sbin/runc"  # crun refuses hybrid cgroup hosts like the CI machines'
# the sandbox refuses raising rlimits, and podman raises them to the hard limit by default
PODMAN_RUN = ["run", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
BUILD_TIMEOUT = 1800.0  # a cold arm64 build under qemu on a loaded 2-core machine
# what the image's python3 finds installed in the wheels' layer (name as in a purl, version)
LIST_WHEELS = """
import importlib.metadata as m, json
found = m.distributions(path=["/usr/local/lib/python3.11/dist-packages"])
print(json.dumps(sorted((d.metadata["Name"].lower().replace("_", "-"), d.version) for d in found)))
"""
METRICS_TIMEOUT = 240.0  # bcc compiles the probes before the first interval


@dataclass(frozen=True)
class Built:
    out: Path
    summary: dict[str, Any]
    version: str

    @property
    def archive(self) -> Path:
        return self.out / str(self.summary["archive"])

    def sbom(self, arch: str) -> dict[str, Any]:
        doc: dict[str, Any] = json.loads(
            (self.out / f"wattprobe-{self.version}-{arch}.cdx.json").read_text()
        )
        return doc


def _build(out: Path) -> Built:
    env = {**os.environ, "SOURCE_DATE_EPOCH": EPOCH, "WATTPROBE_REVISION": "test"}
    cmd = [
        sys.executable,
        "-m",
        "deploy.image.build",
        "--images",
        "agent",
        "--arches",
        "amd64,arm64",
        "--out",
        str(out),
        "--cache",
        str(CACHE),
    ]
    proc = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=BUILD_TIMEOUT, check=False
    )
    assert proc.returncode == 0, f"image build failed:\n{proc.stderr[-4000:]}"
    (summary_path,) = [p for p in out.glob("wattprobe-*.json") if not p.name.endswith(".cdx.json")]
    summary = json.loads(summary_path.read_text())
    return Built(out, summary, str(summary["version"]))


def _podman(
    *args: str, timeout: float = 120.0, check: bool = True
) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        ["podman", "--runtime", RUNC, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if check:
        assert proc.returncode == 0, f"podman {' '.join(args)}: {proc.stderr[-3000:]}"
    return proc


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    require_root()
    for binary in ("mmdebstrap", "podman", "qemu-aarch64-static", "arch-test"):
        require_binary(binary)
    if not Path(RUNC).exists():
        missing(f"{RUNC} (apt-get install runc)")
    return _build(tmp_path_factory.mktemp("image"))


def _load(built: Built, arch: str) -> Iterator[str]:
    image = _podman(
        "pull", "-q", f"oci-archive:{built.archive}:{built.version}-{arch}", timeout=300
    ).stdout.strip()
    try:
        yield image
    finally:
        _podman("rmi", "-f", image, check=False)


@pytest.fixture(scope="module")
def amd64_image(built: Built) -> Iterator[str]:
    yield from _load(built, "amd64")


def daemonset_run_args(port: int) -> list[str]:
    """podman run options for the default overlay's agent container, from the built manifest."""
    ds = one(build("default"), "DaemonSet", "wattprobe")
    pod = ds["spec"]["template"]["spec"]
    (agent,) = [c for c in containers(pod) if c["name"] == "wattprobe"]
    sc = agent["securityContext"]
    assert pod["hostPID"] and sc["readOnlyRootFilesystem"] and sc["capabilities"]["drop"] == ["ALL"]
    assert pod["securityContext"]["seccompProfile"]["type"] == "Unconfined"
    args = [
        "--pid=host",
        "--network=host",
        "--read-only",
        "--cap-drop=ALL",
        "--user",
        f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}",
        "--security-opt",
        "seccomp=unconfined",
    ]
    args += [f"--cap-add={cap}" for cap in sc["capabilities"]["add"]]
    if not sc["allowPrivilegeEscalation"]:
        args += ["--security-opt", "no-new-privileges"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    for mount in agent["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "emptyDir" in volume:
            size = volume["emptyDir"].get("sizeLimit", "64Mi").replace("Mi", "m")
            args += ["--tmpfs", f"{mount['mountPath']}:size={size}"]
            continue
        host = volume["hostPath"]["path"]
        assert mount.get("readOnly"), f"{mount['name']} is mounted writable"
        # type "" hostPaths that this machine lacks (a kubelet socket dir, CDI specs, debugfs)
        if Path(host).exists():
            args += ["-v", f"{host}:{mount['mountPath']}:ro"]
    env = {e["name"]: e["value"] for e in agent["env"] if "value" in e}  # not the fieldRefs
    # no kubelet on this machine; loopback only, on a free port
    env |= {
        "WATTPROBE_KUBE_POD_SOURCE": "none",
        "WATTPROBE_WEB_LISTEN_ADDRESS": f"127.0.0.1:{port}",
    }
    return args + [arg for name, value in env.items() for arg in ("-e", f"{name}={value}")]


def _get(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            body: bytes = resp.read()
            return body.decode()
    except OSError:
        return None


def test_agent_image_serves_metrics_with_ebpf_as_the_daemonset_runs_it(amd64_image: str) -> None:
    port = free_port()
    name = f"wattprobe-image-test-{port}"
    started = time.monotonic()
    _podman(*PODMAN_RUN, "-d", "--name", name, *daemonset_run_args(port), amd64_image, "serve")
    try:
        ebpf: dict[frozenset[tuple[str, str]], float] = {}
        deadline = started + METRICS_TIMEOUT
        first = None
        while time.monotonic() < deadline:
            body = _get(f"http://127.0.0.1:{port}/metrics")
            if body is not None:
                first = first or time.monotonic() - started
                ebpf = select(parse_samples(body), "wattprobe_source_up", source="ebpf")
                if ebpf:
                    break
            state = _podman("inspect", "-f", "{{.State.Running}}", name).stdout.strip()
            assert state == "true", (
                "agent exited:\n" + _podman("logs", name, check=False).stderr[-3000:]
            )
            time.sleep(1)
        logs = _podman("logs", name, check=False)
        assert first is not None, f"no /metrics within {METRICS_TIMEOUT} s:\n{logs.stderr[-3000:]}"
        assert list(ebpf.values()) == [1.0], f"eBPF not up: {ebpf}\n{logs.stderr[-3000:]}"
        print(
            f"first /metrics {first:.1f} s after podman run, "
            f"eBPF up {time.monotonic() - started:.1f} s"
        )
        # what `kubectl exec ds/wattprobe -- wattprobe check` runs: same env, same mounts
        check = _podman("exec", name, "wattprobe", "check", check=False, timeout=180)
        assert check.returncode == 0, check.stdout + check.stderr
        assert any(line.startswith("OK   ebpf") for line in check.stdout.splitlines()), check.stdout
    finally:
        _podman("rm", "-f", "-t", "5", name, check=False)


def test_agent_image_runs_unprivileged_by_default(amd64_image: str) -> None:
    """Without the DaemonSet's uid 0 the image runs as nobody (65534) on a read-only root."""
    proc = _podman(
        *PODMAN_RUN,
        "--rm",
        "--read-only",
        "--network=none",
        "--entrypoint",
        "id",
        amd64_image,
        "-u",
    )
    assert proc.stdout.strip() == "65534"


def test_arm64_image_starts_under_qemu(built: Built) -> None:
    if subprocess.run(["arch-test", "arm64"], capture_output=True, check=False).returncode != 0:
        missing(
            "an arm64 binfmt_misc handler (apt-get install qemu-user-static binfmt-support; "
            "update-binfmts --enable qemu-aarch64)"
        )
    for image in _load(built, "arm64"):
        arch = _podman("image", "inspect", "-f", "{{.Architecture}}", image).stdout.strip()
        assert arch == "arm64"
        proc = _podman(
            *PODMAN_RUN, "--rm", "--read-only", "--network=none", image, "--version", timeout=300
        )
        assert built.version in proc.stdout, proc.stdout + proc.stderr


def test_sbom_is_valid_cyclonedx_and_lists_what_dpkg_and_pip_installed(
    built: Built, amd64_image: str
) -> None:
    for arch in ("amd64", "arm64"):
        sbom = built.sbom(arch)
        error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(json.dumps(sbom))
        assert error is None, f"{arch}: {error}"
        image = PackageURL.from_string(sbom["metadata"]["component"]["purl"])
        assert image.version == built.summary["platforms"][arch]["manifest"]
        purls = {c["purl"] for c in sbom["components"]}
        assert any(p.startswith("pkg:deb/debian/python3-bpfcc@") for p in purls)  # arch all
        assert any(p.startswith("pkg:deb/debian/libbpfcc@") and f"arch={arch}" in p for p in purls)
        assert any(p.startswith(f"pkg:pypi/wattprobe@{built.version}") for p in purls)
        assert any(p.startswith("pkg:pypi/grpcio@") for p in purls) and any(
            p.startswith("pkg:pypi/protobuf@") for p in purls
        )
        headers = [c for c in sbom["components"] if c["name"].startswith("linux-headers-")]
        assert {c["name"].rsplit("-", 1)[-1] for c in headers} == {"common", arch}
        # licences from DEP-5 copyright files, dependencies from dpkg's Depends (test_sbom.py)
        debs = {c["name"]: c for c in sbom["components"] if c["purl"].startswith("pkg:deb/")}
        licences = {e["license"]["name"] for e in debs["libbpfcc"].get("licenses", [])}
        assert "Apache-2.0" in licences, debs["libbpfcc"]
        graph = {d["ref"]: d["dependsOn"] for d in sbom["dependencies"]}
        assert debs["python3.11"]["bom-ref"] in graph[debs["python3"]["bom-ref"]]
    # ground truth: dpkg inside the amd64 image, and what Python there can import
    listed = _podman(
        *PODMAN_RUN,
        "--rm",
        "--read-only",
        "--network=none",
        "--entrypoint",
        "dpkg-query",
        amd64_image,
        "-W",
        "-f",
        "${Package} ${Version}\\n",
    ).stdout
    in_image = {tuple(line.split()) for line in listed.splitlines() if line.strip()}
    in_sbom = {
        (c["name"], c["version"])
        for c in built.sbom("amd64")["components"]
        if c["purl"].startswith("pkg:deb/") and not c["name"].startswith("linux-headers-")
    }
    assert in_sbom == in_image
    pip_listed = _podman(
        *PODMAN_RUN,
        "--rm",
        "--read-only",
        "--network=none",
        "--entrypoint",
        "python3",
        amd64_image,
        "-c",
        LIST_WHEELS,
    ).stdout
    wheels = {
        (c["name"], c["version"])
        for c in built.sbom("amd64")["components"]
        if c["purl"].startswith("pkg:pypi/")
    }
    assert {tuple(x) for x in json.loads(pip_listed)} == wheels


def test_rebuild_from_the_same_inputs_gives_the_same_digests(built: Built, tmp_path: Path) -> None:
    """Same inputs (SOURCE_DATE_EPOCH, package lists, pinned wheels, the cached Debian layers),
    same bytes: the index digest, every platform's manifest and the archive itself."""
    again = _build(tmp_path / "again")
    assert again.summary["index"] == built.summary["index"]
    assert again.summary["archive_sha256"] == built.summary["archive_sha256"]
    assert again.summary["platform_archives"] == built.summary["platform_archives"]
    for arch in ("amd64", "arm64"):
        assert (
            again.summary["platforms"][arch]["manifest"]
            == built.summary["platforms"][arch]["manifest"]
        )
        assert again.sbom(arch) == built.sbom(arch)


def test_platform_archive_loads_under_the_published_name(built: Built) -> None:
    """`podman load -i wattprobe-<version>-amd64.oci.tar` (the multi-platform archive holds two
    images, which podman load refuses) gives ghcr.io/wattprobe/wattprobe:<version>, the
    manifest the multi-platform index lists for amd64."""
    entry = built.summary["platform_archives"]["amd64"]
    archive = built.out / entry["archive"]
    assert entry["archive"] == f"wattprobe-{built.version}-amd64.oci.tar"
    name = f"ghcr.io/wattprobe/wattprobe:{built.version}"
    loaded = _podman("load", "-i", str(archive), timeout=300)
    try:
        assert f"Loaded image: {name}" in loaded.stdout, loaded.stdout
        digest = _podman("image", "inspect", "--format", "{{.Digest}}", name).stdout.strip()
        assert digest == built.summary["platforms"]["amd64"]["manifest"]
    finally:
        _podman("rmi", "-f", name, check=False)
