"""The Debian layer: mmdebstrap's root filesystem tarball, gzip-compressed into an OCI blob.

mmdebstrap writes a reproducible tarball (sorted names, mtimes clamped to SOURCE_DATE_EPOCH,
numeric owners) when the package versions are the same. The compressed layer is cached under a
key of everything that goes into it (suite, architecture, mirrors, packages, hooks' contents,
epoch), so a second build on the same machine reuses it; the Debian archive moving on is the
one input the key cannot see (delete the cache, or pin a snapshot.debian.org mirror).
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from deploy.image.blob import Blob, gzip_blob
from deploy.image.sbom import copyright_licenses
from deploy.image.spec import DPKG_EXCLUDES, SUITE, ImageSpec

# what the SBOM and the checks read back from the root filesystem
RECORDED = {
    "var/lib/dpkg/status": "dpkg-status",
    "opt/wattprobe/kernel-headers/.packages": "kernel-headers-packages",
}
# the layer's cache entries record this much (a new kind of record invalidates older entries)
RECORDS = 2  # 2: the licences of each package's copyright file
DOC = "usr/share/doc/"


@dataclass(frozen=True)
class DebianLayer:
    blob: Blob
    dpkg_status: str
    kernel_headers_packages: str  # "name version arch" lines, empty when the image has none
    key: str
    cached: bool
    # package -> License: names of its DEP-5 /usr/share/doc/<package>/copyright (sbom.py)
    licenses: dict[str, list[str]]


def cache_key(spec: ImageSpec, arch: str, mirrors: tuple[str, ...], epoch: int) -> str:
    parts = {
        "suite": SUITE,
        "arch": arch,
        "mirrors": list(mirrors),
        "packages": sorted(spec.packages),
        "dpkg": list(DPKG_EXCLUDES),
        "hooks": {h.name: hashlib.sha256(h.read_bytes()).hexdigest() for h in spec.hooks},
        "epoch": epoch,
        "mmdebstrap": mmdebstrap_version(),
        "records": RECORDS,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:32]


def mmdebstrap_version() -> str:
    out = subprocess.run(["mmdebstrap", "--version"], check=True, capture_output=True, text=True)
    return out.stdout.strip()


def mmdebstrap_command(
    spec: ImageSpec, arch: str, mirrors: tuple[str, ...], out: Path
) -> list[str]:
    cmd = [
        "mmdebstrap",
        "--quiet",
        "--variant=apt",
        f"--architectures={arch}",
        f"--include={','.join(spec.packages)}",
        '--aptopt=APT::Install-Recommends "false"',
        "--skip=output/dev",  # no device nodes in a layer: the runtime provides /dev
    ]
    cmd += [f"--dpkgopt={opt}" for opt in DPKG_EXCLUDES]
    # mmdebstrap runs a hook through `sh -c`, passing the root filesystem as $1
    cmd += [f'--customize-hook={shlex.quote(str(hook))} "$1"' for hook in spec.hooks]
    return [*cmd, SUITE, str(out), *mirrors]


def build(
    spec: ImageSpec, arch: str, mirrors: tuple[str, ...], epoch: int, cache_dir: Path
) -> DebianLayer:
    key = cache_key(spec, arch, mirrors, epoch)
    entry = cache_dir / f"debian-{arch}-{key}"
    meta_path = entry.with_suffix(".json")
    if meta_path.exists() and entry.with_suffix(".tar.gz").exists():
        meta = json.loads(meta_path.read_text())
        return DebianLayer(
            blob=Blob(path=entry.with_suffix(".tar.gz"), **meta["blob"]),
            dpkg_status=meta["dpkg-status"],
            kernel_headers_packages=meta["kernel-headers-packages"],
            key=key,
            cached=True,
            licenses=meta["copyright-licenses"],
        )
    cache_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        rootfs = Path(tmp) / "rootfs.tar"
        env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
        subprocess.run(mmdebstrap_command(spec, arch, mirrors, rootfs), check=True, env=env)
        recorded, licenses = read_members(rootfs)
        partial = Path(tmp) / "layer.tar.gz"
        blob = gzip_blob(rootfs, partial)
        partial.replace(entry.with_suffix(".tar.gz"))
    blob = Blob(
        path=entry.with_suffix(".tar.gz"), digest=blob.digest, size=blob.size, diff_id=blob.diff_id
    )
    meta = {
        "blob": {"digest": blob.digest, "size": blob.size, "diff_id": blob.diff_id},
        **recorded,
        "copyright-licenses": licenses,
    }
    meta_path.write_text(json.dumps(meta, indent=1, sort_keys=True))
    return DebianLayer(
        blob=blob,
        dpkg_status=recorded["dpkg-status"],
        kernel_headers_packages=recorded["kernel-headers-packages"],
        key=key,
        cached=False,
        licenses=licenses,
    )


def read_members(rootfs: Path) -> tuple[dict[str, str], dict[str, list[str]]]:
    """The RECORDED files' text from the tarball ("" for those it lacks), and each package's
    licences from its DEP-5 usr/share/doc/<package>/copyright (a package whose doc directory
    is a symlink to another's, as Debian allows within one source, gets that one's); packages
    with a free-text copyright file are left out."""
    found = dict.fromkeys(RECORDED.values(), "")
    texts: dict[str, str] = {}
    links: dict[str, str] = {}
    with tarfile.open(rootfs) as tar:
        for member in tar:
            name = member.name.removeprefix("./")
            if name in RECORDED and member.isfile():
                found[RECORDED[name]] = _text(tar, member)
            elif name.startswith(DOC):
                parts = name[len(DOC) :].split("/")
                if len(parts) == 2 and parts[1] == "copyright" and member.isfile():
                    texts[parts[0]] = _text(tar, member)
                elif len(parts) == 1 and member.issym() and "/" not in member.linkname:
                    links[parts[0]] = member.linkname
    licenses: dict[str, list[str]] = {}
    for package in sorted(texts.keys() | links.keys()):
        text = texts.get(package, texts.get(links.get(package, ""), ""))
        names = copyright_licenses(text)
        if names:
            licenses[package] = list(names)
    return found, licenses


def _text(tar: tarfile.TarFile, member: tarfile.TarInfo) -> str:
    data = tar.extractfile(member)
    assert data is not None  # a regular file always has data
    return data.read().decode(errors="replace")
