"""The showback factor series (docs/showback.md) for the live stack, served from loopback.

The agent serves wattprobe_node_pue, wattprobe_energy_price_per_kwh{currency},
wattprobe_carbon_intensity_grams_per_kwh and wattprobe_gpu_hour_price{currency,model,resource}
from its --showback.* flags (issue 33). Until the live exporters get those flags, this server
plays them, one set per node, each series with its node label (scraped with honor_labels), so
the showback rules and dashboards run against every case a fleet has:
- gpu:        PUE, EUR, carbon, a price for its GPU model (the H100s; GPU 4 held and idle);
- measured:   PUE, USD (a second currency, never added to EUR), carbon, no GPU;
- sensorless: USD without PUE or carbon (cost from IT energy, no carbon); a price for resource
              nvidia.com/gpu (its A100 is in MIG mode: MIG devices are not priced);
- broken and the eBPF node: nothing (no cost, no facility energy, no carbon for them).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

JOB = "wattprobe-showback-factors"
H100_MODEL = "NVIDIA H100 80GB HBM3"  # tests/fixtures/nvml/h100x8-timesliced.nvml

# (metric, labels, value)
FACTORS: tuple[tuple[str, dict[str, str], float], ...] = (
    ("wattprobe_node_pue", {"node": "gpu"}, 1.25),
    ("wattprobe_energy_price_per_kwh", {"node": "gpu", "currency": "EUR"}, 0.25),
    ("wattprobe_carbon_intensity_grams_per_kwh", {"node": "gpu"}, 350.0),
    (
        "wattprobe_gpu_hour_price",
        {"node": "gpu", "currency": "EUR", "model": H100_MODEL, "resource": ""},
        2.5,
    ),
    ("wattprobe_node_pue", {"node": "measured"}, 1.5),
    ("wattprobe_energy_price_per_kwh", {"node": "measured", "currency": "USD"}, 0.2),
    ("wattprobe_carbon_intensity_grams_per_kwh", {"node": "measured"}, 100.0),
    ("wattprobe_energy_price_per_kwh", {"node": "sensorless", "currency": "USD"}, 0.3),
    (
        "wattprobe_gpu_hour_price",
        {"node": "sensorless", "currency": "USD", "model": "", "resource": "nvidia.com/gpu"},
        1.0,
    ),
)


def exposition() -> bytes:
    """The Prometheus text format of FACTORS, label values escaped."""
    lines = []
    for metric in dict.fromkeys(m for m, _, _ in FACTORS):
        lines.append(f"# TYPE {metric} gauge")
        for name, labels, value in FACTORS:
            if name != metric:
                continue
            pairs = ",".join(
                f'{k}="{v.replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                for k, v in labels.items()
            )
            lines.append(f"{metric}{{{pairs}}} {value!r}")
    return ("\n".join(lines) + "\n").encode()


@dataclass
class FactorServer:
    server: ThreadingHTTPServer
    thread: threading.Thread

    @classmethod
    def start(cls) -> FactorServer:
        body = exposition()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep pytest output clean

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=server.serve_forever, name="factors", daemon=True)
        thread.start()
        return cls(server, thread)

    @property
    def address(self) -> str:
        host, port = self.server.server_address[:2]
        return f"{host!s}:{port}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
