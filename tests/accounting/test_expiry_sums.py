"""What the sums on /metrics are once a container expired (docs/attribution.md, Invariants).

A pod's counter keeps the energy of its containers that ended (counters never go back), and so
does the node's; /metrics has no series for them once --workload.retention is over. Through
`wattprobe serve`: a pod of two containers, one ends. Afterwards, in one scrape, the pod is
more than its live container and the node's active energy more than all live containers; both
are exact again with the final values the ended series had (tests/support/invariants.py).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable

from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.invariants import check_exposition, ended_series
from tests.support.kubeenv import POD_PIDS, ticking
from tests.support.running import ExporterProcess, Samples

POD_UID = "77777777-0000-4000-8000-000000000077"
STAYS, ENDS = "e1" * 32, "e2" * 32
PIDS = {STAYS: 7001, ENDS: 7002}
RETENTION_S = 1.0


def cgroup(container_id: str) -> str:
    pod = POD_UID.replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-besteffort.slice/"
        f"kubepods-besteffort-pod{pod}.slice/cri-containerd-{container_id}.scope\n"
    )


def energy_of(samples: Samples, metric: str, **want: str) -> float:
    return math.fsum(
        v
        for (name, labels), v in samples.items()
        if name == metric and all(dict(labels).get(k) == x for k, x in want.items())
    )


def has_container(samples: Samples, container_id: str) -> bool:
    return any(
        dict(labels).get("container_id") == container_id
        for name, labels in samples
        if name == "wattprobe_container_energy_joules_total"
    )


class Scraper:
    """Scrapes /metrics, remembers the final values of the workload series that went, and
    checks the exact sums (tests/support/invariants.py) on every scrape."""

    def __init__(self, exp: ExporterProcess) -> None:
        self.exp = exp
        self.last: Samples = {}
        self.ended: Samples = {}

    def scrape(self) -> Samples:
        now = self.exp.samples()
        self.ended = ended_series(self.last, now, self.ended)
        check_exposition(now, self.ended)
        self.last = now
        return now

    def until(self, done: Callable[[Samples], bool], timeout: float = 30.0) -> None:
        # every 0.1 s: far more often than the retention, so a series' last value is final
        deadline = time.monotonic() + timeout
        while not done(self.scrape()):
            assert time.monotonic() < deadline, "timed out"
            time.sleep(0.1)


def test_sums_after_a_container_expired(host: FixtureHost, exporter: StartExporter) -> None:
    for container_id, pid in PIDS.items():
        host.add_process(pid, "work", cgroup(container_id), start=9_000 + pid, utime=5)
    exp = exporter(
        *host.args(),
        "--interval",
        "0.2s",
        "--power.idle",
        "1",
        "--workload.retention",
        f"{RETENTION_S}s",
    )
    scraper = Scraper(exp)
    with ticking(host, (*POD_PIDS, *PIDS.values())):
        scraper.until(  # both containers drew energy
            lambda s: all(
                energy_of(s, "wattprobe_container_energy_joules_total", container_id=c) > 0
                for c in PIDS
            )
        )
        host.remove_process(PIDS[ENDS])
        scraper.until(lambda s: not has_container(s, ENDS))
        # a few more intervals, the pod's live container still drawing energy
        stop = time.monotonic() + 1.0
        scraper.until(lambda s: time.monotonic() > stop)
    last, ended = scraper.last, scraper.ended

    ended_by_zone: dict[tuple[str, str], float] = defaultdict(float)
    for (name, labels), value in ended.items():
        lbl = dict(labels)
        if name == "wattprobe_container_energy_joules_total" and lbl["container_id"] == ENDS:
            ended_by_zone[(lbl["zone"], lbl["mode"])] += value
    assert ended_by_zone[("package", "active")] > 0
    for (zone, mode), gone in ended_by_zone.items():
        pod = energy_of(
            last, "wattprobe_pod_energy_joules_total", pod_uid=POD_UID, zone=zone, mode=mode
        )
        live = energy_of(
            last, "wattprobe_container_energy_joules_total", pod_uid=POD_UID, zone=zone, mode=mode
        )
        # one scrape alone does not balance: the pod kept what its ended container drew
        assert pod > live
        assert math.isclose(pod, live + gone, rel_tol=1e-9), (zone, mode, pod, live, gone)
    node = energy_of(last, "wattprobe_node_energy_joules_total", zone="package", mode="active")
    containers = energy_of(
        last, "wattprobe_container_energy_joules_total", zone="package", mode="active"
    )
    assert containers < node
    # the ended series, and only they, make the difference
    with_ended = containers + math.fsum(
        v
        for (name, labels), v in ended.items()
        if name == "wattprobe_container_energy_joules_total"
        and dict(labels).get("zone") == "package"
        and dict(labels).get("mode") == "active"
    )
    assert math.isclose(with_ended, node, rel_tol=1e-9)
