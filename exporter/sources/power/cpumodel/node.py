"""What the estimate needs to know about this node, read through --path.procfs/--path.sysfs:
the CPU model name (/proc/cpuinfo), installed memory (/proc/meminfo's MemTotal) and the DMI
product name (AWS Nitro instances write their instance type there).

Every read is bounded and a missing or odd file gives "" or 0: the estimate falls back, it never
fails the agent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from exporter.host.hostfile import read_text_bounded
from exporter.sources.power.cpumodel.lookup import Estimate, estimate_for, match_instance

_MAX_READ = 1 << 20  # cpuinfo of a 512-thread host is ~700 KiB; the first CPU's lines suffice
_DMI_PRODUCT = "class/dmi/id/product_name"


@dataclass(frozen=True, slots=True)
class NodeFacts:
    cpu_model_name: str
    memory_bytes: int
    dmi_product: str


def _read(path: Path, limit: int = _MAX_READ) -> str:
    """A regular file's first `limit` bytes; "" for anything else (exporter/host/hostfile.py:
    non-blocking, checked, so a FIFO planted where cpuinfo should be cannot hang the source)."""
    try:
        return read_text_bounded(str(path), limit)
    except OSError:
        return ""


def cpu_model_name(cpuinfo: str) -> str:
    """The first 'model name' (x86). Arm's cpuinfo has none: "" (the instance type, or the
    fallbacks, then decide)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "model name":
            return value.strip()[:200]
    return ""


def mem_total_bytes(meminfo: str) -> int:
    for line in meminfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "MemTotal":
            parts = value.split()
            if parts and parts[0].isascii() and parts[0].isdigit() and len(parts[0]) < 16:
                return int(parts[0]) * 1024  # kB
    return 0


def read_facts(procfs: Path, sysfs: Path) -> NodeFacts:
    return NodeFacts(
        cpu_model_name=cpu_model_name(_read(procfs / "cpuinfo")),
        memory_bytes=mem_total_bytes(_read(procfs / "meminfo", 64 << 10)),
        dmi_product=_read(sysfs / _DMI_PRODUCT, 256).strip(),
    )


def instance_type(flag: str, facts: NodeFacts) -> str:
    """The flag's value, else the DMI product name when the tables know it as an instance type
    (only an exact match counts: GCP writes 'Google Compute Engine', Azure 'Virtual Machine')."""
    if flag.strip():
        return flag.strip()
    if facts.dmi_product and match_instance(facts.dmi_product) is not None:
        return facts.dmi_product
    return ""


def node_estimate(
    facts: NodeFacts,
    instance_flag: str,
    node_threads: int,
    idle_w: float | None = None,
    max_w: float | None = None,
) -> Estimate:
    return estimate_for(
        facts.cpu_model_name,
        instance_type(instance_flag, facts) or None,
        node_threads,
        None,
        facts.memory_bytes,
        idle_w=idle_w,
        max_w=max_w,
    )
