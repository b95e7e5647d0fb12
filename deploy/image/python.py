"""The Python layer: the project's wheel and its dependencies for the target platform, installed
where Debian's python3 looks first (/usr/local/lib/python3.X/dist-packages), as a tarball.

The dependencies are binary wheels for the image's platform from PyPI (pip download
--platform/--only-binary, pinned by constraints.txt), unpacked by `installer` (a pure-Python
wheel installer, so a foreign architecture needs no emulation here). Debian's python3 sees
/usr/lib/python3/dist-packages too: that is where python3-bpfcc's `bcc` comes from.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from installer import install
from installer.destinations import SchemeDictionaryDestination
from installer.sources import WheelFile

from deploy.image.blob import Blob, gzip_blob
from deploy.image.spec import PYTHON_VERSION, wheel_platforms

HERE = Path(__file__).resolve().parent
CONSTRAINTS = HERE / "constraints.txt"
PURELIB = f"usr/local/lib/python{PYTHON_VERSION}/dist-packages"
SCHEME = {
    "purelib": PURELIB,
    "platlib": PURELIB,
    "headers": f"usr/local/include/python{PYTHON_VERSION}",
    "scripts": "usr/local/bin",
    "data": "usr/local",  # sysconfig's "data" for Debian's python3: exporter finds bpf/ there
}


@dataclass(frozen=True)
class Wheel:
    name: str
    version: str
    filename: str
    sha256: str
    license: str  # License-Expression, else License, else ""


@dataclass(frozen=True)
class PythonLayer:
    blob: Blob
    wheels: tuple[Wheel, ...]


def project_wheel(repo: Path, out_dir: Path, epoch: int) -> Path:
    """Build the project's wheel (pure Python, any architecture) once per build."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(out_dir),
            str(repo),
        ],
        check=True,
        env=env,
    )
    (wheel,) = out_dir.glob("wattprobe-*.whl")
    return wheel


def download(project: Path, arch: str, out_dir: Path) -> list[Path]:
    """The project's wheel plus every dependency as a binary wheel for arch."""
    platforms = [arg for tag in wheel_platforms(arch) for arg in ("--platform", tag)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "-q",
            "--only-binary=:all:",
            *platforms,
            "--python-version",
            PYTHON_VERSION,
            "--implementation",
            "cp",
            "--abi",
            f"cp{PYTHON_VERSION.replace('.', '')}",
            "--constraint",
            str(CONSTRAINTS),
            "--dest",
            str(out_dir),
            str(project),
        ],
        check=True,
    )
    return sorted(out_dir.glob("*.whl"))


def metadata(wheel: Path) -> Wheel:
    with WheelFile.open(wheel) as source:
        text = source.read_dist_info("METADATA")
    meta = Parser().parsestr(text, headersonly=True)
    license_ = meta.get("License-Expression") or meta.get("License") or ""
    return Wheel(
        name=str(meta["Name"]),
        version=str(meta["Version"]),
        filename=wheel.name,
        sha256=hashlib.sha256(wheel.read_bytes()).hexdigest(),
        license=license_.strip() if "\n" not in license_.strip() else "",
    )


def build(project: Path, arch: str, epoch: int, work: Path) -> PythonLayer:
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        wheels = download(project, arch, Path(tmp) / "wheels")
        root = Path(tmp) / "root"
        destination = SchemeDictionaryDestination(
            {k: str(root / v) for k, v in SCHEME.items()},
            interpreter="/usr/bin/python3",
            script_kind="posix",
            bytecode_optimization_levels=(),  # no .pyc: they are not reproducible byte for byte
        )
        for wheel in wheels:
            with WheelFile.open(wheel) as source:
                install(
                    source, destination, additional_metadata={"INSTALLER": b"wattprobe-image\n"}
                )
        layer_tar = Path(tmp) / "python.tar"
        write_tar(root, layer_tar, epoch)
        blob = gzip_blob(layer_tar, work / f"python-{arch}.tar.gz")
        return PythonLayer(blob=blob, wheels=tuple(metadata(w) for w in wheels))


def write_tar(root: Path, out: Path, epoch: int) -> None:
    """A layer tarball of root's tree: sorted names, owner root, mtime epoch, modes 0755/0644."""
    paths = sorted(root.rglob("*"))
    dirs = sorted({p for path in paths for p in path.relative_to(root).parents if p != Path(".")})
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for rel in sorted({*dirs, *(p.relative_to(root) for p in paths)}):
            path = root / rel
            info = tar.gettarinfo(str(path), arcname=str(rel))
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = epoch
            if info.isdir() or (info.isfile() and path.stat().st_mode & 0o111):
                info.mode = 0o755
            elif info.isfile():
                info.mode = 0o644
            if info.isfile():
                with path.open("rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
