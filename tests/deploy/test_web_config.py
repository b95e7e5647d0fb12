"""deploy/components/web-config: every agent reads --web.config.file from the Secret, its probes
are tcpSocket (the kubelet has no client certificate), the ServiceMonitor scrapes over https with
Prometheus' client certificate; and, for real, the component's example web-config.yml in a
Secret-like directory serves Prometheus as the ServiceMonitor configures it, refuses what an
httpGet probe sends, and takes tcpSocket probes quietly."""

from __future__ import annotations

import copy
import ipaddress
import os
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from cryptography import x509

from exporter.app.cli import cli
from tests.deploy.manifests import (
    DEPLOY,
    Obj,
    build,
    build_with_components,
    env_of,
    of_kind,
    one,
    operator_validator,
)
from tests.support.fixturehost import FixtureHost
from tests.support.pki import Authority, Pair
from tests.support.running import ExporterProcess, start_exporter
from tests.support.websec_support import client_context, refused, request

COMPONENT = DEPLOY / "components" / "web-config"
MOUNT = "/etc/wattprobe/web"
CONFIG_FILE = f"{MOUNT}/web-config.yml"
SERVER_SECRET = "wattprobe-web-config"
SCRAPE_SECRET = "wattprobe-scrape-tls"
SECRET_KEYS = ("web-config.yml", "tls.crt", "tls.key", "client-ca.crt")
PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _container(ds: Obj) -> Obj:
    container: Obj = ds["spec"]["template"]["spec"]["containers"][0]
    return container


@pytest.mark.parametrize("overlay", ["default", "gpu-only", "kubeedge", "privileged"])
def test_every_agent_reads_the_web_config_from_the_secret(tmp_path: Path, overlay: str) -> None:
    with_tls = of_kind(build_with_components(tmp_path, overlay, "web-config"), "DaemonSet")
    plain = {ds["metadata"]["name"]: ds for ds in of_kind(build(overlay), "DaemonSet")}
    assert {ds["metadata"]["name"] for ds in with_tls} == set(plain)
    for ds in with_tls:
        name = ds["metadata"]["name"]
        container = _container(ds)
        assert env_of(container)["WATTPROBE_WEB_CONFIG_FILE"] == CONFIG_FILE
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == MOUNT]
        assert mount["readOnly"] is True
        (volume,) = [
            v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "web-config"
        ]
        assert volume["name"] == mount["name"]
        assert volume["secret"] == {"secretName": SERVER_SECRET, "defaultMode": 0o400}
        # the edge agent listens on the node's loopback only: its probes go there
        host = {"host": "127.0.0.1"} if name == "wattprobe-edge" else {}
        for kind in PROBES:
            assert container[kind]["tcpSocket"] == {"port": "metrics", **host}, (name, kind)
            assert "httpGet" not in container[kind], (name, kind)
        # nothing else changed: timings of the probes included
        changed, original = copy.deepcopy(ds), copy.deepcopy(plain[name])
        for d in (changed, original):
            c = _container(d)
            c["env"] = [e for e in c["env"] if e["name"] != "WATTPROBE_WEB_CONFIG_FILE"]
            c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != MOUNT]
            pod = d["spec"]["template"]["spec"]
            pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "web-config"]
            for kind in PROBES:
                c[kind].pop("tcpSocket", None)
                c[kind].pop("httpGet", None)
        assert changed == original, name


def test_the_variable_names_the_flag() -> None:
    serve = cli.commands["serve"]
    (option,) = [
        p for p in serve.params if isinstance(p, click.Option) and p.name == "web_config_file"
    ]
    assert option.envvar == "WATTPROBE_WEB_CONFIG_FILE"


def _servicemonitor(tmp_path: Path) -> Obj:
    return one(build_with_components(tmp_path, "default", "web-config"), "ServiceMonitor")


def test_servicemonitor_scrapes_with_prometheus_client_certificate(tmp_path: Path) -> None:
    monitor = _servicemonitor(tmp_path)
    assert not list(operator_validator("ServiceMonitor").iter_errors(monitor))
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["scheme"] == "https"
    tls = endpoint["tlsConfig"]
    assert tls["ca"] == {"secret": {"name": SCRAPE_SECRET, "key": "ca.crt"}}
    assert tls["cert"] == {"secret": {"name": SCRAPE_SECRET, "key": "tls.crt"}}
    assert tls["keySecret"] == {"name": SCRAPE_SECRET, "key": "tls.key"}
    assert tls["serverName"]
    assert not tls.get("insecureSkipVerify")
    # the rest of the endpoint is the base's
    (base,) = one(build("default"), "ServiceMonitor")["spec"]["endpoints"]
    assert {k: v for k, v in endpoint.items() if k not in {"scheme", "tlsConfig"}} == base


# -- for real: the example config, laid out as a Secret volume ----------------------------------


def _secret_volume(directory: Path, files: dict[str, bytes]) -> Path:
    """A directory as the kubelet writes a Secret volume: the files in a timestamped dir, a
    ..data link to it, and one link per key; mode 0400 (the component's defaultMode)."""
    data = directory / "..2025_01_01_00_00_00.000000000"
    data.mkdir(parents=True)
    for key, content in files.items():
        (data / key).write_bytes(content)
        (data / key).chmod(0o400)
        (directory / key).symlink_to(Path("..data") / key)
    (directory / "..data").symlink_to(data.name)
    return directory


def _tls_client(ca: Path, client: Pair | None, *, verify: bool = True) -> ssl.SSLContext:
    if verify:
        return client_context(ca, client)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # the kubelet's https probes: no checks
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def _scrape_as_servicemonitor(port: int, context: ssl.SSLContext, server_name: str) -> bytes:
    """GET /metrics over TLS, checking the agent's certificate against serverName."""
    data = b""
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw, server_hostname=server_name) as tls,
    ):
        tls.sendall(b"GET /metrics HTTP/1.1\r\nHost: agent\r\nConnection: close\r\n\r\n")
        while chunk := tls.recv(65536):
            data += chunk
    return data


@pytest.fixture
def agent(host: FixtureHost, tmp_path: Path) -> Iterator[tuple[ExporterProcess, Any]]:
    """`wattprobe serve` with the component's example config and a test PKI in a Secret-like
    directory, found through the component's WATTPROBE_WEB_CONFIG_FILE (its directory moved)."""
    server_name = _servicemonitor(tmp_path)["spec"]["endpoints"][0]["tlsConfig"]["serverName"]
    pki = tmp_path / "pki"
    pki.mkdir()
    agents_ca = Authority.create(pki, "agents-ca")
    scrapers_ca = Authority.create(pki, "scrapers-ca")
    sans: list[x509.GeneralName] = [
        x509.DNSName(server_name),
        x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
    ]
    server = agents_ca.issue(pki, "agent", server=True, sans=sans)
    prometheus = scrapers_ca.issue(
        pki, "prometheus", server=False, sans=[x509.DNSName("prometheus")]
    )
    secret = _secret_volume(
        tmp_path / "web",
        {
            "web-config.yml": (COMPONENT / "web-config.yml").read_bytes(),
            "tls.crt": server.cert.read_bytes(),
            "tls.key": server.key.read_bytes(),
            "client-ca.crt": scrapers_ca.path.read_bytes(),
        },
    )
    assert sorted(p.name for p in secret.iterdir() if not p.name.startswith("..")) == sorted(
        SECRET_KEYS
    )
    env = {"WATTPROBE_WEB_CONFIG_FILE": CONFIG_FILE.replace(MOUNT, str(secret))}
    prometheus_ctx = _tls_client(agents_ca.path, prometheus)
    proc = start_exporter(
        [*host.args(), "--activity-source", "procfs"],
        tmp_path,
        env=env,
        wait="/readyz",
        scheme="https",
        ssl_context=prometheus_ctx,
    )
    try:
        yield proc, (agents_ca, prometheus_ctx, server_name)
    finally:
        proc.stop()


def test_example_config_serves_prometheus_and_takes_tcp_probes(
    agent: tuple[ExporterProcess, Any],
) -> None:
    proc, (agents_ca, prometheus_ctx, server_name) = agent
    reply = _scrape_as_servicemonitor(proc.port, prometheus_ctx, server_name)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]
    assert b"wattprobe_build_info" in reply
    # what an httpGet probe would send (https, no client certificate): refused, so every
    # such probe would fail and the pod would never be ready
    assert refused(proc.port, _tls_client(agents_ca.path, None, verify=False), "/readyz")
    # what a tcpSocket probe does (connect, then close without a byte): accepted every
    # time, and the agent goes on serving without a complaint in its log
    logged_before = len(proc.log())
    for _ in range(20):
        with socket.create_connection(("127.0.0.1", proc.port), timeout=5):
            pass
    assert request(proc.port, "/readyz", context=prometheus_ctx).status == 200
    reply = _scrape_as_servicemonitor(proc.port, prometheus_ctx, server_name)
    assert reply.startswith(b"HTTP/1.1 200 "), reply[:200]
    noisy = [
        line
        for line in proc.log()[logged_before:].splitlines()
        if " WARNING " in line or " ERROR " in line or "Traceback" in line
    ]
    assert not noisy, noisy
    assert proc.proc.poll() is None


def test_secret_keys_are_what_the_example_names() -> None:
    """The example refers to the files by the Secret's keys, relative to its own directory."""
    config = yaml.safe_load((COMPONENT / "web-config.yml").read_text())
    tls = config["tls_server_config"]
    named = {tls["cert_file"], tls["key_file"], tls["client_ca_file"]}
    assert named == set(SECRET_KEYS) - {"web-config.yml"}
    assert tls["client_auth_type"] == "RequireAndVerifyClientCert"
    assert not any(os.path.isabs(n) for n in named)
