"""How long the PodResources thread spends reading CDI specs: N per-claim specs like the NVIDIA
DRA driver's (tests/fixtures/cdi), the first scan (parse all) and re-scans (nothing changed: a
stat per file). Run from the repository root: python scripts/measure_cdi_scan.py [N]"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from exporter.kube.cdi import CdiScanner

FIXTURE = Path(
    "tests/fixtures/cdi/run/k8s.gpu.nvidia.com-claim_5f0e9c1a-2d3b-4c5d-8e6f-708192a3b4c5.yaml"
)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 200
    text = FIXTURE.read_text()
    root = Path(tempfile.mkdtemp())
    try:
        for _ in range(count):
            uid = str(uuid.uuid4())
            spec = text.replace("5f0e9c1a-2d3b-4c5d-8e6f-708192a3b4c5", uid)
            (root / f"k8s.gpu.nvidia.com-claim_{uid}.yaml").write_text(spec)
        scanner = CdiScanner((root,))
        start = time.perf_counter()
        devices = len(scanner.scan().devices)
        first = time.perf_counter() - start
        again = []
        for _ in range(21):
            start = time.perf_counter()
            scanner.scan()
            again.append(time.perf_counter() - start)
        print(
            f"{count} specs, {devices} devices: first scan {first * 1000:.1f} ms, "
            f"re-scan median {sorted(again)[10] * 1000:.2f} ms"
        )
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
