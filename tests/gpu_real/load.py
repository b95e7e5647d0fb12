"""The known GPU load, run as its own process (so it can sit in its own cgroup):
python -m tests.gpu_real.load ENGINE [GPU]   ENGINE: torch, cupy or fake.

It waits for "go" on stdin (sent once it sits in its cgroup), prints "ready" once its CUDA
context exists, then reads commands from stdin: "duty D" runs matmuls for D of every 100 ms
period and sleeps the rest (D = 0: idle, context kept), "stop" exits. With "fake" it holds no
GPU at all: the validator then drives the fake NVML's scenario for it (fakeload.py), so the
test exercises everything but the GPU."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

PERIOD_S = 0.1
SIZE = 8192  # fp16 8192^3 matmul: ~1.1 TFLOP, a few ms on an H100: fine-grained duty cycles
HOLD_BYTES = 4 << 30  # memory held while loaded, so memory.used moves visibly


def torch_step(gpu: int) -> Callable[[], None]:
    import torch  # noqa: PLC0415 (only the engine asked for is imported)

    device = torch.device(f"cuda:{gpu}")
    a = torch.randn(SIZE, SIZE, device=device, dtype=torch.float16)
    b = torch.randn(SIZE, SIZE, device=device, dtype=torch.float16)
    hold = torch.empty(HOLD_BYTES, dtype=torch.uint8, device=device)
    torch.cuda.synchronize(device)

    def step() -> None:
        torch.matmul(a, b)
        torch.cuda.synchronize(device)
        assert hold is not None  # the held memory lives as long as the step

    return step


def cupy_step(gpu: int) -> Callable[[], None]:
    import cupy  # noqa: PLC0415

    cupy.cuda.Device(gpu).use()
    a = cupy.random.random((SIZE, SIZE)).astype(cupy.float16)
    b = cupy.random.random((SIZE, SIZE)).astype(cupy.float16)
    hold = cupy.empty(HOLD_BYTES, dtype=cupy.uint8)
    cupy.cuda.Device(gpu).synchronize()

    def step() -> None:
        cupy.matmul(a, b)
        cupy.cuda.Device(gpu).synchronize()
        assert hold is not None

    return step


def fake_step(gpu: int) -> Callable[[], None]:
    return lambda: time.sleep(0.001)


ENGINES = {"torch": torch_step, "cupy": cupy_step, "fake": fake_step}


def main(argv: list[str]) -> int:
    engine = argv[0] if argv else "torch"
    gpu = int(argv[1]) if len(argv) > 1 else 0
    sys.stdin.readline()  # "go": the validator has placed this process in its cgroup
    step = ENGINES[engine](gpu)
    duty = [0.0]
    stop = threading.Event()

    def commands() -> None:
        for line in sys.stdin:
            word, _, arg = line.strip().partition(" ")
            if word == "duty":
                duty[0] = min(1.0, max(0.0, float(arg)))
            elif word == "stop":
                break
        stop.set()  # stdin closed counts as stop: the validator died

    threading.Thread(target=commands, daemon=True).start()
    print("ready", flush=True)
    while not stop.is_set():
        start = time.monotonic()
        while time.monotonic() - start < duty[0] * PERIOD_S:
            step()
        rest = PERIOD_S - (time.monotonic() - start)
        if rest > 0:
            stop.wait(rest)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
