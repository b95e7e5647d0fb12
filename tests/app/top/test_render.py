"""`top`'s screen fits the terminal: exactly its height, never wider, whatever the node holds."""

from __future__ import annotations

import io
import time

import pytest
from rich.console import Console, RenderableType

from exporter.app.top.frame import Frame, SortKey, View, frame_between
from exporter.app.top.render import MIN_WORKLOAD_ROWS, Screen, render
from exporter.app.top.scrape import from_snapshot
from exporter.model.readings import SourceStatus
from exporter.model.snapshot import ContainerCounters, NodeZoneEnergy
from tests.app.top.snapshots import container, gpu, snapshot


def screen_lines(renderable: RenderableType, width: int, height: int) -> list[str]:
    console = Console(
        width=width, height=height, file=io.StringIO(), record=True, color_system=None
    )
    console.print(renderable)
    return console.export_text().rstrip("\n").split("\n")


def make_frame(*, gpus: int, pods: int, zones: int, estimated: bool = False) -> Frame:
    def node(scale: float) -> tuple[NodeZoneEnergy, ...]:
        source = "estimated" if estimated else "hwmon"
        return tuple(
            NodeZoneEnergy(f"sensor_with_a_long_name_{i}", f"hwmon{i}", source, scale * i, scale)
            for i in range(zones)
        )

    def workloads(scale: float) -> list[ContainerCounters]:
        return [
            container(
                i,
                {
                    ("sensor_with_a_long_name_1", ""): scale * i,
                    ("gpu", str(i % max(gpus, 1))): scale * i,
                },
                scale,
                pod_uid=f"{i:08x}-0000-4000-8000-000000000000",
                name="a-container-name-that-goes-on-and-on",
                pod=f"inference-server-with-a-very-long-generated-name-{i}",
                namespace="a-long-namespace-name",
            )
            for i in range(pods)
        ] + [
            container(250, {("sensor_with_a_long_name_1", ""): scale}, 1.0, name="system_processes")
        ]

    before = snapshot(
        1,
        100.0,
        node=node(1.0),
        containers=workloads(1.0),
        gpus=[gpu(i, 10.0) for i in range(gpus)],
    )
    after = snapshot(
        2,
        102.0,
        node=node(3.0),
        containers=workloads(2.0),
        gpus=[gpu(i, 20.0 * (i + 1), lost=i == 3) for i in range(gpus)],
        sources=(
            SourceStatus("procfs", True),
            SourceStatus("rapl", False, "permission denied"),
            SourceStatus("nvml", gpus > 0, "" if gpus else "absent"),
        ),
    )
    frame = frame_between(from_snapshot(before, 0.0), from_snapshot(after, 0.0))
    assert frame is not None
    return frame


SIZES = [(80, 24), (100, 30), (200, 60)]
# (GPUs, pods, zones, estimated)
NODES = [
    (0, 3, 1, False),
    (8, 40, 6, False),
    (64, 300, 20, False),
    (1, 0, 0, False),
    (0, 2, 1, True),
]


@pytest.mark.parametrize(("width", "height"), SIZES)
@pytest.mark.parametrize("node", NODES)
@pytest.mark.parametrize("problem", ["", "cannot read http://x/metrics: connection refused"])
def test_screen_is_exactly_the_terminal_size(
    width: int, height: int, node: tuple[int, int, int, bool], problem: str
) -> None:
    gpus, pods, zones, estimated = node
    frame = make_frame(gpus=gpus, pods=pods, zones=zones, estimated=estimated)
    screen = Screen("this node", problem=problem)
    lines = screen_lines(render(frame, screen, frame.sources, width, height), width, height)
    assert len(lines) == height, "\n".join(lines)
    assert max(len(line) for line in lines) <= width
    assert lines[0].startswith("wattprobe top")
    assert lines[-1].lstrip().startswith("c  CPU W")
    assert lines[-2 - bool(problem)].startswith("sources:")
    if problem:
        assert lines[-2] == problem
    text = "\n".join(lines)
    if gpus > 8:
        assert "more GPUs" in text  # GPUs were cut, and it says so
        pods_shown = [line for line in lines if line.startswith("inference-")]
        assert len(pods_shown) >= min(pods, MIN_WORKLOAD_ROWS) - 1
    if estimated:
        assert "ESTIMATED" in text


def test_a_tall_node_on_a_small_terminal_keeps_the_important_rows() -> None:
    frame = make_frame(gpus=8, pods=40, zones=6)
    lines = screen_lines(render(frame, Screen("this node"), frame.sources, 80, 24), 80, 24)
    text = "\n".join(lines)
    # the pod with the most CPU power is first, and the cut is announced
    first_pod = next(line for line in lines if line.startswith("inference-"))
    assert "-name-39 " in first_pod
    assert "more" in text
    assert "rapl FAIL (permission denied)" in text  # failures first, with the reason
    assert "LOST" in text  # GPU 3


def test_sort_and_view_change_the_rows() -> None:
    frame = make_frame(gpus=2, pods=5, zones=2)

    def first_row(screen: Screen) -> str:
        lines = screen_lines(render(frame, screen, frame.sources, 100, 30), 100, 30)
        header = next(i for i, line in enumerate(lines) if line.startswith(("POD ", "CONTAINER ")))
        return lines[header + 1]

    by_cpu = first_row(Screen("x", sort=SortKey.CPU))
    by_name = first_row(Screen("x", sort=SortKey.NAME))
    assert "generated-name-4" in by_cpu  # the most CPU energy
    assert by_name.startswith("system_processes")  # no namespace sorts first
    containers = first_row(Screen("x", view=View.CONTAINERS))
    assert containers.startswith("inference-server-") and "-goes-on-and-on " in containers


def test_the_waiting_screen_fits_too() -> None:
    screen = Screen("this node", waiting="measuring the first interval (0.4s of ~2s)")
    lines = screen_lines(render(None, screen, (), 80, 24), 80, 24)
    assert len(lines) == 24
    assert any("measuring the first interval (0.4s of ~2s)..." in line for line in lines)


@pytest.mark.parametrize("width", [60, 80, 100, 200])
@pytest.mark.parametrize(
    "source",
    [
        "this node",
        "http://gpu-node-17.us-east1-b.c.a-long-project.internal:28390/metrics",
    ],
)
def test_the_header_keeps_the_time_at_any_width(width: int, source: str) -> None:
    """`top --from URL` at 80 columns: the URL gives way, the time of the frame stays."""
    frame = make_frame(gpus=1, pods=3, zones=1)
    lines = screen_lines(render(frame, Screen(source), frame.sources, width, 24), width, 24)
    clock = time.strftime("%H:%M:%S", time.localtime(frame.wall_time))
    assert lines[0].rstrip().endswith(clock), lines[0]
    assert len(lines[0]) <= width
    assert lines[0].startswith("wattprobe top  ")
    if len(source) + 40 <= width:
        assert source in lines[0] and "avg over" in lines[0]  # room: nothing is cut
    else:
        # cut in the middle: the host's start and the port/path end still say which node
        assert "\u2026" in lines[0] and "http://gpu-" in lines[0] and "/metrics " in lines[0], (
            lines[0]
        )
