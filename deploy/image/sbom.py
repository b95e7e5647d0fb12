"""CycloneDX 1.5 SBOM of one platform's image, read from what went into its layers: dpkg's
status database (every installed Debian package), the kernel header packages unpacked by the
agent's hook, and the wheels installed into the Python layer (with their sha256).

A Debian package's licences are the License: fields of its /usr/share/doc/<package>/copyright
when that file is machine-readable (DEP-5, a Format: header); other copyright files are free
text, and their packages get no licences rather than a guess. Each DEP-5 licence is kept as
written there (a name such as `GPL-2+` or `GPL-2+ or Artistic`, not mapped to SPDX ids). The
dependency graph is dpkg's Depends and Pre-Depends, each resolved to a package in the image (the
first installed alternative, or an installed package that Provides it).

The document is deterministic: its serial number derives from the image's manifest digest and
its timestamp is SOURCE_DATE_EPOCH.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from packageurl import PackageURL

from deploy.image.oci import iso
from deploy.image.python import Wheel
from deploy.image.spec import ImageSpec

DISTRO = "debian-12"


DEP5_FORMAT = re.compile(
    r"^Format:[ \t]*https?://www\.debian\.org/doc/packaging-manuals/copyright-format/1\.0/?",
    re.MULTILINE,
)


@dataclass(frozen=True)
class DebPackage:
    name: str
    version: str
    arch: str
    source: str  # source package name ("" when the same as name)
    where: str = ""  # "" for dpkg-installed, else where the package was unpacked
    depends: str = ""  # Pre-Depends and Depends, comma-separated as dpkg writes them
    provides: str = ""
    licenses: tuple[str, ...] = ()  # from a DEP-5 copyright file; () when unknown


def copyright_licenses(text: str) -> tuple[str, ...]:
    """The distinct License: names of a DEP-5 copyright file (header and Files paragraphs),
    sorted; () for a file that is not machine-readable or names none."""
    if not DEP5_FORMAT.search(text.split("\n\n", 1)[0]):
        return ()
    names: set[str] = set()
    for number, paragraph in enumerate(re.split(r"\n[ \t]*\n", text)):
        if number > 0 and not re.search(r"^Files:", paragraph, re.MULTILINE):
            continue  # a stand-alone License paragraph: the text of a name used elsewhere
        for name in re.findall(r"^License:[ \t]*(.*?)[ \t]*$", paragraph, re.MULTILINE):
            if name:
                names.add(name)
    return tuple(sorted(names))


def installed(
    dpkg_status: str, licenses: Mapping[str, Sequence[str]] | None = None
) -> Iterator[DebPackage]:
    """The packages dpkg's status file says are installed, with their licences by package name
    (copyright_licenses of each one's copyright file)."""
    licenses = licenses or {}
    for stanza in dpkg_status.split("\n\n"):
        fields = dict(re.findall(r"^([A-Za-z-]+): ?(.*)$", stanza, re.MULTILINE))
        if "Package" not in fields or not fields.get("Status", "").endswith(" installed"):
            continue
        source = fields.get("Source", "").split(" ")[0]
        depends = ", ".join(
            fields[key] for key in ("Pre-Depends", "Depends") if fields.get(key, "").strip()
        )
        yield DebPackage(
            fields["Package"],
            fields["Version"],
            fields["Architecture"],
            source,
            depends=depends,
            provides=fields.get("Provides", ""),
            licenses=tuple(licenses.get(fields["Package"], ())),
        )


def _names(relations: str) -> Iterator[list[str]]:
    """Each comma-separated relation as its alternatives' package names (versions, arch
    qualifiers such as :any and architecture restrictions dropped)."""
    for relation in relations.split(","):
        alternatives = []
        for alternative in relation.split("|"):
            name = re.split(r"[\s(\[<]", alternative.strip(), maxsplit=1)[0].split(":")[0]
            if name:
                alternatives.append(name)
        if alternatives:
            yield alternatives


def dependencies(debs: Sequence[DebPackage], arch: str) -> list[dict[str, Any]]:
    """CycloneDX dependencies of the dpkg-installed packages: each one's Pre-Depends and Depends
    resolved to packages in the image (an unresolvable relation is left out)."""
    packages = [p for p in debs if not p.where]
    refs = {p.name: deb_component(p, arch)["bom-ref"] for p in packages}
    providers: dict[str, str] = {}
    for p in packages:
        for name, *_ in _names(p.provides):
            providers.setdefault(name, p.name)
    graph = []
    for p in packages:
        on: set[str] = set()
        for alternatives in _names(p.depends):
            for name in alternatives:
                target = name if name in refs else providers.get(name)
                if target is not None:
                    if target != p.name:
                        on.add(refs[target])
                    break
        graph.append({"ref": refs[p.name], "dependsOn": sorted(on)})
    return sorted(graph, key=lambda d: str(d["ref"]))


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
    if pkg.licenses:
        comp["licenses"] = [{"license": {"name": name}} for name in pkg.licenses]
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
        "dependencies": dependencies(debs, arch),
    }


def dumps(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=1, sort_keys=True) + "\n"
