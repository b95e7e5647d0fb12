"""The /proc source per cgroup (exporter/sources/activity/procfs/cgrouptree.py) against the
kernel's own
bookkeeping in fixture trees (tests/support/cgroupnode.py), and against the per-process path."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.host.cgroupfs.classify import classify_cgroup, classify_task
from exporter.host.procstat import CLOCK_TICKS
from exporter.model.identity import KERNEL, SYSTEM, ContainerRef
from exporter.model.readings import SourceError, TaskKey, TaskSample
from exporter.sources.activity.procfs import cgrouptree
from exporter.sources.activity.procfs.cgrouptree import (
    CGROUP_PID,
    HOST_KEY,
    LINGER_SCANS,
    REST_KEY,
    CgroupTree,
    Hierarchy,
    busy_ns_from,
)
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.support.cgroupnode import CgroupNode, cpu_stat
from tests.support.fixturehost import write_atomic

SYSTEMD = "/system.slice/systemd-journald.service"
# these fixtures write read skews of several ticks while no time passes; a real walk's skew is
# bounded by how long its reads took (cgrouptree._quiet_pods)
FIXTURE_SKEW_NS = 200_000_000
KUBELET = "/system.slice/kubelet.service"


class Credit:
    """What the monitor credits per bucket: per key, the increase of its value (all of it for
    a key not seen the interval before); the first interval is a baseline."""

    def __init__(self) -> None:
        self.prev: dict[TaskKey, float] | None = None
        self.total: dict[ContainerRef, float] = {}

    def take(self, tasks: Sequence[TaskSample]) -> None:
        if self.prev is not None:
            for t in tasks:
                delta = t.cpu_seconds - self.prev.get(t.key, 0.0)
                assert delta >= -1e-9, f"{t} went back"
                if delta > 0:
                    ref = classify_task(t.cgroup, t.kernel_thread)
                    self.total[ref] = self.total.get(ref, 0.0) + delta
        self.prev = {t.key: t.cpu_seconds for t in tasks}

    def nonzero(self) -> dict[ContainerRef, float]:
        return {r: v for r, v in self.total.items() if v > 1e-9}


def per_cgroup(node: CgroupNode) -> ProcfsSource:
    source = ProcfsSource(node.procfs, cgroupfs=node.cgroupfs, per_process=False)
    assert source.per_cgroup
    return source


def per_process(node: CgroupNode) -> ProcfsSource:
    return ProcfsSource(node.procfs, cgroupfs=node.cgroupfs, recheck_every=1, per_process=True)


def approx(d: dict[ContainerRef, float]) -> dict[ContainerRef, object]:
    return {k: pytest.approx(v, abs=1e-6) for k, v in d.items()}


def simple_node(tmp_path: Path, *, hybrid: bool = False) -> tuple[CgroupNode, str, list[str]]:
    node = CgroupNode(tmp_path, hybrid=hybrid)
    for path in (SYSTEMD, KUBELET, "/init.scope"):
        node.mkdir(path)
    pod = node.new_pod()
    containers = [node.new_container(pod), node.new_container(pod)]
    return node, pod, containers


# -- the rules, one at a time ------------------------------------------------------------------


def test_containers_system_and_kernel_from_cgroup_totals_without_reading_processes(
    tmp_path: Path,
) -> None:
    node, _pod, (a, b) = simple_node(tmp_path)
    pa, pb, svc = node.start(a), node.start(b), node.start(KUBELET)
    kthread = node.start("", kernel=True)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    node.run(pa, 300)
    node.run(pb, 100)
    node.short_lived(a, 50)  # never in /proc
    node.run(svc, 20)
    node.run(kthread, 7)
    for p in [p for p in node.procs.values() if not p.kernel]:
        node.exit(p)  # no process file but kernel threads' is read: remove the others
    node.write()
    credit.take(source.tasks())
    assert credit.nonzero() == approx(node.truth_s())
    assert credit.total[classify_cgroup(a)] == pytest.approx(3.5)
    assert credit.total[SYSTEM] == pytest.approx(0.2)
    assert credit.total[KERNEL] == pytest.approx(0.07)


def test_first_walk_is_a_baseline_and_a_new_container_counts_in_full(tmp_path: Path) -> None:
    node, pod, (a, _b) = simple_node(tmp_path)
    node.run(node.start(a), 500)  # history before the exporter started
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    c = node.new_container(pod)
    node.run(node.start(c), 40)  # made and ran since the last walk
    node.write()
    credit.take(source.tasks())
    assert credit.nonzero() == approx({classify_cgroup(c): 0.4})


def test_a_new_cgroup_with_more_history_than_the_interval_allows_is_a_baseline(
    tmp_path: Path,
) -> None:
    node, pod, _ = simple_node(tmp_path)
    node.write()
    source = ProcfsSource(node.procfs, cgroupfs=node.cgroupfs, per_process=False)
    credit = Credit()
    credit.take(source.tasks())
    c = node.new_container(pod)
    node.run(node.start(c), 1000 * CLOCK_TICKS)  # 1,000 s: not made since the last walk
    node.write()
    credit.take(source.tasks())
    assert classify_cgroup(c) not in credit.nonzero()


def test_a_removed_container_keeps_its_total_and_its_last_work_goes_to_its_pod(
    tmp_path: Path,
) -> None:
    node, pod, (a, _b) = simple_node(tmp_path)
    pa = node.start(a)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    node.run(pa, 100)
    node.write()
    credit.take(source.tasks())
    # it runs 30 ticks more, exits, and its cgroup is removed before the next read
    node.run(pa, 30)
    node.exit(pa)
    node.rmdir(a)
    node.write()
    tasks = source.tasks()
    credit.take(tasks)
    ref_a, ref_pod = classify_cgroup(a), classify_cgroup(pod)
    assert credit.total[ref_a] == pytest.approx(1.0)
    assert credit.total[ref_pod] == pytest.approx(0.3)  # the kernel left it in the pod's total
    # the bucket stays (its counter never goes back) for a while, then is forgotten
    assert any(classify_task(t.cgroup, False) == ref_a for t in tasks)
    for _ in range(LINGER_SCANS):
        node.write()
        tasks = source.tasks()
        credit.take(tasks)
    assert not any(classify_task(t.cgroup, False) == ref_a for t in tasks)
    assert credit.total[ref_a] == pytest.approx(1.0)


def test_a_cgroup_made_again_under_the_same_path_counts_from_zero(tmp_path: Path) -> None:
    node, _pod, (a, _b) = simple_node(tmp_path)
    node.run(node.start(a), 900)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    for p in [p for p in node.procs.values() if p.cgroup == a]:
        node.exit(p)
    node.rmdir(a)
    node.mkdir(a)
    node.run(node.start(a), 20)
    node.write()
    credit.take(source.tasks())
    assert credit.total[classify_cgroup(a)] == pytest.approx(0.2)


def test_a_docker_container_below_system_slice_is_taken_out_of_system(tmp_path: Path) -> None:
    node = CgroupNode(tmp_path)
    docker = "/system.slice/docker-" + "d" * 64 + ".scope"
    node.mkdir(KUBELET)
    node.mkdir(docker)
    svc, dock = node.start(KUBELET), node.start(docker)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    node.run(svc, 10)
    node.run(dock, 90)
    node.write()
    credit.take(source.tasks())
    assert credit.nonzero() == approx({SYSTEM: 0.1, classify_cgroup(docker): 0.9})


def test_a_read_skew_is_a_debt_never_a_negative_credit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cgrouptree, "SKEW_SLACK_NS", FIXTURE_SKEW_NS)
    node, pod, (a, _b) = simple_node(tmp_path)
    pa = node.start(a)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    # the container's file shows 10 ticks its pod's does not show yet
    node.run(pa, 50)
    node.write()
    pod_file = node.v2 / pod.lstrip("/") / "cpu.stat"
    write_atomic(pod_file, cpu_stat(node.usage[pod] - 10))
    credit.take(source.tasks())
    node.write()  # the pod's total catches up, and 10 ticks more ran directly in the pod
    credit.take(source.tasks())
    assert credit.total.get(classify_cgroup(pod), 0.0) == pytest.approx(0.0)
    assert credit.total[classify_cgroup(a)] == pytest.approx(0.5)


def test_the_root_total_is_never_read_and_processes_in_the_root_are_system(
    tmp_path: Path,
) -> None:
    node, _pod, _ = simple_node(tmp_path)
    in_root = node.start("/")
    kthread = node.start("", kernel=True)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())  # the root's cpu.stat is garbage: it must not be parsed
    node.run(in_root, 25)
    node.run(kthread, 5)
    node.interrupts(3)
    node.write()
    credit.take(source.tasks())
    assert credit.nonzero() == approx({SYSTEM: 0.25, KERNEL: 0.08})


def test_a_host_with_everything_in_the_root_cgroup(tmp_path: Path) -> None:
    """No systemd slices (this CI host's layout): userland, kernel threads and interrupts all
    in the root; host work is system_processes, kernel work kernel_processes, the pod its own."""
    node = CgroupNode(tmp_path)
    pod = node.new_pod()
    c = node.new_container(pod)
    users = [node.start("/") for _ in range(5)]
    kthreads = [node.start("", kernel=True) for _ in range(3)]
    pc = node.start(c)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    for i in range(4):
        for j, p in enumerate(users):
            node.run(p, 10 + i + j)
        for p in kthreads:
            node.run(p, 2)
        node.run(pc, 30)
        node.short_lived("/", 4)  # a root process no read sees
        node.interrupts(1 + i)
        if i == 1:
            node.exit(users.pop())  # its time stays in the node's busy total
            users.append(node.start("/"))
        node.write()
        credit.take(source.tasks())
    assert credit.nonzero() == approx(node.truth_s())
    assert credit.total[SYSTEM] > 5 * credit.total[KERNEL] > 0


def test_without_the_root_cgroup_procs_the_rest_stays_kernel(tmp_path: Path) -> None:
    """The kernel's part cannot be read: all of the rest is kernel_processes, as before."""
    node, _pod, _ = simple_node(tmp_path)
    in_root = node.start("/")
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    node.run(in_root, 25)
    node.write()
    (node.v2 / "cgroup.procs").unlink()
    credit.take(source.tasks())
    assert credit.nonzero() == approx({KERNEL: 0.25})


def test_no_phantom_pod_own_time_from_read_skew(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pod's file shows work its container's read did not (it was read a moment later):
    nothing ran in the pod cgroup, its containers get that time at their next read."""
    monkeypatch.setattr(cgrouptree, "SKEW_SLACK_NS", FIXTURE_SKEW_NS)
    node, pod, (a, _b) = simple_node(tmp_path)
    pa = node.start(a)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    a_file = node.v2 / a.lstrip("/") / "cpu.stat"
    for _ in range(3):
        node.run(pa, 50)
        node.write()
        write_atomic(a_file, cpu_stat(node.usage[a] - 7))  # read 7 ticks before the pod
        credit.take(source.tasks())
    node.write()
    credit.take(source.tasks())
    assert classify_cgroup(pod) not in credit.nonzero()
    assert credit.nonzero() == approx(node.truth_s())


def test_a_container_made_and_removed_between_two_walks_is_its_pods_time(
    tmp_path: Path,
) -> None:
    """No walk saw it: the kernel left its time in the pod's total, which is more than read
    skew can be, so the pod keeps it (it was once taken for skew and lost to every bucket)."""
    node, pod, (a, _b) = simple_node(tmp_path)
    pa = node.start(a)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    node.run(pa, 20)
    brief = node.new_container(pod)
    node.short_lived(brief, 30)
    node.rmdir(brief)
    node.write()
    credit.take(source.tasks())
    truth = node.truth_s()
    assert credit.total[classify_cgroup(pod)] == pytest.approx(0.3)
    assert credit.total[classify_cgroup(a)] == pytest.approx(0.2)
    assert sum(credit.nonzero().values()) == pytest.approx(sum(truth.values()))


def test_a_process_in_the_pod_cgroup_is_the_pods_own_time(tmp_path: Path) -> None:
    node, pod, (a, _b) = simple_node(tmp_path)
    pa, in_pod = node.start(a), node.start(pod)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    node.run(pa, 50)
    node.run(in_pod, 12)
    node.write()
    credit.take(source.tasks())
    assert credit.nonzero() == approx(node.truth_s())
    assert credit.total[classify_cgroup(pod)] == pytest.approx(0.12)


def test_a_hybrid_hosts_v1_only_containers_are_taken_from_the_rest(tmp_path: Path) -> None:
    """cgroupfs driver on a hybrid host: the container is in the v1 cpuacct tree only, its
    processes in the v2 root."""
    node, _pod, (a, _b) = simple_node(tmp_path, hybrid=True)
    v1 = node.cgroupfs / "cpuacct"
    v1_pod = "/kubepods/burstable/pod2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e"
    v1_ctr = f"{v1_pod}/{'e' * 64}"
    (v1 / v1_ctr.lstrip("/")).mkdir(parents=True)
    (v1 / "cpuacct.usage").write_text("999999999999\n")

    def set_v1(ns: int) -> None:
        for path in ("/kubepods", "/kubepods/burstable", v1_pod, v1_ctr):
            write_atomic(v1 / path.lstrip("/") / "cpuacct.usage", f"{ns}\n")

    hidden = node.start("/")  # v2 sees it in the root
    pa = node.start(a)
    set_v1(5 * 10**9)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    node.run(hidden, 60)
    node.run(pa, 20)
    set_v1(5 * 10**9 + 600_000_000)
    node.write()
    credit.take(source.tasks())
    assert credit.nonzero() == approx({classify_cgroup(v1_ctr): 0.6, classify_cgroup(a): 0.2})


def test_a_v1_host_is_walked_in_cpuacct(tmp_path: Path) -> None:
    root = tmp_path / "cgroup"
    v1 = root / "cpu,cpuacct"
    ctr = f"/kubepods/pod2b3c4d5e-6f7a-4b8c-9d0e-1f2a3b4c5d6e/crio-{'f' * 64}"
    (v1 / ctr.lstrip("/")).mkdir(parents=True)
    (v1 / "system.slice").mkdir()
    (tmp_path / "proc").mkdir()
    usage = {"": 10**12, "/kubepods": 0, ctr.rsplit("/", 1)[0]: 0, ctr: 0, "/system.slice": 0}

    def write(busy_ticks: int) -> None:
        for path, ns in usage.items():
            write_atomic(v1 / path.lstrip("/") / "cpuacct.usage", f"{ns}\n")
        write_atomic(tmp_path / "proc" / "stat", f"cpu  {busy_ticks} 0 0 100 0 0 0 0\n")

    write(0)
    source, credit = ProcfsSource(tmp_path / "proc", cgroupfs=root, per_process=False), Credit()
    credit.take(source.tasks())
    for path in ("/kubepods", ctr.rsplit("/", 1)[0], ctr):
        usage[path] = 3 * 10**9
    usage["/system.slice"] = 10**9
    write(5 * CLOCK_TICKS)
    credit.take(source.tasks())
    assert credit.nonzero() == approx({classify_cgroup(ctr): 3.0, SYSTEM: 1.0, KERNEL: 1.0})


def test_keys_are_their_own_namespace(tmp_path: Path) -> None:
    node, _pod, (_a, _b) = simple_node(tmp_path)
    node.write()
    tasks = per_cgroup(node).tasks()
    keys = [t.key for t in tasks]
    assert len(set(keys)) == len(keys)
    assert REST_KEY in keys
    assert all(t.pid == 0 for t in tasks)
    assert HOST_KEY in keys
    assert all(k[0] == CGROUP_PID for k in keys if k not in (REST_KEY, HOST_KEY))


def test_busy_excludes_steal() -> None:
    text = "cpu  100 2 30 5000 40 5 6 700 0 0\ncpu0 1 1 1 1 1 1 1 1\n"
    assert busy_ns_from(text, 100) == (100 + 2 + 30 + 5 + 6) * 10**7
    with pytest.raises(ValueError):
        busy_ns_from("cpu0 1 2 3\n", 100)


def test_cost_grows_with_cgroups_not_processes(tmp_path: Path) -> None:
    node, _pod, (a, _b) = simple_node(tmp_path)
    source = per_cgroup(node)
    node.write()
    source.tasks()
    tree = source._tree
    assert isinstance(tree, CgroupTree)
    # system.slice, init.scope, kubepods.slice, the pod, its two containers: not the services
    # or the QoS slice (the same bucket as their parent)
    assert tree.reads == 6
    for _ in range(200):
        node.start(a)
    node.write()
    source.tasks()
    assert tree.reads == 12


def test_hierarchy_walk_tracks_bucket_changes_only(tmp_path: Path) -> None:
    node, pod, (a, b) = simple_node(tmp_path)
    node.mkdir(f"{a}/nested")
    nodes = Hierarchy("v2", str(node.v2)).walk(None)
    paths = {n.path for n in nodes}
    assert paths == {"/system.slice", "/init.scope", "/kubepods.slice", pod, a, b}


# -- a churning node: per cgroup == the kernel == per process ---------------------------------


def churn(node: CgroupNode, rng: random.Random, pods: list[str], moves: bool) -> None:
    """One interval: processes run, exit, start; short-lived ones; containers made and, an
    interval after their last process, removed; processes moved between cgroups."""
    live = [p for p in node.procs.values()]
    for p in live:
        if rng.random() < 0.6:
            node.run(p, rng.randrange(0, 15))
    # processes in the root cgroup do not exit here: the per-process path cannot see the last
    # work of one that did (no cgroup total below the root holds it); per cgroup it is exact
    # (test_a_host_with_everything_in_the_root_cgroup)
    user = [p for p in live if not p.kernel and p.cgroup != "/"]
    for p in rng.sample(user, k=min(len(user), rng.randrange(0, 3))):
        node.run(p, rng.randrange(1, 10))  # its last work before it exits
        node.exit(p)
    containers = node.containers()
    for _ in range(rng.randrange(0, 3)):
        node.short_lived(rng.choice(containers), rng.randrange(1, 20))
    for _ in range(rng.randrange(0, 3)):
        where = rng.choice([*containers, KUBELET, SYSTEMD, "/"])
        node.run(node.start(where), rng.randrange(0, 10))
    node.interrupts(rng.randrange(0, 4))
    if rng.random() < 0.3:
        c = node.new_container(rng.choice(pods))
        node.run(node.start(c), rng.randrange(0, 20))
    empty = node.removable()
    if empty and rng.random() < 0.5:
        node.rmdir(rng.choice(empty))  # read once empty before: nothing of it is lost
    user = [p for p in node.procs.values() if not p.kernel]
    if moves and user and rng.random() < 0.5:
        p = rng.choice(user)
        node.run(p, rng.randrange(1, 10))  # in its old cgroup, then moved
        node.move(p, rng.choice([*node.containers(), KUBELET]))
        node.run(p, rng.randrange(1, 10))
    node.write()


def churning(seed: int, intervals: int, moves: bool) -> tuple[CgroupNode, Credit, Credit]:
    rng = random.Random(seed)
    node = CgroupNode(Path(tempfile.mkdtemp(dir=ROOT)))
    for path in (SYSTEMD, KUBELET, "/init.scope"):
        node.mkdir(path)
    for _ in range(3):
        node.start(rng.choice((SYSTEMD, KUBELET)))
        node.start("", kernel=True)
    pods = [node.new_pod() for _ in range(3)]
    for pod in pods:
        for _ in range(2):
            c = node.new_container(pod)
            for _ in range(rng.randrange(1, 4)):
                node.run(node.start(c), rng.randrange(0, 1000))
    node.write()
    cgroup_source, process_source = per_cgroup(node), per_process(node)
    by_cgroup, by_process = Credit(), Credit()
    by_cgroup.take(cgroup_source.tasks())
    by_process.take(process_source.tasks())
    node.truth = {}  # the baseline: what ran before it is no one's this run
    for _ in range(intervals):
        churn(node, rng, pods, moves)
        by_cgroup.take(cgroup_source.tasks())
        by_process.take(process_source.tasks())
    return node, by_cgroup, by_process


ROOT = tempfile.mkdtemp(prefix="wattprobe-cgrouptree-")


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), intervals=st.integers(1, 8))
def test_per_cgroup_equals_per_process_and_the_kernel_on_a_churning_node(
    seed: int, intervals: int
) -> None:
    node, by_cgroup, by_process = churning(seed, intervals, moves=False)
    truth = node.truth_s()
    assert by_cgroup.nonzero() == approx(truth)
    # per process, interrupts are no task's time: their energy follows the tasks' shares
    truth[KERNEL] = truth.get(KERNEL, 0.0) - node.irq / CLOCK_TICKS
    assert by_process.nonzero() == approx({r: v for r, v in truth.items() if v > 1e-9})


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), intervals=st.integers(1, 8))
def test_per_cgroup_is_exact_when_processes_move_between_cgroups(seed: int, intervals: int) -> None:
    """A process moved without exec'ing: the kernel charges each cgroup what ran there, and so
    does the per-cgroup path. (The per-process path credits the new cgroup with the whole
    interval, carrying the excess as a debt, and never reads a cgroup that held no live process
    at a read: it can be off either way here, which is why it is not compared.)"""
    node, by_cgroup, _by_process = churning(seed, intervals, moves=True)
    truth = node.truth_s()
    assert by_cgroup.nonzero() == approx(truth)


def test_a_cgroup_root_that_cannot_be_listed_is_a_read_error(tmp_path: Path) -> None:
    node, _pod, _ = simple_node(tmp_path)
    node.write()
    source = per_cgroup(node)
    source.tasks()
    moved = tmp_path / "elsewhere"
    node.v2.rename(moved)  # unmounted under the exporter
    with pytest.raises(SourceError) as err:
        source.tasks()
    assert err.value.reason == "read error" and str(node.v2) in err.value.detail
    moved.rename(node.v2)
    assert source.tasks()


def test_a_failed_read_loses_nothing_and_counts_nothing_twice(tmp_path: Path) -> None:
    """The interval whose read failed, and the next (its baseline again), go to the pod (whose
    total has them), once."""
    node, pod, (a, b) = simple_node(tmp_path)
    pa, pb = node.start(a), node.start(b)
    node.write()
    source, credit = per_cgroup(node), Credit()
    credit.take(source.tasks())
    stat = node.v2 / a.lstrip("/") / "cpu.stat"
    for broken in (False, True, False, False):
        node.run(pa, 40)
        node.run(pb, 10)
        node.write()
        if broken:
            stat.write_text("usage_usec x\n")  # unreadable this once
        credit.take(source.tasks())
    truth = node.truth_s()
    ref_a, ref_pod = classify_cgroup(a), classify_cgroup(pod)
    assert credit.total[ref_a] == pytest.approx(truth[ref_a] - 0.8)
    assert credit.total[ref_pod] == pytest.approx(0.8)
    assert credit.total[classify_cgroup(b)] == pytest.approx(truth[classify_cgroup(b)])
    assert sum(credit.total.values()) == pytest.approx(sum(truth.values()))


def test_without_a_new_cgroup_the_tree_is_not_listed_again(tmp_path: Path) -> None:
    """walk=False (the eBPF source saw no cgroup_mkdir): the last walk's cgroups are read again
    without listing the tree; a read after a mkdir walks (the new cgroup counts whole), a
    removed cgroup makes the next read walk, and every FULL_WALK_EVERY-th read walks anyway."""
    node, pod, (a, _b) = simple_node(tmp_path)
    pa = node.start(a)
    node.write()
    source, credit = per_cgroup(node), Credit()
    tree = source._tree  # its walk count is the point
    assert tree is not None
    credit.take(source.tasks(walk=False))  # the first read walks whatever it is told
    assert tree.walks == 1
    node.run(pa, 10)
    node.write()
    credit.take(source.tasks(walk=False))
    assert tree.walks == 1
    late = node.new_container(pod)
    pl = node.start(late)
    node.run(pl, 7)
    node.write()
    credit.take(source.tasks(walk=True))  # the mkdir is seen: listed, and its time counted
    assert tree.walks == 2
    assert credit.total[classify_cgroup(late)] == pytest.approx(0.07)
    node.exit(pl)
    node.rmdir(late)
    node.write()
    credit.take(source.tasks(walk=False))  # its read fails: the next read walks
    credit.take(source.tasks(walk=False))
    assert tree.walks == 3
    for _ in range(cgrouptree.FULL_WALK_EVERY):
        credit.take(source.tasks(walk=False))
    assert tree.walks == 4
    assert credit.nonzero() == approx(node.truth_s())
