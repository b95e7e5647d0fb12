"""The release workflow's registry steps (deploy/release.sh, which release.yml runs) against a
loopback OCI registry: Debian's docker-registry on 127.0.0.1, the images pushed by the real
skopeo from synthesized archives (the project's OCI code, no mmdebstrap), the chart packaged
and pushed by Helm's engine (helm_python, behind a `helm` shim: no helm binary here), cosign a
stub that logs what it would sign. The digests handed to cosign are compared with the ones the
registry serves (Docker-Content-Digest), and a failed push or a wrong digest stops the step
before cosign."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from deploy.image import oci
from deploy.image.spec import AGENT, FORWARDER, ImageSpec
from tests.deploy.manifests import REPO
from tests.deploy.test_image_archive import EPOCH, _layer
from tests.support.ociregistry import Registry, loopback_registry
from tests.support.realparts import require_binary
from tests.support.running import free_port

SCRIPT = REPO / "deploy" / "release.sh"
VERSION = "1.2.3"
OWNER = "some-owner"
INDEX_TYPES = f"{oci.INDEX}, application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = f"{oci.MANIFEST}, application/vnd.docker.distribution.manifest.v2+json"

# `helm package` and `helm push` by Helm's own engine (helm-python-sdk); push prints what helm
# push prints (Pushed:, Digest:), the digest from the registry client's resolve of the tag.
# HELM_SHIM_DIGEST replaces the printed digest (a helm that reports a wrong one).
HELM_SHIM = """\
import os, sys
import helm_python
from helm_python import registry

args = sys.argv[1:]
log = os.environ.get("STUB_LOG")
if log:
    with open(log, "a") as f:
        f.write("helm " + " ".join(args) + "\\n")
if args[0] == "package":
    chart, rest = args[1], args[2:]
    opt = dict(zip(rest[::2], rest[1::2]))
    print(helm_python.package(chart, destination=opt["-d"], version=opt["--version"],
                              app_version=opt["--app-version"]))
elif args[0] == "push":
    archive, remote = args[1], args[2]
    try:
        registry.push(archive, remote, plain_http=True)
        name = os.path.basename(archive)[: -len(".tgz")]
        chart, version = name.rsplit("-", 1)
        ref = f"{remote}/{chart}:{version}"
        digest = registry.RegistryClient(plain_http=True).resolve(ref)["digest"]
    except Exception as exc:
        print(f"Error: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"Pushed: {ref[len('oci://'):]}")
    print(f"Digest: {os.environ.get('HELM_SHIM_DIGEST', digest)}")
else:
    sys.exit(f"helm shim: {args[0]} not implemented")
"""


@pytest.fixture
def registry(tmp_path: Path) -> Iterator[Registry]:
    with loopback_registry(tmp_path) as running:
        yield running


def _build_image(tmp_path: Path, out: Path, spec: ImageSpec) -> dict[str, object]:
    """What `make image` leaves in build/image for one image: the multi-platform archive, its
    summary (<title>-<version>.json) and a CycloneDX file per platform."""
    stem = f"{spec.title}-{VERSION}"
    layout = tmp_path / stem
    labels = oci.labels(spec, VERSION, "test", EPOCH)
    work = tmp_path / f"layer-{spec.title}"
    work.mkdir()
    layer = _layer(work)
    manifests = {
        arch: oci.write_image(
            layout / "blobs" / "sha256",
            spec,
            arch=arch,
            layers=[layer],
            image_labels=labels,
            epoch=EPOCH,
        )
        for arch in ("amd64", "arm64")
    }
    index = oci.write_layout(layout, VERSION, manifests, labels)
    oci.archive(layout, out / f"{stem}.oci.tar", EPOCH)
    summary: dict[str, object] = {
        "image": spec.name,
        "version": VERSION,
        "index": index.digest,
        "archive": f"{stem}.oci.tar",
        "platforms": {arch: {"manifest": m.digest} for arch, m in manifests.items()},
    }
    (out / f"{stem}.json").write_text(json.dumps(summary))
    for arch in manifests:
        (out / f"{stem}-{arch}.cdx.json").write_text('{"bomFormat": "CycloneDX"}\n')
    return summary


@dataclass
class Release:
    tmp: Path
    env: dict[str, str]
    log: Path

    def run(self, step: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(SCRIPT), step],
            cwd=REPO,
            env={**self.env, **env},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )

    def calls(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def release(tmp_path: Path, registry: Registry) -> Release:
    require_binary("skopeo")
    stubs = tmp_path / "bin"
    stubs.mkdir()
    log = tmp_path / "calls.log"
    (stubs / "cosign").write_text(f'#!/bin/bash\necho "cosign $*" >> {log}\n')
    (stubs / "helm").write_text(f"#!{sys.executable}\n{HELM_SHIM}")
    for stub in stubs.iterdir():
        stub.chmod(0o755)
    # credentials go to a file of the test's
    auth = tmp_path / "auth.json"
    auth.write_text('{"auths": {}}\n')
    image_out = tmp_path / "build" / "image"
    image_out.mkdir(parents=True)
    env = {
        "PATH": f"{stubs}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(REPO),
        "PYTHON": sys.executable,
        "REGISTRY": f"{registry.host}/{OWNER}",
        "VERSION": VERSION,
        "IMAGE_OUT": str(image_out),
        "CHART_OUT": str(tmp_path / "build" / "chart"),
        "TLS_VERIFY": "false",  # plain HTTP on loopback
        "REGISTRY_AUTH_FILE": str(auth),
        "HELM_REGISTRY_CONFIG": str(auth),
        "STUB_LOG": str(log),
    }
    return Release(tmp_path, env, log)


def _outputs(stdout: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in stdout.splitlines())


def test_images_pushed_with_their_digests_then_signed_and_attested(
    release: Release, registry: Registry
) -> None:
    out = Path(release.env["IMAGE_OUT"])
    summaries = {spec.title: _build_image(release.tmp, out, spec) for spec in (AGENT, FORWARDER)}
    pushed = release.run("push-images")
    assert pushed.returncode == 0, pushed.stderr
    outputs = _outputs(pushed.stdout)
    prefix = release.env["REGISTRY"]
    assert outputs == {
        "agent-name": f"{prefix}/wattprobe",
        "agent-digest": str(summaries["wattprobe"]["index"]),
        "forwarder-name": f"{prefix}/wattprobe-forwarder",
        "forwarder-digest": str(summaries["wattprobe-forwarder"]["index"]),
    }
    for key in ("agent", "forwarder"):
        repository = outputs[f"{key}-name"].split("/", 1)[1]
        # the tag serves the index the workflow attests, every platform's manifest is there
        assert registry.digest(repository, VERSION, INDEX_TYPES) == outputs[f"{key}-digest"]
        summary = summaries[repository.rsplit("/", 1)[1]]
        platforms = summary["platforms"]
        assert isinstance(platforms, dict)
        for platform in platforms.values():
            digest = platform["manifest"]
            assert registry.digest(repository, digest, MANIFEST_TYPES) == digest
    refs = (out / "pushed.txt").read_text().split()
    assert sorted(refs) == sorted(
        f"{outputs[f'{k}-name']}@{outputs[f'{k}-digest']}"
        for k in (
            "agent",
            "forwarder",
        )
    )

    signed = release.run("sign-images")
    assert signed.returncode == 0, signed.stderr
    calls = release.calls()
    assert [c for c in calls if c.startswith("cosign sign")] == [
        f"cosign sign --yes {ref}" for ref in refs
    ]
    attests = [c.split() for c in calls if c.startswith("cosign attest")]
    expected = set()
    for title, summary in summaries.items():
        platforms = summary["platforms"]
        assert isinstance(platforms, dict)
        for arch, platform in platforms.items():
            sbom = out / f"{title}-{VERSION}-{arch}.cdx.json"
            expected.add((f"{prefix}/{title}@{platform['manifest']}", str(sbom)))
    assert {(a[-1], a[a.index("--predicate") + 1]) for a in attests} == expected
    assert all(a[:5] == ["cosign", "attest", "--yes", "--type", "cyclonedx"] for a in attests)


def test_a_failed_image_push_fails_the_step(release: Release) -> None:
    out = Path(release.env["IMAGE_OUT"])
    _build_image(release.tmp, out, AGENT)
    down = f"127.0.0.1:{free_port()}"  # nothing listens there
    proc = release.run("push-images", REGISTRY=f"{down}/{OWNER}")
    assert proc.returncode != 0
    assert "agent-digest" not in proc.stdout and not (out / "pushed.txt").exists()


def test_chart_pushed_and_the_registry_digest_signed(release: Release, registry: Registry) -> None:
    proc = release.run("push-chart")
    assert proc.returncode == 0, proc.stderr
    served = registry.digest(f"{OWNER}/charts/wattprobe", VERSION, oci.MANIFEST)
    assert served is not None and served.startswith("sha256:")
    assert proc.stdout.strip() == f"digest={served}"
    calls = release.calls()
    assert f"cosign sign --yes {release.env['REGISTRY']}/charts/wattprobe@{served}" in calls
    assert (release.tmp / "build" / "chart" / f"wattprobe-{VERSION}.tgz").is_file()


def test_a_chart_digest_other_than_the_registry_s_is_not_signed(release: Release) -> None:
    proc = release.run("push-chart", HELM_SHIM_DIGEST="sha256:" + "ab" * 32)
    assert proc.returncode != 0
    assert "the registry serves" in proc.stderr
    assert not [c for c in release.calls() if c.startswith("cosign")]


def test_a_failed_chart_push_stops_before_cosign(release: Release) -> None:
    down = f"127.0.0.1:{free_port()}"
    proc = release.run("push-chart", REGISTRY=f"{down}/{OWNER}")
    assert proc.returncode != 0
    # pipefail: the `helm push | tee` pipeline itself fails, before the digest is even read
    assert "Error:" in proc.stderr and "no chart digest" not in proc.stderr, proc.stderr
    calls = release.calls()
    assert any(c.startswith("helm push") for c in calls), calls
    assert not [c for c in calls if c.startswith("cosign")]


def test_release_yml_runs_these_steps() -> None:
    text = (REPO / ".github" / "workflows" / "release.yml").read_text()
    assert 'deploy/release.sh push-images >> "$GITHUB_OUTPUT"' in text
    assert "deploy/release.sh sign-images" in text
    assert "deploy/release.sh push-chart" in text
