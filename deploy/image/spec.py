"""What each image is made of: Debian packages, hooks, Python wheels and the runtime config.

The builder is generic (an ImageSpec in, an OCI image out); the two specs below are the agent
(deploy/base/agent) and an edge forwarder: Prometheus in agent mode, for
deploy/overlays/kubeedge-prometheus-agent (deploy/overlays/kubeedge runs upstream's vmagent).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent

# Debian 12; the mirrors are overridable (a snapshot.debian.org URL pins the archive's state, which
# is what makes a rebuild next month give the same digest: docs/release.md).
SUITE = "bookworm"
DEFAULT_MIRRORS = (
    "deb http://deb.debian.org/debian bookworm main",
    "deb http://deb.debian.org/debian bookworm-updates main",
    "deb http://deb.debian.org/debian-security bookworm-security main",
)

# Debian's own platform names; OCI uses the same architecture names (plus a variant for arm64).
ARCHES = ("amd64", "arm64")
OCI_VARIANT = {"arm64": "v8"}
# the machine names of wheel platform tags
WHEEL_MACHINE = {"amd64": "x86_64", "arm64": "aarch64"}
GLIBC_MINOR = 36  # Debian 12's glibc 2.36: manylinux_2_17 .. manylinux_2_36 wheels run on it


def wheel_platforms(arch: str) -> list[str]:
    """Every manylinux tag Debian 12 satisfies (pip does not widen a --platform by itself)."""
    machine = WHEEL_MACHINE[arch]
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(GLIBC_MINOR, 16, -1)]
    return [*tags, f"manylinux2014_{machine}"]


# Debian's python3, for which python3-bpfcc is built; wheels go where it looks first
PYTHON_VERSION = "3.11"

# Slimmer images: no manuals, translations or docs, but every package's copyright file stays.
DPKG_EXCLUDES = (
    "path-exclude=/usr/share/man/*",
    "path-exclude=/usr/share/locale/*",
    "path-include=/usr/share/locale/locale.alias",
    "path-exclude=/usr/share/doc/*",
    "path-include=/usr/share/doc/*/copyright",
    "path-exclude=/usr/share/info/*",
)


@dataclass(frozen=True)
class ImageSpec:
    """One image: `packages` from Debian (plus `hooks`, mmdebstrap customize hooks run on the
    root filesystem), optionally the project's wheel with its dependencies, and the OCI config."""

    name: str  # repository, e.g. ghcr.io/wattprobe/wattprobe
    title: str
    description: str
    packages: tuple[str, ...]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    user: str = "65534:65534"
    ports: tuple[int, ...] = ()
    hooks: tuple[Path, ...] = ()
    python_wheels: bool = False  # install the project's wheel and its dependencies
    extra_labels: tuple[tuple[str, str], ...] = field(default=())


AGENT = ImageSpec(
    name="ghcr.io/wattprobe/wattprobe",
    title="wattprobe",
    description="Node power and GPU exporter with energy attributed to pods",
    # usr-is-merged: otherwise apt picks usrmerge for init-system-helpers, which brings perl
    packages=("python3", "python3-bpfcc", "usr-is-merged", "ca-certificates"),
    entrypoint=("/usr/local/bin/wattprobe",),
    cmd=("serve",),
    env=(
        ("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
        # the root filesystem is read-only in the DaemonSet: no .pyc writes at run time
        ("PYTHONDONTWRITEBYTECODE", "1"),
        ("PYTHONUNBUFFERED", "1"),
        # also set in the DaemonSet; here for `podman run` and `kubectl exec ... wattprobe check`
        ("WATTPROBE_EBPF_KERNEL_HEADERS", "/opt/wattprobe/kernel-headers"),
    ),
    # Unprivileged by default; the DaemonSet runs it as uid 0 with every capability dropped but
    # BPF, PERFMON and SYS_RESOURCE (deploy/base/agent/daemonset.yaml says why).
    user="65534:65534",
    ports=(28390,),
    hooks=(HERE / "kernel-headers.sh",),
    python_wheels=True,
)

FORWARDER = ImageSpec(
    name="ghcr.io/wattprobe/wattprobe-forwarder",
    title="wattprobe-forwarder",
    description="Prometheus in agent mode: the edge agent's scrape, WAL and remote write",
    # Debian 12's prometheus (2.42): the release tests/test_edge_forwarding.py runs with the
    # overlay's flags and config
    packages=("prometheus", "usr-is-merged"),
    entrypoint=("/usr/bin/prometheus",),
    cmd=("--enable-feature=agent",),
    env=(("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),),
    user="65534:65534",
    ports=(28391,),
)

SPECS = {"agent": AGENT, "forwarder": FORWARDER}


def repository(name: str, registry: str = "") -> str:
    """An image's repository as published: `registry` (e.g. ghcr.io/<owner>, what the release
    pushes to) replaces the registry/owner part of `name`; empty: `name` itself."""
    if not registry:
        return name
    return f"{registry.rstrip('/')}/{name.rsplit('/', 1)[-1]}"
