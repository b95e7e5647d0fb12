"""A synthetic Kubernetes GPU node: procfs, sysfs and cgroup trees far busier than this machine.

    python -m tests.benchmarks.synthetic DEST [--processes 5000 --pods 110 --containers 3]

writes DEST/proc, DEST/sys (with DEST/sys/fs/cgroup) and DEST/nvml.scenario, then prints the
flags that point `wattprobe serve` at them. The benchmarks use SyntheticHost directly and call
advance() between intervals, so the exporter sees moving counters, exiting and starting
processes, and does the work it would do on a real node.

What is in it (every file in the kernel's own format, as in tests/fixtures):
- /proc/<pid>/stat (tests.support.fixturehost.stat_line) and /proc/<pid>/cgroup for every process;
  /proc/stat with one line per CPU. Kernel threads (PF_KTHREAD, cgroup "0::/"), host services
  under system.slice, and per pod a pause (sandbox) process plus the processes of its app
  containers.
- Pods in the cgroup layouts kubelet produces with the runtimes and drivers it supports, in
  turn: systemd driver on cgroup v2 with containerd, with CRI-O (and its conmon), with
  cri-dockerd, and the cgroupfs driver on cgroup v1 (13 controller lines) with containerd; QoS
  classes in turn (guaranteed, burstable, besteffort).
- sys/: the checked-in RAPL (two packages with core and dram subzones, an MMIO duplicate) and
  hwmon (ACPI power meter, a GPU board sensor, an energy counter) fixture, and
  sys/fs/cgroup with a directory, cgroup.procs and cpu.stat for every v2 cgroup of a process,
  and sys/fs/cgroup/cpu,cpuacct/<path>/cpuacct.usage for the cgroup v1 pods: the kernel's CPU
  time per cgroup, which also counts the work of processes that exited.
- nvml.scenario: the 8 x H100 fixture scenario with one GPU pod per GPU (GPU 0 time-sliced
  between two pods), for the fake libnvidia-ml.so.1 (tests/nvml).
"""

from __future__ import annotations

import argparse
import random
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.sources.gpu.nvml.scenario import Scenario
from tests.sources.gpu.nvml.scenario import parse as parse_scenario
from tests.support.fixturehost import FixtureHost, stat_line, write_atomic
from tests.support.paths import FIXTURES

NVML_FIXTURE = FIXTURES / "nvml" / "h100x8-timesliced.nvml"

USER_FLAGS = 0x400100  # PF_RANDOMIZE | PF_FORKNOEXEC, as a normal process shows
KTHREAD_FLAGS = 0x208040  # PF_KTHREAD | PF_NOFREEZE | PF_NOFREEZE-like bits, as kthreadd shows
TICKS_PER_S = 100  # USER_HZ
NS_PER_TICK = 1_000_000_000 // TICKS_PER_S
HYBRID_V2 = "unified"  # where a hybrid host mounts cgroup v2 under sys/fs/cgroup
V1_CPUACCT = "cpu,cpuacct"  # the v1 hierarchy's directory under sys/fs/cgroup

QOS = ("guaranteed", "burstable", "besteffort")
LAYOUTS = ("systemd-containerd", "systemd-crio", "systemd-docker", "cgroupfs-v1-containerd")
V1_CONTROLLERS = (
    "misc",
    "rdma",
    "pids",
    "hugetlb",
    "net_cls,net_prio",
    "perf_event",
    "cpuset",
    "freezer",
    "devices",
    "blkio",
    "memory",
    "cpu,cpuacct",
    "name=systemd",
)
SERVICES = (
    "kubelet",
    "containerd",
    "crio",
    "systemd-journald",
    "systemd-udevd",
    "systemd-logind",
    "sshd",
    "chronyd",
    "dbus",
    "rsyslog",
    "nvidia-persistenced",
    "nvidia-fabricmanager",
    "node-problem-detector",
    "cron",
)
APP_COMMS = (
    "python3",
    "java",
    "nginx",
    "envoy",
    "node",
    "postgres",
    "redis-server",
    "my (weird) proc",
    "torchrun",
    "triton",
)


@dataclass(frozen=True)
class HostShape:
    processes: int = 5000
    pods: int = 110
    containers: int = 3  # app containers per pod; each pod also has its pause sandbox
    gpus: int = 8
    ncpu: int = 64
    kernel_share: float = 0.12  # kernel threads (a 64-CPU node has several hundred)
    system_share: float = 0.06  # host processes outside any pod
    busy_share: float = 0.3  # processes whose CPU time moves in an interval
    utilisation: float = 0.5  # of the node's CPUs, used by those processes on average
    churn_share: float = 0.01  # container processes that exit and are replaced per interval
    seed: int = 8
    layouts: tuple[str, ...] = LAYOUTS  # the pods' cgroup layouts, in turn


@dataclass(frozen=True)
class Cgroup:
    """Where a process lives: its /proc/<pid>/cgroup text and its v2 directory (if any)."""

    text: str
    # relative to sys/fs/cgroup: the v2 root's (HYBRID_V2 on a hybrid host); "" for v1 layouts
    # and the root
    v2_dir: str
    v1_dir: str = ""  # relative to the cpu,cpuacct v1 hierarchy; "" for v2 layouts

    @property
    def usage_file(self) -> str:
        """The kernel's CPU time file of this cgroup, relative to sys/fs/cgroup ("": none)."""
        if self.v2_dir:
            return f"{self.v2_dir}/cpu.stat"
        if self.v1_dir:
            return f"{V1_CPUACCT}/{self.v1_dir}/cpuacct.usage"
        return ""


@dataclass
class Process:
    pid: int
    comm: str
    cgroup: Cgroup
    start: int
    kernel: bool
    utime: int = 0
    stime: int = 0


class SyntheticHost:
    """The trees on disk and the model of the processes they show; advance() moves them on."""

    def __init__(self, root: Path, shape: HostShape) -> None:
        self.root = root
        self.shape = shape
        self.processes: dict[int, Process] = {}
        self.container_cgroups: list[Cgroup] = []  # app containers (not the pause sandboxes)
        self.gpu_pids: list[int] = []
        self.next_pid = 1
        self.uptime_ticks = 10_000_000
        self.intervals = 0
        self._rng = random.Random(shape.seed)
        self._apps: frozenset[Cgroup] = frozenset()
        self._scenario: Scenario | None = None
        self.usage_ns: dict[Cgroup, int] = {}  # the kernel's CPU time per cgroup
        self._charged_ns = 0  # CPU time charged to cgroups in this interval
        self._exited: set[Cgroup] = set()  # cgroups of the processes that exited last interval

    # -- layout ---------------------------------------------------------------------------------

    @property
    def procfs(self) -> Path:
        return self.root / "proc"

    @property
    def sysfs(self) -> Path:
        return self.root / "sys"

    @property
    def cgroupfs(self) -> Path:
        return self.sysfs / "fs" / "cgroup"

    @property
    def hybrid(self) -> bool:
        """Pods in v1 layouts: cgroup v2 is then mounted at sys/fs/cgroup/unified beside the v1
        hierarchies, as on a real hybrid host (never the v1 hierarchies inside the v2 root)."""
        return any(layout.startswith("cgroupfs-v1") for layout in self.shape.layouts)

    @property
    def v2_root(self) -> Path:
        return self.cgroupfs / HYBRID_V2 if self.hybrid else self.cgroupfs

    def _v2(self, cg: Cgroup) -> Cgroup:
        """cg with its v2 directory placed under the v2 root."""
        if not (cg.v2_dir and self.hybrid):
            return cg
        return Cgroup(cg.text, f"{HYBRID_V2}/{cg.v2_dir}", cg.v1_dir)

    @property
    def scenario_path(self) -> Path:
        return self.root / "nvml.scenario"

    def args(self) -> list[str]:
        return ["--path.procfs", str(self.procfs), "--path.sysfs", str(self.sysfs)]

    @property
    def fixture(self) -> FixtureHost:
        """The RAPL/hwmon/proc-stat helpers of the checked-in fixture host, on this tree."""
        return FixtureHost(self.root)

    # -- building -------------------------------------------------------------------------------

    @classmethod
    def create(cls, root: Path, shape: HostShape | None = None) -> SyntheticHost:
        shape = shape or HostShape()
        root.mkdir(parents=True, exist_ok=True)
        host = cls(root, shape)
        shutil.copytree(FIXTURES / "sys", host.sysfs, symlinks=True)
        host.procfs.mkdir()
        host._write_proc_stat(busy=400_000_000, idle=4_000_000_000)
        host._populate()
        host._write_scenario()
        return host

    def _populate(self) -> None:
        shape = self.shape
        kernel = max(2, round(shape.processes * shape.kernel_share))
        system = max(2, round(shape.processes * shape.system_share))
        pods = [self._pod_cgroups(i) for i in range(shape.pods)]
        self._add(self._v2(Cgroup("0::/init.scope\n", "init.scope")), "systemd", kernel=False)
        for i in range(kernel):
            self._add(Cgroup("0::/\n", ""), _kernel_comm(i, shape.ncpu), kernel=True)
        for i in range(system - 1):
            name = SERVICES[i % len(SERVICES)]
            self._add(self._v2(_service_cgroup(name)), name, kernel=False)
        for sandbox, _apps in pods:
            self._add(sandbox, "pause", kernel=False)
        self.container_cgroups = [c for _s, apps in pods for c in apps]
        self._apps = frozenset(self.container_cgroups)
        remaining = shape.processes - len(self.processes)
        for i in range(max(remaining, 0)):
            cg = self.container_cgroups[i % len(self.container_cgroups)]
            self._add(cg, APP_COMMS[i % len(APP_COMMS)], kernel=False)
        # one GPU process per GPU in the first pods' first containers; GPU 0 gets a second pod
        firsts: dict[Cgroup, int] = {}
        for pid in sorted(self.processes):
            firsts.setdefault(self.processes[pid].cgroup, pid)
        per_pod = shape.containers
        chosen = [firsts[self.container_cgroups[g * per_pod]] for g in range(shape.gpus)]
        if shape.pods > shape.gpus:
            chosen.append(firsts[self.container_cgroups[shape.gpus * per_pod]])
        self.gpu_pids = chosen
        self._write_cgroup_procs()
        for p in self.processes.values():
            if not p.kernel:
                self._charge(p.cgroup, (p.utime + p.stime) * NS_PER_TICK)
        self._write_usage(set(self.usage_ns))
        if any(not c.v2_dir for c in self.container_cgroups):
            # the v1 hierarchy's root: where a reader tells that the cpuacct controller is mounted
            (self.cgroupfs / V1_CPUACCT).mkdir(parents=True, exist_ok=True)
            write_atomic(self.cgroupfs / V1_CPUACCT / "cpuacct.usage", f"{10**15}\n")

    def _pod_cgroups(self, i: int) -> tuple[Cgroup, list[Cgroup]]:
        layout = self.shape.layouts[i % len(self.shape.layouts)]
        qos = QOS[i % len(QOS)]
        uid = f"{i:08x}-{self._rng.getrandbits(16):04x}-4{self._rng.getrandbits(12):03x}-8"
        uid += f"{self._rng.getrandbits(12):03x}-{self._rng.getrandbits(48):012x}"
        ids = [f"{self._rng.getrandbits(256):064x}" for _ in range(self.shape.containers + 1)]
        cgroups = [self._v2(_container_cgroup(layout, qos, uid, cid)) for cid in ids]
        return cgroups[0], cgroups[1:]

    def _add(self, cgroup: Cgroup, comm: str, *, kernel: bool) -> Process:
        pid = self.next_pid
        self.next_pid += 1
        proc = Process(
            pid,
            comm,
            cgroup,
            start=self.uptime_ticks - 1_000_000 + pid,
            kernel=kernel,
            utime=0 if kernel else self._rng.randrange(10_000_000),
            stime=self._rng.randrange(100_000),
        )
        self.processes[pid] = proc
        d = self.procfs / str(pid)
        d.mkdir()
        (d / "cgroup").write_text(cgroup.text)
        self._write_stat(proc)
        return proc

    def _write_stat(self, p: Process) -> None:
        flags = KTHREAD_FLAGS if p.kernel else USER_FLAGS
        text = stat_line(p.pid, p.comm, p.utime, p.stime, start=p.start, flags=flags)
        write_atomic(self.procfs / str(p.pid) / "stat", text)

    def _write_proc_stat(self, busy: int, idle: int) -> None:
        ncpu = self.shape.ncpu
        lines = [f"cpu  {busy} 0 0 {idle} 0 0 0 0 0 0"]
        lines += [f"cpu{c} {busy // ncpu} 0 0 {idle // ncpu} 0 0 0 0 0 0" for c in range(ncpu)]
        lines += ["intr 0", "ctxt 0", "btime 1763700000", "processes 1", "procs_running 1"]
        write_atomic(self.procfs / "stat", "\n".join(lines) + "\n")

    def _write_cgroup_procs(self) -> None:
        members: dict[str, list[int]] = {}
        for p in self.processes.values():
            members.setdefault(p.cgroup.v2_dir, []).append(p.pid)
        (self.cgroupfs).mkdir(parents=True, exist_ok=True)
        self.v2_root.mkdir(parents=True, exist_ok=True)
        write_atomic(self.v2_root / "cgroup.controllers", "cpuset cpu io memory pids misc\n")
        for rel, pids in members.items():
            d = self.cgroupfs / rel if rel else self.v2_root
            d.mkdir(parents=True, exist_ok=True)
            write_atomic(d / "cgroup.procs", "".join(f"{pid}\n" for pid in sorted(pids)))

    def _write_scenario(self) -> None:
        self._scenario = gpu_scenario(self.scenario_path, self.gpu_pids)

    # -- one interval of activity ---------------------------------------------------------------

    def advance(self, seconds: float = 5.0) -> None:
        """Move every counter as `seconds` of a busy node would, and churn some processes.

        Pass the time that really passed since the last call: the exporter checks energy
        counters against its own clock and re-baselines a zone that moved implausibly fast.
        """
        rng = self._rng
        shape = self.shape
        self.intervals += 1
        ticks = max(2, round(seconds * TICKS_PER_S))
        self.uptime_ticks += ticks
        self._charged_ns = 0
        self._churn(max(1, round(shape.processes * shape.churn_share)))
        live = list(self.processes.values())
        ran = rng.sample(live, k=max(1, round(len(live) * shape.busy_share)))
        capacity = round(seconds * TICKS_PER_S * shape.ncpu)
        # the processes that ran share what the node's CPUs had: `utilisation` of it on average
        mean = max(2, round(capacity * shape.utilisation / len(ran)))
        busy_ticks = 0
        charged: set[Cgroup] = set()
        for p in ran:
            du = rng.randrange(1, 2 * mean)
            ds = du // 5
            if p.kernel:
                du, ds = 0, du // 4 + 1
            p.utime += du
            p.stime += ds
            if p.kernel:
                busy_ticks += du + ds
            self._write_stat(p)
            if not p.kernel:
                self._charge(p.cgroup, (du + ds) * NS_PER_TICK + rng.randrange(NS_PER_TICK))
                charged.add(p.cgroup)
        self._write_usage(charged | self._exited)
        # the node's busy time holds every cgroup's (as the kernel's does), exits and sub-tick
        # remainders included: rounded up to whole ticks
        busy_ticks += -(-self._charged_ns // NS_PER_TICK)
        self.fixture.add_cpu_ticks(busy=busy_ticks, idle=max(capacity - busy_ticks, 0))
        fixture = self.fixture
        for device, watts in (
            ("intel-rapl:0", 180.0),
            ("intel-rapl:0:0", 120.0),
            ("intel-rapl:0:1", 25.0),
            ("intel-rapl:1", 160.0),
            ("intel-rapl:1:0", 30.0),
            ("intel-rapl:1:1", 100.0),
            ("intel-rapl-mmio:0", 180.0),
        ):
            fixture.add_energy_j(device, watts * seconds * rng.uniform(0.9, 1.1))
        fixture.add_hwmon_energy_j("hwmon3", "energy1_input", 40.0 * seconds)
        fixture.set_hwmon("hwmon1", "power1_average", round(rng.uniform(900, 1100) * 1e6))
        fixture.set_hwmon("hwmon2", "power1_input", round(rng.uniform(250, 300) * 1e6))
        if self._scenario is not None:
            for gpu in range(self._scenario.gpu_count()):
                self._scenario.add_energy_j(gpu, rng.uniform(300, 650) * seconds)
            self._scenario.write()

    def _churn(self, count: int) -> None:
        """count container processes exit; as many start in random containers with new PIDs."""
        gpu = set(self.gpu_pids)
        candidates = [
            p.pid
            for p in self.processes.values()
            if not p.kernel and p.pid not in gpu and p.cgroup in self._apps
        ]
        changed: set[str] = set()
        self._exited = set()
        for pid in self._rng.sample(candidates, k=min(count, len(candidates))):
            p = self.processes.pop(pid)
            shutil.rmtree(self.procfs / str(pid))
            changed.add(p.cgroup.v2_dir)
            # what it ran between the last read and its exit: only its cgroup's total shows it
            self._charge(p.cgroup, self._rng.randrange(1, 50) * NS_PER_TICK)
            self._exited.add(p.cgroup)
        for _ in range(count):
            cg = self._rng.choice(self.container_cgroups)
            p = self._add(cg, self._rng.choice(APP_COMMS), kernel=False)
            p.start = self.uptime_ticks
            p.utime = p.stime = 0
            self._write_stat(p)
            changed.add(cg.v2_dir)
        self._rewrite_procs(changed)

    def _charge(self, cgroup: Cgroup, ns: int) -> None:
        self._charged_ns += ns
        if cgroup.usage_file:
            self.usage_ns[cgroup] = self.usage_ns.get(cgroup, 0) + ns

    def _write_usage(self, cgroups: set[Cgroup]) -> None:
        """cpu.stat (v2, microseconds) or cpuacct.usage (v1, nanoseconds), as the kernel writes,
        for these cgroups and their ancestors (the kernel's totals are hierarchical: a parent's
        holds its children's), the roots excepted."""
        for cg in cgroups:
            ns = self.usage_ns.get(cg)
            if ns is not None:
                _write_usage_file(self.cgroupfs / cg.usage_file, ns, v2=bool(cg.v2_dir))
        totals: dict[str, int] = {}
        for cg, ns in self.usage_ns.items():
            for parent in _ancestors(cg):
                totals[parent] = totals.get(parent, 0) + ns
        changed = {parent for cg in cgroups for parent in _ancestors(cg)}
        for parent in changed:
            v2 = not parent.startswith(f"{V1_CPUACCT}/")
            name = "cpu.stat" if v2 else "cpuacct.usage"
            _write_usage_file(self.cgroupfs / parent / name, totals[parent], v2=v2)

    def _rewrite_procs(self, dirs: set[str]) -> None:
        members: dict[str, list[int]] = {d: [] for d in dirs if d}
        for p in self.processes.values():
            if p.cgroup.v2_dir in members:
                members[p.cgroup.v2_dir].append(p.pid)
        for rel, pids in members.items():
            d = self.cgroupfs / rel
            d.mkdir(parents=True, exist_ok=True)  # a container's first process
            write_atomic(d / "cgroup.procs", "".join(f"{x}\n" for x in pids))

    # -- what a reader needs to know -----------------------------------------------------------

    def files_per_interval(self) -> Iterator[Path]:
        for pid in self.processes:
            yield self.procfs / str(pid) / "stat"
            yield self.procfs / str(pid) / "cgroup"

    @property
    def scenario(self) -> Scenario:
        assert self._scenario is not None
        return self._scenario

    def summary(self) -> str:
        kinds = {"kernel": 0, "system": 0, "pod": 0}
        apps = self._apps
        for p in self.processes.values():
            kinds["kernel" if p.kernel else "pod" if p.cgroup in apps else "system"] += 1
        sandboxes = self.shape.pods
        kinds["system"] -= sandboxes
        kinds["pod"] += sandboxes
        return (
            f"{len(self.processes)} processes ({kinds['kernel']} kernel threads, "
            f"{kinds['system']} host, {kinds['pod']} in {self.shape.pods} pods x "
            f"({self.shape.containers} containers + pause)), {self.shape.ncpu} CPUs, "
            f"{self.scenario.gpu_count()} GPUs"
        )


def _ancestors(cg: Cgroup) -> list[str]:
    """The directories above a cgroup's, relative to sys/fs/cgroup, below its hierarchy's root."""
    rel = cg.usage_file.rsplit("/", 1)[0] if cg.usage_file else ""  # the cgroup's own dir
    parts = rel.split("/")
    # "cpu,cpuacct/<...>", "unified/<...>": a hierarchy's root is not a cgroup of it
    first = 2 if cg.v1_dir or cg.v2_dir.startswith(f"{HYBRID_V2}/") else 1
    return ["/".join(parts[:i]) for i in range(first, len(parts))]


def _write_usage_file(path: Path, ns: int, *, v2: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if v2:
        us = ns // 1000
        text = f"usage_usec {us}\nuser_usec {us * 4 // 5}\nsystem_usec {us // 5}\n"
        text += "nice_usec 0\ncore_sched.force_idle_usec 0\n"
    else:
        text = f"{ns}\n"
    write_atomic(path, text)


def gpu_scenario(path: Path, gpu_pids: list[int]) -> Scenario:
    """The 8 x H100 fixture scenario with one process per GPU (the given PIDs, in order) and,
    when there is one more PID, a second process time-sliced on GPU 0; written to path."""
    values = {
        k: v
        for k, v in parse_scenario(NVML_FIXTURE.read_text()).items()
        if ".proc." not in k and ".putil." not in k
    }
    scenario = Scenario(path, values)
    for gpu in range(scenario.gpu_count()):
        pids = [gpu_pids[gpu]] if gpu < len(gpu_pids) else []
        if gpu == 0 and len(gpu_pids) > scenario.gpu_count():
            pids.append(gpu_pids[-1])
        for n, pid in enumerate(pids):
            scenario[f"gpu.{gpu}.proc.{n}.pid"] = pid
            scenario[f"gpu.{gpu}.proc.{n}.memory"] = (n + 1) * 8 << 30
            scenario[f"gpu.{gpu}.putil.{n}.pid"] = pid
            scenario[f"gpu.{gpu}.putil.{n}.sm"] = 60 // (n + 1)
            scenario[f"gpu.{gpu}.putil.{n}.mem"] = 30 // (n + 1)
        scenario[f"gpu.{gpu}.util.gpu"] = 90 if pids else 0
    scenario.write()
    return scenario


def _kernel_comm(i: int, ncpu: int) -> str:
    kinds = ("kworker/{c}:{n}", "ksoftirqd/{c}", "migration/{c}", "cpuhp/{c}", "kworker/{c}:{n}H")
    return kinds[i % len(kinds)].format(c=(i // len(kinds)) % ncpu, n=i % 7)


def _service_cgroup(name: str) -> Cgroup:
    rel = f"system.slice/{name}.service"
    return Cgroup(f"0::/{rel}\n", rel)


def _container_cgroup(layout: str, qos: str, uid: str, cid: str) -> Cgroup:
    uid_ = uid.replace("-", "_")
    if layout == "cgroupfs-v1-containerd":
        parent = "/kubepods" if qos == "guaranteed" else f"/kubepods/{qos}"
        path = f"{parent}/pod{uid}/{cid}"
        lines = [f"{13 - n}:{c}:{path}" for n, c in enumerate(V1_CONTROLLERS)]
        return Cgroup("\n".join([*lines, "0::/"]) + "\n", "", path.lstrip("/"))
    scope = {
        "systemd-containerd": f"cri-containerd-{cid}.scope",
        "systemd-crio": f"crio-{cid}.scope",
        "systemd-docker": f"docker-{cid}.scope",
    }[layout]
    if qos == "guaranteed":
        rel = f"kubepods.slice/kubepods-pod{uid_}.slice/{scope}"
    else:
        rel = f"kubepods.slice/kubepods-{qos}.slice/kubepods-{qos}-pod{uid_}.slice/{scope}"
    return Cgroup(f"0::/{rel}\n", rel)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path)
    parser.add_argument("--processes", type=int, default=HostShape.processes)
    parser.add_argument("--pods", type=int, default=HostShape.pods)
    parser.add_argument("--containers", type=int, default=HostShape.containers)
    args = parser.parse_args()
    host = SyntheticHost.create(
        args.dest,
        HostShape(processes=args.processes, pods=args.pods, containers=args.containers),
    )
    print(host.summary())
    print(
        f"WATTPROBE_FAKE_NVML_SCENARIO={host.scenario_path} "
        "LD_LIBRARY_PATH=<python -m tests.sources.gpu.nvml.build DIR> "
        f"wattprobe serve {' '.join(host.args())}"
    )


if __name__ == "__main__":
    main()
