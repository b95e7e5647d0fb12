"""Which power model a node gets: its instance type or CPU model looked up in Boavizta's tables,
falling back in a stated order.

Order (the first that applies is the `basis`):
1. `instance`: the instance type is in Boavizta's AWS/Azure/GCP tables and its host CPU has a
   TDP: the CPU's curve refitted to its TDP (curve.fit_log_curve), scaled by the node's threads
   over the package's threads, as boaviztapi computes a cloud instance.
2. `cpu`: the same from /proc/cpuinfo's model name when it names a CPU with a TDP.
3. `model_range`: the CPU (or the name) gives a model range with a curve (Xeon Platinum, Gold,
   Silver, E5, E3, E): that curve, unfitted, scaled the same way.
4. `ccf`: the CPU's microarchitecture has Cloud Carbon Footprint coefficients: linear per vCPU.
5. `average`: CCF's averages, 0.74 W idle and 3.5 W busy per vCPU (the old model).
`flags`: --estimate.idle-watts/--estimate.max-watts replace the CPU curve by a straight line.
Memory: Boavizta's per-DIMM model on the installed memory (the instance's, else MemTotal).
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass
from functools import cache

from exporter.sources.power.cpumodel.curve import (
    Fit,
    LinearCurve,
    LogCurve,
    MemoryCurve,
    NodeCurve,
    fit_log_curve,
)
from exporter.sources.power.cpumodel.data import (
    CCF_AVERAGE_W_PER_VCPU,
    CCF_W_PER_VCPU,
    CpuSpec,
    Instance,
    Profile,
    Tables,
    tables,
)

INSTANCE = "instance"
CPU = "cpu"
MODEL_RANGE = "model_range"
CCF = "ccf"
AVERAGE = "average"
FLAGS = "flags"
BASES = (INSTANCE, CPU, MODEL_RANGE, CCF, AVERAGE, FLAGS)
GIB = 1 << 30

_NOISE = re.compile(r"\((?:r|tm|c)\)|\b(?:cpu|processor|\d+-core)\b")


@dataclass(frozen=True, slots=True)
class Estimate:
    """A node's estimated power model and where it comes from."""

    basis: str  # one of BASES
    cpu_model: str  # the CPU as the tables name it, else as /proc/cpuinfo does
    instance_type: str  # the instance type found in the tables, else ""
    cpu: NodeCurve | LinearCurve
    dram: MemoryCurve | None
    detail: str  # what was matched, for `check` and the logs
    hints: tuple[str, ...] = ()  # what would make the estimate better

    @property
    def idle_w(self) -> float:
        return self.cpu.watts(0.0)

    @property
    def max_w(self) -> float:
        return self.cpu.watts(1.0)

    def power(self, busy: float) -> float:
        """Node CPU watts at busy fraction 0..1."""
        return self.cpu.watts(busy)

    def dram_w(self, busy: float) -> float:
        return 0.0 if self.dram is None else self.dram.watts(busy)


def normalise(name: str) -> str:
    """'Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz' -> 'intel xeon platinum 8175m'."""
    text = name.lower().split("@")[0]
    text = _NOISE.sub(" ", text)
    return " ".join(text.split())


def _numbered(tokens: list[str]) -> frozenset[str]:
    return frozenset(t for t in tokens if any(ch.isdigit() for ch in t))


@dataclass(frozen=True, slots=True)
class _CpuIndex:
    by_name: dict[str, CpuSpec]
    by_numbers: dict[frozenset[str], tuple[CpuSpec, ...]]
    range_threads: dict[str, int]  # median threads per package of a model range


@cache
def _index(t: Tables) -> _CpuIndex:
    by_name: dict[str, CpuSpec] = {}
    by_numbers: dict[frozenset[str], list[CpuSpec]] = {}
    threads: dict[str, list[int]] = {}
    for spec in t.cpus:
        key = normalise(spec.name)
        by_name.setdefault(key, spec)
        nums = _numbered(key.split())
        if nums:
            by_numbers.setdefault(nums, []).append(spec)
        if spec.threads and spec.model_range:
            threads.setdefault(spec.model_range.lower(), []).append(spec.threads)
    return _CpuIndex(
        by_name=by_name,
        by_numbers={k: tuple(v) for k, v in by_numbers.items()},
        range_threads={r: round(statistics.median(v)) for r, v in threads.items()},
    )


def match_cpu(name: str, t: Tables | None = None) -> CpuSpec | None:
    """The table's CPU for a model name: the same name once normalised, else the only CPU with
    the same model numbers (8175M, E5-2686 v4, 7R32) and no word the name lacks. Ambiguous or
    unknown: None (a wrong CPU is worse than a fallback that says it is one)."""
    t = t or tables()
    key = normalise(name)
    if not key:
        return None
    index = _index(t)
    if key in index.by_name:
        return index.by_name[key]
    tokens = key.split()
    nums = _numbered(tokens)
    if not nums:
        return None
    words = set(tokens)
    fits = [s for s in index.by_numbers.get(nums, ()) if set(normalise(s.name).split()) <= words]
    return fits[0] if len(fits) == 1 else None


def _canonical(name: str) -> set[str]:
    base = name.strip().lower()
    base = base.removeprefix("standard_")  # Azure's label is Standard_D2ads_v5
    return {
        base,
        base.replace(" ", "_").replace("-", "_"),
        base.replace(" ", "").replace("_", "").replace("-", ""),
    }


def match_instance(instance_type: str, t: Tables | None = None) -> Instance | None:
    """The instance type in the AWS, Azure and GCP tables, up to case and separators (the first
    stage of boaviztapi's matching; its edit-distance stages could pick a different size)."""
    t = t or tables()
    if not instance_type.strip():
        return None
    wanted = _canonical(instance_type)
    for inst in t.instances:
        if wanted & _canonical(inst.name):
            return inst
    return None


def _profile(t: Tables, spec_range: str) -> Profile | None:
    wanted = spec_range.strip().lower()
    return next((p for p in t.profiles if p.model_range.lower() == wanted), None)


def _range_in_name(t: Tables, key: str) -> Profile | None:
    """A model range named in a CPU name the tables lack ('xeon gold 6999' -> Xeon Gold)."""
    for p in sorted(t.profiles, key=lambda p: -len(p.model_range)):
        if re.search(rf"(?:^| ){re.escape(p.model_range.lower())}(?:$|[ -])", key):
            return p
    return None


def package_curve(t: Tables, spec: CpuSpec) -> LogCurve:
    """One package of `spec` at its TDP, as boaviztapi's CPU model fits it: its default curve
    refitted to TDP x (0.12, 0.32, 0.75, 1.02). The start is the default curve, not the model
    range's: boaviztapi 2.5.0 reads the CPU's range before its name lookup fills it in, so its
    fit always starts there (it matters only where the start's bounds bind: a Xeon Gold or
    Silver above ~210 or ~120 W would be held below its TDP points by its range's bounds)."""
    assert spec.tdp_w is not None
    base = t.default_profile
    fit = Fit(
        a0=base.a,
        c0=base.c,
        loads=t.tdp_loads,
        watts=tuple(spec.tdp_w * r for r in t.tdp_ratios),
    )
    return fit_log_curve(fit, t.min_power_w)


def _memory(t: Tables, family: str, memory_gb: float) -> MemoryCurve | None:
    if memory_gb <= 0:
        return None
    ram = t.ram
    dimm = ram.dimm_gb(t.memory_type(family))
    full = memory_gb / dimm * (ram.dimm_base_w + ram.dimm_w_per_gb * dimm)
    return MemoryCurve(full_w=full, idle_ratio=ram.idle_ratio)


def _ccf_family(family: str) -> tuple[float, float] | None:
    return CCF_W_PER_VCPU.get(family) or CCF_W_PER_VCPU.get(family.split("-", maxsplit=1)[0])


def estimate_for(
    cpu_model_name: str,
    instance_type: str | None,
    node_threads: int,
    host_threads: int | None,
    memory_bytes: int,
    *,
    idle_w: float | None = None,
    max_w: float | None = None,
    t: Tables | None = None,
) -> Estimate:
    """The node's power model. node_threads: the CPUs the node's kernel sees (a VM's vCPUs);
    host_threads: threads of one physical package when the node knows them (bare metal) and
    the tables do not; memory_bytes: installed memory (MemTotal) when no instance row gives it;
    idle_w / max_w: the --estimate.* overrides."""
    t = t or tables()
    threads = max(node_threads, 1)
    inst = match_instance(instance_type or "", t)
    hints: list[str] = []
    source = ""
    spec: CpuSpec | None = None
    if inst is not None:
        platform = t.platform(inst.platform)
        spec = match_cpu(platform.cpu_name, t) if platform and platform.cpu_name else None
        source = f"instance type {inst.name} ({inst.provider}, host {inst.platform})"
        # boaviztapi takes the threads from the CPU's row when it has one, else the host's
        per_package = (spec.threads if spec else None) or (platform.threads if platform else None)
        if inst.vcpu != threads:
            hints.append(
                f"{inst.name} has {inst.vcpu} vCPUs but the node sees {threads}: "
                "check the instance type"
            )
    else:
        if instance_type:
            hints.append(
                f"instance type {instance_type!r} is not in Boavizta {t.version}'s tables: "
                "check its spelling (the node.kubernetes.io/instance-type label)"
            )
        else:
            hints.append(
                "--estimate.instance-type with the node's node.kubernetes.io/instance-type "
                "label: the host's CPU from Boavizta's tables"
            )
        spec = match_cpu(cpu_model_name, t)
        source = f"CPU {cpu_model_name!r}" if cpu_model_name else "no CPU model name"
        per_package = (spec.threads if spec else None) or host_threads
    memory_gb = inst.memory_gb if inst is not None else memory_bytes / GIB
    family = spec.family if spec else ""
    dram = _memory(t, family, memory_gb)
    cpu_name = spec.name if spec else cpu_model_name.strip()
    inst_name = inst.name if inst else ""

    def done(basis: str, curve: NodeCurve | LinearCurve, how: str) -> Estimate:
        if idle_w is not None or max_w is not None:
            lo = curve.watts(0.0) if idle_w is None else idle_w
            hi = curve.watts(1.0) if max_w is None else max_w
            curve, basis = LinearCurve(lo, max(hi, lo)), FLAGS
            how = f"--estimate.idle-watts/--estimate.max-watts over {how}"
        return Estimate(basis, cpu_name, inst_name, curve, dram, f"{source}: {how}", tuple(hints))

    if spec is not None and spec.tdp_w is not None and per_package:
        curve = NodeCurve(package_curve(t, spec), threads / per_package)
        basis = INSTANCE if inst is not None else CPU
        return done(basis, curve, f"{spec.name}, TDP {spec.tdp_w:g} W, {per_package} threads")
    # the row's range, else a range its name (or the node's) spells out: Xeon E5-2686 has none
    profile = (_profile(t, spec.model_range) if spec else None) or _range_in_name(
        t, normalise(spec.name if spec else cpu_model_name)
    )
    if profile is not None:
        n = per_package or _index(t).range_threads.get(profile.model_range.lower())
        if n:
            hints.append(
                f"{cpu_name or 'the CPU'} has no TDP in the tables: its model range's curve "
                "is used; --estimate.idle-watts/--estimate.max-watts from its datasheet"
            )
            pkg = LogCurve.from_profile(
                profile.a, profile.b, profile.c, profile.d, floor_w=t.min_power_w
            )
            return done(
                MODEL_RANGE,
                NodeCurve(pkg, threads / n),
                f"{profile.model_range} curve, {n} threads per package",
            )
    coef = _ccf_family(family) if family else None
    if coef is not None:
        hints.append(
            f"{cpu_name} has no TDP in the tables: CCF's {family} line is used; "
            "--estimate.idle-watts/--estimate.max-watts from its datasheet"
        )
        lo, hi = coef
        return done(
            CCF,
            LinearCurve(lo * threads, hi * threads),
            f"CCF {family}, {lo:g}..{hi:g} W per vCPU",
        )
    what = f"CPU {cpu_name!r} is not in the tables" if cpu_name else "no CPU model name (Arm)"
    hints.append(f"{what}: CCF's cloud averages are used")
    lo, hi = CCF_AVERAGE_W_PER_VCPU
    return done(AVERAGE, LinearCurve(lo * threads, hi * threads), f"{lo:g}..{hi:g} W per vCPU")
