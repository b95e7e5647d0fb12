"""The metric catalogue: every family wattprobe can expose, with its type, labels and meaning.

The collector builds its families from these specs, and docs/metrics.md is generated from them
(`make docs`); a test checks both against what the collector actually emits.
"""

from __future__ import annotations

from dataclasses import dataclass

PREFIX = "wattprobe_"

WORKLOAD_LABELS = ("container_id", "container", "pod", "namespace", "pod_uid")


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
    MetricSpec("node_cpu_usage_ratio", "gauge", "Node CPU busy fraction over the last interval."),
    MetricSpec(
        "node_energy_joules",
        "counter",
        'Energy measured (or, with source="estimated", modelled) per zone and device, split into '
        "active and idle. Zones overlap (package contains core): never sum across zones; summing "
        "the devices of one zone (both sockets' package) is right.",
        ("zone", "device", "source", "mode"),
    ),
    MetricSpec(
        "container_energy_joules",
        "counter",
        "Energy attributed to a container, per zone kind and mode. Pseudo-containers "
        'container="system_processes" and "kernel_processes" hold host processes and kernel '
        "threads.",
        ("zone", "mode", *WORKLOAD_LABELS),
        ("gpu",),
    ),
    MetricSpec(
        "container_cpu_seconds", "counter", "CPU time of a container's tasks.", WORKLOAD_LABELS
    ),
    MetricSpec(
        "container_gpu_ioctls",
        "counter",
        "GPU driver ioctls issued by a container's tasks (eBPF activity source only).",
        (*WORKLOAD_LABELS, "driver"),
    ),
    MetricSpec(
        "pod_energy_joules",
        "counter",
        "Energy attributed to a pod: the sum of its containers.",
        ("zone", "mode", "pod", "namespace", "pod_uid"),
        ("gpu",),
    ),
    MetricSpec(
        "process_energy_joules",
        "counter",
        "Energy attributed to a process (opt-in: --collector.process).",
        ("zone", "mode", "pid", "comm", "container_id", "container"),
        ("gpu",),
    ),
)

BY_NAME = {spec.name: spec for spec in CATALOGUE}


def render_markdown() -> str:
    lines = [
        "# Metrics",
        "",
        "Generated from `exporter/metrics.py` by `make docs`; a test fails when it drifts.",
        "All energy is in joules (counters: graph `rate()` for watts), ratios are 0..1.",
        "",
    ]
    sections: dict[str, list[MetricSpec]] = {}
    for spec in CATALOGUE:
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
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(render_markdown(), end="")
