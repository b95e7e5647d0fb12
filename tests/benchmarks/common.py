"""What every benchmark shares: figures and sections of the report, the fake NVML, the synthetic
hosts (built once per run), and how busy the machine was while a benchmark ran."""

from __future__ import annotations

import ctypes
import os
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from exporter.model.config import ActivitySource, Config, PodSource
from tests.benchmarks.synthetic import HostShape, SyntheticHost
from tests.sources.gpu.nvml.build import EVENT_POLL_ENV, LIBRARY, SCENARIO_ENV, build_fake_nvml
from tests.support.realparts import require_binary

REPO = Path(__file__).resolve().parents[2]
FAKE_EVENT_POLL_MS = 3_600_000  # longer than any wait of the exporter's XID watcher


@dataclass(frozen=True)
class Figure:
    """One measured figure of the report, with the issue's target where it sets one."""

    measure: str
    value: str
    target: str = ""
    met: bool | None = None  # None: no target
    rerun: str = ""  # the command that reproduces it

    @property
    def verdict(self) -> str:
        if self.met is None:
            return ""
        return "met" if self.met else "**missed**"


@dataclass
class Section:
    """A benchmark's figures plus the prose saying how they were taken."""

    title: str
    figures: list[Figure] = field(default_factory=list)
    method: str = ""
    details: str = ""  # extra Markdown (tables) shown under the method
    load: LoadSample | None = None


@dataclass(frozen=True)
class LoadSample:
    """How busy the machine was over a benchmark: from /proc/stat and the load average."""

    seconds: float
    busy_ratio: float  # of all CPUs, every process counted (the benchmark's own included)
    loadavg_1m: float

    def describe(self) -> str:
        return (
            f"{self.seconds:.0f} s, CPUs {100 * self.busy_ratio:.0f} % busy on average, "
            f"load average {self.loadavg_1m:.1f} at the end"
        )


def _cpu_ticks() -> tuple[int, int]:
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:9]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, idle


@contextmanager
def machine_load() -> Iterator[list[LoadSample]]:
    """Measures the whole machine's CPU use while the block runs; the sample lands in the list."""
    out: list[LoadSample] = []
    busy0, idle0 = _cpu_ticks()
    start = time.monotonic()
    try:
        yield out
    finally:
        busy1, idle1 = _cpu_ticks()
        total = (busy1 - busy0) + (idle1 - idle0)
        out.append(
            LoadSample(
                seconds=time.monotonic() - start,
                busy_ratio=(busy1 - busy0) / total if total else 0.0,
                loadavg_1m=os.getloadavg()[0],
            )
        )


def median(values: list[float]) -> float:
    return statistics.median(values)


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between the closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    pos = (len(ordered) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class Context:
    """Shared across the benchmarks of one run: a scratch directory on tmpfs where there is one
    (procfs is in memory, so the fixture trees are too), the fake NVML, synthetic hosts."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self._hosts: dict[HostShape, SyntheticHost] = {}
        self._nvml_dir: Path | None = None
        self._nvml_loaded = False

    @classmethod
    @contextmanager
    def create(cls) -> Iterator[Context]:
        base = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        with tempfile.TemporaryDirectory(prefix="wattprobe-bench-", dir=base) as tmp:
            yield cls(Path(tmp))

    def host(self, shape: HostShape) -> SyntheticHost:
        if shape not in self._hosts:
            name = f"host-{shape.processes}-{shape.pods}x{shape.containers}-{len(self._hosts)}"
            self._hosts[shape] = SyntheticHost.create(self.scratch / name, shape)
        return self._hosts[shape]

    @property
    def nvml_dir(self) -> Path:
        """The directory holding the fake libnvidia-ml.so.1 (for LD_LIBRARY_PATH)."""
        if self._nvml_dir is None:
            self._nvml_dir = build_fake_nvml(self.scratch / "fake-nvml", require_binary("gcc"))
        return self._nvml_dir

    def load_nvml_in_process(self, scenario: Path) -> None:
        """pynvml in this process finds the fake by its soname; it reads this scenario."""
        if not self._nvml_loaded:
            ctypes.CDLL(str(self.nvml_dir / LIBRARY), mode=ctypes.RTLD_GLOBAL)
            self._nvml_loaded = True
        os.environ[SCENARIO_ENV] = str(scenario)
        os.environ[EVENT_POLL_ENV] = str(FAKE_EVENT_POLL_MS)

    def exporter_env(self, host: SyntheticHost) -> dict[str, str]:
        return self.exporter_env_for(host.scenario_path)

    def exporter_env_for(self, scenario: Path) -> dict[str, str]:
        return {
            "LD_LIBRARY_PATH": str(self.nvml_dir),
            SCENARIO_ENV: str(scenario),
            # no XID events come: the fake's event wait sleeps to its timeout like the driver
            EVENT_POLL_ENV: str(FAKE_EVENT_POLL_MS),
        }


def config_for(host: SyntheticHost) -> Config:
    """What `wattprobe serve <host.args()>` runs with: default collectors, /proc activity (the
    synthetic tree is not a live /proc that eBPF could observe), no Kubernetes API."""
    return Config(
        procfs=host.procfs,
        sysfs=host.sysfs,
        activity_source=ActivitySource.PROCFS,
        pod_source=PodSource.NONE,
    )


def serve_args(host: SyntheticHost) -> list[str]:
    return [*host.args(), "--activity-source", "procfs", "--kube.pod-source", "none"]


def read_proc_cpu_seconds(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    rest = text[text.rfind(")") + 2 :].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


def read_proc_memory_mib(pid: int) -> dict[str, float]:
    """VmRSS, VmHWM (peak RSS), RssAnon, RssFile of a process, in MiB."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile", "RssShmem"):
                out[key] = int(value.split()[0]) / 1024
    return out
