"""The report's comparisons, as pure functions of what was read: agreement in %, the gauges
side by side, and the busy-phase billing (issue 14's rule: a busy GPU bills >= 90 % active)."""

from __future__ import annotations

from collections.abc import Mapping

from tests.gpu_real.agent import Samples, pick, total
from tests.gpu_real.nvmlprobe import Answer

BUSY_ACTIVE_SHARE = 0.9
MIB = 1 << 20


def agreement_pct(value: float | None, reference: float | None) -> float | None:
    """(value - reference) / reference in %, None when either is missing or reference is 0."""
    if value is None or reference is None or reference == 0:
        return None
    return round(100.0 * (value - reference) / reference, 3)


def gpu_energy(samples: Samples, gpu: int, **labels: str) -> float:
    return total(samples, "wattprobe_gpu_energy_joules_total", gpu=str(gpu), **labels)


def billed(samples: Samples, gpu: int, container_id: str | None, pid: int) -> dict[str, float]:
    """GPU energy the load's container and process were billed (both modes)."""
    out = {
        "process_j": total(
            samples, "wattprobe_process_energy_joules_total", zone="gpu", gpu=str(gpu), pid=str(pid)
        )
    }
    if container_id is not None:
        out["container_j"] = total(
            samples,
            "wattprobe_container_energy_joules_total",
            zone="gpu",
            gpu=str(gpu),
            container_id=container_id,
        )
    return out


def phase_billing(
    before: Samples, after: Samples, gpu: int, container_id: str | None, pid: int
) -> dict[str, float | None]:
    gpu_j = gpu_energy(after, gpu) - gpu_energy(before, gpu)
    active_j = gpu_energy(after, gpu, mode="active") - gpu_energy(before, gpu, mode="active")
    b0, b1 = billed(before, gpu, container_id, pid), billed(after, gpu, container_id, pid)
    out: dict[str, float | None] = {
        "gpu_j": round(gpu_j, 3),
        "gpu_active_j": round(active_j, 3),
        "active_share": round(active_j / gpu_j, 4) if gpu_j > 0 else None,
    }
    for key in b1:
        delta = b1[key] - b0.get(key, 0.0)
        out[key] = round(delta, 3)
        out[key.replace("_j", "_share")] = round(delta / gpu_j, 4) if gpu_j > 0 else None
    return out


def gauges(
    samples: Samples,
    gpu: int,
    nvml: Mapping[str, Answer],
    smi: Mapping[str, float | None] | None,
) -> dict[str, dict[str, float | None]]:
    """Each gauge as wattprobe served it, as NVML answered and as nvidia-smi printed it, in
    nvidia-smi's units (W, %, MiB, C, MHz)."""
    g = {"gpu": str(gpu)}

    def wp(name: str, scale: float, **labels: str) -> float | None:
        # the whole GPU's series: MIG instances' carry a non-empty gpu_instance
        found = [
            value
            for lbl, value in pick(samples, name, **g, **labels).items()
            if not dict(lbl).get("gpu_instance")
        ]
        return found[0] * scale if len(found) == 1 else None

    def nv(key: str, scale: float) -> float | None:
        value = nvml.get(key)
        return value * scale if isinstance(value, int) else None

    def sm(key: str) -> float | None:
        return None if smi is None else smi.get(key)

    rows = {
        "power_w": (wp("wattprobe_gpu_power_watts", 1), nv("power_mw", 1e-3), sm("power.draw")),
        "power_limit_w": (
            wp("wattprobe_gpu_power_limit_watts", 1),
            nv("power_limit_mw", 1e-3),
            sm("power.limit"),
        ),
        "utilization_pct": (
            wp("wattprobe_gpu_utilization_ratio", 100),
            nv("util.gpu", 1),
            sm("utilization.gpu"),
        ),
        "memory_used_mib": (
            wp("wattprobe_gpu_memory_used_bytes", 1 / MIB),
            nv("memory.used", 1 / MIB),
            sm("memory.used"),
        ),
        "temperature_c": (
            wp("wattprobe_gpu_temperature_celsius", 1),
            nv("temperature", 1),
            sm("temperature.gpu"),
        ),
        "clock_sm_mhz": (
            wp("wattprobe_gpu_clock_hertz", 1e-6, clock="sm"),
            nv("clock.sm", 1),
            sm("clocks.sm"),
        ),
    }
    return {name: {"wattprobe": w, "nvml": n, "nvidia_smi": s} for name, (w, n, s) in rows.items()}


def health_series(samples: Samples, gpu: int) -> dict[str, list[dict[str, object]]]:
    """XID, ECC, clock-event and PCIe replay series of one GPU, with their labels and values."""
    out: dict[str, list[dict[str, object]]] = {}
    for name in (
        "wattprobe_gpu_xid_errors_total",
        "wattprobe_gpu_ecc_errors_total",
        "wattprobe_gpu_clock_event_active",
        "wattprobe_gpu_pcie_replays_total",
        "wattprobe_gpu_lost",
    ):
        out[name] = [
            {"labels": dict(sorted(labels)), "value": value}
            for labels, value in sorted(pick(samples, name, gpu=str(gpu)).items(), key=str)
        ]
    return out


def collect_durations(samples: Samples) -> dict[str, float]:
    """wattprobe_collect_duration_seconds by source: the agent's own read time per interval."""
    return {
        dict(labels).get("source", ""): round(value, 6)
        for labels, value in pick(samples, "wattprobe_collect_duration_seconds").items()
    }


def interval_end(samples: Samples) -> float | None:
    """The Unix time the served snapshot's interval ended."""
    found = pick(samples, "wattprobe_last_interval_timestamp_seconds")
    return next(iter(found.values())) if len(found) == 1 else None
