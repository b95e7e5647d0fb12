"""Which GPU each container holds, from the kubelet's PodResources API: device plugin IDs
(`devices`) and DRA claims (`dynamic_resources`, through the node's CDI specs).

Device plugin IDs (docs/kubernetes.md has the sources):
  GPU-<uuid>                 NVIDIA device plugin, uuid strategy (the default)
  GPU-<uuid>::<n>            ... time-sliced or MPS-shared: replica n of that GPU
  MIG-<uuid>                 ... a MIG device (driver R470+ UUIDs)
  MIG-GPU-<uuid>/<gi>/<ci>   ... a MIG device, older drivers (names its parent GPU)
  <i>, <i>::<n>, <i>:<m>     ... index strategy: GPU i, replica n, MIG device m on GPU i
  nvidia<N>                  GKE's plugin: the GPU behind /dev/nvidia<N> (minor number N)
  nvidia<N>/vgpu<k>          ... time-shared replica k
  nvidia<N>/gi<g>            ... MIG partition (GPU instance g)
  GPU-<uuid>-<n>, GPU-<uuid>-memory-<n>, GPU-<uuid>-core-<n>
                             Volcano's vGPU plugin (HAMi): placeholders; the GPU really given is
                             in the pod's volcano.sh/vgpu-ids-new annotation (exporter/kube/
                             kube.py reads it), the UUID here is only the kubelet's pick
  <uuid>-_-<n>               Alibaba's gpushare plugin (aliyun.com/gpu-mem): a placeholder as well
  <i>-<n>                    volcano-sh/devices' GPU sharing (volcano.sh/gpu-memory): ditto
Which resources are GPUs is configurable (--kube.gpu-resources, shell patterns).

The GPU index and, for index or minor based IDs, the UUID are known only from the GPU backend
(NVML); a GpuDirectory carries what it read (empty without it), and unknown parts stay "". MIG
devices also get their GPU instance id, as NVML's MIG series label it (gpu_instance).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from fnmatch import fnmatchcase
from pathlib import Path

from exporter.host.hostfile import read_text_bounded
from exporter.host.kernelnum import parse_uint
from exporter.kube.cdi import EMPTY_INDEX, CdiDevice, CdiIndex, split_name
from exporter.model.config import DEFAULT_GPU_RESOURCES
from exporter.model.gpu_directory import EMPTY_DIRECTORY, GpuDirectory, GpuRef
from exporter.model.gpu_readings import GpuReading
from exporter.model.snapshot import GpuAllocation
from exporter.model.spec import DevicePlugin

VOLCANO_VGPU = "volcano.sh/vgpu-number"

# the NVIDIA driver's /proc files are a few hundred bytes
_MAX_PROC_BYTES = 4096
_REPLICA = re.compile(r"^(?P<base>.+?)(?:::\d+|/vgpu\d+)$")
_LEGACY_MIG = re.compile(r"^MIG-(?P<gpu>GPU-[0-9A-Fa-f-]+)/(?P<gi>\d+)/\d+$")
_MINOR = re.compile(r"^nvidia(?P<minor>\d+)(?:/gi(?P<gi>\d+))?$")
_INDEX = re.compile(r"^(?P<index>\d+)(?P<mig>:\d+)?$")
_UUID = r"GPU-[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}"
# placeholders of the sharing plugins that name a GPU of the node, not the one given
_VGPU_PLACEHOLDER = re.compile(rf"^(?P<uuid>{_UUID})-(?:memory-|core-)?\d+$")
_GPUSHARE_PLACEHOLDER = re.compile(r"^(?P<uuid>.+)-_-\d+$")
_INDEX_PLACEHOLDER = re.compile(r"^(?P<index>\d{1,4})-\d+$")  # volcano-sh/devices' gpu-share
# the NVIDIA DRA driver's device names: gpu-<minor>, gpu-<minor>-mig-<profile>-<id>-<start>
_DRA_NAME = re.compile(r"(?:^|-)gpu-(?P<minor>\d{1,6})(?P<mig>-mig-[0-9A-Za-z.-]+)?$")
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"
NVIDIA_DRA_CDI_VENDOR = "k8s.gpu.nvidia.com"


def gpu_resources_with(patterns: Sequence[str], plugins: Sequence[DevicePlugin]) -> tuple[str, ...]:
    """--kube.gpu-resources and the enabled GPU vendors' device plugin resources."""
    return tuple(dict.fromkeys((*patterns, *(r for p in plugins for r in p.resources))))


def is_gpu_resource(resource_name: str, patterns: Sequence[str] = DEFAULT_GPU_RESOURCES) -> bool:
    """Whether a device plugin resource is a GPU (shell patterns, as --kube.gpu-resources)."""
    return any(fnmatchcase(resource_name, p) for p in patterns)


def device_minors(procfs: Path) -> dict[str, int]:
    """PCI bus id (lower case, 4-digit domain) -> /dev/nvidiaN minor, from the driver's
    <procfs>/driver/nvidia/gpus/<bus>/information ("Device Minor: N")."""
    out: dict[str, int] = {}
    try:
        entries = list((procfs / "driver" / "nvidia" / "gpus").iterdir())
    except OSError:
        return out
    for entry in entries:
        try:
            text = read_text_bounded(str(entry / "information"), _MAX_PROC_BYTES)
        except OSError:
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Device Minor":
                try:
                    out[_bus_id(entry.name)] = parse_uint(value.strip())
                except ValueError:
                    continue  # garbage or a number longer than the driver writes
    return out


def mig_capability_minors(procfs: Path) -> dict[int, tuple[int, str]]:
    """nvidia-cap minor -> (GPU minor, GPU instance id) for every MIG GPU and compute instance,
    from <procfs>/driver/nvidia/capabilities/gpu<N>/mig/gi<G>[/ci<C>]/access
    ("DeviceFileMinor: M"): how a CDI spec's /dev/nvidia-caps nodes name a MIG device."""
    out: dict[int, tuple[int, str]] = {}
    root = procfs / "driver" / "nvidia" / "capabilities"
    try:
        gpus = [e for e in root.iterdir() if e.name.startswith("gpu")][:64]
    except OSError:
        return out
    for gpu in gpus:
        try:
            minor = parse_uint(gpu.name[3:])
            instances = [e for e in (gpu / "mig").iterdir() if e.name.startswith("gi")][:128]
        except (OSError, ValueError):
            continue
        for gi in instances:
            gi_id = gi.name[2:]
            if not gi_id.isdigit():
                continue
            try:
                cis = [e / "access" for e in gi.iterdir() if e.name.startswith("ci")][:64]
            except OSError:
                cis = []
            for access in (gi / "access", *cis):
                cap = _device_file_minor(access)
                if cap is not None:
                    out[cap] = (minor, gi_id)
    return out


def _device_file_minor(access: Path) -> int | None:
    try:
        text = read_text_bounded(str(access), _MAX_PROC_BYTES)
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "DeviceFileMinor":
            try:
                return parse_uint(value.strip())
            except ValueError:
                return None
    return None


def _bus_id(text: str) -> str:
    """'00000000:3B:00.0' (NVML) and '0000:3b:00.0' (procfs) -> '0000:3b:00.0'."""
    head, sep, tail = text.strip().lower().partition(":")
    try:
        return f"{int(head, 16):04x}:{tail}" if sep else text
    except ValueError:
        return text


def directory_from_gpus(
    gpus: Sequence[GpuReading],
    minors: Mapping[str, int],
    caps: Mapping[int, tuple[int, str]] | None = None,
) -> GpuDirectory:
    """What the GPU backend's latest read tells about indexes, MIG parents and instances, and
    which minor number each GPU (and each MIG capability) has."""
    index_by_uuid: dict[str, str] = {}
    parent: dict[str, str] = {}
    instance: dict[str, str] = {}
    by_minor: dict[int, str] = {}
    by_name: dict[str, str] = {}
    for g in gpus:
        index_by_uuid[g.uuid] = str(g.index)
        by_name.update(dict.fromkeys(g.device_names, g.uuid))
        minor = minors.get(_bus_id(g.pci_bus_id)) if g.pci_bus_id else None
        if minor is not None:
            by_minor[minor] = str(g.index)
        for mig in g.mig_instances:
            parent[mig.uuid] = g.uuid
            instance[mig.uuid] = str(mig.gpu_instance)
    return GpuDirectory(index_by_uuid, parent, by_minor, instance, dict(caps or {}), by_name)


class BackendDirectory:
    """A GpuDirectory provider over the GPU backends' latest merged read
    (exporter/sources/gpu/backend.py LatestGpus), rebuilt only when it changes; the NVIDIA
    driver's minor numbers (and MIG capability minors) are re-read only when the set of GPUs
    (or MIG devices) changes."""

    def __init__(self, procfs: Path, gpus: Callable[[], Sequence[GpuReading]]) -> None:
        self._procfs = procfs
        self._gpus = gpus
        self._seen: Sequence[GpuReading] | None = None
        self._buses: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        self._minors: dict[str, int] = {}
        self._caps: dict[int, tuple[int, str]] = {}
        self._directory = EMPTY_DIRECTORY

    def __call__(self) -> GpuDirectory:
        gpus = self._gpus()
        if gpus is not self._seen:
            buses = tuple(sorted(g.pci_bus_id for g in gpus))
            migs = tuple(sorted(m.uuid for g in gpus for m in g.mig_instances))
            if (buses, migs) != self._buses:
                self._minors = device_minors(self._procfs)
                self._caps = mig_capability_minors(self._procfs) if migs else {}
                self._buses = (buses, migs)
            self._directory = directory_from_gpus(gpus, self._minors, self._caps)
            self._seen = gpus
        return self._directory


def resolve_device(device_id: str, directory: GpuDirectory = EMPTY_DIRECTORY) -> GpuRef | None:
    """The GPU behind one PodResources device ID; None for a format that names no NVIDIA GPU."""
    base = device_id.strip()
    placeholder = False
    replica = _REPLICA.match(base)
    if replica is not None:
        base = replica.group("base")
    elif (held := _VGPU_PLACEHOLDER.match(base) or _GPUSHARE_PLACEHOLDER.match(base)) is not None:
        base, placeholder = held.group("uuid"), True
    elif (held := _INDEX_PLACEHOLDER.match(base)) is not None:
        base, placeholder = held.group("index"), True
    uuid = index = instance = gpu_instance = ""
    if base.startswith("GPU-"):
        uuid = base
    elif (legacy := _LEGACY_MIG.match(base)) is not None:
        uuid, instance, gpu_instance = legacy.group("gpu"), base, legacy.group("gi")
    elif base.startswith("MIG-"):
        instance = base
        uuid = directory.parent_by_mig_uuid.get(base, "")
        gpu_instance = directory.instance_by_mig_uuid.get(base, "")
    elif (minor := _MINOR.match(base)) is not None:
        # without NVML's minor numbers, assume minor == index (true unless GPUs were hidden)
        n = int(minor.group("minor"))
        index = directory.index_by_minor.get(n, str(n))
        if minor.group("gi") is not None:
            instance, gpu_instance = base, minor.group("gi")
    elif (by_index := _INDEX.match(base)) is not None:
        index = by_index.group("index")
        instance = base if by_index.group("mig") else ""
    else:
        return None
    if uuid and not index:
        index = directory.index_by_uuid.get(uuid, "")
    if index and not uuid:
        uuid = directory.uuid_of_index(index)
    return GpuRef(uuid, index, instance, gpu_instance, placeholder)


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """One device a container holds, as PodResources reports it (names, no uids)."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_id: str


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One device a container holds through a DRA ResourceClaim (PodResources'
    dynamic_resources: one ClaimResource). driver/pool/device come from kubelets 1.31+."""

    namespace: str
    pod: str
    container: str
    claim_namespace: str
    claim: str
    cdi_devices: tuple[str, ...]
    driver: str = ""
    pool: str = ""
    device: str = ""

    @property
    def claim_label(self) -> str:
        """The claim as the allocation series names it: its name, with its namespace where that
        is not the pod's (Kubernetes keeps them equal: pods reference claims in their own)."""
        if self.claim_namespace and self.claim_namespace != self.namespace:
            return f"{self.claim_namespace}/{self.claim}"
        return self.claim


@dataclass(frozen=True, slots=True)
class Holding:
    """A container holds (a share of) a GPU or MIG device, whatever allocated it."""

    namespace: str
    pod: str
    container: str
    ref: GpuRef
    claim: str = ""  # the DRA ResourceClaim, "" for device plugin allocations
    resource: str = ""  # the device plugin resource (nvidia.com/mig-1g.10gb), "" for a claim


@dataclass(frozen=True, slots=True)
class Unresolved:
    """An allocation wattprobe could not turn into a GPU of this node, and why."""

    source: str  # "device" or "claim"
    holder: str  # namespace/pod/container
    what: str  # the device ID, or claim ns/name: CDI name
    reason: str


@dataclass(frozen=True)
class Holdings:
    holdings: tuple[Holding, ...] = ()
    unresolved: tuple[Unresolved, ...] = ()
    # by source: device plugin IDs and DRA claim devices resolved; which CDI names resolved
    # through a spec and which only through the NVIDIA DRA driver's naming
    devices: int = 0
    claims: int = 0
    by_spec: int = 0
    by_name: int = 0


EMPTY_HOLDINGS = Holdings()

# a sharing plugin's placeholders: the GPUs really given to (namespace, pod, container) for a
# resource, where known (Volcano's annotation, exporter/kube/kube.py); None: not known
AssignedByAnnotation = Callable[[str, str, str, str], Sequence[str] | None]


def _known_gpu(ref: GpuRef, directory: GpuDirectory) -> str:
    """Why the node has no such GPU, or "" (only where NVML listed the node's GPUs)."""
    if not directory.index_by_uuid:
        return ""
    if ref.uuid and ref.uuid not in directory.index_by_uuid:
        return f"{ref.uuid} is not a GPU of this node"
    if not ref.uuid and ref.gpu and ref.gpu not in directory.index_by_uuid.values():
        return f"GPU {ref.gpu} is not a GPU of this node"
    return ""


def resolve_cdi_device(dev: CdiDevice, directory: GpuDirectory) -> tuple[list[GpuRef], str]:
    """The GPUs or MIG devices a CDI device's edits name, or ([], why not)."""
    refs = [r for r in (resolve_device(i, directory) for i in dev.gpu_ids) if r is not None]
    if not refs and dev.minors:
        known = directory.index_by_minor
        absent = [m for m in dev.minors if known and m not in known]
        if absent:
            return [], f"names /dev/nvidia{absent[0]}, which this node does not have"
        refs = _by_device_nodes(dev, directory)
    if not refs:
        return [], "its CDI edits name no NVIDIA GPU" if not dev.names_gpu else "no GPU"
    for ref in refs:
        why = _known_gpu(ref, directory)
        if why:
            return [], why
    return refs, ""


def _by_device_nodes(dev: CdiDevice, directory: GpuDirectory) -> list[GpuRef]:
    """/dev/nvidia<N> names GPU N; with /dev/nvidia-caps nodes, a MIG device on it."""
    caps = directory.mig_by_cap_minor
    migs = {caps[c] for c in dev.cap_minors if c in caps}
    refs: list[GpuRef] = []
    for minor in dev.minors:
        parent = resolve_device(f"nvidia{minor}", directory)
        if parent is None:
            continue
        held = sorted(gi for m, gi in migs if m == minor)
        for gi in held:
            mig = _mig_uuid(directory, parent.uuid, gi) or f"nvidia{minor}/gi{gi}"
            refs.append(GpuRef(parent.uuid, parent.gpu, mig, gi))
        if not held:
            # with caps nodes: a MIG device whose instance the driver's capabilities did not tell
            refs.append(GpuRef(parent.uuid, parent.gpu, dev.name) if dev.cap_minors else parent)
    return refs


def _mig_uuid(directory: GpuDirectory, parent: str, gi: str) -> str:
    for mig, gpu in directory.parent_by_mig_uuid.items():
        if gpu == parent and directory.instance_by_mig_uuid.get(mig) == gi:
            return mig
    return ""


def resolve_dra_name(name: str, directory: GpuDirectory) -> GpuRef | None:
    """A device by the NVIDIA DRA driver's naming (gpu-<minor>, gpu-<minor>-mig-...; in CDI
    names prefixed with the claim's uid): the fallback where no spec tells (not mounted)."""
    match = _DRA_NAME.search(name)
    if match is None:
        return None
    parent = resolve_device(f"nvidia{match.group('minor')}", directory)
    if parent is None:
        return None
    if match.group("mig"):
        return GpuRef(parent.uuid, parent.gpu, name)
    return parent


def resolve_claim(
    claim: ClaimDevice, cdi: CdiIndex, directory: GpuDirectory
) -> tuple[list[GpuRef], str, str]:
    """(refs, how: "spec" or "name", why not) for one claim device."""
    why = "the kubelet names no CDI device" if not claim.cdi_devices else ""
    refs: dict[GpuRef, None] = {}
    for name in claim.cdi_devices:
        dev = cdi.devices.get(name)
        if dev is None:
            why = why or f"{name}: in no CDI spec"
            continue
        got, reason = resolve_cdi_device(dev, directory)
        if got:
            refs.update(dict.fromkeys(got))
        elif dev.names_gpu:
            # the spec is what the runtime injects: a GPU it names that the node lacks is no
            # reason to guess from names
            return [], "", f"{name}: {reason}"
        elif not why:
            why = f"{name}: {reason}"
    if refs:
        return list(refs), "spec", ""
    named, absent = _by_dra_names(claim, directory)
    if absent:
        return [], "", absent
    if named:
        return named, "name", ""
    return [], "", why or "no GPU"


def _by_dra_names(claim: ClaimDevice, directory: GpuDirectory) -> tuple[list[GpuRef], str]:
    """The GPU by the NVIDIA DRA driver's own names, where no spec told (v25.3 drivers write a
    claim spec with config edits only beside a "device" spec; newer ones one spec per claim;
    either may be out of reach when the spec directories are not mounted)."""
    names: list[str] = []
    if claim.driver == NVIDIA_DRA_DRIVER and claim.device:
        names.append(claim.device)
    for name in claim.cdi_devices:
        parts = split_name(name)
        if parts is not None and parts[0] == NVIDIA_DRA_CDI_VENDOR:
            names.append(parts[2])
    for name in names:
        ref = resolve_dra_name(name, directory)
        match = _DRA_NAME.search(name)
        if ref is None or match is None:
            continue
        minor, known = int(match.group("minor")), directory.index_by_minor
        absent = _known_gpu(ref, directory)
        if known and minor not in known:
            absent = f"names /dev/nvidia{minor}, which this node does not have"
        return ([], f"{name}: {absent}") if absent else ([ref], "")
    return [], ""


def _placeholder_gpus(
    key: tuple[str, str, str, str], assigned: AssignedByAnnotation | None, directory: GpuDirectory
) -> list[GpuRef]:
    """The GPUs behind a sharing plugin's placeholders: those the pod's annotation names, else
    the node's only GPU (the kubelet's pick cannot be wrong there); none on a node with several
    GPUs (the pick is anyone's)."""
    given = assigned(*key) if assigned is not None else None
    if given:
        return [r for r in (resolve_device(u, directory) for u in given) if r is not None]
    if len(directory.index_by_uuid) == 1:
        ((only, index),) = directory.index_by_uuid.items()
        return [GpuRef(only, index, "")]
    return []


def resolve_holdings(
    devices: Iterable[DeviceAssignment],
    claims: Iterable[ClaimDevice] = (),
    cdi: CdiIndex = EMPTY_INDEX,
    directory: GpuDirectory = EMPTY_DIRECTORY,
    *,
    gpu_resources: Sequence[str] = DEFAULT_GPU_RESOURCES,
    assigned: AssignedByAnnotation | None = None,
    plugins: Sequence[DevicePlugin] = (),
) -> Holdings:
    """Every container's GPUs from device plugin IDs and DRA claims, and what did not resolve.

    A sharing plugin's placeholder ID stands for the GPU its pod's annotation names (assigned);
    without that, for the node's only GPU; with several GPUs it is left unresolved rather than
    guessed.
    """
    out: dict[Holding, None] = {}
    unresolved: list[Unresolved] = []
    n_devices = n_claims = by_spec = by_name = 0
    annotated: set[tuple[str, str, str, str]] = set()
    for a in devices:
        plugin = next((p for p in plugins if is_gpu_resource(a.resource, p.resources)), None)
        if plugin is None and not is_gpu_resource(a.resource, gpu_resources):
            continue
        holder = f"{a.namespace}/{a.pod}/{a.container}"
        if plugin is not None:
            ref = plugin.resolve(a.device_id, directory)
            what = f"no {plugin.vendor} GPU of this node has this ID"
        else:
            ref = resolve_device(a.device_id, directory)
            what = "not an NVIDIA GPU ID"
        if ref is None:
            unresolved.append(Unresolved("device", holder, a.device_id, what))
            continue
        if ref.placeholder:
            # one annotation (or one verdict) stands for all of a container's placeholders
            key = (a.namespace, a.pod, a.container, a.resource)
            if key in annotated:
                continue
            annotated.add(key)
            real = _placeholder_gpus(key, assigned, directory)
            if not real:
                why = f"{a.resource} placeholder: the pod's annotation names the GPU"
                unresolved.append(Unresolved("device", holder, a.device_id, why))
                continue
            n_devices += 1
            out.update(
                dict.fromkeys(
                    Holding(a.namespace, a.pod, a.container, r, resource=a.resource) for r in real
                )
            )
            continue
        n_devices += 1
        out[Holding(a.namespace, a.pod, a.container, ref, resource=a.resource)] = None
    for c in claims:
        refs, how, why = resolve_claim(c, cdi, directory)
        if not refs:
            holder = f"{c.namespace}/{c.pod}/{c.container}"
            what = f"claim {c.claim_namespace}/{c.claim}"
            unresolved.append(Unresolved("claim", holder, what, why))
            continue
        n_claims += 1
        by_spec += how == "spec"
        by_name += how == "name"
        for ref in refs:
            out[Holding(c.namespace, c.pod, c.container, ref, c.claim_label)] = None
    return Holdings(tuple(out), tuple(unresolved), n_devices, n_claims, by_spec, by_name)


def allocations_of(holdings: Iterable[Holding]) -> tuple[GpuAllocation, ...]:
    """wattprobe_gpu_allocation_info rows: one per (GPU or MIG device, container, claim); two
    replicas of one time-sliced GPU held by the same container are one row. A device a
    container holds through several resources (a sharing plugin's count and memory
    resources) is still one row, its resources joined sorted with "," in `resource`: one
    series per device and holder, whatever the plugin, and GPU hours counted once."""
    resources: dict[GpuAllocation, set[str]] = {}
    for h in holdings:
        row = GpuAllocation(
            h.ref.gpu,
            h.ref.uuid,
            h.ref.gpu_instance,
            h.ref.instance,
            h.namespace,
            h.pod,
            h.container,
            h.claim,
        )
        resources.setdefault(row, set()).update([h.resource] if h.resource else [])
    rows = (replace(row, resource=",".join(sorted(r))) for row, r in resources.items())
    return tuple(sorted(rows, key=_row_key))


def gpu_allocations(
    assignments: Iterable[DeviceAssignment], directory: GpuDirectory = EMPTY_DIRECTORY
) -> tuple[GpuAllocation, ...]:
    """Device plugin allocations alone (see resolve_holdings for all of them)."""
    return allocations_of(resolve_holdings(assignments, directory=directory).holdings)


def _row_key(row: GpuAllocation) -> tuple[str, ...]:
    return (
        row.gpu,
        row.uuid,
        row.mig_device,
        row.namespace,
        row.pod,
        row.container,
        row.claim,
        row.resource,
    )


def holders_in(uuid: str, holdings: Iterable[Holding]) -> list[tuple[str, str, str]]:
    """(namespace, pod, container) of every container holding the GPU or MIG device `uuid`:
    a physical GPU's UUID also matches the MIG devices carved from it (when their parent is
    known) and all its time-slices and shares."""
    found: dict[tuple[str, str, str], None] = {}
    for h in holdings:
        if uuid in (h.ref.uuid, h.ref.instance):
            found[(h.namespace, h.pod, h.container)] = None
    return list(found)


def holders_of(
    uuid: str, assignments: Iterable[DeviceAssignment], directory: GpuDirectory = EMPTY_DIRECTORY
) -> list[tuple[str, str, str]]:
    """Device plugin holders alone of `uuid` (see holders_in)."""
    return holders_in(uuid, resolve_holdings(assignments, directory=directory).holdings)
