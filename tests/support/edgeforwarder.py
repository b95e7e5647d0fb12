"""The shipped edge forwarder run on loopback against a real receiver.

Two forwarders ship: vmagent (overlays/kubeedge, the default: an on-disk queue that survives its
own restart) and Prometheus in agent mode (overlays/kubeedge-prometheus-agent, the documented
alternative). Each one's scrape configuration and flags are taken from what `kubectl kustomize`
renders; only what names the node's world is rewritten: the scrape targets (the agent and the
forwarder itself on this machine's free ports), the remote-write URL (a local receiver), the
credentials file, the queue or WAL directory and the config path. Everything else (intervals,
queue settings and bound, relabeling, node labels) is the shipped configuration. Every process
listens on 127.0.0.1 and is stopped by PID.
"""

from __future__ import annotations

import copy
import os
import re
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
VMAGENT_OVERLAY = "kubeedge"  # the shipped default
PROMETHEUS_AGENT_OVERLAY = "kubeedge-prometheus-agent"  # the documented alternative


@dataclass(frozen=True)
class Engine:
    """What differs between the two forwarders: binary, flag names, where each reads its
    config and keeps its queue, and the flags that name the node's world (replaced here)."""

    binary: str
    config_flag: str
    queue_flag: str
    listen_flag: str
    local_flags: tuple[str, ...]


VMAGENT = Engine(
    binary="vmagent",
    config_flag="-promscrape.config",
    queue_flag="-remoteWrite.tmpDataPath",
    listen_flag="-httpListenAddr",
    local_flags=(
        "-promscrape.config=",
        "-remoteWrite.tmpDataPath=",
        "-httpListenAddr=",
        "-remoteWrite.url=",
        "-remoteWrite.bearerTokenFile=",
    ),
)
PROMETHEUS_AGENT = Engine(
    binary="prometheus",
    config_flag="--config.file",
    queue_flag="--storage.agent.path",
    listen_flag="--web.listen-address",
    local_flags=("--config.file=", "--storage.agent.path=", "--web.listen-address="),
)


@dataclass(frozen=True)
class Shipped:
    """A forwarder as an overlay ships it."""

    engine: Engine
    config: dict[str, Any]  # its scrape configuration (vmagent) or prometheus.yml, parsed
    config_key: str  # the ConfigMap key it reads
    args: tuple[str, ...]  # the container's args
    env: dict[str, str]  # names of the container's env vars (values from the downward API)
    image: str

    @property
    def is_vmagent(self) -> bool:
        return self.engine is VMAGENT


def shipped_forwarder(overlay: str = VMAGENT_OVERLAY) -> Shipped:
    objs = build(overlay)
    daemonset = one(objs, "DaemonSet", EDGE_DAEMONSET)
    pod = daemonset["spec"]["template"]["spec"]
    container = next(c for c in pod["containers"] if c["name"] == FORWARDER_CONTAINER)
    engine = VMAGENT if "/vmagent:" in container["image"] else PROMETHEUS_AGENT
    config_path = Path(flag_value(tuple(container["args"]), engine.config_flag))
    volume = next(
        v
        for v in pod["volumes"]
        if v["name"]
        in {
            m["name"]
            for m in container["volumeMounts"]
            if m["mountPath"] == str(config_path.parent)
        }
    )
    configmap = one(objs, "ConfigMap", volume["configMap"]["name"])
    config = yaml.safe_load(configmap["data"][config_path.name])
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container.get("env", [])}
    return Shipped(
        engine, config, config_path.name, tuple(container["args"]), env, container["image"]
    )


def flag_value(args: tuple[str, ...], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{name}="))


_SIZES = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text: str) -> int:
    """A VictoriaMetrics size flag's value in bytes ("2GiB", "500MB", "1024")."""
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB|KB|MB|GB)?", text)
    assert m, f"not a size: {text}"
    return int(m.group(1)) * _SIZES.get(m.group(2) or "", 1)


def loopback_config(
    shipped: Shipped, *, agent: str, forwarder: str, receiver_url: str, token_file: Path
) -> dict[str, Any]:
    """The shipped configuration with targets (and for Prometheus URL and credentials) pointed
    at this machine; vmagent takes those two as flags."""
    config = copy.deepcopy(shipped.config)
    targets = {"wattprobe": agent, "wattprobe-forwarder": forwarder}
    jobs = {job["job_name"] for job in config["scrape_configs"]}
    assert jobs == set(targets), f"the shipped forwarder scrapes {jobs}"
    for job in config["scrape_configs"]:
        (static,) = job["static_configs"]
        assert len(static["targets"]) == 1 and static["targets"][0].startswith("127.0.0.1:")
        static["targets"] = [targets[job["job_name"]]]
    if shipped.is_vmagent:
        assert "remote_write" not in config, "vmagent takes its remote write from flags"
        return config
    (remote,) = config["remote_write"]
    remote["url"] = receiver_url
    remote["authorization"]["credentials_file"] = str(token_file)
    return config


@dataclass
class Forwarder:
    daemon: Daemon
    wal: Path  # the on-disk queue (vmagent) or WAL (Prometheus agent)

    def metrics(self) -> str:
        with urllib.request.urlopen(self.daemon.url + "/metrics", timeout=5) as resp:
            text: str = resp.read().decode()
            return text

    def stop(self) -> None:
        self.daemon.stop()

    def kill(self) -> None:
        """SIGKILL: an OOM kill or a power cut of the process (not of the disk)."""
        self.daemon.proc.kill()
        self.daemon.proc.wait(timeout=10)


def start_forwarder(
    shipped: Shipped,
    workdir: Path,
    *,
    agent_port: int,
    receiver_url: str,
    node: str,
    port: int | None = None,
    extra_args: tuple[str, ...] = (),
) -> Forwarder:
    """Debian's vmagent or prometheus (agent mode) with the shipped flags and the loopback
    config; the queue stays in workdir/wal across restarts, as the hostPath does on a node.
    `port`: the same one after a restart (the forwarder scrapes itself there)."""
    binary = require_binary(shipped.engine.binary)
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    token = workdir / "token"
    token.write_text("edge-test-token\n")
    config = loopback_config(
        shipped,
        agent=f"127.0.0.1:{agent_port}",
        forwarder=f"127.0.0.1:{port}",
        receiver_url=receiver_url,
        token_file=token,
    )
    engine = shipped.engine
    config_path = workdir / shipped.config_key
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    wal = workdir / "wal"
    wal.mkdir(exist_ok=True)
    args = [a for a in shipped.args if not a.startswith(engine.local_flags)]
    argv = [
        binary,
        *args,
        *extra_args,
        f"{engine.config_flag}={config_path}",
        f"{engine.queue_flag}={wal}",
        f"{engine.listen_flag}=127.0.0.1:{port}",
    ]
    if shipped.is_vmagent:
        argv += [f"-remoteWrite.url={receiver_url}", f"-remoteWrite.bearerTokenFile={token}"]
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
    # out_of_order_time_window: a forwarder replaying a backlog may deliver blocks out of order
    # (docs/install.md, "Receivers"); without it Prometheus drops them
    config.write_text(
        "global:\n  evaluation_interval: 15s\nstorage:\n  tsdb:\n    out_of_order_time_window: 1d\n"
    )
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
