"""`wattprobe check` entries for Kubernetes identity: the pod source and PodResources.

They never change the exit status (power and activity decide it): without names the exporter
still serves every series, with IDs.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from exporter.kube.cdi import CdiIndex, CdiScanner
from exporter.kube.gpus import (
    ClaimDevice,
    Holdings,
    device_minors,
    gpu_resources_with,
    is_gpu_resource,
    mig_capability_minors,
    resolve_holdings,
)
from exporter.kube.kube import node_has_gpus, podresources_wanted
from exporter.kube.podsources import (
    AUTO,
    POD_SOURCES,
    PodSourceKind,
    kind_of,
    resolve_pod_source,
)
from exporter.model.config import Config
from exporter.model.gpu_directory import GpuDirectory
from exporter.model.readings import SourceError
from exporter.model.spec import (
    IDENTITY,
    KUBERNETES,
    BuildContext,
    CheckResult,
    DevicePlugin,
    SourceSpec,
)

RBAC = "see docs/kubernetes.md (RBAC)"

FIXES: dict[tuple[str, str], str] = {
    ("kubelet", "unauthorized"): "the kubelet rejected the token: check --kube.token-file (the "
    "service-account token) and that the kubelet accepts tokens (--authentication-token-webhook)",
    ("kubelet", "forbidden"): "grant the service account get on nodes/pods (Kubernetes 1.33+) or "
    f"nodes/proxy (older clusters); {RBAC}",
    ("kubelet", "tls verify failed"): "the kubelet's certificate is not signed by --kube.ca-file "
    "(kubelets often serve self-signed certificates): enable serverTLSBootstrap, give the right "
    "--kube.ca-file, or opt in with --kube.insecure-skip-tls-verify",
    ("kubelet", "unreachable"): "check --kube.kubelet-url: set NODE_IP (or HOST_IP) from "
    "status.hostIP (downward API) or run with hostNetwork so https://127.0.0.1:10250 works",
    ("kubelet", "timeout"): "the kubelet did not answer within --kube.timeout: check network "
    "policies and host firewalls for port 10250",
    ("apiserver", "unauthorized"): "the apiserver rejected the token: check --kube.token-file",
    ("apiserver", "forbidden"): f"grant the service account list and watch on pods; {RBAC}",
    ("apiserver", "no node name"): "set NODE_NAME from spec.nodeName (downward API) or "
    "--kube.node-name",
    ("apiserver", "no url"): "outside a cluster give --kube.apiserver-url (KubeEdge edge nodes: "
    "http://127.0.0.1:10550 with the MetaServer enabled in edgecore)",
    ("apiserver", "unreachable"): "check --kube.apiserver-url; on KubeEdge enable edgecore's "
    "metaServer (modules.metaManager.metaServer.enable)",
    ("apiserver", "tls verify failed"): "give the cluster CA with --kube.ca-file",
    ("podresources", "socket missing"): "mount the host's /var/lib/kubelet/pod-resources directory "
    "(a hostPath of the directory, not of the socket, survives kubelet restarts)",
    ("podresources", "unreachable"): "is the kubelet running? the socket is root-only: run "
    "privileged or as root",
    ("podresources", "permission denied"): "the socket is root-only: run privileged or as root",
}


def _failure(source: str, exc: SourceError) -> CheckResult:
    return CheckResult(
        source,
        KUBERNETES,
        False,
        reason=exc.reason,
        detail=exc.detail,
        fix=FIXES.get((source, exc.reason), ""),
    )


def _pods(config: Config, kind: PodSourceKind, environ: Mapping[str, str]) -> CheckResult:
    try:
        found = kind.check(config, environ)
    except SourceError as exc:
        return _failure(kind.name, exc)
    return CheckResult(kind.name, KUBERNETES, True, found=found)


def _podresources(config: Config, plugins: Sequence[DevicePlugin]) -> CheckResult:
    # imported here: grpc is loaded only where PodResources is used
    from exporter.kube.podresources.client import PodResourcesClient  # noqa: PLC0415

    assert config.podresources_socket is not None
    client = PodResourcesClient(config.podresources_socket, timeout_s=config.kube_timeout_s)
    resources = gpu_resources_with(config.gpu_resources, plugins)
    try:
        listed, claims = client.list_all()
        try:
            allocatable = sum(
                1 for r, _ in client.allocatable_devices() if is_gpu_resource(r, resources)
            )
            also = f", {allocatable} allocatable GPU devices"
        except SourceError as exc:
            also = f", allocatable unknown ({exc.reason})"
    except SourceError as exc:
        return _failure("podresources", exc)
    finally:
        client.close()
    devices = [d for d in listed if is_gpu_resource(d.resource, resources)]
    cdi = CdiScanner(config.cdi_spec_dirs).scan()
    # no NVML here: the driver's minor numbers (and MIG capabilities) stand for the node's GPUs
    directory = GpuDirectory(
        index_by_minor={m: str(m) for m in device_minors(config.procfs).values()},
        mig_by_cap_minor=mig_capability_minors(config.procfs),
    )
    held = resolve_holdings(
        devices, claims, cdi, directory, gpu_resources=config.gpu_resources, plugins=plugins
    )
    holders = len({(h.namespace, h.pod, h.container) for h in held.holdings})
    # a device held through two resources is one allocation, as on the allocation series
    rows = len({(h.namespace, h.pod, h.container, h.ref, h.claim) for h in held.holdings})
    found = (
        f"{rows} GPU allocations to {holders} containers "
        f"({held.devices} device plugin devices, {held.claims} DRA claim devices){also}"
    )
    return CheckResult(
        "podresources", KUBERNETES, True, found=found, items=_allocation_items(held, cdi, claims)
    )


def _allocation_items(held: Holdings, cdi: CdiIndex, claims: list[ClaimDevice]) -> tuple[str, ...]:
    """What `check` lists under PodResources: each allocation source, then what did not resolve."""
    items = [f"device plugins: {held.devices} GPU devices resolved"]
    if claims:
        items.append(
            f"DRA claims: {len(claims)} claim devices, {held.claims} resolved "
            f"({held.by_spec} through CDI specs, {held.by_name} by the NVIDIA driver's names)"
        )
    else:
        items.append("DRA claims: none on this node")
    specs = f"CDI specs: {cdi.specs} read, {len(cdi.devices)} devices"
    if cdi.dirs:
        specs += f" in {', '.join(cdi.dirs)}"
    if cdi.missing_dirs:
        specs += f"; missing: {', '.join(cdi.missing_dirs)}"
    items.append(specs)
    items.extend(f"bad CDI spec {p.path}: {p.reason}" for p in cdi.problems)
    items.extend(
        f"unresolved {u.source} of {u.holder}: {u.what}: {u.reason}" for u in held.unresolved
    )
    return tuple(items)


def kube_checks(
    config: Config,
    context: BuildContext | None = None,
    environ: Mapping[str, str] | None = None,
    pod_sources: Sequence[PodSourceKind] = POD_SOURCES,
) -> list[CheckResult]:
    """The kubernetes group: the pod source the configuration picks and PodResources (with
    the enabled GPU vendors' device plugins from context)."""
    plugins = context.device_plugins if context is not None else ()
    env = os.environ if environ is None else environ
    mode = resolve_pod_source(config.pod_source, env)
    results: list[CheckResult] = []
    kind = kind_of(mode, pod_sources)
    if kind is None:
        why = "not in a cluster" if config.pod_source == AUTO else "disabled"
        results.append(
            CheckResult(
                "pods",
                KUBERNETES,
                False,
                reason=why,
                detail="containers carry IDs only",
                fix=f"--kube.pod-source={' or '.join(s.name for s in pod_sources)} for pod names",
                disabled=True,
            )
        )
    else:
        results.append(_pods(config, kind, env))
    if podresources_wanted(config, mode):
        results.append(_podresources(config, plugins))
    elif config.podresources_socket is not None and not node_has_gpus(config.procfs):
        results.append(
            CheckResult(
                "podresources",
                KUBERNETES,
                False,
                reason="not needed",
                detail=f"no NVIDIA GPUs listed under {config.procfs}/driver/nvidia",
                disabled=True,
            )
        )
    return results


# pod names and GPU holders: one group, as the configuration decides which sources there are
SPEC = SourceSpec(name=KUBERNETES, kind=IDENTITY, group_probe=kube_checks)
