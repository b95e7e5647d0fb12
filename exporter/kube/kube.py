"""Kubernetes identity for the monitor: pod names (kubelet or apiserver) and GPU holders
(PodResources), each running on its own thread, built from the Config.

--kube.pod-source auto picks kubelet inside a cluster (KUBERNETES_SERVICE_HOST is set in every
pod) and none outside one. PodResources runs on nodes with NVIDIA GPUs (the driver lists them
under <procfs>/driver/nvidia/gpus) when a pod source runs or its socket exists: elsewhere it has
nothing to tell and its gRPC runtime would cost ~19 MiB. --kube.podresources-socket=none turns it
off.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from exporter.kube.cdi import CdiScanner
from exporter.kube.gpus import (
    EMPTY_HOLDINGS,
    VOLCANO_VGPU,
    DeviceAssignment,
    Holdings,
    allocations_of,
    gpu_resources_with,
    holders_in,
    resolve_holdings,
)
from exporter.kube.pods import KubeNames, PodIndex, PodStore
from exporter.kube.podsources import (
    NONE,
    POD_SOURCES,
    Misconfigured,
    PodSourceKind,
    PodSourceThread,
    RefreshOnRequest,
    kind_of,
    resolve_pod_source,
)
from exporter.model.config import DEFAULT_GPU_RESOURCES, Config
from exporter.model.gpu_directory import EMPTY_DIRECTORY, GpuDirectory
from exporter.model.identity import ContainerRef, NoNames, WorkloadNames
from exporter.model.readings import SourceStatus
from exporter.model.snapshot import GpuAllocation, PodInfo
from exporter.model.spec import DevicePlugin

if TYPE_CHECKING:  # the poller's module loads grpc; only its type is needed here
    from exporter.kube.podresources.poller import Assignments

log = logging.getLogger(__name__)


class AssignmentSource(Protocol):
    def assignments(self) -> tuple[DeviceAssignment, ...]: ...
    def latest(self) -> Assignments | None: ...
    def statuses(self) -> list[SourceStatus]: ...
    def cdi_rejections(self) -> tuple[tuple[str, int], ...]: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


def node_has_gpus(procfs: Path) -> bool:
    """Whether the NVIDIA driver lists GPUs on this node (a procfs entry, visible through any
    procfs mount, also where the driver itself runs in a container)."""
    try:
        return any((procfs / "driver" / "nvidia" / "gpus").iterdir())
    except OSError:
        return False


def podresources_wanted(config: Config, mode: str) -> bool:
    sock = config.podresources_socket
    if sock is None or not node_has_gpus(config.procfs):
        return False
    return mode != NONE or sock.exists()


class KubeWorkloads:
    """Everything Kubernetes-shaped the monitor reads: names, statuses, pod info, GPU holders."""

    def __init__(
        self,
        *,
        store: PodStore | None,
        pod_source: PodSourceThread | None,
        podresources: AssignmentSource | None,
        label_keys: Sequence[str] = (),
        on_unknown: Callable[[], None] | None = None,
        gpu_resources: Sequence[str] = DEFAULT_GPU_RESOURCES,
        gpu_directory: Callable[[], GpuDirectory] = lambda: EMPTY_DIRECTORY,
        device_plugins: Sequence[DevicePlugin] = (),
    ) -> None:
        self.store = store
        self.pod_source = pod_source
        self.podresources = podresources
        self._label_keys = tuple(label_keys)
        self._gpu_resources = tuple(gpu_resources)
        # GPU vendors' device plugins besides NVIDIA's grammar (their SPECs' device_plugins)
        self._plugins = tuple(device_plugins)
        # names the GPUs PodResources lists (by UUID, index or minor): exporter/kube/gpus.py
        self._directory = gpu_directory
        # the last resolution, kept while its inputs are the same objects (one per interval)
        self._resolved: tuple[object, object, object, Holdings] | None = None
        self.names: WorkloadNames = (
            KubeNames(store, on_unknown=on_unknown) if store is not None else NoNames()
        )

    @classmethod
    def from_config(
        cls,
        config: Config,
        environ: Mapping[str, str] | None = None,
        *,
        gpu_directory: Callable[[], GpuDirectory] = lambda: EMPTY_DIRECTORY,
        device_plugins: Sequence[DevicePlugin] = (),
        pod_sources: Sequence[PodSourceKind] = POD_SOURCES,
    ) -> KubeWorkloads:
        env = os.environ if environ is None else environ
        mode = resolve_pod_source(config.pod_source, env)
        store = None
        source: PodSourceThread | None = None
        on_unknown = None
        if mode != NONE:
            store = PodStore(
                ttl_s=config.kube_metadata_ttl_s, deleted_retention_s=config.retention_s
            )
            kind = kind_of(mode, pod_sources)
            source = (
                kind.build(config, env, store)
                if kind is not None
                else Misconfigured(mode, "unknown", f"--kube.pod-source {mode}: no such source")
            )
            if isinstance(source, RefreshOnRequest):
                on_unknown = source.request_refresh
        podresources = None
        sock = config.podresources_socket
        if sock is not None and podresources_wanted(config, mode):
            # imported here: grpc costs ~21 MiB and is needed only where PodResources is used
            from exporter.kube.podresources.client import PodResourcesClient  # noqa: PLC0415
            from exporter.kube.podresources.poller import PodResourcesPoller  # noqa: PLC0415

            podresources = PodResourcesPoller(
                PodResourcesClient(sock, timeout_s=config.kube_timeout_s),
                interval_s=config.kube_poll_interval_s,
                ttl_s=config.kube_metadata_ttl_s,
                cdi=CdiScanner(config.cdi_spec_dirs),
                gpu_resources=gpu_resources_with(config.gpu_resources, device_plugins),
            )
        return cls(
            store=store,
            pod_source=source,
            podresources=podresources,
            label_keys=config.kube_pod_labels,
            on_unknown=on_unknown,
            gpu_resources=config.gpu_resources,
            gpu_directory=gpu_directory,
            device_plugins=device_plugins,
        )

    # -- lifecycle --------------------------------------------------------------------

    def start(self) -> None:
        for part in (self.pod_source, self.podresources):
            if part is not None:
                part.start()

    def stop(self) -> None:
        for part in (self.pod_source, self.podresources):
            if part is not None:
                part.stop()

    # -- what the monitor reads -------------------------------------------------------

    def statuses(self) -> list[SourceStatus]:
        out: list[SourceStatus] = []
        for part in (self.pod_source, self.podresources):
            if part is not None:
                out.extend(part.statuses())
        return out

    def cdi_rejections(self) -> tuple[tuple[str, int], ...]:
        """CDI spec files refused so far, per reason (PodResources' DRA claims read them)."""
        return self.podresources.cdi_rejections() if self.podresources is not None else ()

    def pod_info(self) -> tuple[PodInfo, ...]:
        """One row per known pod (deleted ones too, while their series stay), opt-in."""
        if not self._label_keys or self.store is None:
            return ()
        index = self.store.index()
        rows = {
            pod.uid: PodInfo(pod.uid, pod.name, pod.namespace, pod.labels)
            for pod in (*index.deleted, *index.present)
        }
        return tuple(rows[uid] for uid in sorted(rows))

    def holdings(self) -> Holdings:
        """Who holds which GPU, from device plugins and DRA claims alike (and what did not
        resolve); computed once per new PodResources list, pod index or GPU directory."""
        latest = self.podresources.latest() if self.podresources is not None else None
        if latest is None:
            return EMPTY_HOLDINGS
        directory = self._directory()
        index = self.store.index() if self.store is not None else None
        cached = self._resolved
        if cached is not None and cached[:3] == (latest, directory, index):
            return cached[3]
        got = resolve_holdings(
            latest.devices,
            latest.claims,
            latest.cdi,
            directory,
            gpu_resources=self._gpu_resources,
            plugins=self._plugins,
            assigned=_volcano_assigned(index) if index is not None else None,
        )
        self._resolved = (latest, directory, index, got)
        return got

    def gpu_allocations(self) -> tuple[GpuAllocation, ...]:
        return allocations_of(self.holdings().holdings)

    def gpu_holders(self, uuid: str) -> tuple[ContainerRef, ...]:
        """Containers holding the GPU (or MIG device) `uuid`, whatever allocated it (a device
        plugin or a DRA claim), for the idle "holders" and "requests" policies.

        PodResources names pods and containers; the pod metadata turns a name into the running
        container's id and the pod's uid. A holder whose pod or container id is not known (no pod
        source, or the container has not started) is left out. The refs carry container_id and
        pod_uid only: match them to the monitor's refs by container_id (the runtime and QoS
        fields come from the cgroup path, which this side does not see).
        """
        if self.podresources is None or self.store is None:
            return ()
        holdings = self.holdings().holdings
        if not holdings:
            return ()
        index = self.store.index()
        refs: dict[ContainerRef, None] = {}
        for namespace, pod_name, container in holders_in(uuid, holdings):
            pod = index.by_name.get((namespace, pod_name))
            container_id = pod.container_id(container) if pod is not None else ""
            if pod is not None and container_id:
                refs[ContainerRef(container_id=container_id, pod_uid=pod.uid)] = None
        return tuple(refs)


def _volcano_assigned(index: PodIndex) -> Callable[[str, str, str, str], Sequence[str] | None]:
    """The GPUs Volcano's vGPU scheduler gave a container (its pod's volcano.sh/vgpu-ids-new
    annotation), for the plugin's placeholder device IDs."""

    def assigned(namespace: str, pod: str, container: str, resource: str) -> Sequence[str] | None:
        if resource != VOLCANO_VGPU:
            return None
        meta = index.by_name.get((namespace, pod))
        return meta.vgpu_uuids(container) if meta is not None else None

    return assigned
