"""Compile and attach bpf/activity.c with bcc, after checking everything it needs.

Each failure is a SourceError with a short reason (the source_up label) and a detail; FIXES says
what an operator does about each reason (`wattprobe check` prints it).
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from exporter.host.caps import CAP_BPF, CAP_PERFMON, CAP_SYS_ADMIN, SELF_STATUS, effective_caps
from exporter.host.hostfile import read_text_bounded
from exporter.model.readings import SourceError
from exporter.sources.activity.ebpf.btf import (
    VMLINUX,
    Btf,
    BtfError,
    irq_time_accounted,
    offset_flags,
    runtime_flags,
)
from exporter.sources.activity.ebpf.gpu_majors import DeviceClasses
from exporter.sources.activity.ebpf.kheaders import NO_HEADERS, KernelHeaders, find_kernel_headers

log = logging.getLogger(__name__)

BPF_SOURCE_NAME = "activity.c"

NO_BCC = "no bcc"
PERMISSION = "permission denied"
NO_TRACEFS = "no tracefs"
NO_TRACEPOINT = "no tracepoint"
NO_CGROUP2 = "no cgroup v2"
COMPILE_FAILED = "compile failed"
LOAD_FAILED = "load failed"
LOADER_KILLED = "loader killed"  # the compile child died of a signal (the OOM killer's SIGKILL)
NO_SOURCE = "no bpf source"
NOT_LIVE_PROCFS = "procfs not live"

FIXES: dict[str, str] = {
    NO_BCC: "install Debian's python3-bpfcc (the image and scripts/setup-debian.sh do)",
    # The one fix that matches deploy/: uid 0 (it owns tracefs, RAPL and the kubelet's files, so no
    # CAP_DAC_READ_SEARCH: docs/install.md) with BPF and PERFMON added to the container.
    PERMISSION: (
        "run as uid 0 with CAP_BPF and CAP_PERFMON added (deploy/'s DaemonSet adds BPF, PERFMON "
        "and SYS_RESOURCE; kernels before 5.8 need CAP_SYS_ADMIN instead)"
    ),
    NO_TRACEFS: (
        "mount tracefs: mount -t tracefs nodev /sys/kernel/tracing "
        "(in a pod, mount the host's /sys/kernel/tracing)"
    ),
    NO_TRACEPOINT: "use a kernel built with CONFIG_TRACEPOINTS and CONFIG_FTRACE_SYSCALLS",
    NO_HEADERS: (
        "install headers for the running kernel (linux-headers-$(uname -r)) or any generic set "
        "(Debian: linux-headers-$(dpkg --print-architecture), i.e. linux-headers-amd64 or "
        "linux-headers-arm64), or pass --ebpf.kernel-headers DIR"
    ),
    NO_CGROUP2: (
        "mount cgroup v2 (unified or hybrid hierarchy); until then use --activity.source procfs"
    ),
    COMPILE_FAILED: (
        "see the compiler output in the log; try another headers set (--ebpf.kernel-headers)"
    ),
    LOAD_FAILED: "the kernel rejected the programs: it needs BPF tracepoint support (5.8 or later)",
    LOADER_KILLED: (
        "the eBPF compile child was killed (SIGKILL is usually the OOM killer at the compile's "
        "memory peak): raise the container's memory limit, then restart the agent; /proc is used "
        "meanwhile"
    ),
    NO_SOURCE: "reinstall wattprobe: bpf/activity.c must ship with it",
    NOT_LIVE_PROCFS: (
        "point --path.procfs at this host's /proc (hostPID: true in Kubernetes), or use "
        "--activity.source procfs"
    ),
}

TRACEFS_DIRS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))

SWITCH_TRACEPOINT = ("sched", "sched_switch")  # per-process mode only
REQUIRED_TRACEPOINTS = (("sched", "sched_process_exit"),)
SCHED_SWITCH = "sched:sched_switch"
IOCTL_TRACEPOINT = ("syscalls", "sys_enter_ioctl")
EXEC_TRACEPOINT = ("sched", "sched_process_exec")
ATTACH_TRACEPOINT = ("cgroup", "cgroup_attach_task")
MKDIR_TRACEPOINT = ("cgroup", "cgroup_mkdir")
PROC_DEVICES = Path("/proc/devices")
NO_BTF = "kernel BTF"  # in missing_optional: GPU ioctls need it to tell an ioctl's device

MAX_TASKS = 32768  # live processes plus tombstones of the processes that exited in one interval
MAX_CGROUPS = 8192
SEEN_BITS = 16  # the raw sched_switch program's task cache: 65536 slots of 24 bytes

PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0  # include/uapi/linux/perf_event.h
RAW = "raw"  # sched_switch attached as a raw tracepoint (4.17+): no argument formatting
CLASSIC = "classic"  # through tracefs's sched:sched_switch: costs more per context switch
NO_SWITCH = "none"  # the default: no program on sched_switch (per-process series are off)

# Why each hook is attached, for `wattprobe check` and the start-up log (docs/ebpf.md, "Programs").
PURPOSES: dict[str, str] = {
    SCHED_SWITCH: (
        "per-process CPU time (--collector.process): runs on every context switch of every CPU, "
        "its cost following the switch rate (0.9-1.2 us a switch measured: docs/ebpf.md)"
    ),
    "sched:sched_process_exit": (
        "an ended process's GPU ioctls (and, per process, its CPU time) folded into its cgroup's "
        "total, so nothing it did is lost"
    ),
    "sched:sched_process_exec": "a process's new name after exec, and its cgroup",
    "syscalls:sys_enter_ioctl": (
        "GPU ioctls per process (NVIDIA 'F' and DRM 'd' commands on GPU device files), to split "
        "a shared GPU; other ioctls return after one compare"
    ),
    "cgroup:cgroup_attach_task": "keeps a GPU process's cgroup current when it moves",
    "cgroup:cgroup_mkdir": (
        "names each new cgroup, so one removed before the next read keeps its name"
    ),
    "perf:cpu-clock": (
        "once a second per CPU (--collector.process): names the slice in flight, so a long one is "
        "credited before it ends"
    ),
}


@dataclass(frozen=True)
class LoadInfo:
    """What was loaded, for logs and `wattprobe check`."""

    headers: KernelHeaders
    tracefs: Path
    tracepoints: tuple[str, ...]  # attached, as category:event
    missing_optional: tuple[str, ...]
    compile_s: float
    switched_off: tuple[str, ...] = ()  # optional tracepoints not attached on purpose
    max_tasks: int = MAX_TASKS
    max_cgroups: int = MAX_CGROUPS
    # an entry per process and a program on sched_switch (WATTPROBE_PER_PROCESS); False: entries
    # only for processes that made a GPU ioctl, CPU time from the cgroups' own totals
    per_process: bool = True
    switch_probe: str = CLASSIC  # how sched:sched_switch is attached: RAW, CLASSIC or NO_SWITCH
    # on-CPU time from the kernel's per-task runtime (se.sum_exec_runtime, what cpu.stat sums;
    # slots then hold runtimes); False: from clock reads at each switch (no BTF)
    task_runtime: bool = False
    # interrupt time is outside every task's runtime (CONFIG_IRQ_TIME_ACCOUNTING with
    # task_runtime): the source reports /proc/stat's irq + softirq as kernel work (interrupts.py)
    irq_time_apart: bool = False

    def describe(self) -> str:
        missing = f"; missing {', '.join(self.missing_optional)}" if self.missing_optional else ""
        if self.switched_off:
            missing += f"; off: {', '.join(self.switched_off)}"
        names = [
            f"{tp} ({self.switch_probe} tracepoint)" if tp == SCHED_SWITCH else tp
            for tp in self.tracepoints
        ]
        return (
            f"tracepoints {', '.join(names)}{missing}; {self.headers.describe()}; "
            f"compiled in {self.compile_s:.2f}s; "
            + (
                "per-process entries"
                + ("; task runtime" if self.task_runtime else "; clock between switches")
                if self.per_process
                else "no sched_switch program: CPU time from the cgroups' own totals"
            )
            + ("; interrupts from /proc/stat" if self.irq_time_apart else "")
        )

    def programs(self) -> list[str]:
        """Each hook attached and why it is there."""
        hooks = list(self.tracepoints)
        if self.task_runtime:
            hooks.append("perf:cpu-clock")
        return [f"{hook}: {PURPOSES.get(hook, '')}".rstrip(": ") for hook in hooks]


@dataclass
class Loaded:
    bpf: Any  # bcc.BPF
    info: LoadInfo


def bpf_source() -> Path:
    """bpf/activity.c beside the package (checkout, editable install) or under share/."""
    here = Path(__file__).resolve().parents[4]
    candidates = [
        here / "bpf" / BPF_SOURCE_NAME,
        Path(sysconfig.get_paths()["data"]) / "share" / "wattprobe" / "bpf" / BPF_SOURCE_NAME,
        Path(sys.prefix) / "share" / "wattprobe" / "bpf" / BPF_SOURCE_NAME,
    ]
    for c in candidates:
        if c.is_file():
            return c
    raise SourceError(NO_SOURCE, "not found at " + ", ".join(str(c) for c in candidates))


def check_privileges(status_path: Path = SELF_STATUS) -> None:
    """bpf() and perf_event_open() on tracepoints need CAP_BPF + CAP_PERFMON or CAP_SYS_ADMIN."""
    try:
        caps = effective_caps(read_text_bounded(str(status_path), 65536))
    except (OSError, ValueError) as exc:
        raise SourceError(PERMISSION, f"cannot read capabilities: {exc}") from exc
    has = {c for c in (CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF) if caps & (1 << c)}
    if CAP_SYS_ADMIN in has or {CAP_BPF, CAP_PERFMON} <= has:
        return
    lacking = " and ".join(
        n for c, n in ((CAP_BPF, "CAP_BPF"), (CAP_PERFMON, "CAP_PERFMON")) if c not in has
    )
    who = f"uid {os.geteuid()}" + (" (root)" if os.geteuid() == 0 else "")
    raise SourceError(PERMISSION, f"{who} without {lacking}: eBPF needs CAP_BPF and CAP_PERFMON")


def find_tracefs(candidates: tuple[Path, ...] = TRACEFS_DIRS) -> Path:
    """The tracefs bcc will use, checked to be mounted.

    bcc (Python and libbcc alike) uses /sys/kernel/debug/tracing when that path exists, else
    /sys/kernel/tracing; checking any other mount would not help it.
    """
    tracing, debug_tracing = candidates
    try:
        path = debug_tracing if debug_tracing.exists() else tracing
        if (path / "events" / "sched").is_dir():
            return path
    except PermissionError as exc:
        # tracefs is root's, mode 0700: a non-root user needs CAP_DAC_READ_SEARCH to look in
        raise SourceError(PERMISSION, f"cannot read tracefs: {exc}") from exc
    if path.is_dir():
        raise SourceError(NO_TRACEFS, f"tracefs is not mounted at {path} (no events/sched)")
    raise SourceError(NO_TRACEFS, f"no {tracing} or {debug_tracing}")


def tracepoint_exists(tracefs: Path, category: str, event: str) -> bool:
    return (tracefs / "events" / category / event / "format").is_file()


def has_group_dead(tracefs: Path) -> bool:
    """Recent kernels (6.18 has it, 6.1 does not) say in sched_process_exit whether the
    exiting thread is the last of its process."""
    return "group_dead;" in _format(tracefs, "sched", "sched_process_exit")


def has_cgroup_attach(tracefs: Path) -> bool:
    """cgroup_attach_task carrying the 64-bit cgroup id (older kernels had a 32-bit one)."""
    return "u64 dst_id;" in _format(tracefs, *ATTACH_TRACEPOINT)


def _format(tracefs: Path, category: str, event: str) -> str:
    try:
        return read_text_bounded(str(tracefs / "events" / category / event / "format"), 65536)
    except OSError:
        return ""


@contextlib.contextmanager
def bcc_environment(changes: dict[str, str | None]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in changes}
    try:
        for k, v in changes.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _captured_output() -> Iterator[list[str]]:
    """Collect what libbcc and clang write to fds 1 and 2 (diagnostics) instead of leaking it."""
    out: list[str] = []
    with tempfile.TemporaryFile() as tmp:
        sys.stdout.flush()
        sys.stderr.flush()
        saved = os.dup(1), os.dup(2)
        try:
            os.dup2(tmp.fileno(), 1)
            os.dup2(tmp.fileno(), 2)
            yield out
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
            tmp.seek(0)
            out.append(tmp.read().decode(errors="replace"))


def gpu_device_nodes(dev: Path = Path("/dev")) -> list[str]:
    """NVIDIA (/dev/nvidia*) and DRM (/dev/dri/*) device nodes: what GPU ioctls would go to."""
    found = sorted(str(p) for p in dev.glob("nvidia*"))
    with contextlib.suppress(OSError):
        found += sorted(str(p) for p in (dev / "dri").iterdir())
    return found


def load(
    kernel_headers: Path | None = None,
    *,
    ioctls: bool = True,
    max_tasks: int = MAX_TASKS,
    max_cgroups: int = MAX_CGROUPS,
    raw_switch: bool | None = None,
    per_process: bool = True,
    source: Path | None = None,
    btf: Path = VMLINUX,
    proc_devices: Path = PROC_DEVICES,
    task_runtime: bool = True,
) -> Loaded:
    """Check, compile and attach. Raises SourceError with a reason from FIXES.

    raw_switch: per-process mode: attach sched_switch as a raw tracepoint (True), through tracefs
    (False), or try raw and fall back to tracefs if the kernel refuses it (None; kernels before
    4.17 do, and pay a second compile).
    per_process: an entry per process and a program on every context switch
    (--collector.process, WATTPROBE_PER_PROCESS); False (the default): no sched_switch program,
    entries only for processes that made a GPU ioctl (CPU time comes from the cgroups' totals).
    source: another version of bpf/activity.c (benchmarks compare one with the current).
    btf: the kernel's BTF, where the ioctl probe's struct offsets come from; without it the
    probe cannot tell an ioctl's device, and is not attached.
    proc_devices: /proc/devices, naming the GPU device majors (gpu_majors.py).
    task_runtime: charge the kernel's own per-task runtime (needs BTF, a BTF task pointer (5.11+)
    and the raw sched_switch program; without them, or if the kernel refuses the program, the
    clock between switches).
    """
    source = source or bpf_source()
    try:
        import bcc  # noqa: PLC0415 (optional dependency, imported only when eBPF is wanted)
    except ImportError as exc:
        raise SourceError(NO_BCC, f"cannot import bcc: {exc}") from exc
    check_privileges()
    tracefs = find_tracefs()
    required = (*REQUIRED_TRACEPOINTS, SWITCH_TRACEPOINT) if per_process else REQUIRED_TRACEPOINTS
    missing = [f"{c}:{e}" for c, e in required if not tracepoint_exists(tracefs, c, e)]
    if missing:
        raise SourceError(NO_TRACEPOINT, f"{', '.join(missing)} not in {tracefs}/events")
    headers = find_kernel_headers(kernel_headers)

    cflags = [f"-DWATTPROBE_MAX_TASKS={max_tasks}", f"-DWATTPROBE_MAX_CGROUPS={max_cgroups}"]
    if has_group_dead(tracefs):
        cflags.append("-DWATTPROBE_HAVE_GROUP_DEAD")
    optional, attached, optional_missing = _optional_probes(tracefs, ioctls=ioctls, btf=btf)
    cflags += optional
    if per_process:
        cflags.append("-DWATTPROBE_PER_PROCESS")
        attached.insert(0, SCHED_SWITCH)
    # the raw program reads the incoming task's runtime; the classic one has no pointer to it
    runtime = (
        _runtime_flags(btf) if per_process and task_runtime and raw_switch is not False else []
    )
    cflags += headers.cflags()

    switch_probe = NO_SWITCH if not per_process else CLASSIC if raw_switch is False else RAW
    start = time.perf_counter()
    bpf, error, text = _compile(bcc, source, headers, cflags + runtime, switch_probe)
    if error is not None and runtime and not raw_attach_failed(error):
        # a BTF task pointer or a perf-event program refused (kernels before 5.11): the clock
        # (a refused raw tracepoint is the classic program's case, below, which has no runtime)
        log.warning("on-CPU time from task runtime unavailable (%s); using the clock", error)
        runtime = []
        bpf, error, text = _compile(bcc, source, headers, cflags, switch_probe)
    if error is not None and per_process and raw_switch is None and raw_attach_failed(error):
        # the kernel refused the raw tracepoint itself (before 4.17 it has none): the classic
        # one does the same job at a higher cost per context switch
        log.warning(
            "raw tracepoint sched_switch unavailable (%s); using the classic "
            "sched:sched_switch tracepoint",
            error,
        )
        switch_probe = CLASSIC
        runtime = []
        bpf, error, text = _compile(bcc, source, headers, cflags, switch_probe)
    compile_s = time.perf_counter() - start
    if error is not None:
        reason = COMPILE_FAILED if "compile" in str(error).lower() else LOAD_FAILED
        if _looks_like_permission(text + str(error)):
            reason = PERMISSION
        raise SourceError(reason, _first_error(text) or str(error))
    if text.strip():
        log.debug("bcc output while compiling %s:\n%s", source, text.rstrip())
    if "-DWATTPROBE_IOCTLS" in cflags:
        _fill_dev_class(bpf, proc_devices)
    if runtime:
        _attach_slice_namer(bpf)
    _release_compiler_memory()
    info = LoadInfo(
        headers=headers,
        tracefs=tracefs,
        tracepoints=tuple(attached),
        missing_optional=tuple(optional_missing),
        compile_s=compile_s,
        switched_off=() if ioctls else ("syscalls:sys_enter_ioctl (GPU ioctls)",),
        max_tasks=max_tasks,
        max_cgroups=max_cgroups,
        switch_probe=switch_probe,
        per_process=per_process,
        task_runtime=bool(runtime),
        irq_time_apart=bool(runtime) and _irq_time_accounted(btf),
    )
    return Loaded(bpf, info)


def _optional_probes(
    tracefs: Path, *, ioctls: bool, btf: Path
) -> tuple[list[str], list[str], list[str]]:
    """(-D flags, tracepoints attached as category:event, optional parts missing)."""
    cflags: list[str] = []
    attached = [f"{c}:{e}" for c, e in REQUIRED_TRACEPOINTS]
    missing: list[str] = []
    if ioctls and tracepoint_exists(tracefs, *IOCTL_TRACEPOINT):
        offsets, no_btf = _fd_device_offsets(btf)
        cflags += offsets
        if no_btf:
            missing.append(no_btf)
            ioctls = False
    for (category, event), define, wanted in (
        (EXEC_TRACEPOINT, "-DWATTPROBE_EXEC", True),
        (IOCTL_TRACEPOINT, "-DWATTPROBE_IOCTLS", ioctls),
        (ATTACH_TRACEPOINT, "-DWATTPROBE_CGROUP_ATTACH", has_cgroup_attach(tracefs)),
        (MKDIR_TRACEPOINT, "-DWATTPROBE_CGROUP_PATHS", True),
    ):
        if not wanted:
            continue
        if tracepoint_exists(tracefs, category, event):
            cflags.append(define)
            attached.append(f"{category}:{event}")
        else:
            missing.append(f"{category}:{event}")
    return cflags, attached, missing


SAMPLE_PERIOD_NS = 1_000_000_000  # name_slice(): how often each CPU's slice in flight is named
NAME_SLICE_FN = b"name_slice"


def _attach_slice_namer(bpf: Any) -> None:
    """A cpu-clock perf event per CPU runs name_slice() once a second: it names the slice in
    flight there, so userspace can credit a long one before it ends. Without it (perf events
    refused) a slice is credited when it ends."""
    try:
        bpf.attach_perf_event(
            ev_type=PERF_TYPE_SOFTWARE,
            ev_config=PERF_COUNT_SW_CPU_CLOCK,
            fn_name=NAME_SLICE_FN,
            sample_period=SAMPLE_PERIOD_NS,
        )
    except Exception as exc:  # bcc raises bare Exception
        log.warning("slices in flight credited only when they end: %s", exc)


def _runtime_flags(btf: Path) -> list[str]:
    """-D flags for on-CPU time from the kernel's per-task runtime, or [] without BTF."""
    try:
        offsets = runtime_flags(Btf.read(btf))
    except BtfError as exc:
        log.info("on-CPU time from the clock between switches: %s", exc)
        return []
    return ["-DWATTPROBE_TASK_RUNTIME", *offsets]


def _irq_time_accounted(btf: Path) -> bool:
    """Whether the kernel keeps interrupt time out of task runtime (CONFIG_IRQ_TIME_ACCOUNTING:
    its per-CPU struct irqtime exists only then)."""
    try:
        return irq_time_accounted(Btf.read(btf))
    except BtfError:
        return False


def _fd_device_offsets(btf: Path) -> tuple[list[str], str]:
    """(-D flags with the struct offsets the ioctl probe reads, "") or ([], why there are none)."""
    try:
        return offset_flags(Btf.read(btf)), ""
    except BtfError as exc:
        log.warning("GPU ioctls not counted: %s", exc)
        return [], f"{NO_BTF} for GPU ioctls ({exc})"


def _fill_dev_class(bpf: Any, proc_devices: Path) -> None:
    """The GPU majors, now rather than at the first read: until then the probe counts nothing."""
    try:
        table = bpf[b"dev_class"]
    except KeyError:  # another source without the map (a benchmark's baseline)
        return
    DeviceClasses(table, proc_devices).refresh()


def _compile(
    bcc: Any, source: Path, headers: KernelHeaders, cflags: list[str], switch_probe: str
) -> tuple[Any, Exception | None, str]:
    """(bcc.BPF or None, the exception if it failed, compiler output)."""
    if switch_probe == RAW and "-DWATTPROBE_PER_PROCESS" in cflags:
        cflags = [*cflags, "-DWATTPROBE_RAW_SWITCH", f"-DWATTPROBE_SEEN_BITS={SEEN_BITS}"]
    made: list[Any] = []

    class Bpf(bcc.BPF):  # type: ignore[misc]
        def _trace_autoload(self) -> None:
            made.append(self)  # so that what it attached before failing can be detached
            super()._trace_autoload()

    bpf: Any = None
    error: Exception | None = None
    with bcc_environment(headers.environment()), _captured_output() as output:
        try:
            # TRACEPOINT_PROBE and RAW_TRACEPOINT_PROBE functions are attached by the constructor
            bpf = Bpf(src_file=str(source).encode(), cflags=cflags)
        except Exception as exc:  # bcc raises bare Exception for compile and attach errors
            error = exc
            for partial in made:
                with contextlib.suppress(Exception):
                    partial.cleanup()
    return bpf, error, output[0] if output else ""


def raw_attach_failed(error: Exception) -> bool:
    """bcc's errors for loading or attaching the raw tracepoint program."""
    text = str(error)
    return "raw tracepoint" in text or "raw_tracepoint__" in text


def _release_compiler_memory() -> None:
    """clang's heap is freed after the compile but glibc keeps it: hand it back (~25 MiB)."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: not glibc
        ctypes.CDLL(None).malloc_trim(0)


def _looks_like_permission(text: str) -> bool:
    lowered = text.lower()
    return "operation not permitted" in lowered or "permission denied" in lowered


def _first_error(text: str) -> str:
    """The first compiler error line (the rest is usually a consequence of it)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error:" in ln or "Unable to find kernel headers" in ln:
            return ln
    return lines[-1] if lines else ""
