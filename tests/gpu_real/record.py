"""Write NVML answers as a scenario file in the fake NVML's format (tests/sources/gpu/nvml/
fake_nvml.c documents the keys): the recording a CI test replays. A key NVML did not answer is
left out, which the fake answers with NVML_ERROR_NOT_SUPPORTED, as the driver did."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tests.gpu_real.nvmlprobe import Answer

SYSTEM_KEYS = ("driver_version", "nvml_version", "cuda_version")


def scenario_text(
    header: Sequence[str],
    system: Mapping[str, Answer],
    gpus: Sequence[Mapping[str, Answer]],
) -> str:
    lines = [f"# {line}" for line in header]
    lines += [f"{k}={system[k]}" for k in SYSTEM_KEYS if k in system]
    for index, values in enumerate(gpus):
        lines.append("")
        lines += [f"gpu.{index}.{key}={value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"
