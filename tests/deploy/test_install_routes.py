"""docs/install.md's copy-paste path per install route (its ```sh route=NAME blocks), run as
far as runs without a cluster, so the doc cannot drift from the overlays, the chart, the release
and the image archives:

- kustomize: the overlay `kubectl apply -k` names is built with the pinned kubectl; the
  DaemonSet `rollout status` waits for is in it, in that namespace.
- helm: the `oci://` reference is where deploy/release.sh pushes the chart (REGISTRY
  ghcr.io/<owner>, then /charts/<chart>) at the project's version; the chart is pushed to a
  loopback registry in that place, pulled back by the block's reference and version, and
  rendered with the block's release, namespace and --set-json values; the rollout target is in
  the render and the namespace gets the privileged Pod Security level.
- archive: the `gh release download` asset is the name `make image` gives a per-platform
  archive; a synthesized archive of that name is loaded with the block's `podman load`, tagged
  and pushed with its commands (registry.example.com replaced by a loopback registry).
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.image import oci
from deploy.image.spec import AGENT, repository
from tests.deploy.helmchart import CHART, helm, parse
from tests.deploy.manifests import REPO, kustomize
from tests.deploy.test_image_archive import EPOCH, _layer
from tests.support.ociregistry import Registry, loopback_registry
from tests.support.realparts import require_binary, require_root

DOC = REPO / "docs" / "install.md"
VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
OWNER_REGISTRY = "ghcr.io/wattprobe"  # release.yml's REGISTRY for the wattprobe owner


def route(name: str) -> list[list[str]]:
    """The commands of the ```sh route=<name> block, continuation lines joined, split as the
    shell would (comments dropped)."""
    blocks = re.findall(r"^```sh route=(\w+)\n(.*?)^```", DOC.read_text(), re.M | re.S)
    (text,) = [body for found, body in blocks if found == name]
    return [shlex.split(line, comments=True) for line in text.replace("\\\n", " ").splitlines()]


def _option(cmd: list[str], *names: str) -> str:
    (value,) = [cmd[i + 1] for i, arg in enumerate(cmd) if arg in names]
    return value


def _rollout(commands: list[list[str]]) -> tuple[str, str]:
    """(namespace, name) of `kubectl -n NS rollout status daemonset/NAME`."""
    (cmd,) = [c for c in commands if c[:1] == ["kubectl"] and "rollout" in c]
    name = next(a for a in cmd if a.startswith("daemonset/")).split("/")[1]
    return _option(cmd, "-n", "--namespace"), name


def _has_daemonset(objs: list[dict[str, Any]], namespace: str, name: str) -> bool:
    return any(
        o["kind"] == "DaemonSet"
        and o["metadata"]["name"] == name
        and o["metadata"].get("namespace") == namespace
        for o in objs
    )


def test_every_route_has_a_block() -> None:
    for name in ("kustomize", "helm", "archive"):
        assert route(name), name


def test_kustomize_route_applies_an_overlay_holding_what_it_waits_for() -> None:
    commands = route("kustomize")
    (apply,) = [c for c in commands if c[:3] == ["kubectl", "apply", "-k"]]
    objs = kustomize(REPO / apply[3])
    assert _has_daemonset(objs, *_rollout(commands)), _rollout(commands)


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with loopback_registry(tmp_path) as running:
        yield running


def test_helm_route_installs_the_published_chart(tmp_path: Path, registry: Registry) -> None:
    hp = helm()
    from helm_python import registry as oci_registry  # noqa: PLC0415 (a real part, as helm())

    commands = route("helm")
    (install,) = [c for c in commands if c[:2] == ["helm", "install"]]
    release, ref = install[2], install[3]
    chart_name = yaml.safe_load((CHART / "Chart.yaml").read_text())["name"]
    # where deploy/release.sh push-chart puts it: oci://$REGISTRY/charts/<chart>
    assert ref == f"oci://{OWNER_REGISTRY}/charts/{chart_name}", ref
    assert _option(install, "--version") == VERSION
    namespace = _option(install, "-n", "--namespace")
    values: dict[str, Any] = {}
    for expression in (install[i + 1] for i, a in enumerate(install) if a == "--set-json"):
        values.update(hp.parse_set_json(expression))
    # the chart pushed where the release pushes it, here on loopback, and pulled by reference
    packaged = hp.package(CHART, destination=tmp_path / "pkg", version=VERSION)
    remote = f"oci://{registry.host}/{OWNER_REGISTRY.split('/', 1)[1]}/charts"
    oci_registry.push(packaged, remote, plain_http=True)
    pulled = tmp_path / "pulled"
    pulled.mkdir()
    loopback_ref = ref.replace(f"oci://{OWNER_REGISTRY.split('/', 1)[0]}", f"oci://{registry.host}")
    oci_registry.pull(loopback_ref, destination=pulled, version=VERSION, plain_http=True)
    (archive,) = pulled.glob("*.tgz")
    chart = hp.Chart.load_archive(archive.read_bytes())
    objs = parse(chart.render(values, name=release, namespace=namespace))
    assert _has_daemonset(objs, *_rollout(commands)) and _rollout(commands)[0] == namespace
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert monitors and all(
        values["serviceMonitor"]["labels"].items() <= o["metadata"]["labels"].items()
        for o in monitors
    )
    (label,) = [c for c in commands if c[:2] == ["kubectl", "label"]]
    assert label[2:4] == ["namespace", namespace]
    assert "pod-security.kubernetes.io/enforce=privileged" in label
    (create,) = [c for c in commands if c[:2] == ["kubectl", "create"]]
    assert create == ["kubectl", "create", "namespace", namespace]


def _archive(tmp_path: Path, version: str) -> Path:
    """A per-platform archive as `make image` names and fills it (deploy/image/build.py), of a
    one-file image: <title>-<version>-amd64.oci.tar holding ghcr.io/wattprobe/wattprobe:<v>."""
    layout = tmp_path / "layout"
    labels = oci.labels(AGENT, version, "test", EPOCH)
    manifest = oci.write_image(
        layout / "blobs" / "sha256",
        AGENT,
        arch="amd64",
        layers=[_layer(tmp_path)],
        image_labels=labels,
        epoch=EPOCH,
    )
    oci.write_layout(layout, version, {"amd64": manifest}, labels)
    single = tmp_path / "single"
    oci.platform_layout(layout, single, manifest, f"{repository(AGENT.name)}:{version}")
    out = tmp_path / f"{AGENT.title}-{version}-amd64.oci.tar"
    oci.archive(single, out, EPOCH)
    return out


def test_archive_route_loads_tags_and_pushes(tmp_path: Path, registry: Registry) -> None:
    commands = route("archive")
    (download,) = [c for c in commands if c[:3] == ["gh", "release", "download"]]
    assert download[3] == f"v{VERSION}"
    asset = _option(download, "-p", "--pattern")
    assert asset == f"{AGENT.title}-{VERSION}-amd64.oci.tar"  # build.py's per-platform name
    require_root()
    podman = require_binary("podman")
    # a version of this run's own: the image store is the machine's
    version = f"0.0.0-route{os.getpid()}"
    archive = _archive(tmp_path, version)
    run = [
        [a.replace(VERSION, version).replace("registry.example.com", registry.host) for a in c]
        for c in commands
        if c[0] == "podman"
    ]
    assert [c[:2] for c in run] == [["podman", "load"], ["podman", "tag"], ["podman", "push"]]
    assert run[0][-1] == archive.name
    names = [run[1][2], run[1][3]]
    assert names[0] == f"{repository(AGENT.name)}:{version}"
    try:
        for cmd in run:
            # plain HTTP on loopback
            extra = ["--tls-verify=false"] if cmd[1] == "push" else []
            proc = subprocess.run(
                [podman, cmd[1], *extra, *cmd[2:]],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert proc.returncode == 0, (cmd, proc.stderr)
        pushed = names[1].split("/", 1)[1].rsplit(":", 1)[0]
        accept = f"{oci.MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"
        assert registry.digest(pushed, version, accept) is not None
    finally:
        for name in names:
            subprocess.run(
                [podman, "rmi", "-f", name], capture_output=True, timeout=120, check=False
            )
