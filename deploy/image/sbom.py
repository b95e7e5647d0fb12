"""CycloneDX 1.5 SBOM of one platform's image, read from what went into its layers: dpkg's
status database (every installed Debian package), the kernel header packages unpacked by the
agent's hook, and the wheels installed into the Python layer (with their sha256).

The document is deterministic: its serial number derives from the image's manifest digest and
its timestamp is SOURCE_DATE_EPOCH.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from packageurl import PackageURL

from deploy.image.oci import iso
from deploy.image.python import Wheel
from deploy.image.spec import ImageSpec

DISTRO = "debian-12"


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    source: str  # source package name ("" when the same as name)
    where: str = ""  # "" for dpkg-installed, else where the package was unpacked


def installed(dpkg_status: str) -> Iterator[DebPackage]:
    """The packages dpkg's status file says are installed."""
    for stanza in dpkg_status.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, re.MULTILINE))
        if "Package" not in fields or not fields.get("Status", "").endswith(" installed"):
            continue
        source = fields.get("Source", "").split(" ")[0]
        yield DebPackage(fields["Package"], fields["Version"], fields["Architecture"], source)


def unpacked(lines: str, where: str) -> Iterator[DebPackage]:
    for line in lines.splitlines():
        if line.strip():
            name, version, arch = line.split()
            yield DebPackage(name, version, arch, "", where)


def deb_component(pkg: DebPackage, arch: str) -> dict[str, Any]:
    qualifiers = {"arch": pkg.arch, "distro": DISTRO}
    purl = PackageURL(
        type="deb", namespace="debian", name=pkg.name, version=pkg.version, qualifiers=qualifiers
    ).to_string()
    comp: dict[str, Any] = {
        "type": "library",
        "bom-ref": purl,
        "name": pkg.name,
        "version": pkg.version,
        "purl": purl,
    }
    props = [{"name": "wattprobe:platform", "value": f"linux/{arch}"}]
    if pkg.source and pkg.source != pkg.name:
        props.append({"name": "debian:source", "value": pkg.source})
    if pkg.where:
        props.append({"name": "wattprobe:unpacked-to", "value": pkg.where})
    comp["properties"] = props
    return comp


def wheel_component(wheel: Wheel) -> dict[str, Any]:
    name = re.sub(r"[-_.]+", "-", wheel.name).lower()
    purl = PackageURL(type="pypi", name=name, version=wheel.version).to_string()
    comp: dict[str, Any] = {
        "type": "library",
        "bom-ref": purl,
        "name": name,
        "version": wheel.version,
        "purl": purl,
        "hashes": [{"alg": "SHA-256", "content": wheel.sha256}],
        "properties": [{"name": "wattprobe:wheel", "value": wheel.filename}],
    }
    if wheel.license:
        comp["licenses"] = [{"license": {"name": wheel.license}}]
    return comp


def document(
    spec: ImageSpec,
    *,
    arch: str,
    version: str,
    manifest_digest: str,
    debs: list[DebPackage],
    wheels: tuple[Wheel, ...],
    epoch: int,
) -> dict[str, Any]:
    image_purl = PackageURL(
        type="oci",
        name=spec.name.rsplit("/", 1)[-1],
        version=manifest_digest,
        qualifiers={"arch": arch, "repository_url": spec.name, "tag": version},
    ).to_string()
    components = sorted(
        [deb_component(p, arch) for p in debs] + [wheel_component(w) for w in wheels],
        key=lambda c: str(c["bom-ref"]),
    )
    return {
        "$schema": "http://cyclonedx.org/schema/bom-1.5.schema.json",
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, image_purl)}",
        "version": 1,
        "metadata": {
            "timestamp": iso(epoch),
            "tools": {
                "components": [{"type": "application", "name": "wattprobe deploy/image/build.py"}]
            },
            "component": {
                "type": "container",
                "bom-ref": image_purl,
                "name": spec.name,
                "version": version,
                "purl": image_purl,
            },
        },
        "components": components,
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
