"""The image SBOM's Debian licences and dependency graph (deploy/image/sbom.py), from a fixture
root filesystem tarball read the way the build reads mmdebstrap's (debian.read_members): dpkg's
status file and /usr/share/doc/<package>/copyright files, machine-readable (DEP-5) or not, one
doc directory a symlink to another's. No image build: tests/deploy/test_image.py checks a real
image's SBOM against dpkg in it."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from deploy.image import sbom
from deploy.image.debian import read_members
from deploy.image.spec import AGENT

DEP5 = "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/\n"

STATUS = """\
Package: base-app
Status: install ok installed
Architecture: amd64
Version: 1.0-1
Pre-Depends: libc6 (>= 2.34)
Depends: debconf (>= 0.5) | debconf-2.0, python3.11:any (>= 3.11.2), libmissing1, base-app-data

Package: base-app-data
Status: install ok installed
Architecture: all
Version: 1.0-1
Source: base-app

Package: libc6
Status: install ok installed
Architecture: amd64
Version: 2.36-9
Depends: libgcc-s1

Package: libgcc-s1
Status: install ok installed
Architecture: amd64
Version: 12.2.0-14
Source: gcc-12 (12.2.0-14)
Depends: gcc-12-base (= 12.2.0-14), libc6 (>= 2.35)

Package: gcc-12-base
Status: install ok installed
Architecture: amd64
Version: 12.2.0-14
Source: gcc-12

Package: cdebconf
Status: install ok installed
Architecture: amd64
Version: 0.270
Provides: debconf-2.0

Package: python3.11
Status: install ok installed
Architecture: amd64
Version: 3.11.2-6
Depends: python3.11 (>= 3.11)

Package: removed-pkg
Status: deinstall ok config-files
Architecture: amd64
Version: 1
"""

COPYRIGHT = {
    "base-app": DEP5 + "Upstream-Name: base-app\nLicense: MIT\n\n"
    "Files: *\nCopyright: 2020 Someone\nLicense: GPL-2+\n\n"
    "Files: vendor/*\nCopyright: 2019 Other\nLicense: BSD-3-clause or GPL-2+\n\n"
    "Files: debian/*\nCopyright: 2021 Packager\nLicense: GPL-2+\n\n"
    "License: GPL-2+\n This program is free software...\n .\n On Debian systems...\n\n"
    "License: Expat\n Permission is hereby granted...\n",
    # free text: no licence is guessed from it, License: line or not
    "libc6": "This is the Debian prepackaged version of the GNU C Library.\n\n"
    "License: LGPL-2.1+ (see /usr/share/common-licenses/LGPL-2.1)\n",
    "gcc-12-base": DEP5 + "\nFiles: *\nCopyright: FSF\nLicense: GPL-3+ with GCC-exception-3.1\n",
    "cdebconf": DEP5 + "\nFiles: *\nCopyright: 2000 Randolph Chung\nLicense: BSD-2-clause\n",
    "python3.11": DEP5.replace("https:", "http:").replace("1.0/", "1.0")
    + "\nFiles: *\nCopyright: PSF\nLicense: PSF-2\n",
}


def _rootfs(tmp_path: Path) -> Path:
    path = tmp_path / "rootfs.tar"
    with tarfile.open(path, "w") as tar:

        def add(name: str, text: str) -> None:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("./var/lib/dpkg/status", STATUS)
        for package, text in COPYRIGHT.items():
            add(f"./usr/share/doc/{package}/copyright", text)
        # Debian lets a package's doc directory be a symlink to another of the same source's
        for package, target in (("libgcc-s1", "gcc-12-base"), ("base-app-data", "base-app")):
            link = tarfile.TarInfo(f"./usr/share/doc/{package}")
            link.type, link.linkname = tarfile.SYMTYPE, target
            tar.addfile(link)
    return path


def _document(tmp_path: Path) -> dict[str, Any]:
    recorded, licenses = read_members(_rootfs(tmp_path))
    debs = list(sbom.installed(recorded["dpkg-status"], licenses))
    debs += sbom.unpacked("linux-headers-6.1.0-1-amd64 6.1.4-1 amd64\n", "/opt/k")
    return sbom.document(
        AGENT,
        arch="amd64",
        version="1.2.3",
        manifest_digest="sha256:" + "ab" * 32,
        debs=debs,
        wheels=(),
        epoch=1764115200,
    )


def _by_name(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in doc["components"]}


def test_licences_come_from_dep5_copyright_files_only(tmp_path: Path) -> None:
    components = _by_name(_document(tmp_path))
    licences = {
        name: [entry["license"]["name"] for entry in c.get("licenses", [])]
        for name, c in components.items()
    }
    assert licences == {
        # header and Files paragraphs; Expat is only a stand-alone License paragraph's text
        "base-app": ["BSD-3-clause or GPL-2+", "GPL-2+", "MIT"],
        "base-app-data": ["BSD-3-clause or GPL-2+", "GPL-2+", "MIT"],  # doc dir: a symlink
        "libc6": [],  # free-text copyright: left out, not guessed
        "libgcc-s1": ["GPL-3+ with GCC-exception-3.1"],
        "gcc-12-base": ["GPL-3+ with GCC-exception-3.1"],
        "cdebconf": ["BSD-2-clause"],
        "python3.11": ["PSF-2"],
        "linux-headers-6.1.0-1-amd64": [],
    }


def test_dependency_graph_from_depends_and_pre_depends(tmp_path: Path) -> None:
    doc = _document(tmp_path)
    components = _by_name(doc)
    ref = {name: c["bom-ref"] for name, c in components.items()}
    graph = {d["ref"]: set(d["dependsOn"]) for d in doc["dependencies"]}
    assert graph[ref["base-app"]] == {
        ref["libc6"],  # Pre-Depends
        ref["cdebconf"],  # debconf is not installed: the alternative debconf-2.0, provided
        ref["python3.11"],  # :any dropped
        ref["base-app-data"],
        # libmissing1 is not in the image: left out
    }
    assert graph[ref["libc6"]] == {ref["libgcc-s1"]}
    assert graph[ref["libgcc-s1"]] == {ref["gcc-12-base"], ref["libc6"]}  # cycles are kept
    assert graph[ref["python3.11"]] == set()  # itself is no dependency
    assert graph[ref["gcc-12-base"]] == set()
    # every dpkg-installed package has an entry; unpacked header packages and removed ones none
    assert set(graph) == {c["bom-ref"] for c in doc["components"]} - {
        ref["linux-headers-6.1.0-1-amd64"]
    }
    assert "removed-pkg" not in components


def test_the_document_is_valid_cyclonedx_1_5(tmp_path: Path) -> None:
    doc = _document(tmp_path)
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(json.dumps(doc))
    assert error is None, error
    assert sbom.dumps(doc) == sbom.dumps(_document(tmp_path))  # deterministic


def test_copyright_licenses_refuses_what_is_not_dep5() -> None:
    assert sbom.copyright_licenses("") == ()
    assert sbom.copyright_licenses("License: GPL-2\n") == ()
    # a Format: line that is not the header paragraph's
    assert sbom.copyright_licenses("Intro\n\n" + DEP5 + "License: GPL-2\n") == ()
    assert sbom.copyright_licenses(DEP5 + "\nFiles: *\nLicense:\n text only\n") == ()
