"""deploy/Dockerfile, checked as far as a machine without a container engine allows: its stages,
that every apt package it installs exists in Debian 12, that every COPY source exists and is
not excluded from the build context, that each RUN parses as shell, that the wheel builds from
exactly the files it copies and carries the console script the ENTRYPOINT runs, that the
generic kernel headers land where the image and the DaemonSets point the agent, and that the
image version, the manifests' tag and exporter.__version__ agree."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

import pytest

from exporter import __version__
from tests.deploy.manifests import DEPLOY, IMAGE_REPOSITORY, OVERLAYS, REPO, build, env_of, of_kind
from tests.support.realparts import missing, require_binary

DOCKERFILE = DEPLOY / "Dockerfile"
IGNORE = DEPLOY / "Dockerfile.dockerignore"
VENV = "/opt/wattprobe/venv"


@dataclass(frozen=True)
class Instruction:
    stage: int
    op: str
    args: str


def _instructions() -> list[Instruction]:
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    result: list[Instruction] = []
    stage = -1
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        op, _, args = line.partition(" ")
        if op.upper() == "FROM":
            stage += 1
        result.append(Instruction(stage, op.upper(), args.strip()))
    return result


def _args_defaults() -> dict[str, str]:
    return {
        name: value
        for i in _instructions()
        if i.op == "ARG" and "=" in i.args
        for name, _, value in [i.args.partition("=")]
    }


def _stages() -> list[tuple[str, str | None]]:
    """(base image, stage name) per FROM, with ARG defaults substituted."""
    defaults = _args_defaults()
    stages = []
    for i in _instructions():
        if i.op == "FROM":
            words = i.args.split()
            image = re.sub(r"\$\{(\w+)\}", lambda m: defaults[m.group(1)], words[0])
            stages.append((image, words[2] if len(words) == 3 else None))
    return stages


TARGET_ARCHES = ("amd64", "arm64")  # what docs/install.md says to build with buildx


def _apt_packages(target: str = "amd64") -> list[str]:
    """What the stages install for one TARGETARCH (the headers stage names its set by it)."""
    pkgs: list[str] = []
    for i in _instructions():
        if i.op != "RUN":
            continue
        for command in i.args.split("&&"):
            if "apt-get install" not in command:
                continue
            words = shlex.split(command)
            if words[:2] == ["apt-get", "install"]:
                pkgs += [w.replace("${target}", target) for w in words[2:] if not w.startswith("-")]
    return pkgs


def _ignored(rel: str) -> bool:
    """Docker's .dockerignore semantics, enough for our file: last matching pattern wins."""
    ignored = False
    for raw in IGNORE.read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.removeprefix("!").rstrip("/")
        parts = rel.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(fnmatch(p, pattern) for p in prefixes) or fnmatch(rel, pattern):
            ignored = not negate
    return ignored


def test_stages_are_debian_bookworm_and_multi_stage() -> None:
    stages = _stages()
    assert len(stages) >= 2, "build the wheel in its own stage"
    for image, _name in stages:
        assert image == "debian:bookworm-slim", image
    names = {name for _, name in stages if name}
    for i in _instructions():
        if i.op == "COPY" and "--from=" in i.args:
            source = re.search(r"--from=(\S+)", i.args)
            assert source and source.group(1) in names, i.args


def test_every_apt_package_exists_in_bookworm() -> None:
    apt_cache = require_binary("apt-cache")
    os_release = Path("/etc/os-release").read_text()
    if "VERSION_CODENAME=bookworm" not in os_release:
        missing("a Debian 12 (bookworm) machine to resolve the image's packages")
    # apt here knows only this machine's architecture; the other's names differ in the one
    # ${target} word (test_headers_per_target_arch)
    host = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, timeout=30, check=True
    ).stdout.strip()
    pkgs = _apt_packages(host)
    assert {"python3", "python3-bpfcc", f"linux-headers-{host}"} <= set(pkgs)
    for pkg in pkgs:
        proc = subprocess.run(
            [apt_cache, "policy", pkg], capture_output=True, text=True, timeout=60, check=False
        )
        candidate = re.search(r"Candidate: (\S+)", proc.stdout)
        if candidate is None and pkg == pkgs[0]:
            missing("apt package lists (run apt-get update)")
        assert candidate and candidate.group(1) != "(none)", f"{pkg} is not in Debian 12"


def test_every_copy_source_exists_in_the_build_context() -> None:
    checked = 0
    for i in _instructions():
        if i.op != "COPY" or "--from=" in i.args:
            continue
        words = [w for w in i.args.split() if not w.startswith("--")]
        for source in words[:-1]:
            path = REPO / source
            assert path.exists(), f"COPY {source}: no such file"
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            for file in files:
                rel = file.relative_to(REPO).as_posix()
                if "__pycache__" not in rel:
                    assert not _ignored(rel), f"{rel} is copied but excluded by {IGNORE.name}"
            checked += 1
    assert checked >= 4
    assert _ignored(".venv/bin/python") and _ignored("tests/conftest.py")


def test_run_steps_parse_as_shell() -> None:
    sh = require_binary("sh")
    for i in _instructions():
        if i.op == "RUN":
            proc = subprocess.run(
                [sh, "-n", "-c", i.args], capture_output=True, text=True, timeout=30, check=False
            )
            assert proc.returncode == 0, f"RUN {i.args[:80]}...: {proc.stderr}"
    for script in (DEPLOY / "image").glob("*.sh"):
        assert subprocess.run([sh, "-n", str(script)], timeout=30, check=False).returncode == 0


def test_entrypoint_runs_the_console_script_of_the_wheel(tmp_path: Path) -> None:
    """Build the wheel offline from exactly what the Dockerfile copies, as its first stage does."""
    context = tmp_path / "context"
    for i in _instructions():
        if i.op == "COPY" and i.stage == 0:
            words = [w for w in i.args.split() if not w.startswith("--")]
            for source in words[:-1]:
                src = REPO / source
                if src.is_dir():
                    shutil.copytree(src, context / source, ignore=shutil.ignore_patterns("__py*"))
                else:
                    (context / source).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(src, context / source)
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"),
            *("--wheel-dir", str(tmp_path / "dist"), str(context)),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = (tmp_path / "dist").glob("wattprobe-*.whl")
    assert wheel.name.startswith(f"wattprobe-{__version__}-")
    with zipfile.ZipFile(wheel) as archive:
        entry_points = next(n for n in archive.namelist() if n.endswith("entry_points.txt"))
        assert "wattprobe = exporter.app.cli:main" in archive.read(entry_points).decode()
        packed = set(archive.namelist())
    # every data file in the package tree ships (package-data globs name folders, and a
    # folder that moved left its files out of the wheel without an error)
    data = {
        f.relative_to(REPO).as_posix()
        for f in (REPO / "exporter").rglob("*")
        if f.is_file() and f.suffix in {".json", ".proto", ".pyi", ".typed"}
    }
    assert data, "the package has data files"
    assert not data - packed, sorted(data - packed)
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["wattprobe"] == "exporter.app.cli:main"
    # ENTRYPOINT is the venv's console script itself, and the same script is the first
    # `wattprobe` on PATH, so `kubectl exec ... wattprobe check` runs what the agent runs
    entrypoint = next(i.args for i in _instructions() if i.op == "ENTRYPOINT")
    assert entrypoint == f'["{VENV}/bin/wattprobe"]'
    assert f"python3 -m venv {VENV}" in DOCKERFILE.read_text()
    path = _env()["PATH"].split(":")
    assert path[0] == f"{VENV}/bin", path


def _env() -> dict[str, str]:
    """The final stage's ENV (KEY=VALUE pairs)."""
    last = max(i.stage for i in _instructions())
    env: dict[str, str] = {}
    for i in _instructions():
        if i.op == "ENV" and i.stage == last:
            for pair in shlex.split(i.args):
                name, _, value = pair.partition("=")
                env[name] = value
    return env


def test_no_wrapper_decides_for_the_agent() -> None:
    """Header choice is the agent's own (exporter/sources/activity/ebpf/kheaders.py): nothing in
    the image
    sets BCC_KERNEL_SOURCE or shadows the console script."""
    text = DOCKERFILE.read_text()
    assert "BCC_KERNEL_SOURCE" not in text
    assert "/usr/local/bin/wattprobe" not in text
    assert not list((DEPLOY / "image").glob("*wrapper*"))


def test_generic_headers_land_where_the_agent_is_pointed() -> None:
    """The merged tree is built to the path the image's ENV and every DaemonSet name in
    WATTPROBE_EBPF_KERNEL_HEADERS, and no host mount of the DaemonSet covers that path."""
    headers = _env()["WATTPROBE_EBPF_KERNEL_HEADERS"]
    assert f"merge-kernel-headers /usr/src {headers}" in DOCKERFILE.read_text()
    assert f"COPY --from=headers {headers} {headers}" in DOCKERFILE.read_text()
    for overlay in OVERLAYS:
        for ds in of_kind(build(overlay), "DaemonSet"):
            container = ds["spec"]["template"]["spec"]["containers"][0]
            assert env_of(container)["WATTPROBE_EBPF_KERNEL_HEADERS"] == headers, overlay
            for mount in container.get("volumeMounts", []):
                covered = Path(headers).is_relative_to(mount["mountPath"])
                assert not covered, f"{mount['mountPath']} would hide {headers} ({overlay})"


def test_versions_agree() -> None:
    assert _args_defaults()["VERSION"] == __version__
    assert f"{IMAGE_REPOSITORY}:{__version__}" in DOCKERFILE.read_text()
    tags = re.findall(r"image: (\S+)", (DEPLOY / "base" / "agent" / "daemonset.yaml").read_text())
    assert tags == [f"{IMAGE_REPOSITORY}:{__version__}"]


@pytest.mark.parametrize("pattern", [":latest", "USER root", "USER 0"])
def test_no_latest_tag_and_not_root_by_default(pattern: str) -> None:
    assert pattern not in DOCKERFILE.read_text()
    users = [i.args for i in _instructions() if i.op == "USER"]
    assert users[-1] == "65534:65534"


def _headers_run() -> str:
    stage = next(n for n, (_, name) in enumerate(_stages()) if name == "headers")
    (run,) = [i.args for i in _instructions() if i.stage == stage and "linux-headers" in i.args]
    assert any(
        i.op == "ARG" and i.args == "TARGETARCH" for i in _instructions() if i.stage == stage
    )
    return run


@pytest.mark.parametrize(
    ("targetarch", "stage_arch", "installed"),
    [
        ("amd64", "amd64", "linux-headers-amd64"),
        ("arm64", "arm64", "linux-headers-arm64"),
        (None, "arm64", "linux-headers-arm64"),  # docker build without BuildKit
        ("arm64", "amd64", None),  # a stage not running on its target platform
        ("riscv64", "riscv64", None),  # no such build
    ],
)
def test_headers_per_target_arch(
    tmp_path: Path, targetarch: str | None, stage_arch: str, installed: str | None
) -> None:
    """The headers stage's RUN, run by sh with dpkg, apt-get and rm replaced by recorders: it
    installs Debian's generic set named by TARGETARCH, and refuses what it cannot build."""
    sh = require_binary("sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    fakes = {
        "dpkg": f'[ "$1" = --print-architecture ] && echo {stage_arch}',
        "apt-get": f'echo "apt-get $*" >> {log}',
        "rm": f'echo "rm $*" >> {log}',
    }
    for name, body in fakes.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    if targetarch is not None:
        env["TARGETARCH"] = targetarch
    proc = subprocess.run(
        [sh, "-c", _headers_run()], check=False, env=env, capture_output=True, text=True, timeout=30
    )
    calls = log.read_text().splitlines() if log.exists() else []
    if installed is None:
        assert proc.returncode != 0 and calls == [], calls
        assert proc.stderr.strip(), "a refused build says why"
        return
    assert proc.returncode == 0, proc.stderr
    assert f"apt-get install -y --no-install-recommends {installed}" in calls


def test_no_architecture_is_hard_coded() -> None:
    """Every stage installs the same names on both architectures but the headers set, which
    follows TARGETARCH: nothing names an architecture but the headers stage's list of those it
    builds."""
    allowed = 'case "$target" in ' + "|".join(TARGET_ARCHES) + ")"
    for i in _instructions():
        args = i.args.replace(allowed, "")
        assert not re.search(r"amd64|arm64|x86_64|aarch64", args), i.args
    assert allowed in _headers_run()
    per_arch = {arch: _apt_packages(arch) for arch in TARGET_ARCHES}
    assert per_arch["amd64"] != per_arch["arm64"]
    for arch, pkgs in per_arch.items():
        assert f"linux-headers-{arch}" in pkgs and "python3-bpfcc" in pkgs
        assert [p for p in pkgs if "linux-headers" not in p] == [
            p for p in per_arch["amd64"] if "linux-headers" not in p
        ]
