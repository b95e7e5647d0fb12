"""`top`'s active and idle columns, from two known /metrics pages: a pod holding a GPU and
billed its idle energy, a pod billed CPU idle (--attribution.idle activity), one billed none."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from exporter.app.top.frame import Frame, SortKey, View, frame_between, sort_rows
from exporter.app.top.render import Screen, render
from exporter.app.top.scrape import from_text

TRAIN = "11111111-aaaa-4bbb-8ccc-000000000001"
WEB = "22222222-aaaa-4bbb-8ccc-000000000002"
BATCH = "33333333-aaaa-4bbb-8ccc-000000000003"
C1, C2, C3 = "c1" * 32, "c2" * 32, "c3" * 32


# (pod_uid, pod, container_id, zone, gpu, mode, key of the joules)
SERIES = (
    (TRAIN, "train", C1, "package", "", "active", "train_pkg"),
    (TRAIN, "train", C1, "gpu", "0", "active", "train_gpu"),
    (TRAIN, "train", C1, "gpu", "0", "idle", "train_gpu_idle"),
    (WEB, "web", C2, "package", "", "active", "web_pkg"),
    (WEB, "web", C2, "package", "", "idle", "web_pkg_idle"),
    # holds GPU 1 and never used it: all of its GPU energy is billed idle
    (BATCH, "batch", C3, "gpu", "1", "idle", "batch_gpu_idle"),
)


def page(t: float, seq: int, j: dict[str, float]) -> str:
    """One exposition as the exporter writes it; j holds the cumulative joules by key."""
    lines = [
        "# TYPE wattprobe_intervals_total counter",
        f"wattprobe_intervals_total {seq}",
        "# TYPE wattprobe_last_interval_timestamp_seconds gauge",
        f"wattprobe_last_interval_timestamp_seconds {t}",
        "# TYPE wattprobe_node_energy_joules counter",
    ]
    for mode in ("active", "idle"):
        lines.append(
            'wattprobe_node_energy_joules_total{zone="package",device="intel-rapl:0",'
            f'source="rapl",mode="{mode}"}} {j["node_" + mode]}'
        )
    for family, container in (("pod", False), ("container", True)):
        lines.append(f"# TYPE wattprobe_{family}_energy_joules counter")
        for uid, pod, cid, zone, gpu, mode, key in SERIES:
            labels = f'zone="{zone}",mode="{mode}",'
            if container:
                labels += f'container_id="{cid}",container="main",'
            labels += f'pod="{pod}",namespace="ml",pod_uid="{uid}"'
            labels += f',gpu="{gpu}"' if gpu else ""
            lines.append(f"wattprobe_{family}_energy_joules_total{{{labels}}} {j[key]}")
    return "\n".join([*lines, "# EOF"]) + "\n"


BEFORE = {
    "node_active": 1000.0,
    "node_idle": 500.0,
    "train_pkg": 100.0,
    "train_gpu": 5000.0,
    "train_gpu_idle": 300.0,
    "web_pkg": 50.0,
    "web_pkg_idle": 20.0,
    "batch_gpu_idle": 400.0,
}
# 4 s later: train +40 J package, +2400 J GPU active, +120 J GPU idle; web +20 J package active,
# +8 J package idle; batch +240 J idle on GPU 1
AFTER = {
    "node_active": 1060.0,
    "node_idle": 540.0,
    "train_pkg": 140.0,
    "train_gpu": 7400.0,
    "train_gpu_idle": 420.0,
    "web_pkg": 70.0,
    "web_pkg_idle": 28.0,
    "batch_gpu_idle": 640.0,
}


@pytest.fixture
def frame() -> Frame:
    before = from_text(page(1000.0, 10, BEFORE), 0.0)
    after = from_text(page(1004.0, 14, AFTER), 0.0)
    got = frame_between(before, after)
    assert got is not None
    return got


def test_active_and_billed_idle_per_pod_from_a_known_page(frame: Frame) -> None:
    pods = {r.name: r for r in frame.pods}
    assert set(pods) == {"train", "web", "batch"}
    train, web, batch = pods["train"], pods["web"], pods["batch"]
    # watts: (CPU active, CPU idle billed, GPU active, GPU idle billed)
    watts = {name: [r.cpu_w, r.cpu_idle_w, r.gpu_w, r.gpu_idle_w] for name, r in pods.items()}
    assert watts["train"] == pytest.approx([10.0, 0.0, 600.0, 30.0])
    assert watts["web"] == pytest.approx([5.0, 2.0, 0.0, 0.0])
    assert watts["batch"] == pytest.approx([0.0, 0.0, 0.0, 60.0])
    # a GPU billed only as idle is still one the pod holds
    assert (train.gpus, web.gpus, batch.gpus) == (("0",), (), ("1",))
    # the container view carries the same numbers (one container per pod here)
    containers = {r.name: r for r in frame.rows(View.CONTAINERS)}
    assert containers["train/main"].idle_w == pytest.approx(train.idle_w)
    # active rows add up to the node's active power in the CPU zone; idle billed is apart
    assert sum(r.cpu_w for r in frame.pods) == pytest.approx(
        next(z for z in frame.zones if z.zone == "package").watts
        - next(z for z in frame.zones if z.zone == "package").idle_watts
    )


def test_idle_sort_puts_the_biggest_idle_bill_first(frame: Frame) -> None:
    assert [r.name for r in sort_rows(frame.pods, SortKey.IDLE)] == ["batch", "train", "web"]


def test_the_screen_shows_active_and_idle_columns(frame: Frame) -> None:
    console = Console(width=80, height=24, file=io.StringIO(), record=True, color_system=None)
    console.print(render(frame, Screen("x", sort=SortKey.IDLE), frame.sources, 80, 24))
    lines = console.export_text().split("\n")
    header = next(line for line in lines if line.startswith("POD "))
    cols = ["POD", "NAMESPACE", "CPU W", "GPU W", "IDLE W", "CPUS", "GPUS"]
    starts = [header.index(c) for c in cols]
    assert starts == sorted(starts)
    rows = {
        line.split()[0]: line.split()
        for line in lines
        if line.startswith(("train ", "web ", "batch "))
    }
    # name, namespace, CPU W, GPU W, IDLE W, CPUS, GPUS
    assert rows["batch"] == ["batch", "ml", "0.0", "0.0", "60.0", "0.00", "1"]
    assert rows["train"] == ["train", "ml", "10.0", "600.0", "30.0", "0.00", "0"]
    assert rows["web"] == ["web", "ml", "5.0", "-", "2.0", "0.00", "-"]
