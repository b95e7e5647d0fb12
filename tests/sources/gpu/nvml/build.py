"""Compile tests/sources/gpu/nvml/fake_nvml.c into a libnvidia-ml.so.1 that the real pynvml loads.

python -m tests.sources.gpu.nvml.build DEST_DIR     # then LD_LIBRARY_PATH=DEST_DIR
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("fake_nvml.c")
LIBRARY = "libnvidia-ml.so.1"
SCENARIO_ENV = "WATTPROBE_FAKE_NVML_SCENARIO"
EVENT_POLL_ENV = "WATTPROBE_FAKE_NVML_EVENT_POLL_MS"  # how often a waiting event wait polls


def build_fake_nvml(dest: Path, gcc: str = "gcc") -> Path:
    """Build dest/libnvidia-ml.so.1 (with that soname, as the real one has); return dest."""
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / LIBRARY
    cmd = [gcc, "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror"]
    cmd += [f"-Wl,-soname,{LIBRARY}", "-o", str(out), str(SOURCE), "-lpthread"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"building the fake NVML failed:\n{result.stderr}")
    return dest


if __name__ == "__main__":
    print(build_fake_nvml(Path(sys.argv[1]) if len(sys.argv) > 1 else Path("build/fake-nvml")))
