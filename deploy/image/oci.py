"""OCI image layout and archive: config, manifest per platform, one index for all platforms.

Every document is canonical JSON and every timestamp is SOURCE_DATE_EPOCH, so the digests
depend only on the layers and the spec. The layout's index.json names the multi-platform index
`<version>` and each platform's manifest `<version>-<arch>` (org.opencontainers.image.ref.name),
so `skopeo copy --all oci-archive:FILE:<version> docker://...` pushes them all and
`podman run oci-archive:FILE:<version>-amd64` runs one. Beside it, one archive per platform
holds that platform's image alone, named `<repository>:<version>` (platform_layout), for
`podman load -i` and `skopeo copy oci-archive:FILE`.
"""

from __future__ import annotations

import json
import shutil
import tarfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from deploy.image.blob import Blob, canonical_json, store, store_file
from deploy.image.spec import OCI_VARIANT, ImageSpec

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
INDEX = "application/vnd.oci.image.index.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
REF = "org.opencontainers.image.ref.name"


@dataclass(frozen=True)
class Descriptor:
    media_type: str
    digest: str
    size: int
    platform: dict[str, str] | None = None
    annotations: dict[str, str] | None = None

    def json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "mediaType": self.media_type,
            "digest": self.digest,
            "size": self.size,
        }
        if self.platform:
            doc["platform"] = self.platform
        if self.annotations:
            doc["annotations"] = self.annotations
        return doc


@dataclass(frozen=True)
class Layer:
    blob: Blob
    created_by: str


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def platform(arch: str) -> dict[str, str]:
    doc = {"architecture": arch, "os": "linux"}
    if arch in OCI_VARIANT:
        doc["variant"] = OCI_VARIANT[arch]
    return doc


def labels(spec: ImageSpec, version: str, revision: str, epoch: int) -> dict[str, str]:
    return {
        "org.opencontainers.image.title": spec.title,
        "org.opencontainers.image.description": spec.description,
        "org.opencontainers.image.version": version,
        "org.opencontainers.image.revision": revision,
        "org.opencontainers.image.created": iso(epoch),
        "org.opencontainers.image.source": "https://github.com/wattprobe/wattprobe",
        "org.opencontainers.image.licenses": "Apache-2.0",
        **dict(spec.extra_labels),
    }


def config(
    spec: ImageSpec, arch: str, layers: list[Layer], image_labels: dict[str, str], epoch: int
) -> dict[str, Any]:
    runtime: dict[str, Any] = {
        "User": spec.user,
        "Env": [f"{k}={v}" for k, v in spec.env],
        "Entrypoint": list(spec.entrypoint),
        "WorkingDir": "/",
        "Labels": image_labels,
    }
    if spec.cmd:
        runtime["Cmd"] = list(spec.cmd)
    if spec.ports:
        runtime["ExposedPorts"] = {f"{p}/tcp": {} for p in spec.ports}
    return {
        **platform(arch),
        "created": iso(epoch),
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": [layer.blob.diff_id for layer in layers]},
        "history": [{"created": iso(epoch), "created_by": layer.created_by} for layer in layers],
    }


def write_image(
    blobs: Path,
    spec: ImageSpec,
    *,
    arch: str,
    layers: list[Layer],
    image_labels: dict[str, str],
    epoch: int,
) -> Descriptor:
    """Store the layers, config and manifest of one platform; return the manifest's descriptor."""
    for layer in layers:
        store_file(blobs, layer.blob)
    cfg_digest, cfg_size = store(
        blobs, canonical_json(config(spec, arch, layers, image_labels, epoch))
    )
    manifest = {
        "schemaVersion": 2,
        "mediaType": MANIFEST,
        "config": {"mediaType": CONFIG, "digest": cfg_digest, "size": cfg_size},
        "layers": [
            Descriptor(LAYER, layer.blob.digest, layer.blob.size).json() for layer in layers
        ],
        "annotations": {
            k: v for k, v in image_labels.items() if k.startswith("org.opencontainers.image.")
        },
    }
    digest, size = store(blobs, canonical_json(manifest))
    return Descriptor(MANIFEST, digest, size, platform=platform(arch))


def write_layout(
    layout: Path, version: str, manifests: dict[str, Descriptor], image_labels: dict[str, str]
) -> Descriptor:
    """index.json: the multi-platform index as <version>, each platform as <version>-<arch>."""
    blobs = layout / "blobs" / "sha256"
    index = {
        "schemaVersion": 2,
        "mediaType": INDEX,
        "manifests": [manifests[arch].json() for arch in sorted(manifests)],
        "annotations": {
            k: v for k, v in image_labels.items() if k.startswith("org.opencontainers.image.")
        },
    }
    digest, size = store(blobs, canonical_json(index))
    multi = Descriptor(INDEX, digest, size, annotations={REF: version})
    entries = [multi.json()] + [
        Descriptor(MANIFEST, d.digest, d.size, d.platform, {REF: f"{version}-{arch}"}).json()
        for arch, d in sorted(manifests.items())
    ]
    top = {"schemaVersion": 2, "mediaType": INDEX, "manifests": entries}
    (layout / "index.json").write_bytes(canonical_json(top))
    (layout / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))
    return multi


def platform_layout(layout: Path, target: Path, manifest: Descriptor, name: str) -> None:
    """One platform's image alone in its own layout, named by its full reference
    (`ghcr.io/wattprobe/wattprobe:0.1.0`): what `podman load -i` wants (one image per archive)
    and names it by, and what `skopeo copy oci-archive:FILE ...` copies without a reference.
    The blobs (manifest, config, layers) are hard links to layout's where possible."""
    source = layout / "blobs" / "sha256"
    blobs = target / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    doc = json.loads((source / manifest.digest.removeprefix("sha256:")).read_bytes())
    digests = [manifest.digest, doc["config"]["digest"], *(d["digest"] for d in doc["layers"])]
    for digest in digests:
        hexd = digest.removeprefix("sha256:")
        if not (blobs / hexd).exists():
            try:
                (blobs / hexd).hardlink_to(source / hexd)
            except OSError:
                shutil.copyfile(source / hexd, blobs / hexd)
    entry = Descriptor(MANIFEST, manifest.digest, manifest.size, manifest.platform, {REF: name})
    top = {"schemaVersion": 2, "mediaType": INDEX, "manifests": [entry.json()]}
    (target / "index.json").write_bytes(canonical_json(top))
    (target / "oci-layout").write_bytes(canonical_json({"imageLayoutVersion": "1.0.0"}))


def archive(layout: Path, out: Path, epoch: int) -> None:
    """The layout as one tar (oci-archive:), sorted, owner root, mtime epoch."""
    partial = out.with_name(out.name + ".partial")
    with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(layout.rglob("*")):
            info = tar.gettarinfo(str(path), arcname=str(path.relative_to(layout)))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            info.mode = 0o755 if info.isdir() else 0o644
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    partial.replace(out)
