"""Build the wattprobe images as OCI archives, one per image, holding every platform.

  python -m deploy.image.build [--images agent,forwarder] [--arches amd64,arm64]
                               [--version V] [--out build/image] [--cache DIR] [--mirror LINE]...

For each image: build/image/<name>-<version>.oci.tar (an OCI image layout: the multi-platform
index tagged <version>, each platform tagged <version>-<arch>), one archive per platform
(<name>-<version>-<arch>.oci.tar: that image alone, named <repository>:<version>, the
repository under --registry where given, for
`podman load -i`), next to them one CycloneDX SBOM per
platform (<name>-<version>-<arch>.cdx.json) and <name>-<version>.json (the digests and the
seconds each platform took). Needs root (mmdebstrap), and qemu-user-static with binfmt_misc for
a foreign architecture. SOURCE_DATE_EPOCH defaults to the last commit's time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deploy.image import debian, oci, python, sbom
from deploy.image.blob import file_digest
from deploy.image.spec import ARCHES, DEFAULT_MIRRORS, SPECS, SUITE, ImageSpec, repository

REPO = Path(__file__).resolve().parents[2]


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def default_epoch() -> int:
    if "SOURCE_DATE_EPOCH" in os.environ:
        return int(os.environ["SOURCE_DATE_EPOCH"])
    return int(git("log", "-1", "--format=%ct"))


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def build_image(
    *,
    spec: ImageSpec,
    arches: list[str],
    version: str,
    revision: str,
    epoch: int,
    mirrors: tuple[str, ...],
    project: Path,
    out: Path,
    cache: Path,
    registry: str = "",
) -> dict[str, object]:
    stem = f"{spec.title}-{version}"
    layout = out / stem
    shutil.rmtree(layout, ignore_errors=True)
    blobs = layout / "blobs" / "sha256"
    image_labels = oci.labels(spec, version, revision, epoch)
    manifests: dict[str, oci.Descriptor] = {}
    report: dict[str, dict[str, object]] = {}
    for arch in arches:
        started = time.monotonic()
        base = debian.build(spec, arch, mirrors, epoch, cache)
        layers = [oci.Layer(base.blob, f"mmdebstrap {SUITE} {arch}: {' '.join(spec.packages)}")]
        wheels: tuple[python.Wheel, ...] = ()
        if spec.python_wheels:
            py = python.build(project, arch, epoch, out)
            layers.append(
                oci.Layer(
                    py.blob, f"wheels for linux/{arch}: {' '.join(w.filename for w in py.wheels)}"
                )
            )
            wheels = py.wheels
        manifests[arch] = oci.write_image(
            blobs, spec, arch=arch, layers=layers, image_labels=image_labels, epoch=epoch
        )
        debs = list(sbom.installed(base.dpkg_status, base.licenses))
        debs += sbom.unpacked(base.kernel_headers_packages, "/opt/wattprobe/kernel-headers")
        doc = sbom.document(
            spec,
            arch=arch,
            version=version,
            manifest_digest=manifests[arch].digest,
            debs=debs,
            wheels=wheels,
            epoch=epoch,
        )
        (out / f"{stem}-{arch}.cdx.json").write_text(sbom.dumps(doc))
        report[arch] = {
            "manifest": manifests[arch].digest,
            "debian_layer_cached": base.cached,
            "layers_bytes": sum(layer.blob.size for layer in layers),
            "seconds": round(time.monotonic() - started, 1),
        }
        print(
            f"image: {spec.name}:{version} linux/{arch} {manifests[arch].digest} "
            f"({report[arch]['seconds']} s, Debian layer {'cached' if base.cached else 'built'})",
            file=sys.stderr,
        )
    index = oci.write_layout(layout, version, manifests, image_labels)
    archive = out / f"{stem}.oci.tar"
    oci.archive(layout, archive, epoch)
    # one archive per platform, its image named as published (podman load -i names it so)
    published = f"{repository(spec.name, registry)}:{version}"
    platform_archives: dict[str, dict[str, str]] = {}
    for arch, manifest in sorted(manifests.items()):
        single = out / f"{stem}-{arch}"
        shutil.rmtree(single, ignore_errors=True)
        oci.platform_layout(layout, single, manifest, published)
        path = out / f"{stem}-{arch}.oci.tar"
        oci.archive(single, path, epoch)
        shutil.rmtree(single)
        platform_archives[arch] = {
            "archive": path.name,
            "archive_sha256": file_digest(path),
            "name": published,
        }
    summary = {
        "image": spec.name,
        "version": version,
        "index": index.digest,
        "archive": str(archive.relative_to(out)),
        "archive_sha256": file_digest(archive),
        "platform_archives": platform_archives,
        "platforms": report,
        "source_date_epoch": epoch,
        "revision": revision,
    }
    (out / f"{stem}.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    print(f"image: {archive} index {index.digest}", file=sys.stderr)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--images", default=",".join(SPECS), help="comma-separated: " + ", ".join(SPECS)
    )
    parser.add_argument(
        "--arches", default=",".join(ARCHES), help="comma-separated Debian architectures"
    )
    parser.add_argument(
        "--version", default="", help="the image tag; must equal the wheel's version"
    )
    parser.add_argument("--out", type=Path, default=REPO / "build" / "image")
    parser.add_argument(
        "--cache",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "wattprobe-image",
    )
    parser.add_argument(
        "--mirror", action="append", default=[], help="an apt sources line (repeatable)"
    )
    parser.add_argument(
        "--registry",
        default="",
        help="names the per-platform archives' images <registry>/<image>:<version> "
        "(e.g. ghcr.io/you; default: the spec's ghcr.io/wattprobe)",
    )
    args = parser.parse_args(argv)
    images = [i for i in args.images.split(",") if i]
    arches = [a for a in args.arches.split(",") if a]
    unknown = [i for i in images if i not in SPECS] + [a for a in arches if a not in ARCHES]
    if unknown:
        parser.error(f"unknown image or architecture: {', '.join(unknown)}")
    epoch = default_epoch()
    revision = os.environ.get("WATTPROBE_REVISION") or git("rev-parse", "HEAD")
    mirrors = tuple(args.mirror) or DEFAULT_MIRRORS
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=args.out) as tmp:
        project = python.project_wheel(REPO, Path(tmp), epoch)
        version = args.version or wheel_version(project)
        if version != wheel_version(project):
            print(
                f"image: --version {version} but the wheel is {project.name}: the tag and the "
                "package version must agree (docs/release.md)",
                file=sys.stderr,
            )
            return 1
        for key in images:
            build_image(
                spec=SPECS[key],
                arches=arches,
                version=version,
                revision=revision,
                epoch=epoch,
                mirrors=mirrors,
                project=project,
                out=args.out,
                cache=args.cache,
                registry=args.registry,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
