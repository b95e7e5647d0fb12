"""The showback factors (docs/showback-config.md) the live stack's agents serve, one
--showback.config file per node, so the showback rules and dashboards run against every case a
fleet has:
- gpu:        PUE, EUR, carbon, a price for its GPU model (the H100s; GPU 4 held and idle);
- measured:   PUE, USD (a second currency, never added to EUR), carbon, no GPU;
- sensorless: USD without PUE or carbon (cost from IT energy, no carbon); a price for resource
              nvidia.com/gpu and one for nvidia.com/mig-1g.5gb (its A100 is in MIG mode: the
              1g.5gb device by its resource's price, the others at their share of the GPU's);
- broken and the eBPF node: nothing (no cost, no facility energy, no carbon for them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

H100_MODEL = "NVIDIA H100 80GB HBM3"  # tests/fixtures/nvml/h100x8-timesliced.nvml
MIG_1G_RESOURCE = "nvidia.com/mig-1g.5gb"  # tests/fixtures/nvml/a100-mig.nvml's smallest
MIG_1G_PRICE = 0.2

NODE_FACTORS: dict[str, dict[str, Any]] = {
    "gpu": {
        "pue": 1.25,
        "energy_price": 0.25,
        "currency": "EUR",
        "carbon_intensity": 350,
        "gpu_hour_prices": [{"model": H100_MODEL, "price": 2.5}],
    },
    "measured": {"pue": 1.5, "energy_price": 0.2, "currency": "USD", "carbon_intensity": 100},
    "sensorless": {
        "energy_price": 0.3,
        "currency": "USD",
        "gpu_hour_prices": [
            {"resource": "nvidia.com/gpu", "price": 1.0},
            {"resource": MIG_1G_RESOURCE, "price": MIG_1G_PRICE},
        ],
    },
}


# Nodes whose agent also reads a --web.config.file (plain HTTP, a response header only), so the
# reload gauges WattprobeConfigReloadFailed reads exist in the stack, web and showback both.
WEB_CONFIG_NODES = frozenset({"measured"})
WEB_CONFIG = {"http_server_config": {"headers": {"X-Content-Type-Options": "nosniff"}}}


def showback_args(workdir: Path, node: str) -> list[str]:
    """The agent's flags for the node's factors: a --showback.config file, or none; and its
    --web.config.file where WEB_CONFIG_NODES says so."""
    args = []
    if node in WEB_CONFIG_NODES:
        web = workdir / f"web-config-{node}.yml"
        web.write_text(yaml.safe_dump(WEB_CONFIG))
        args += ["--web.config.file", str(web)]
    factors = NODE_FACTORS.get(node)
    if factors is None:
        return args
    path = workdir / f"showback-{node}.yaml"
    path.write_text(yaml.safe_dump(factors))
    return [*args, "--showback.config", str(path)]
