"""Content-addressed blobs: gzip a layer tarball reproducibly, hash JSON documents."""

from __future__ import annotations

import gzip
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


@dataclass(frozen=True)
class Blob:
    path: Path
    digest: str  # sha256:<hex> of the bytes at path
    size: int
    diff_id: str = ""  # sha256:<hex> of the uncompressed layer (layers only)


def gzip_blob(tar_path: Path, out: Path) -> Blob:
    """gzip without a name or timestamp in its header (mtime=0), so equal tarballs give equal
    blobs with the same zlib."""
    diff = hashlib.sha256()
    with (
        tar_path.open("rb") as src,
        out.open("wb") as raw,
        gzip.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=6, mtime=0) as gz,
    ):
        while chunk := src.read(CHUNK):
            diff.update(chunk)
            gz.write(chunk)
    return Blob(
        path=out,
        digest=file_digest(out),
        size=out.stat().st_size,
        diff_id=f"sha256:{diff.hexdigest()}",
    )


def file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return f"sha256:{h.hexdigest()}"


def canonical_json(doc: Any) -> bytes:
    """One byte form per document: sorted keys, no spaces (the digest is of these bytes)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def store(blobs_dir: Path, data: bytes) -> tuple[str, int]:
    """Write data under blobs/sha256/<hex>; return its digest and size."""
    hexd = hashlib.sha256(data).hexdigest()
    blobs_dir.mkdir(parents=True, exist_ok=True)
    (blobs_dir / hexd).write_bytes(data)
    return f"sha256:{hexd}", len(data)


def store_file(blobs_dir: Path, blob: Blob) -> None:
    """Copy a layer blob into blobs/sha256/ (a hard link where the file system allows)."""
    dest = blobs_dir / blob.digest.removeprefix("sha256:")
    if dest.exists():
        return
    blobs_dir.mkdir(parents=True, exist_ok=True)
    try:
        dest.hardlink_to(blob.path)
    except OSError:
        shutil.copyfile(blob.path, dest)
