"""Validate wattprobe's NVML path on the GPU this machine has (issue 32); one JSON report.

    PYTHONPATH=. python tests/gpu_real/validate.py --out DIR [--budget-s 420]   (make gpu-validate)

Starts `wattprobe serve --activity.source procfs` (python -m exporter from this checkout),
runs a matmul load (PyTorch or CuPy) in a process of its own cgroup at a few duty cycles and
then idle, samples nvidia-smi beside it, reads NVML directly (every call timed), scrapes
/metrics, and writes DIR/report.json plus DIR/recorded.nvml: the NVML answers of the busy
phase as a scenario for the fake NVML (tests/sources/gpu/nvml/fake_nvml.c), which CI replays.

Bounded: every wait is cut to what --budget-s leaves; whatever fails is recorded in the report's
"errors" and the report is written anyway (partial). Read-only towards the GPU: it never resets
the GPU, changes clocks, limits or MIG mode.

--engine fake is the test mode (no GPU): the fake NVML must be on LD_LIBRARY_PATH with
$WATTPROBE_FAKE_NVML_SCENARIO naming a scenario file, which this script then drives as the
driver would show the (GPU-less) load process (fakeload.py)."""

from __future__ import annotations

import argparse
import datetime
import importlib
import importlib.metadata
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `tests.gpu_real` importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.gpu_real import cgroup, figures
from tests.gpu_real.agent import REPO, Agent, Samples, Usage
from tests.gpu_real.budget import Budget
from tests.gpu_real.nvmlprobe import Answer, Nvml
from tests.gpu_real.record import scenario_text
from tests.gpu_real.smi import SmiSampler

SCENARIO_ENV = "WATTPROBE_FAKE_NVML_SCENARIO"
# what `python -m exporter serve` imports (pyproject's dependencies), by distribution name
AGENT_DEPS = (
    "prometheus-client",
    "psutil",
    "click",
    "nvidia-ml-py",
    "pyyaml",
    "bcrypt",
    "grpcio",
    "protobuf",
    "rich",
)
# kept back from the phases for the end window (two intervals), the stops and the write
END_RESERVE_S = 10.0
FAKE_XID = 31  # fake mode: one XID event raised in the busy phase, to see it counted


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-validate-out")))
    p.add_argument("--budget-s", type=float, default=420.0, help="wall-clock cap (default 420)")
    p.add_argument("--engine", choices=("auto", "torch", "cupy", "fake"), default="auto")
    p.add_argument("--gpu", type=int, default=0, help="NVML index of the GPU to load")
    p.add_argument("--duties", default="1.0,0.6,0.3,0", help="duty cycles, in order")
    p.add_argument("--interval", default="1s", help="the agent's --interval")
    p.add_argument("--sample-s", type=float, default=1.0, help="direct NVML sampling period")
    p.add_argument("--nvidia-smi", default=None, help="nvidia-smi binary [default: on PATH]")
    p.add_argument("--agent-arg", action="append", default=[], help="extra flag for serve")
    return p.parse_args(argv)


def pick_engine(wanted: str) -> str:
    if wanted != "auto":
        return wanted
    for name in ("torch", "cupy"):
        try:
            importlib.import_module(name)
            return name
        except ImportError:
            continue
    raise RuntimeError("neither torch nor cupy can be imported: no load to run")


def environment() -> dict[str, object]:
    versions: dict[str, str | None] = {}
    for dist in AGENT_DEPS:
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return {
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "kernel": platform.release(),
        "cpus": os.cpu_count(),
        "agent_deps": versions,
        "missing_deps": [d for d, v in versions.items() if v is None],
    }


def usage_dict(u: Usage | None) -> dict[str, float] | None:
    return (
        None
        if u is None
        else {"cpu_s": round(u.cpu_s, 3), "rss_mib": round(u.rss_bytes / 2**20, 2)}
    )


class LoadProcess:
    """The load child: started, placed in its cgroup, then told to go."""

    def __init__(self, engine: str, gpu: int, log: Path) -> None:
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.gpu_real.load", engine, str(gpu)],
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=log.open("w"),
            text=True,
            env=env,
        )
        self.ready = threading.Event()
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == "ready":
                self.ready.set()

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def stop(self, timeout: float) -> int | None:
        if self.proc.poll() is None:
            try:
                self.send("stop")
                self.proc.wait(timeout=max(1.0, timeout))
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=5)
        return self.proc.returncode


class Run:
    def __init__(self, args: argparse.Namespace, report: dict[str, Any]) -> None:
        self.args = args
        self.report = report
        self.budget = Budget(args.budget_s)
        self.out: Path = args.out
        self.nvml = Nvml()
        self.agent: Agent | None = None
        self.smi: SmiSampler | None = None
        self.load: LoadProcess | None = None
        self.placement: cgroup.Placement | None = None
        self.driver: Any = None  # fakeload.FakeDriver in fake mode
        self.system: dict[str, Answer] = {}
        self.identities: list[dict[str, Answer]] = []
        self.busy: list[dict[str, Answer]] | None = None
        self.last_sample: dict[str, Answer] = {}

    # -- steps ---------------------------------------------------------------------------

    def go(self) -> None:
        args, report = self.args, self.report
        report["environment"] = environment()
        engine = pick_engine(args.engine)
        report["engine"] = engine
        self.system = self.nvml.open()
        self.identities = [self.nvml.identity(i) for i in range(len(self.nvml.handles))]
        report["nvml"] = {"system": self.system, "gpus": self.identities}
        if not self.nvml.handles:
            raise RuntimeError("NVML lists no GPU")
        gpu = args.gpu
        report["nvml"]["idle_sample"] = self.nvml.sample(gpu)
        report["nvml"]["xid_event_set"] = self.nvml.xid_probe()
        if engine == "fake":
            from tests.gpu_real.fakeload import FakeDriver  # noqa: PLC0415 (test mode only)

            self.driver = FakeDriver(Path(os.environ[SCENARIO_ENV]))
            self.driver.start()
        self.start_smi()
        self.start_agent()
        write_report(self.out, self.report)  # checkpoints: a killed run leaves what it had
        self.start_load(engine, gpu)
        write_report(self.out, self.report)
        self.measure(gpu)

    def start_smi(self) -> None:
        binary = self.args.nvidia_smi or shutil.which("nvidia-smi")
        if binary is None:
            self.report["nvidia_smi"] = {"found": False}
            return
        self.smi = SmiSampler(binary, self.out / "nvidia-smi.log")
        self.smi.start()
        self.report["nvidia_smi"] = {"found": True, "binary": binary}

    def start_agent(self) -> None:
        args = ["--activity.source", "procfs", "--interval", self.args.interval]
        args += ["--collector.container", "--collector.process", *self.args.agent_arg]
        self.report["agent"] = {"args": args}
        self.agent = Agent.start(args, self.out / "agent.log", dict(os.environ))
        ready_s = self.agent.wait_ready(self.budget.cap(90.0, END_RESERVE_S))
        self.report["agent"]["ready_s"] = round(ready_s, 3)
        self.report["agent"]["at_ready"] = usage_dict(self.agent.usage())

    def start_load(self, engine: str, gpu: int) -> None:
        self.load = LoadProcess(engine, gpu, self.out / "load.log")
        self.placement = cgroup.place(self.load.proc.pid)
        self.load.send("go")  # only now does it touch the GPU: all its work is in the cgroup
        self.report["load"] = {"pid": self.load.proc.pid, "cgroup": self.placement.as_dict()}
        if not self.placement.placed:
            self.report["load"]["cgroup_note"] = (
                "could not make a cgroup: the load runs in the validator's own; billing is read "
                "from the per-process series"
            )
        started = time.monotonic()
        if not self.load.ready.wait(self.budget.cap(120.0, END_RESERVE_S)):
            raise TimeoutError(f"load process not ready (exit status {self.load.proc.poll()})")
        self.report["load"]["ready_s"] = round(time.monotonic() - started, 3)
        if self.driver is not None:
            self.driver.set(pid=self.load.proc.pid, running=True)

    def measure(self, gpu: int) -> None:
        assert self.agent is not None and self.load is not None and self.placement is not None
        agent, load = self.agent, self.load
        container = self.placement.container_id if self.placement.placed else None
        interval_s = _seconds(self.args.interval)
        wait_s = 3 * interval_s + 5
        t0, s0 = agent.next_interval(self.budget.cap(wait_s))
        e0 = [self.nvml.energy_mj(i) for i in range(len(self.nvml.handles))]
        skew0 = _skew(time.time(), s0)
        u0 = agent.usage()
        duties = [float(d) for d in self.args.duties.split(",")]
        # after each phase one interval is waited for; at the end two more
        reserve = END_RESERVE_S + (len(duties) + 2) * interval_s
        phase_s = self.budget.cap(1e9, reserve) / len(duties)
        self.report["phase_s"] = round(phase_s, 2)
        phases: list[dict[str, Any]] = []
        self.report["phases"] = phases
        before = s0
        peak_rss = u0.rss_bytes if u0 else 0
        for n, duty in enumerate(duties):
            load.send(f"duty {duty}")
            if self.driver is not None:
                self.driver.set(duty=duty)
            end = time.monotonic() + phase_s
            seen = self._sample_until(end, reserve, gpu, busy=duty == max(duties), first=n == 0)
            peak_rss = max(peak_rss, seen.pop("peak_rss"))
            when, after = agent.next_interval(self.budget.cap(wait_s))
            smi_row = self.smi.nearest(gpu, when) if self.smi else None
            phases.append(
                {
                    "duty": duty,
                    **seen,
                    "billing": figures.phase_billing(before, after, gpu, container, load.proc.pid),
                    "gauges": figures.gauges(after, gpu, self.last_sample, smi_row),
                    "agent_collect_s": figures.collect_durations(after),
                }
            )
            before = after
            write_report(self.out, self.report)  # a checkpoint, should the run be killed
        self.report["load"]["exit_status"] = load.stop(self.budget.cap(15.0))
        if self.driver is not None:
            self.driver.set(running=False, duty=0.0)
            self.driver.stop()  # the counter is final from here on
        agent.next_interval(self.budget.cap(wait_s))  # the one in flight may predate the stop
        t1, s1 = agent.next_interval(self.budget.cap(wait_s))
        e1 = [self.nvml.energy_mj(i) for i in range(len(self.nvml.handles))]
        skew1 = _skew(time.time(), s1)
        u1 = agent.usage()
        if u1:
            peak_rss = max(peak_rss, u1.rss_bytes)
        self.report["energy"] = self.energy(s0=s0, s1=s1, e0=e0, e1=e1, t0=t0, t1=t1)
        # how long after the agent's interval ended NVML's counter was read, at each end
        self.report["energy"]["nvml_read_after_agent_s"] = [skew0, skew1]
        self.report["health"] = {
            str(i): {
                "wattprobe": figures.health_series(s1, i),
                "nvml": {
                    k: v
                    for k, v in self.nvml.sample(i).items()
                    if k.startswith(("ecc.", "clock_events", "pcie_replay"))
                },
            }
            for i in range(len(self.nvml.handles))
        }
        steady = None
        if u0 and u1 and t1 > t0:
            steady = {
                "cpu_cores": round((u1.cpu_s - u0.cpu_s) / (t1 - t0), 4),
                "rss_mib_end": round(u1.rss_bytes / 2**20, 2),
                "rss_mib_peak": round(peak_rss / 2**20, 2),
                "window_s": round(t1 - t0, 2),
            }
        self.report["agent"]["steady"] = steady
        self.report["busy_ok"] = _busy_ok(phases, max(duties))

    def _sample_until(
        self, end: float, reserve: float, gpu: int, *, busy: bool, first: bool
    ) -> dict[str, Any]:
        """Sample NVML every --sample-s until end (once at least, however little budget is
        left): was the load in the process list, in the utilization samples; which PIDs were."""
        assert self.load is not None and self.agent is not None
        pid = self.load.proc.pid
        procs: set[int] = set()
        utils: set[int] = set()
        peak_rss = 0
        once = True
        while once or (time.monotonic() < end and self.budget.left() > reserve):
            once = False
            started = time.perf_counter()
            sample = self.nvml.sample(gpu)
            self.nvml.times.seconds.setdefault("sample: every call, one GPU", []).append(
                time.perf_counter() - started
            )
            self.last_sample = sample
            procs |= {
                int(v) for k, v in sample.items() if k.startswith("proc.") and k.endswith(".pid")
            }
            utils |= {
                int(v) for k, v in sample.items() if k.startswith("putil.") and k.endswith(".pid")
            }
            # the busy phase's answers become the recording: one with the load in it if any
            if busy and (self.busy is None or pid in procs):
                self.busy = [
                    {**self.identities[i], **(sample if i == gpu else self.nvml.sample(i))}
                    for i in range(len(self.nvml.handles))
                ]
            if first and self.driver is not None and "fake_xid" not in self.report:
                self.driver.inject_xid(FAKE_XID)
                self.report["fake_xid"] = FAKE_XID
            now = self.agent.usage()
            peak_rss = max(peak_rss, now.rss_bytes if now else 0)
            time.sleep(min(self.args.sample_s, max(0.0, end - time.monotonic())))
        return {
            "load_in_process_list": pid in procs,
            "load_in_process_utilization": pid in utils,
            "process_list_pids": sorted(procs),
            "process_utilization_pids": sorted(utils),
            "peak_rss": peak_rss,
        }

    def energy(
        self,
        *,
        s0: Samples,
        s1: Samples,
        e0: list[int | None],
        e1: list[int | None],
        t0: float,
        t1: float,
    ) -> dict[str, Any]:
        gpus: dict[str, Any] = {}
        for i in range(len(self.nvml.handles)):
            wp = figures.gpu_energy(s1, i) - figures.gpu_energy(s0, i)
            a, b = e0[i], e1[i]
            nv = None if a is None or b is None else (b - a) / 1000.0
            smi = self.smi.energy_j(i, t0, t1) if self.smi else None
            gpus[str(i)] = {
                "wattprobe_j": round(wp, 3),
                "nvml_counter_j": nv,
                "nvml_counter_mj": [a, b],
                "nvidia_smi_integrated_j": None if smi is None else round(smi[0], 3),
                "nvidia_smi_rows": None if smi is None else smi[1],
                "wattprobe_vs_nvml_pct": figures.agreement_pct(wp, nv),
                "nvidia_smi_vs_nvml_pct": figures.agreement_pct(smi[0] if smi else None, nv),
                "wattprobe_vs_nvidia_smi_pct": figures.agreement_pct(wp, smi[0] if smi else None),
            }
        return {"window_s": round(t1 - t0, 3), "gpus": gpus}

    # -- the end, whatever happened -------------------------------------------------------

    def close(self) -> None:
        steps = (
            ("load", lambda: self.load.stop(5.0) if self.load else None),
            ("driver", lambda: self.driver.stop() if self.driver else None),
            ("agent", self._stop_agent),
            ("nvidia_smi", lambda: self.smi.stop() if self.smi else None),
            ("cgroup", lambda: cgroup.remove(self.placement) if self.placement else None),
            ("recording", self._record),
        )
        for name, step in steps:
            try:
                step()
            except Exception as err:  # keep closing the rest; the report says what failed
                self.report["errors"].append(f"closing {name}: {err!r}")
        self.report["nvml"] = {
            **self.report.get("nvml", {}),
            "call_times": self.nvml.times.summary(),
        }
        self.report["nvml"]["call_errors"] = self.nvml.times.errors
        try:
            self.nvml.close()
        except Exception as err:
            self.report["errors"].append(f"nvmlShutdown: {err!r}")

    def _stop_agent(self) -> None:
        if self.agent is not None:
            self.report.setdefault("agent", {})["exit_status"] = self.agent.stop()
            self.report["agent"]["log_tail"] = self.agent.log_tail()

    def _record(self) -> None:
        if self.busy is None:
            self.report["recording"] = None
            return
        gpu = self.report.get("nvml", {}).get("gpus", [{}])[0]
        header = [
            f"Recorded by tests/gpu_real/validate.py on {self.report['started_utc']}",
            f"{gpu.get('name', '?')}, driver {self.system.get('driver_version', '?')}, "
            f"engine {self.report.get('engine')}: NVML's answers during the busy phase.",
            "Units as NVML returns them: mW, mJ, MHz, bytes, percent. Keys NVML did not "
            "answer are absent (the fake then answers NOT_SUPPORTED).",
        ]
        path = self.out / "recorded.nvml"
        path.write_text(scenario_text(header, self.system, self.busy))
        self.report["recording"] = str(path)


def _busy_ok(phases: list[dict[str, Any]], busy_duty: float) -> bool | None:
    """Issue 14's rule on the busiest phase: the load's bill (container, or process where no
    cgroup could be made) is >= 90 % of the GPU's energy."""
    for phase in phases:
        if phase.get("duty") == busy_duty:
            billing = phase["billing"]
            share = billing.get("container_share", billing.get("process_share"))
            return None if share is None else bool(share >= figures.BUSY_ACTIVE_SHARE)
    return None


def _skew(now: float, samples: Samples) -> float | None:
    end = figures.interval_end(samples)
    return None if end is None else round(now - end, 3)


def _seconds(duration: str) -> float:
    units = {"ms": 1e-3, "s": 1.0, "m": 60.0}
    for suffix in ("ms", "s", "m"):
        if duration.endswith(suffix):
            return float(duration[: -len(suffix)]) * units[suffix]
    return float(duration)


def write_report(out: Path, report: dict[str, Any]) -> Path:
    path = out / "report.json"
    tmp = out / ".report.json.tmp"
    tmp.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    os.replace(tmp, path)
    return path


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "schema": 1,
        "started_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "args": {k: str(v) for k, v in vars(args).items()},
        "errors": [],
        "complete": False,  # until the end: a checkpoint of a killed run says so
    }

    def on_term(signum: int, frame: object) -> None:
        raise SystemExit(f"signal {signum}")

    signal.signal(signal.SIGTERM, on_term)
    run = Run(args, report)
    try:
        run.go()
    except BaseException as err:  # a partial report beats none: record and go on closing
        report["errors"].append(f"{err!r}\n{traceback.format_exc(limit=6)}")
    finally:
        run.close()
        report["elapsed_s"] = round(run.budget.elapsed(), 2)
        report["complete"] = not report["errors"]
        print(write_report(args.out, report))
    return 0 if report["complete"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
