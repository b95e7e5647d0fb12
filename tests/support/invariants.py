"""The attribution invariants of DESIGN.md, checked on a Snapshot or on parsed /metrics."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable

from exporter.model.snapshot import Energy, Snapshot
from tests.support.running import Samples

REL_TOL = 1e-9
ABS_TOL = 1e-9


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=ABS_TOL)


def _by_key(items: Iterable[Energy]) -> dict[tuple[str, str, str], float]:
    out: dict[tuple[str, str, str], float] = defaultdict(float)
    for e in items:
        out[(e.zone, e.gpu, e.mode)] += e.joules
    return out


def _fsum_into(target: dict[tuple[str, str, str], list[float]], items: Iterable[Energy]) -> None:
    for e in items:
        target[(e.zone, e.gpu, e.mode)].append(e.joules)


def _assert_same(
    what: str,
    got: dict[tuple[str, str, str], float],
    parts: dict[tuple[str, str, str], list[float]],
) -> None:
    want = {k: math.fsum(v) for k, v in parts.items()}
    for key in set(want) | set(got):
        assert close(got.get(key, 0.0), want.get(key, 0.0)), f"{what} {key}: {got} != {want}"


def check_snapshot(snap: Snapshot) -> None:
    """Raise AssertionError naming the first invariant that does not hold."""
    # sum over containers (pseudo-containers and dropped ones included) == node, per zone kind
    node_active: dict[str, list[float]] = defaultdict(list)
    for z in snap.node_energy:
        assert z.active_j >= 0 and z.idle_j >= 0, z
        if z.zone in snap.attributed_zones:
            node_active[z.zone].append(z.active_j)
    parts: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for c in snap.containers:
        _fsum_into(parts, c.energy)
    _fsum_into(parts, snap.retired_containers)
    for zone, actives in node_active.items():
        got = math.fsum(parts.get((zone, "", "active"), []))
        assert close(got, math.fsum(actives)), (
            f"zone {zone}: containers {got} != node {math.fsum(actives)}"
        )
    # pod == sum of its containers (+ its dropped containers)
    per_pod: dict[str, dict[tuple[str, str, str], list[float]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for c in snap.containers:
        if c.pod_uid:
            _fsum_into(per_pod[c.pod_uid], c.energy)
    for p in snap.pods:
        _fsum_into(per_pod[p.pod_uid], p.retired_containers)
        _assert_same(f"pod {p.pod_uid}", _by_key(p.energy), per_pod[p.pod_uid])
    # container == sum of its processes (+ dropped processes), when processes are kept
    if snap.processes:
        per_container: dict[tuple[str, str, str], dict[tuple[str, str, str], list[float]]] = (
            defaultdict(lambda: defaultdict(list))
        )
        for pr in snap.processes:
            _fsum_into(per_container[(pr.container_id, pr.pod_uid, pr.container)], pr.energy)
        for c in snap.containers:
            key3 = (c.container_id, c.pod_uid, c.container)
            _fsum_into(per_container[key3], c.retired_processes)
            _assert_same(f"container {key3}", _by_key(c.energy), per_container[key3])


def counter_values(snap: Snapshot) -> dict[tuple[object, ...], float]:
    """Every cumulative value in a snapshot by a stable key, for monotonicity checks."""
    out: dict[tuple[object, ...], float] = {}
    for z in snap.node_energy:
        out[("node", z.zone, z.device, z.source, "active")] = z.active_j
        out[("node", z.zone, z.device, z.source, "idle")] = z.idle_j
    for c in snap.containers:
        for e in c.energy:
            out[("container", c.container_id, c.pod_uid, c.container, e.zone, e.gpu, e.mode)] = (
                e.joules
            )
        out[("cpu", c.container_id, c.pod_uid, c.container)] = c.cpu_seconds
    for p in snap.pods:
        for e in p.energy:
            out[("pod", p.pod_uid, e.zone, e.gpu, e.mode)] = e.joules
    for pr in snap.processes:
        for e in pr.energy:
            out[("process", pr.task, pr.container_id, pr.pod_uid, e.zone, e.gpu, e.mode)] = e.joules
    return out


def check_monotonic(before: Snapshot, after: Snapshot) -> None:
    old = counter_values(before)
    for key, value in counter_values(after).items():
        if key in old:
            assert value >= old[key] - ABS_TOL, f"{key} went backwards: {old[key]} -> {value}"


def ended_series(before: Samples, now: Samples, ended: Samples) -> Samples:
    """ended plus the workload energy series of before that are gone from now, at their last
    value. A workload series goes only after --workload.retention without new energy, so the
    last value a scrape saw is its final one when scrapes come more often than that."""
    out = dict(ended)
    for key, value in before.items():
        if key[0] in WORKLOAD_ENERGY and key not in now:
            out[key] = value
    return out


WORKLOAD_ENERGY = (
    "wattprobe_container_energy_joules_total",
    "wattprobe_pod_energy_joules_total",
    "wattprobe_process_energy_joules_total",
)


def check_exposition(samples: Samples, ended: Samples | None = None) -> None:
    """Sum checks on live /metrics: per zone containers == node, pods == their containers.

    /metrics has no series for the energy of workloads that expired, while the node's and a
    pod's counters keep it (counters never go back). So, in one scrape, the sums hold exactly
    only with `ended` (the final values of the workload series gone since the start, see
    ended_series); without it they hold until the first container expires.
    """
    ended = ended or {}
    node: dict[str, float] = defaultdict(float)
    for (name, labels), value in samples.items():
        lbl = dict(labels)
        if name == "wattprobe_node_energy_joules_total" and lbl["mode"] == "active":
            node[lbl["zone"]] += value
    containers: dict[tuple[str, str], float] = defaultdict(float)
    pods_from_containers: dict[tuple[str, str, str, str], float] = defaultdict(float)
    pods: dict[tuple[str, str, str, str], float] = {}
    # (pod_uid, zone, gpu, mode)
    for source in (samples, ended):
        for (name, labels), value in source.items():
            lbl = dict(labels)
            if name == "wattprobe_container_energy_joules_total":
                if lbl["mode"] == "active":
                    containers[(lbl["zone"], lbl.get("gpu", ""))] += value
                if lbl["pod_uid"]:
                    key = (lbl["pod_uid"], lbl["zone"], lbl.get("gpu", ""), lbl["mode"])
                    pods_from_containers[key] += value
            elif name == "wattprobe_pod_energy_joules_total" and source is samples:
                pods[(lbl["pod_uid"], lbl["zone"], lbl.get("gpu", ""), lbl["mode"])] = value
    for (zone, gpu), total in containers.items():
        if not gpu:
            assert math.isclose(total, node[zone], rel_tol=1e-9), (
                f"zone {zone}: containers {total} != node {node[zone]}"
            )
    # pods with a series or a live container here; a pod known only from ended series expired
    live_pods = {key[0] for key in pods} | {
        dict(labels).get("pod_uid", "")
        for name, labels in samples
        if name == "wattprobe_container_energy_joules_total"
    }
    for key, total in pods_from_containers.items():
        if key[0] not in live_pods:
            continue  # the pod expired too: its series went with its containers'
        assert math.isclose(pods.get(key, 0.0), total, rel_tol=1e-9), (
            f"pod {key}: {pods.get(key)} != {total}"
        )
    assert set(pods) == {k for k in pods_from_containers if k[0] in live_pods}, (
        "pods without containers or the reverse"
    )
