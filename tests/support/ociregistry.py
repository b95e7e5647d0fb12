"""Debian's docker-registry (distribution 2.8) on loopback, for tests that push and pull OCI
images and charts: storage in a temporary directory, plain HTTP on 127.0.0.1, a bounded wait
for /v2/ to answer."""

from __future__ import annotations

import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.support.realparts import require_binary
from tests.support.running import free_port, stop_process
from tests.support.wait import eventually


@dataclass
class Registry:
    host: str  # 127.0.0.1:<port>

    def digest(self, repository: str, reference: str, accept: str) -> str | None:
        """Docker-Content-Digest of HEAD /v2/<repository>/manifests/<reference>, None if 404."""
        request = urllib.request.Request(
            f"http://{self.host}/v2/{repository}/manifests/{reference}",
            method="HEAD",
            headers={"Accept": accept},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return str(response.headers["Docker-Content-Digest"])
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return None
            raise


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@contextmanager
def loopback_registry(workdir: Path) -> Iterator[Registry]:
    binary = require_binary("docker-registry")  # Debian's, scripts/setup-debian.sh test
    host = f"127.0.0.1:{free_port()}"
    config = workdir / "registry.yml"
    config.write_text(
        "version: 0.1\n"
        "log:\n  level: error\n"
        f"storage:\n  filesystem:\n    rootdirectory: {workdir / 'registry-data'}\n"
        f"http:\n  addr: {host}\n"
    )
    with (workdir / "registry.log").open("wb") as log:
        proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=log)
        try:
            eventually(
                lambda: proc.poll() is not None or _answers(f"http://{host}/v2/"),
                "docker-registry to answer /v2/",
                timeout=30,
            )
            assert proc.poll() is None, (workdir / "registry.log").read_text()
            yield Registry(host)
        finally:
            stop_process(proc)
