"""The shipped edge forwarder (overlays/kubeedge) run on loopback against a real receiver.

The forwarder's prometheus.yml and flags are taken from what `kubectl kustomize
deploy/overlays/kubeedge` renders; only what names the node's world is rewritten: the scrape
targets (the agent and the forwarder itself on this machine's free ports), the remote-write URL
(a local Prometheus with --web.enable-remote-write-receiver), the credentials file, the WAL and
config paths. Everything else (intervals, queue settings, relabeling, external labels, the WAL
bound) is the shipped configuration. Every process listens on 127.0.0.1 and is stopped by PID.
"""

from __future__ import annotations

import copy
import os
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.manifests import build, one
from tests.support.monitoringstack import Daemon, PrometheusAPI
from tests.support.realparts import require_binary
from tests.support.running import free_port, stop_process
from tests.support.wait import eventually

EDGE_DAEMONSET = "wattprobe-edge"
FORWARDER_CONTAINER = "forwarder"
CONFIG_KEY = "prometheus.yml"
# flags that name paths or addresses of the node: replaced, everything else is kept
_LOCAL_FLAGS = ("--config.file=", "--storage.agent.path=", "--web.listen-address=")


@dataclass(frozen=True)
class Shipped:
    """The forwarder as overlays/kubeedge ships it."""

    config: dict[str, Any]  # prometheus.yml, parsed
    args: tuple[str, ...]  # the container's args
    env: dict[str, str]  # names of the container's env vars (values from the downward API)


def shipped_forwarder() -> Shipped:
    objs = build("kubeedge")
    daemonset = one(objs, "DaemonSet", EDGE_DAEMONSET)
    pod = daemonset["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == FORWARDER_CONTAINER)
    volume = next(
        v
        for v in pod["volumes"]
        if v["name"]
        in {m["name"] for m in container["volumeMounts"] if m["mountPath"] == config_dir(container)}
    )
    configmap = one(objs, "ConfigMap", volume["configMap"]["name"])
    config = yaml.safe_load(configmap["data"][CONFIG_KEY])
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container.get("env", [])}
    return Shipped(config, tuple(container["args"]), env)


def config_dir(container: dict[str, Any]) -> str:
    flag = next(a for a in container["args"] if a.startswith("--config.file="))
    return str(Path(flag.split("=", 1)[1]).parent)


def flag_value(args: tuple[str, ...], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{name}="))


def loopback_config(
    shipped: Shipped, *, agent: str, forwarder: str, receiver_url: str, token_file: Path
) -> dict[str, Any]:
    """The shipped prometheus.yml with targets, URL and credentials pointed at this machine."""
    config = copy.deepcopy(shipped.config)
    targets = {"wattprobe": agent, "wattprobe-forwarder": forwarder}
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert jobs == set(targets), f"the shipped forwarder scrapes {jobs}"
    for job in config["scrape_configs"]:
        (static,) = job["static_configs"]
        assert len(static["targets"]) == 1 and static["targets"][0].startswith("127.0.0.1:")
        static["targets"] = [targets[job["job_name"]]]
    (remote,) = config["remote_write"]
    remote["url"] = receiver_url
    remote["authorization"]["credentials_file"] = str(token_file)
    return config


@dataclass
class Forwarder:
    daemon: Daemon
    wal: Path

    def metrics(self) -> str:
        with urllib.request.urlopen(self.daemon.url + "/metrics", timeout=5) as resp:
            text: str = resp.read().decode()
            return text

    def stop(self) -> None:
        self.daemon.stop()


def start_forwarder(
    shipped: Shipped, workdir: Path, *, agent_port: int, receiver_url: str, node: str
) -> Forwarder:
    """Debian's prometheus with the shipped flags (agent mode) and the loopback config; the WAL
    stays in workdir/wal across restarts, as the hostPath does on a node."""
    binary = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    token = workdir / "token"
    token.write_text("edge-test-token\n")
    config = loopback_config(
        shipped,
        agent=f"127.0.0.1:{agent_port}",
        forwarder=f"127.0.0.1:{port}",
        receiver_url=receiver_url,
        token_file=token,
    )
    config_path = workdir / "prometheus.yml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    wal = workdir / "wal"
    wal.mkdir(exist_ok=True)
    args = [a for a in shipped.args if not a.startswith(_LOCAL_FLAGS)]
    argv = [
        binary,
        *args,
        f"--config.file={config_path}",
        f"--storage.agent.path={wal}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    env = {**os.environ, **{name: node for name in shipped.env}}  # spec.nodeName
    log_path = workdir / f"forwarder-{port}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )
    daemon = Daemon("forwarder", proc, port, log_path)
    try:
        daemon.wait_ready()
    except BaseException:
        daemon.stop()
        raise
    return Forwarder(daemon, wal)


@dataclass
class Receiver:
    daemon: Daemon
    api: PrometheusAPI
    data: Path

    @property
    def write_url(self) -> str:
        return f"{self.daemon.url}/api/v1/write"

    def stop(self) -> None:
        self.daemon.stop()


def start_receiver(workdir: Path, port: int | None = None) -> Receiver:
    """A Prometheus accepting remote write; restarted on the same port and data directory, it is
    the same receiver coming back."""
    binary = require_binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    config = workdir / "receiver.yml"
    config.write_text("global:\n  evaluation_interval: 15s\n")
    data = workdir / "receiver-data"
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--web.enable-remote-write-receiver",
        "--log.level=info",
    ]
    log_path = workdir / f"receiver-{port}.log"
    with log_path.open("ab") as log:
        proc = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
    daemon = Daemon("receiver", proc, port, log_path)
    try:
        daemon.wait_ready()
    except BaseException:
        daemon.stop()
        raise
    return Receiver(daemon, PrometheusAPI(daemon.url), data)


def raw_samples(
    api: PrometheusAPI, selector: str, window_s: int
) -> dict[str, list[tuple[float, float]]]:
    """Every stored sample of the selector in the last window_s seconds: series -> (t, v)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for series in api.query(f"{selector}[{window_s}s]"):
        labels = ",".join(f"{k}={v}" for k, v in sorted(series["metric"].items()))
        out[labels] = [(float(t), float(v)) for t, v in series["values"]]
    return out


def wait_until(check: Any, timeout: float, what: str, interval: float = 0.25) -> None:
    """Poll check() until it is truthy (bounded): tests.support.wait.eventually."""
    eventually(check, what, timeout, interval)


def stop_all(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        stop_process(proc)
