"""VictoriaMetrics as the edge fleet's remote-write receiver, and one fleet spread over two.

    python -m tests.benchmarks --only fleet-vm

- memory per series: Debian's victoria-metrics (single node) receiving tests/support/fleet.py's
  synthetic edge nodes by remote write (1 s samples, the forwarder's rate); RSS growth per
  series, beside the Prometheus figure of the fleet section.
- sharding: the shipped vmagent scraping several synthetic nodes and writing to two
  VictoriaMetrics nodes, each URL keeping the nodes whose name hashes to it
  (-remoteWrite.urlRelabelConfig with hashmod: Debian's vmagent 1.79 has no
  -remoteWrite.shardByURL, which came later), plus a third receiver taking everything as the
  reference: every series must be on exactly one shard, with the reference's samples.
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.benchmarks.common import Figure, Section, read_proc_memory_mib
from tests.support.fleet import Fleet, NodeServer, remote_write, timestamps
from tests.support.monitoringstack import Daemon, spawn_daemon
from tests.support.realparts import require_binary
from tests.support.running import free_port

COMMAND = "python -m tests.benchmarks --only fleet-vm"


def start_vm(workdir: Path, name: str) -> Daemon:
    """victoria-metrics single node on loopback; no query latency offset (the default 30 s
    hides the newest samples from queries)."""
    binary = require_binary("victoria-metrics")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = [
        binary,
        f"-storageDataPath={workdir / name}",
        f"-httpListenAddr=127.0.0.1:{port}",
        "-search.latencyOffset=0s",
        "-retentionPeriod=30d",
        "-loggerLevel=WARN",
    ]
    return spawn_daemon(name, argv, port, workdir / f"{name}.log")


def _get(daemon: Daemon, path: str, params: dict[str, str] | None = None) -> object:
    query = f"?{urllib.parse.urlencode(params)}" if params else ""
    with urllib.request.urlopen(f"{daemon.url}{path}{query}", timeout=120) as resp:
        body = resp.read().decode()
    return json.loads(body) if body.startswith("{") else body


def _flush(daemon: Daemon) -> None:
    urllib.request.urlopen(f"{daemon.url}/internal/force_flush", timeout=60).read()


def series_count(daemon: Daemon) -> int:
    _flush(daemon)
    got = _get(daemon, "/api/v1/series/count")
    assert isinstance(got, dict)
    return int(got["data"][0])


def series_by_node(daemon: Daemon, match: str) -> dict[str, int]:
    _flush(daemon)
    got = _get(daemon, "/api/v1/query", {"query": f"count by (node) ({match})"})
    assert isinstance(got, dict)
    return {r["metric"].get("node", ""): int(r["value"][1]) for r in got["data"]["result"]}


@dataclass(frozen=True)
class Memory:
    nodes: int
    series: int
    samples: int
    per_series_kib: float
    rss_mib: float


def memory_per_series(workdir: Path, nodes: int, seconds: int) -> Memory:
    fleet = Fleet(nodes, gpu_every=4)
    vm = start_vm(workdir, "vm-memory")
    try:
        time.sleep(3)
        empty = read_proc_memory_mib(vm.proc.pid)["VmRSS"]
        now = time.time()
        stamps = list(timestamps(now - seconds, now, 1.0))
        ingest = remote_write(fleet.series, f"{vm.url}/api/v1/write", stamps, now - seconds)
        time.sleep(5)
        series = series_count(vm)
        rss = read_proc_memory_mib(vm.proc.pid)["VmRSS"]
    finally:
        vm.stop()
    return Memory(nodes, series, ingest.samples, (rss - empty) * 1024 / series, rss)


@dataclass(frozen=True)
class Sharded:
    nodes: int
    per_shard: tuple[dict[str, int], dict[str, int]]
    reference: dict[str, int]


def sharded(workdir: Path, nodes: int, seconds: float) -> Sharded:
    """vmagent spreading `nodes` synthetic nodes over two receivers by node."""
    vmagent = require_binary("vmagent")
    fleet = Fleet(nodes, gpu_every=0)
    servers = []
    by_node: dict[str, list[object]] = {}
    for s in fleet.series:
        node = dict(s.labels).get("node", "")
        by_node.setdefault(node, []).append(s)
    shards = (start_vm(workdir, "vm-shard-0"), start_vm(workdir, "vm-shard-1"))
    reference = start_vm(workdir, "vm-reference")
    agent = None
    try:
        jobs = []
        for node, series in sorted(by_node.items()):
            server = NodeServer(series)  # type: ignore[arg-type]
            servers.append(server)
            jobs.append(
                {
                    "targets": [f"127.0.0.1:{server.port}"],
                    "labels": {"node": node, "instance": node},
                }
            )
        scrape = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
            "scrape_configs": [
                {"job_name": "wattprobe", "honor_labels": True, "static_configs": jobs}
            ],
        }
        (workdir / "scrape.yml").write_text(yaml.safe_dump(scrape))
        relabel = []
        for n in range(2):
            path = workdir / f"shard-{n}.yml"
            path.write_text(
                yaml.safe_dump(
                    [
                        {
                            "source_labels": ["node"],
                            "modulus": 2,
                            "target_label": "__tmp_shard",
                            "action": "hashmod",
                        },
                        {"source_labels": ["__tmp_shard"], "regex": str(n), "action": "keep"},
                    ]
                )
            )
            relabel.append(str(path))
        (workdir / "keep-all.yml").write_text("[]\n")
        relabel.append(str(workdir / "keep-all.yml"))
        port = free_port()
        argv = [
            vmagent,
            f"-promscrape.config={workdir / 'scrape.yml'}",
            f"-remoteWrite.url={shards[0].url}/api/v1/write",
            f"-remoteWrite.url={shards[1].url}/api/v1/write",
            f"-remoteWrite.url={reference.url}/api/v1/write",
            f"-remoteWrite.urlRelabelConfig={','.join(relabel)}",
            f"-remoteWrite.tmpDataPath={workdir / 'queue'}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-loggerLevel=WARN",
        ]
        agent = spawn_daemon("vmagent-sharding", argv, port, workdir / "vmagent.log")
        time.sleep(seconds)
        match = '{job="wattprobe"}'
        return Sharded(
            nodes,
            (series_by_node(shards[0], match), series_by_node(shards[1], match)),
            series_by_node(reference, match),
        )
    finally:
        if agent is not None:
            agent.stop()
        for d in (*shards, reference):
            d.stop()
        for server in servers:
            server.stop()


def run(workdir: Path, nodes: int = 20, seconds: int = 120) -> Section:
    mem = memory_per_series(workdir / "memory", nodes, seconds)
    shard = sharded(workdir / "sharding", 6, 30.0)
    a, b = shard.per_shard
    overlap = set(a) & set(b)
    complete = {**a, **b} == shard.reference
    figures = [
        Figure(
            f"VictoriaMetrics 1.79 single node as receiver: RSS growth per series ({mem.nodes} "
            f"synthetic edge nodes, 1 in 4 with 8 GPUs, {seconds} s of 1 s samples)",
            f"{mem.per_series_kib:.2f} KiB per series ({mem.series} series, {mem.samples} "
            f"samples, RSS {mem.rss_mib:.0f} MiB)",
            rerun=COMMAND,
        ),
        Figure(
            f"vmagent spreading {shard.nodes} nodes over two VictoriaMetrics by node "
            "(urlRelabelConfig hashmod): nodes per shard; nodes on both; every node's series "
            "count equal to the reference receiver's",
            f"{len(a)} + {len(b)}; {len(overlap)}; {'yes' if complete else 'no'}",
            "every node on one shard, complete",
            not overlap and complete,
            COMMAND,
        ),
    ]
    method = (
        "Debian 12's victoria-metrics and vmagent (1.79.5) on loopback. Memory: "
        "tests/support/fleet.py's "
        "synthetic nodes remote-written with 1 s samples into an empty single node; RSS after "
        "ingest minus RSS before, over /api/v1/series/count. Sharding: one NodeServer per "
        "synthetic node scraped every second by one vmagent with three -remoteWrite.url: two "
        "shards, each keeping the nodes whose `node` hashes to it, and a reference taking "
        'everything; after 30 s, `count by (node) ({job="wattprobe"})` on each.'
    )
    return Section("VictoriaMetrics as the fleet's receiver", figures, method)
