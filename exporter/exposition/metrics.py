"""The metric catalogue: every family wattprobe can expose, with its type, labels and meaning.

The collector builds its families from these specs, and docs/metrics.md is generated from them
(`make docs`); a test checks both against what the collector actually emits.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "wattprobe_"

WORKLOAD_LABELS = ("container_id", "container", "pod", "namespace", "pod_uid")
GPU_LABELS = ("gpu", "uuid")
MIG_LABELS = ("gpu_instance", "compute_instance")
POD_LABEL = "label_KEY"  # stands for the allow-listed pod labels on wattprobe_pod_info


@dataclass(frozen=True)
class MetricSpec:
    name: str  # without the prefix; counters without _total
    kind: str  # counter or gauge
    help: str
    labels: tuple[str, ...] = ()
    optional_labels: tuple[str, ...] = ()  # present only on some series (gpu on zone="gpu")
    section: str = "Node and workloads"

    @property
    def exposed_name(self) -> str:
        return PREFIX + self.name + ("_total" if self.kind == "counter" else "")


CATALOGUE: tuple[MetricSpec, ...] = (
    MetricSpec(
        "build_info",
        "gauge",
        "wattprobe build, value 1.",
        ("version", "python"),
        section="Exporter",
    ),
    MetricSpec(
        "intervals", "counter", "Attribution intervals completed since start.", section="Exporter"
    ),
    MetricSpec(
        "last_interval_timestamp_seconds",
        "gauge",
        "Unix time at which the last completed interval ended: the instant all other series of "
        "the scrape describe. Energy increase divided by the increase of this is average power.",
        section="Exporter",
    ),
    MetricSpec(
        "source_up",
        "gauge",
        '1 if the source worked in the last interval. reason says why not; reason="absent" means '
        "the node has no such hardware, which is not a fault.",
        ("source", "reason"),
        section="Exporter",
    ),
    MetricSpec(
        "collect_duration_seconds",
        "gauge",
        "Time the source took to read in the last interval.",
        ("source",),
        section="Exporter",
    ),
    MetricSpec(
        "device_up",
        "gauge",
        "1 if the device's last reading was accepted; 0 if it was unreadable or rejected (its "
        'last good reading stays the baseline). Devices are node zones and GPUs (zone="gpu", '
        "device = GPU index). source_up says whether the source as a whole worked.",
        ("source", "zone", "device"),
        section="Exporter",
    ),
    MetricSpec(
        "device_rejected_readings",
        "counter",
        'Readings of a device that counted no energy: reason="unreadable" (the source could not '
        'read or parse it), "implausible" (out of range, or more energy than the device can draw '
        'in the time), "reset" (a counter went back without a wrap).',
        ("source", "zone", "device", "reason"),
        section="Exporter",
    ),
    MetricSpec(
        "idle_power_watts",
        "gauge",
        'Idle power baseline in use per device: origin="learned" (from intervals the device was '
        'idle, or the intercept of a fit over a wide utilization range), "configured" '
        '(--power.idle), "prior" (a share of the rated or highest power seen, until idleness '
        'is observed; docs/attribution.md) or "model" (source="estimated": the estimate\'s power '
        "at zero load).",
        ("source", "zone", "device", "origin"),
    ),
    MetricSpec(
        "estimate_info",
        "gauge",
        'Where the estimated power (source="estimated") comes from: basis="instance" (the '
        "instance type's host CPU in Boavizta's tables), \"cpu\" (the CPU model's TDP), "
        '"model_range" (its model range\'s curve), "ccf" (Cloud Carbon Footprint\'s '
        'microarchitecture line), "average" (CCF\'s cloud averages) or "flags" '
        "(--estimate.idle-watts/--estimate.max-watts); docs/faq.md. Present while the estimate "
        "is in use.",
        ("cpu_model", "instance_type", "basis"),
    ),
    MetricSpec("node_cpu_usage_ratio", "gauge", "Node CPU busy fraction over the last interval."),
    MetricSpec(
        "node_energy_joules",
        "counter",
        'Energy measured (or, with source="estimated", modelled) per zone and device, split into '
        "active and idle. Zones overlap (package contains core): never sum across zones; summing "
        "the devices of one zone (both sockets' package) is right. A node whose measured sources "
        'have no dram zone (RAPL without a DRAM domain, as on most AMD CPUs) gets zone="dram" '
        'source="estimated" beside them, from installed memory (docs/attribution.md).',
        ("zone", "device", "source", "mode"),
    ),
    MetricSpec(
        "node_unattributed_energy_joules",
        "counter",
        "Energy of an attributed zone kind given up because no activity reading covered it: held "
        'for 3 intervals without one, then counted here; reason="late" (the activity read did '
        'not return in time) or "failed"; for a GPU (zone="gpu", gpu=<index>) "no_process_list" '
        "(its process list could not be read). Per zone kind (per GPU), node active = workloads' "
        "active + this + wattprobe_node_pending_energy_joules (docs/attribution.md).",
        ("zone", "mode", "reason"),
        ("gpu",),
    ),
    MetricSpec(
        "node_pending_energy_joules",
        "gauge",
        "Energy of an attributed zone kind held now for the activity reading that covers it "
        "(after a late or failed read), or a GPU's for its process list; handed to workloads "
        "when that reading comes.",
        ("zone", "mode"),
        ("gpu",),
    ),
    MetricSpec(
        "container_energy_joules",
        "counter",
        "Energy attributed to a container, per zone kind and mode. Pseudo-containers "
        'container="system_processes" and "kernel_processes" hold host processes and kernel '
        "threads (always served); pods' containers only with --collector.container.",
        ("zone", "mode", *WORKLOAD_LABELS),
        ("gpu",),
    ),
    MetricSpec(
        "container_cpu_seconds",
        "counter",
        "CPU time of a container's tasks (pods' containers only with --collector.container).",
        WORKLOAD_LABELS,
    ),
    MetricSpec(
        "container_gpu_ioctls",
        "counter",
        "GPU driver ioctls issued by a container's tasks (eBPF activity source only; pods' "
        "containers only with --collector.container).",
        (*WORKLOAD_LABELS, "driver"),
    ),
    MetricSpec(
        "pod_energy_joules",
        "counter",
        "Energy attributed to a pod: the sum of its containers, ended ones included.",
        ("zone", "mode", "pod", "namespace", "pod_uid"),
        ("gpu",),
    ),
    MetricSpec(
        "pod_cpu_seconds",
        "counter",
        "CPU time of a pod's tasks: the sum of its containers, ended ones included.",
        ("pod", "namespace", "pod_uid"),
    ),
    MetricSpec(
        "process_energy_joules",
        "counter",
        "Energy attributed to a process (opt-in: --collector.process).",
        ("zone", "mode", "pid", "comm", "container_id", "container"),
        ("gpu",),
    ),
    # -- eBPF activity source --------------------------------------------------------------
    MetricSpec(
        "ebpf_map_entries",
        "gauge",
        "Entries in a bounded eBPF map at the last read (tasks: processes; exited: per-cgroup "
        "totals of exited processes).",
        ("map",),
        section="eBPF",
    ),
    MetricSpec(
        "ebpf_map_max_entries", "gauge", "Capacity of a bounded eBPF map.", ("map",), section="eBPF"
    ),
    MetricSpec(
        "ebpf_map_evictions",
        "counter",
        "Entries an eBPF LRU map evicted to make room (inserts - deletes - entries: a lower "
        "bound). tasks: a process's work since the last read is lost; exited: a cgroup's exited "
        "total restarts.",
        ("map",),
        section="eBPF",
    ),
    MetricSpec(
        "ebpf_map_insert_failures",
        "counter",
        "Events that found no room in an eBPF map (tasks: counted in the cgroup's exited total "
        "instead; exited: lost).",
        ("map",),
        section="eBPF",
    ),
    # -- GPUs (exporter/exposition/gpu.py) ----------------------------------------------------
    MetricSpec(
        "gpu_info",
        "gauge",
        "GPU identity, value 1: model, PCI bus id, driver and CUDA versions, MIG mode, vendor.",
        (
            "gpu",
            "uuid",
            "model",
            "pci_bus_id",
            "driver_version",
            "cuda_version",
            "mig_mode",
            "vendor",
        ),
        section="GPUs",
    ),
    MetricSpec(
        "gpu_lost",
        "gauge",
        "1 when NVML reports the GPU lost (off the bus or needing a reset).",
        GPU_LABELS,
        section="GPUs",
    ),
    MetricSpec(
        "gpu_utilization_ratio",
        "gauge",
        "Fraction of the last sample period a kernel ran on the GPU.",
        GPU_LABELS,
        section="GPUs",
    ),
    MetricSpec(
        "gpu_memory_utilization_ratio",
        "gauge",
        "Fraction of the last sample period device memory was read or written.",
        GPU_LABELS,
        section="GPUs",
    ),
    MetricSpec(
        "gpu_memory_used_bytes",
        "gauge",
        "GPU memory in use (driver reservation excluded); per MIG instance with gpu_instance. "
        'Sum whole GPUs with {gpu_instance=""}.',
        GPU_LABELS,
        MIG_LABELS,
        section="GPUs",
    ),
    MetricSpec(
        "gpu_memory_total_bytes",
        "gauge",
        "GPU memory size; per MIG instance with gpu_instance.",
        GPU_LABELS,
        MIG_LABELS,
        section="GPUs",
    ),
    MetricSpec(
        "gpu_memory_reserved_bytes",
        "gauge",
        "GPU memory reserved by the driver.",
        GPU_LABELS,
        section="GPUs",
    ),
    MetricSpec(
        "gpu_temperature_celsius", "gauge", "GPU core temperature.", GPU_LABELS, section="GPUs"
    ),
    MetricSpec("gpu_power_watts", "gauge", "GPU board power draw.", GPU_LABELS, section="GPUs"),
    MetricSpec(
        "gpu_power_limit_watts",
        "gauge",
        "Power limit the driver enforces.",
        GPU_LABELS,
        section="GPUs",
    ),
    MetricSpec(
        "gpu_energy_joules",
        "counter",
        "GPU energy since wattprobe started, split into active and idle; source says whether "
        "from the energy counter (nvml_energy) or integrated power (nvml_power). The sum over "
        'containers of zone="gpu",gpu=<index> equals this GPU\'s active energy.',
        (*GPU_LABELS, "mode", "source"),
        section="GPUs",
    ),
    MetricSpec(
        "gpu_clock_hertz",
        "gauge",
        "Current clock frequency (sm, memory).",
        (*GPU_LABELS, "clock"),
        section="GPUs",
    ),
    MetricSpec(
        "gpu_clock_event_active",
        "gauge",
        "1 while the reason holds the GPU's clocks down (NVML clock event reasons).",
        (*GPU_LABELS, "reason"),
        section="GPUs",
    ),
    MetricSpec(
        "gpu_pcie_replays",
        "counter",
        "PCIe replays since the driver loaded.",
        GPU_LABELS,
        section="GPUs",
    ),
    MetricSpec(
        "gpu_ecc_errors",
        "counter",
        "ECC errors since the driver loaded (volatile), by type (corrected, uncorrected).",
        (*GPU_LABELS, "type"),
        section="GPUs",
    ),
    MetricSpec(
        "gpu_xid_errors",
        "counter",
        "XID error events seen since wattprobe started, by XID.",
        (*GPU_LABELS, "xid"),
        section="GPUs",
    ),
    MetricSpec(
        "gpu_processes", "gauge", "Processes with a context on the GPU.", GPU_LABELS, section="GPUs"
    ),
    MetricSpec(
        "gpu_mig_info",
        "gauge",
        "MIG device (compute instance) identity, value 1: its UUID and profile.",
        (*GPU_LABELS, *MIG_LABELS, "mig_uuid", "profile"),
        section="GPUs",
    ),
    MetricSpec(
        "gpu_mig_slice_ratio",
        "gauge",
        "A MIG GPU instance's share of its GPU: its profile's compute slices over the GPU's "
        "(7; 4 on an A30), e.g. 3/7 for 3g.20gb on an A100. What a MIG device is priced at "
        "from its GPU's whole price (docs/showback.md).",
        (*GPU_LABELS, "gpu_instance"),
        section="GPUs",
    ),
    MetricSpec(
        "gpu_attribution_intervals",
        "counter",
        "Intervals in which the GPU's active energy was split by each method "
        "(engine, sm, memory, mig_memory, ioctl, even, none).",
        (*GPU_LABELS, "method"),
        section="GPUs",
    ),
    MetricSpec(
        "container_gpu_memory_used_bytes",
        "gauge",
        "GPU memory held by a container's processes, per GPU (pods' containers only with "
        "--collector.container).",
        ("gpu", *WORKLOAD_LABELS),
        section="GPUs",
    ),
)

# Kubernetes identity (docs/kubernetes.md): names fill WORKLOAD_LABELS on the series above.
KUBE_CATALOGUE: tuple[MetricSpec, ...] = (
    MetricSpec(
        "pod_info",
        "gauge",
        "A pod's identity and its labels allow-listed by --kube.pod-labels (as label_KEY, "
        "characters outside [a-zA-Z0-9_] as _), value 1. One series per known pod; only with "
        "--kube.pod-labels.",
        ("namespace", "pod", "pod_uid"),
        (POD_LABEL,),
        section="Kubernetes",
    ),
    MetricSpec(
        "gpu_allocation_info",
        "gauge",
        "The container holds this GPU, a time-slice or share of it or a MIG device on it, per the "
        "kubelet's PodResources API (device plugins, and DRA claims through the node's CDI "
        "specs), value 1. gpu, uuid and gpu_instance are left out while NVML does not know "
        "them; mig_device is the MIG device as the device plugin (or CDI) names it; claim is "
        "the DRA ResourceClaim in the pod's namespace, left out for device plugin allocations; "
        "resource is the device plugin resource it was allocated as (nvidia.com/gpu, "
        "nvidia.com/mig-1g.10gb: what a GPU-hour price per resource applies to), left out for "
        "DRA claims.",
        ("namespace", "pod", "container"),
        ("gpu", "uuid", "gpu_instance", "mig_device", "claim", "resource"),
        section="Kubernetes",
    ),
    MetricSpec(
        "cdi_spec_rejections",
        "counter",
        "CDI spec files (or spec directories) refused while resolving DRA claims, each time one "
        'becomes refused: reason="not_a_file" (a FIFO, socket or device), "unreadable", '
        '"too_large", "too_many" (more spec files in a directory than are read) or "invalid" '
        "(not a CDI spec). Present once a spec has been refused; the log names the file.",
        ("reason",),
        section="Kubernetes",
    ),
)
CATALOGUE = CATALOGUE + KUBE_CATALOGUE

# Served by the web server itself (exporter/web/telemetry.py), not from the snapshot.
WEB_CATALOGUE: tuple[MetricSpec, ...] = (
    MetricSpec(
        "web_config_last_reload_successful",
        "gauge",
        "1 if the last read of --web.config.file (at start, on SIGHUP, or when the file or a "
        "certificate it names changed) succeeded; 0 if it was refused and the previous config "
        "still serves, as Prometheus's prometheus_config_last_reload_successful. Only with "
        "--web.config.file.",
        section="Web server",
    ),
    MetricSpec(
        "web_config_last_reload_success_timestamp_seconds",
        "gauge",
        "Unix time of the last successful read of --web.config.file. Only with --web.config.file.",
        section="Web server",
    ),
    MetricSpec(
        "web_auth_refused",
        "counter",
        "Basic-auth requests answered 429 at once because their client address, or all "
        "addresses together, had as many bcrypt checks waiting as allowed (a brute force).",
        section="Web server",
    ),
    MetricSpec(
        "web_connections_shed",
        "counter",
        'Connections the server closed to keep serving: reason="silent" (at '
        "--web.max-connections, the oldest connection with no request answered, given up for a "
        'new one), "idle" (at the limit with no silent one, the answered connection that has '
        'waited longest for its next request), "refused" (at the limit with none to give up: '
        '503), "tls_handshake" (the '
        "oldest TLS handshake in progress, given up for a new one at the bound on handshakes), "
        '"slow_reader" (a client that did not take its responses within --web.write-timeout; a '
        "pipelining client's answers share one deadline).",
        ("reason",),
        section="Web server",
    ),
)

# The node's showback settings (--showback.*, exporter/exposition/showback.py): served from the
# settings in force at each render, each family only while it is configured.
SHOWBACK_CATALOGUE: tuple[MetricSpec, ...] = (
    MetricSpec(
        "node_pue",
        "gauge",
        "The node's facility PUE (facility energy / IT energy, >= 1), from --showback.pue or "
        "--showback.config; absent when not configured. Facility energy = IT energy x PUE.",
        section="Showback",
    ),
    MetricSpec(
        "energy_price_per_kwh",
        "gauge",
        "Price of one kWh of the node's facility energy, in currency (an ISO 4217 code; one per "
        "node), from --showback.energy-price or --showback.config; absent when not configured.",
        ("currency",),
        section="Showback",
    ),
    MetricSpec(
        "carbon_intensity_grams_per_kwh",
        "gauge",
        "Carbon intensity of the node's grid in gCO2e per kWh, from --showback.carbon-intensity "
        "or --showback.config; absent when not configured.",
        section="Showback",
    ),
    MetricSpec(
        "gpu_hour_price",
        "gauge",
        "Price of one allocated GPU for one hour, in currency, per --showback.config entry: a "
        "GPU model (as in wattprobe_gpu_info's model label) or a device plugin resource; the "
        'other label is "". Absent when no entry is configured.',
        ("currency", "model", "resource"),
        section="Showback",
    ),
    MetricSpec(
        "showback_config_last_reload_successful",
        "gauge",
        "1 if the last read of --showback.config (at start, on SIGHUP, or when the file changed) "
        "succeeded; 0 if it was refused and the previous settings are still served. Only with "
        "--showback.config.",
        section="Showback",
    ),
    MetricSpec(
        "showback_config_last_reload_success_timestamp_seconds",
        "gauge",
        "Unix time of the last successful read of --showback.config. Only with --showback.config.",
        section="Showback",
    ),
)

BY_NAME = {spec.name: spec for spec in CATALOGUE + WEB_CATALOGUE + SHOWBACK_CATALOGUE}


# What one pod costs in series (issue 22's budget: <= 10 by default).
# tests/system/test_series_per_pod.py
# counts them on a synthetic node and holds the default to the budget.
SERIES_PER_POD = (
    "## Series per pod",
    "",
    "By default a pod gets only its pod series; per-container series of its containers come "
    "with `--collector.container` (the pod dashboard's container panels need it). A pod's "
    "series add up with the pseudo-containers and the node's idle to the node, with or "
    "without the flag. On a node with RAPL package and dram, with the default "
    "`--attribution.idle holders`:",
    "",
    "| series | per pod, default | per pod, `--collector.container` |",
    "|---|---|---|",
    "| `wattprobe_pod_energy_joules_total` | 1 per CPU zone kind (package, dram): 2; per GPU "
    "the pod holds, active and idle: 2 | same |",
    "| `wattprobe_pod_info` | 1 with `--kube.pod-labels`, else 0 | same |",
    "| `wattprobe_gpu_allocation_info` | 1 per GPU (or MIG device, time-slice) a container "
    "holds, with PodResources | same |",
    "| `wattprobe_pod_cpu_seconds_total` | 1 | same |",
    "| `wattprobe_container_energy_joules_total` | 0 | per container (the pause sandbox "
    "included): 1 per CPU zone kind, 2 per GPU |",
    "| `wattprobe_container_cpu_seconds_total` | 0 | 1 per container |",
    "| `wattprobe_container_gpu_ioctls_total` | 0 | 1 per container and GPU driver it called "
    "(eBPF) |",
    "| `wattprobe_container_gpu_memory_used_bytes` | 0 | 1 per container and GPU it holds "
    "memory on |",
    "",
    "So a CPU pod gets 3 series by default (4 with pod labels), a pod holding one GPU 5; "
    "with `--collector.container`, a pod of 3 containers and its sandbox gets 15 (4 x 3 + 3), "
    "the figure before this default changed (issue 22). `--attribution.idle activity` adds "
    'mode="idle" to every CPU zone kind: one more series per zone kind.',
)


def render_markdown() -> str:
    lines = [
        "# Metrics",
        "",
        "Generated from `exporter/exposition/metrics.py` by `make docs`; a test fails when it",
        "drifts. All energy is in joules (counters: graph `rate()` for watts), ratios are 0..1.",
        "",
    ]
    sections: dict[str, list[MetricSpec]] = {}
    for spec in CATALOGUE + WEB_CATALOGUE + SHOWBACK_CATALOGUE:
        sections.setdefault(spec.section, []).append(spec)
    for section, specs in sections.items():
        lines += [f"## {section}", "", "| metric | type | labels | meaning |", "|---|---|---|---|"]
        for s in specs:
            labels = ", ".join(s.labels)
            if s.optional_labels:
                labels += (", " if labels else "") + ", ".join(f"({o})" for o in s.optional_labels)
            meaning = s.help.replace("|", "\\|")
            lines.append(f"| `{s.exposed_name}` | {s.kind} | {labels} | {meaning} |")
        lines.append("")
    lines += [
        'Labels in parentheses appear only on some series: `gpu` only where `zone="gpu"`.',
        "",
        *SERIES_PER_POD,
        "",
        "## wattprobe itself",
        "",
        "prometheus_client's standard process collector adds `process_cpu_seconds_total`,",
        "`process_resident_memory_bytes`, `process_virtual_memory_bytes`, `process_open_fds`,",
        "`process_max_fds` and `process_start_time_seconds` of the wattprobe process (read from",
        "its own `/proc/self`, whatever `--path.procfs` says).",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_markdown(), end="")
