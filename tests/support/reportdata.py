"""A Prometheus holding a known past: wattprobe series for three nodes over three days, written
as OpenMetrics, turned into TSDB blocks by Debian's promtool (create-blocks-from openmetrics) and
served by Debian's prometheus on 127.0.0.1, so `wattprobe report` reads it like a real fleet's.

Every counter grows at a constant power (watts x seconds since START, whole joules), sampled each
minute, so a day's increase() is exact and the expected report is a hand sum (tests/app/report).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from tests.support.monitoringstack import Daemon, spawn_daemon
from tests.support.realparts import require_binary
from tests.support.running import free_port

START = int(datetime(2025, 3, 1, tzinfo=UTC).timestamp())
DAYS = 3
STEP_S = 60
H100 = "NVIDIA H100 80GB HBM3"
U0, U1 = "GPU-0000aaaa-0000-0000-0000-000000000000", "GPU-1111bbbb-1111-1111-1111-111111111111"
U2 = "GPU-2222cccc-2222-2222-2222-222222222222"  # in MIG mode
MIG_1G = "nvidia.com/mig-1g.10gb"

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Series:
    family: str  # OpenMetrics family name (a counter's samples add _total)
    kind: str  # counter or gauge
    labels: Labels
    value: int | float  # watts for a counter, the value for a gauge
    # seconds after START the series has samples in: [first, last]
    first: int = 0
    last: int = DAYS * 86400
    gap: tuple[int, int] | None = None  # (from, to): no samples strictly between

    def samples(self) -> Iterator[tuple[int, str]]:
        for t in range(self.first, self.last + 1, STEP_S):
            if self.gap is not None and self.gap[0] < t < self.gap[1]:
                continue
            # whole watts times whole seconds: whole joules, exact in a float64
            v = self.value * t if self.kind == "counter" else self.value
            yield START + t, repr(v)


def _target(job: str, node: str) -> Labels:
    return (("job", job), ("instance", f"{node}:28390"), ("node", node))


def node_energy(
    node: str,
    zone: str,
    device: str,
    mode: str,
    watts: float,
    *,
    job: str = "wattprobe",
    gap: tuple[int, int] | None = None,
) -> Series:
    labels = (
        *_target(job, node),
        ("zone", zone),
        ("device", device),
        ("source", "rapl"),
        ("mode", mode),
    )
    return Series("wattprobe_node_energy_joules", "counter", labels, watts, gap=gap)


def pod_energy(
    node: str,
    namespace: str,
    pod: str,
    zone: str,
    watts: float,
    *,
    mode: str = "active",
    gpu: str = "",
    job: str = "wattprobe",
    gap: tuple[int, int] | None = None,
) -> Series:
    labels = (
        *_target(job, node),
        ("zone", zone),
        ("mode", mode),
        ("namespace", namespace),
        ("pod", pod),
        ("pod_uid", f"uid-{pod}"),
    )
    if gpu:
        labels = (*labels, ("gpu", gpu))
    return Series("wattprobe_pod_energy_joules", "counter", labels, watts, gap=gap)


def system_energy(
    node: str,
    zone: str,
    watts: float,
    *,
    job: str = "wattprobe",
    gap: tuple[int, int] | None = None,
) -> Series:
    labels = (
        *_target(job, node),
        ("zone", zone),
        ("mode", "active"),
        ("container", "system_processes"),
        ("container_id", ""),
        ("namespace", ""),
        ("pod", ""),
        ("pod_uid", ""),
    )
    return Series("wattprobe_container_energy_joules", "counter", labels, watts, gap=gap)


def gauge(family: str, node: str, value: float, job: str = "wattprobe", **labels: str) -> Series:
    return Series(family, "gauge", (*_target(job, node), *sorted(labels.items())), value)


def fleet() -> list[Series]:
    """The known past the report tests assert on (their module docstring has the hand sums)."""
    return [
        # node a: PUE 1.5, 0.2 EUR/kWh, 300 g/kWh, two H100s
        node_energy("a", "package", "intel-rapl:0", "active", 80),
        node_energy("a", "package", "intel-rapl:0", "idle", 20),
        node_energy("a", "package", "intel-rapl:1", "active", 100),
        node_energy("a", "core", "intel-rapl:0:0", "active", 50),  # inside package: never added
        node_energy("a", "dram", "intel-rapl:0:1", "active", 20),
        system_energy("a", "package", 10),
        system_energy("a", "dram", 1),
        pod_energy("a", "alpha", "a1", "package", 60),
        pod_energy("a", "alpha", "a1", "dram", 5),
        pod_energy("a", "beta", "b1", "package", 40),
        pod_energy("a", "alpha", "a2", "gpu", 150, gpu="0"),
        pod_energy("a", "beta", "b1", "gpu", 30, mode="idle", gpu="1"),
        Series(
            "wattprobe_gpu_energy_joules",
            "counter",
            (
                *_target("wattprobe", "a"),
                ("gpu", "0"),
                ("uuid", U0),
                ("mode", "active"),
                ("source", "nvml_energy"),
            ),
            150,
        ),
        Series(
            "wattprobe_gpu_energy_joules",
            "counter",
            (
                *_target("wattprobe", "a"),
                ("gpu", "0"),
                ("uuid", U0),
                ("mode", "idle"),
                ("source", "nvml_energy"),
            ),
            50,
        ),
        Series(
            "wattprobe_gpu_energy_joules",
            "counter",
            (
                *_target("wattprobe", "a"),
                ("gpu", "1"),
                ("uuid", U1),
                ("mode", "idle"),
                ("source", "nvml_energy"),
            ),
            40,
        ),
        gauge("wattprobe_node_pue", "a", 1.5),
        gauge("wattprobe_energy_price_per_kwh", "a", 0.2, currency="EUR"),
        gauge("wattprobe_carbon_intensity_grams_per_kwh", "a", 300),
        gauge("wattprobe_gpu_hour_price", "a", 2.5, currency="EUR", model=H100, resource=""),
        gauge("wattprobe_gpu_info", "a", 1, gpu="0", uuid=U0, model=H100),
        gauge("wattprobe_gpu_info", "a", 1, gpu="1", uuid=U1, model=H100),
        gauge(
            "wattprobe_gpu_allocation_info",
            "a",
            1,
            gpu="0",
            uuid=U0,
            namespace="alpha",
            pod="a2",
            container="train",
        ),
        # a second container of pod a2 on the same GPU: the pod holds it once
        gauge(
            "wattprobe_gpu_allocation_info",
            "a",
            1,
            gpu="0",
            uuid=U0,
            namespace="alpha",
            pod="a2",
            container="sidecar",
        ),
        # GPU 2 is in MIG mode (no energy, no utilization here): alpha's a5 holds a 1g.10gb
        # device priced by its resource, a6 a 3g.40gb priced at 3/7 of the H100's price
        gauge("wattprobe_gpu_info", "a", 1, gpu="2", uuid=U2, model=H100, mig_mode="enabled"),
        gauge("wattprobe_gpu_hour_price", "a", 0.5, currency="EUR", model="", resource=MIG_1G),
        gauge("wattprobe_gpu_mig_slice_ratio", "a", 1 / 7, gpu="2", uuid=U2, gpu_instance="9"),
        gauge("wattprobe_gpu_mig_slice_ratio", "a", 3 / 7, gpu="2", uuid=U2, gpu_instance="1"),
        gauge(
            "wattprobe_gpu_allocation_info",
            "a",
            1,
            gpu="2",
            uuid=U2,
            gpu_instance="9",
            mig_device="MIG-1g.10gb-0",
            namespace="alpha",
            pod="a5",
            container="infer",
            resource=MIG_1G,
        ),
        gauge(
            "wattprobe_gpu_allocation_info",
            "a",
            1,
            gpu="2",
            uuid=U2,
            gpu_instance="1",
            mig_device="MIG-3g.40gb-0",
            namespace="alpha",
            pod="a6",
            container="train",
            resource="nvidia.com/mig-3g.40gb",
        ),
        gauge(
            "wattprobe_gpu_allocation_info",
            "a",
            1,
            gpu="1",
            uuid=U1,
            namespace="beta",
            pod="b1",
            container="notebook",
        ),
        gauge("wattprobe_gpu_utilization_ratio", "a", 0.5, gpu="0", uuid=U0),
        gauge("wattprobe_gpu_utilization_ratio", "a", 0, gpu="1", uuid=U1),
        # node b: PUE 1.2, 0.3 EUR/kWh, 100 g/kWh
        node_energy("b", "package", "intel-rapl:0", "active", 90),
        node_energy("b", "dram", "intel-rapl:0:1", "active", 10),
        system_energy("b", "package", 5),
        pod_energy("b", "beta", "b2", "package", 30),
        pod_energy("b", "gamma", "g1", "package", 10),
        pod_energy("b", "gamma", "g1", "dram", 2),
        gauge("wattprobe_node_pue", "b", 1.2),
        gauge("wattprobe_energy_price_per_kwh", "b", 0.3, currency="EUR"),
        gauge("wattprobe_carbon_intensity_grams_per_kwh", "b", 100),
        # node c: no PUE, no price, no carbon intensity configured
        node_energy("c", "package", "intel-rapl:0", "active", 50),
        system_energy("c", "package", 5),
        pod_energy("c", "alpha", "a3", "package", 20),
        # job "gappy": node d has no samples through 2025-03-02 (Prometheus was down)
        node_energy("d", "package", "intel-rapl:0", "active", 10, job="gappy", gap=(86340, 172860)),
        pod_energy("d", "delta", "d1", "package", 5, job="gappy", gap=(86340, 172860)),
    ]


def openmetrics(series: list[Series]) -> str:
    lines = []
    families: dict[str, list[Series]] = {}
    for s in series:
        families.setdefault(s.family, []).append(s)
    for family, members in families.items():
        kind = members[0].kind
        lines.append(f"# TYPE {family} {kind}")
        name = family + ("_total" if kind == "counter" else "")
        for s in members:
            labels = ",".join(f'{k}="{v}"' for k, v in s.labels)
            lines.extend(f"{name}{{{labels}}} {v} {t}" for t, v in s.samples())
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def start_filled_prometheus(workdir: Path, series: list[Series]) -> Daemon:
    """Blocks made by promtool from the series, served by prometheus (retention long enough for
    a past month)."""
    promtool = require_binary("promtool")
    prometheus = require_binary("prometheus")
    data = workdir / "data"
    data.mkdir(parents=True)
    source = workdir / "fleet.om"
    source.write_text(openmetrics(series))
    done = subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(source), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"promtool failed: {done.stderr}")
    config = workdir / "prometheus.yml"
    config.write_text("global:\n  scrape_interval: 1m\n")
    port = free_port()
    argv = [
        prometheus,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        "--storage.tsdb.retention.time=100y",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    return spawn_daemon("prometheus", argv, port, workdir / "prometheus.log")


def gpu_fleet(nodes: int, gpus: int = 8, days: int = 1) -> list[Series]:
    """A bigger past for timing the queries: nodes with `gpus` GPUs each, every GPU allocated to
    a pod, half of them idle; energy series as node b's (fleet())."""
    out = []
    span = days * 86400
    for i in range(nodes):
        node = f"gpu-{i:04d}"
        out += [
            Series(
                "wattprobe_node_energy_joules",
                "counter",
                (*_target("wattprobe", node), ("zone", "package"), ("mode", "active")),
                300,
                last=span,
            ),
            Series(
                "wattprobe_pod_energy_joules",
                "counter",
                (
                    *_target("wattprobe", node),
                    ("zone", "package"),
                    ("mode", "active"),
                    ("namespace", f"team-{i % 7}"),
                    ("pod", f"p{i}"),
                ),
                200,
                last=span,
            ),
            Series("wattprobe_node_pue", "gauge", _target("wattprobe", node), 1.3, last=span),
        ]
        for g in range(gpus):
            uuid = f"GPU-{i:04d}-{g}"
            gpu = (*_target("wattprobe", node), ("gpu", str(g)), ("uuid", uuid))
            out += [
                Series(
                    "wattprobe_gpu_energy_joules",
                    "counter",
                    (*gpu, ("mode", "active")),
                    200,
                    last=span,
                ),
                Series(
                    "wattprobe_gpu_allocation_info",
                    "gauge",
                    (
                        *gpu,
                        ("namespace", f"team-{(i + g) % 7}"),
                        ("pod", f"p{i}-{g}"),
                        ("container", "c"),
                    ),
                    1,
                    last=span,
                ),
                Series("wattprobe_gpu_utilization_ratio", "gauge", gpu, 0.5 * (g % 2), last=span),
            ]
    return out


def bench(argv: list[str]) -> None:
    """python -m tests.support.reportdata NODES [GPUS]: each chunk query's time over one day."""
    import tempfile  # noqa: PLC0415
    import time  # noqa: PLC0415

    from exporter.app.report.fetch import FACTORS, NAMED  # noqa: PLC0415
    from exporter.app.report.promql import Queries  # noqa: PLC0415
    from exporter.app.report.query import Client  # noqa: PLC0415

    nodes, gpus = int(argv[0]), int(argv[1]) if len(argv) > 1 else 8
    with tempfile.TemporaryDirectory() as tmp:
        daemon = start_filled_prometheus(Path(tmp), gpu_fleet(nodes, gpus))
        try:
            client = Client(daemon.url, 600)
            queries = Queries('job="wattprobe"', 86_400_000, 3_600_000)
            at = START + 86400
            print(f"{nodes} nodes x {gpus} GPUs, one day, best of 3 (ms):")
            for name in (*NAMED, *FACTORS):
                expr = (
                    queries.factor("wattprobe_node_pue")
                    if name in FACTORS
                    else getattr(queries, name)()
                )
                times = []
                for _ in range(3):
                    t = time.perf_counter()
                    client.instant(expr, at)
                    times.append(time.perf_counter() - t)
                print(f"  {name:22s} {min(times) * 1000:9.1f}")
        finally:
            daemon.stop()


if __name__ == "__main__":
    import sys

    bench(sys.argv[1:])
