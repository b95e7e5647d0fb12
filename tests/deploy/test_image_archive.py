"""The per-platform image archives (deploy/image/oci.py platform_layout): each holds one
image named as published, so `podman load -i` loads it under `<repository>:<version>` and
`skopeo copy oci-archive:FILE` copies it without naming a reference. Built here from a
one-file layer with the same code `make image` uses (no mmdebstrap: seconds, not minutes);
tests/deploy/test_image.py checks the archives of a real build."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from deploy.image import oci
from deploy.image.blob import gzip_blob
from deploy.image.spec import AGENT, repository
from tests.support.realparts import require_binary, require_root

EPOCH = 1764115200
ARCHES = ("amd64", "arm64")
# what release.yml's REGISTRY (ghcr.io/<owner>) makes of the spec's ghcr.io/wattprobe/wattprobe
REGISTRY = "ghcr.io/some-owner"
PUBLISHED = "ghcr.io/some-owner/wattprobe"


def _layer(tmp_path: Path) -> oci.Layer:
    raw = tmp_path / "layer.tar"
    with tarfile.open(raw, "w") as tar:
        data = b"wattprobe archive test\n"
        info = tarfile.TarInfo("hello.txt")
        info.size, info.mtime = len(data), EPOCH
        tar.addfile(info, io.BytesIO(data))
    return oci.Layer(gzip_blob(raw, tmp_path / "layer.tar.gz"), "test layer")


def _archives(tmp_path: Path, version: str) -> dict[str, Path]:
    layout = tmp_path / "layout"
    blobs = layout / "blobs" / "sha256"
    labels = oci.labels(AGENT, version, "test", EPOCH)
    layer = _layer(tmp_path)
    manifests = {
        arch: oci.write_image(
            blobs, AGENT, arch=arch, layers=[layer], image_labels=labels, epoch=EPOCH
        )
        for arch in ARCHES
    }
    oci.write_layout(layout, version, manifests, labels)
    out: dict[str, Path] = {}
    for arch, manifest in manifests.items():
        single = tmp_path / f"single-{arch}"
        oci.platform_layout(
            layout, single, manifest, f"{repository(AGENT.name, REGISTRY)}:{version}"
        )
        out[arch] = tmp_path / f"wattprobe-{version}-{arch}.oci.tar"
        oci.archive(single, out[arch], EPOCH)
        index = json.loads((single / "index.json").read_text())
        (entry,) = index["manifests"]
        assert entry["annotations"] == {oci.REF: f"{PUBLISHED}:{version}"}
        assert entry["digest"] == manifest.digest and entry["platform"]["architecture"] == arch
    return out


def _run(*cmd: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


@pytest.fixture
def version() -> str:
    # unique per run: the image store is the machine's
    return f"0.0.0-archive{os.getpid()}"


def test_podman_load_names_each_platform_image_as_published(tmp_path: Path, version: str) -> None:
    require_root()
    podman = require_binary("podman")
    name = f"{PUBLISHED}:{version}"
    for arch, archive in _archives(tmp_path, version).items():
        loaded = _run(podman, "load", "-i", str(archive))
        try:
            assert loaded.returncode == 0, loaded.stderr
            assert name in loaded.stdout, loaded.stdout
            inspect = _run(podman, "image", "inspect", "--format", "{{.Architecture}}", name)
            assert inspect.returncode == 0 and inspect.stdout.strip() == arch, inspect
        finally:
            _run(podman, "rmi", "-f", name)


def test_skopeo_copies_the_archive_without_a_reference(tmp_path: Path, version: str) -> None:
    skopeo = require_binary("skopeo")
    archives = _archives(tmp_path, version)
    for arch, archive in archives.items():
        target = tmp_path / f"copied-{arch}"
        copied = _run(skopeo, "copy", f"oci-archive:{archive}", f"dir:{target}")
        assert copied.returncode == 0, copied.stderr
        by_name = _run(skopeo, "inspect", "--raw", f"oci-archive:{archive}:{PUBLISHED}:{version}")
        assert by_name.returncode == 0, by_name.stderr
        assert json.loads(by_name.stdout)["layers"], by_name.stdout


def test_repository_under_a_registry() -> None:
    assert repository(AGENT.name) == "ghcr.io/wattprobe/wattprobe"
    assert repository(AGENT.name, REGISTRY + "/") == PUBLISHED
    assert repository("ghcr.io/wattprobe/wattprobe-forwarder", "registry.example.com/a/b") == (
        "registry.example.com/a/b/wattprobe-forwarder"
    )
