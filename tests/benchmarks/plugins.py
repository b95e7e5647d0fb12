"""Benchmarks that other parts of wattprobe bring along, run by the harness.

- NVML (tests/benchmarks/nvml_bench.py): imported and run in-process; its figures become a
  section of docs/benchmarks.md (it still writes docs/benchmarks-nvml.md on its own with --write).
- eBPF (tests/benchmarks/ebpf_bench.py, when present): run as `python -m
  tests.benchmarks.ebpf_bench` (it needs root and loads the probes), and the Markdown table it
  prints (| measure | value |) becomes a section. Any two-column table works, so the eBPF
  benchmark can change what it measures without the harness knowing.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from dataclasses import asdict

from tests.benchmarks import nvml_bench
from tests.benchmarks.common import REPO, Figure, Section

NVML_COMMAND = "python -m tests.benchmarks.nvml_bench --write"
EBPF_COMMAND = "python -m tests.benchmarks.ebpf_bench"
EBPF_MODULE = "tests.benchmarks.ebpf_bench"


def nvml(repeat: int) -> Section:
    """Runs nvml_bench.run() in a fresh process: the fake library it builds and counts calls in
    must be the one pynvml loads, not one another benchmark already loaded here."""
    done = subprocess.run(
        [sys.executable, "-m", "tests.benchmarks.plugins", "nvml", str(repeat)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=1800,
    )
    r = nvml_bench.Result(**json.loads(done.stdout.strip().splitlines()[-1]))
    section = Section("GPUs through NVML (fake libnvidia-ml, 8 x H100)")

    def us(figures: tuple[float, float, float]) -> str:
        med, p90, p99 = figures
        return f"{med:,.0f} µs median, {p90:,.0f} p90, {p99:,.0f} p99"

    section.figures += [
        Figure(f"NvmlSource.read(), {r.gpus} GPUs", us(r.read), rerun=NVML_COMMAND),
        Figure("GPU accounting + attribution per interval", us(r.account), rerun=NVML_COMMAND),
        Figure("rendering the GPU families", us(r.render), rerun=NVML_COMMAND),
        Figure(
            "NVML calls per read",
            f"{r.calls:.0f} ({r.calls / r.gpus:.1f} per GPU)",
            rerun=NVML_COMMAND,
        ),
        Figure("GPU series", f"{r.series} for {r.gpus} GPUs", rerun=NVML_COMMAND),
    ]
    section.method = (
        f"tests/benchmarks/nvml_bench.py, {r.repeat} repetitions each: the real nvidia-ml-py "
        "binding on the fake library (answers from memory, so these are wattprobe's own costs; "
        "a real driver adds an ioctl per NVML call). Details: [benchmarks-nvml.md]"
        "(benchmarks-nvml.md)."
    )
    return section


def ebpf_available() -> bool:
    return importlib.util.find_spec(EBPF_MODULE) is not None


def ebpf(timeout_s: float = 1800) -> Section | None:
    """None when the eBPF benchmark is not on this branch."""
    if not ebpf_available():
        return None
    done = subprocess.run(
        [sys.executable, "-m", EBPF_MODULE],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout_s,
    )
    section = Section("eBPF probes (tests/benchmarks/ebpf_bench.py)")
    if done.returncode != 0:
        section.method = (
            f"`{EBPF_COMMAND}` failed with status {done.returncode}:\n\n```\n"
            f"{(done.stdout + done.stderr)[-3000:]}\n```"
        )
        return section
    prose: list[str] = []
    for line in done.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) == 2:
            if cells[0] in ("measure", "") or set(cells[0]) <= {"-", ":"}:
                continue
            section.figures.append(Figure(cells[0], cells[1], rerun=EBPF_COMMAND))
        elif line.strip():
            prose.append(line.strip())
    section.method = " ".join(prose)
    return section


def main() -> None:
    if sys.argv[1:2] == ["nvml"]:
        print(json.dumps(asdict(nvml_bench.run(int(sys.argv[2])))))


if __name__ == "__main__":
    main()
