"""The pod-source registry (exporter/kube/podsources.py): a new pod-identity source is its module
and one entry. The fake source below is declared in this file alone: it gets a
--kube.pod-source choice, a `kubernetes` check entry, is the source KubeWorkloads builds when
chosen, and its names reach the Snapshot through the monitor's PodIdentity."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import click
from click.testing import CliRunner

from exporter.accounting.monitor import Monitor, MonitorParts
from exporter.app.cli.kube import kube_options
from exporter.kube.check import kube_checks
from exporter.kube.kube import KubeWorkloads
from exporter.kube.pods import PodStore, parse_pod
from exporter.kube.podsources import POD_SOURCES, PodSourceKind, PodSourceThread
from exporter.model.config import Config
from exporter.model.readings import SourceError, SourceStatus, TaskSample
from tests.sources.gpu.nvml.scripted import StaticActivity, StaticCpu
from tests.support.monitor import monitor_settings

CID = "c0ffee" * 10 + "beef"
UID = "0b2f7a4e-1c3d-4e5f-8a9b-0c1d2e3f4a5b"
CGROUP = f"/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope"


class InventoryFile:
    """Pods from a node-local inventory (say an edge runtime's own list): one read, at start."""

    name = "inventory"

    def __init__(self, store: PodStore) -> None:
        self._store = store

    def start(self) -> None:
        pod = {
            "metadata": {"uid": UID, "namespace": "edge", "name": "camera-0"},
            "status": {
                "containerStatuses": [{"name": "infer", "containerID": f"containerd://{CID}"}]
            },
        }
        meta = parse_pod(pod)
        assert meta is not None
        self._store.replace([meta])
        self._store.mark_synced()

    def stop(self) -> None:
        pass

    def statuses(self) -> list[SourceStatus]:
        return [SourceStatus(self.name, True)]


def build(_config: Config, _environ: Mapping[str, str], store: PodStore) -> PodSourceThread:
    return InventoryFile(store)


def check(config: Config, _environ: Mapping[str, str]) -> str:
    if not config.node_name:
        raise SourceError("no node name", "the inventory is per node")
    return f"1 pod on {config.node_name}"


INVENTORY = PodSourceKind("inventory", "a node-local pod inventory", build, check)
WITH_INVENTORY = (*POD_SOURCES, INVENTORY)


def test_it_is_a_choice_of_the_flag() -> None:
    seen: dict[str, Any] = {}

    def command(**kw: Any) -> None:
        seen.update(kw)

    cmd = click.command()(kube_options(command, WITH_INVENTORY))
    runner = CliRunner()
    assert "inventory (a node-local pod inventory)" in runner.invoke(cmd, ["--help"]).output
    assert runner.invoke(cmd, ["--kube.pod-source", "inventory"]).exit_code == 0
    assert seen["pod_source"] == "inventory"
    stock = click.command()(kube_options(command))
    assert runner.invoke(stock, ["--kube.pod-source", "inventory"]).exit_code == 2


def test_its_check_entry() -> None:
    config = Config(pod_source="inventory", node_name="edge-7", podresources_socket=None)
    (entry,) = kube_checks(config, environ={}, pod_sources=WITH_INVENTORY)
    assert (entry.source, entry.ok, entry.found) == ("inventory", True, "1 pod on edge-7")
    nameless = Config(pod_source="inventory", podresources_socket=None)
    (failed,) = kube_checks(nameless, environ={}, pod_sources=WITH_INVENTORY)
    assert (failed.source, failed.ok, failed.reason) == ("inventory", False, "no node name")


def test_it_is_built_and_its_names_reach_the_snapshot() -> None:
    config = Config(pod_source="inventory", podresources_socket=None)
    kube = KubeWorkloads.from_config(config, {}, pod_sources=WITH_INVENTORY)
    assert isinstance(kube.pod_source, InventoryFile)
    unknown = KubeWorkloads.from_config(config, {})  # not registered in the stock build
    assert [(s.source, s.up, s.reason) for s in unknown.statuses()] == [
        ("inventory", False, "unknown")
    ]
    kube.start()
    try:
        task = TaskSample((-1, 1), -1, "bucket", CGROUP, False, 5.0)
        clock = [10.0]
        monitor = Monitor(
            MonitorParts(cpu=StaticCpu(), activity=StaticActivity([task]), identity=kube),
            monitor_settings(),
            clock=lambda: clock[0],
            wall_clock=lambda: clock[0],
        )
        monitor.step()
        clock[0] += 1
        snapshot = monitor.step()
    finally:
        kube.stop()
    (pod,) = [c for c in snapshot.containers if c.container_id == CID]
    assert (pod.namespace, pod.pod, pod.container) == ("edge", "camera-0", "infer")
    assert ("inventory", True, "") in [(s.source, s.up, s.reason) for s in snapshot.sources]
