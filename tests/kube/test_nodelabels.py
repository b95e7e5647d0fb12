"""The node's instance-type label read from a loopback apiserver (TLS, bearer token) at start-up,
and what the estimate makes of it: a GCP or Azure VM, whose DMI name is no instance type, gets
its instance's host CPU."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.kube.nodelabels import (
    INSTANCE_TYPE_LABELS,
    LOOKUP_TIMEOUT_S,
    instance_type_label,
    with_node_instance_type,
)
from exporter.model.config import Config
from exporter.sources.power.cpumodel.lookup import INSTANCE
from exporter.sources.power.estimate import NodeModels
from tests.sources.power.test_estimate import node_tree
from tests.support.kubefakes import FakeApiserver, TlsFiles, make_tls
from tests.support.running import parse_samples, select, start_exporter

TOKEN = "node-reader-token"
NODE = "gke-pool-1-abcd"
# a GCP machine type in Boavizta's tables; its DMI product name ("Google Compute Engine") is none
MACHINE = "n2-standard-8"


def node_object(labels: dict[str, str]) -> dict[str, Any]:
    return {"kind": "Node", "apiVersion": "v1", "metadata": {"name": NODE, "labels": labels}}


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return make_tls(tmp_path / "tls")


@pytest.fixture
def apiserver(tls: TlsFiles) -> Iterator[FakeApiserver]:
    fake = FakeApiserver(tls=tls, token=TOKEN)
    fake.nodes[NODE] = node_object({INSTANCE_TYPE_LABELS[0]: MACHINE, "kubernetes.io/os": "linux"})
    fake.start()
    yield fake
    fake.stop()


def config_for(fake: FakeApiserver, tls: TlsFiles, tmp_path: Path, **changes: Any) -> Config:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    base = Config(
        node_name=NODE,
        apiserver_url=fake.url,
        kube_token_file=token,
        kube_ca_file=tls.ca,
        kube_timeout_s=10.0,
    )
    return replace(base, **changes)


def test_the_label_becomes_the_estimate_instance_type(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    config = with_node_instance_type(config_for(apiserver, tls, tmp_path), {})
    assert config.estimate_instance_type == MACHINE


def test_the_flag_wins_and_no_request_is_made(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    config = config_for(apiserver, tls, tmp_path, estimate_instance_type="m5.xlarge")
    assert with_node_instance_type(config, {}) is config
    assert apiserver.requests == 0


def test_outside_a_cluster_nothing_is_asked() -> None:
    config = Config(node_name=NODE)
    assert with_node_instance_type(config, {}) is config


def test_the_beta_label_of_old_clusters(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    apiserver.nodes[NODE] = node_object({INSTANCE_TYPE_LABELS[1]: "Standard_D4s_v3"})
    config = with_node_instance_type(config_for(apiserver, tls, tmp_path), {})
    assert config.estimate_instance_type == "Standard_D4s_v3"


@pytest.mark.parametrize(
    ("mode", "node", "logged"),
    [
        ("forbidden", True, "grant get on nodes"),  # RBAC without the node-labels component
        ("ok", False, "not found"),  # another node name
        ("garbage", True, "not JSON"),
        ("5xx", True, "not read"),
    ],
)
def test_a_node_that_cannot_be_read_leaves_the_estimate_as_it_was(
    *,
    apiserver: FakeApiserver,
    tls: TlsFiles,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    mode: str,
    node: bool,
    logged: str,
) -> None:
    apiserver.mode = mode
    if not node:
        apiserver.nodes.clear()
    config = config_for(apiserver, tls, tmp_path)
    with caplog.at_level(logging.INFO, logger="exporter.kube.nodelabels"):
        assert with_node_instance_type(config, {}) is config
    (record,) = caplog.records
    assert logged in record.getMessage()


def test_a_hanging_apiserver_delays_start_up_by_the_bound_only(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    apiserver.mode = "slow"
    apiserver.slow_s = 60.0
    config = config_for(apiserver, tls, tmp_path, kube_timeout_s=30.0)
    began = time.monotonic()
    assert with_node_instance_type(config, {}) is config
    waited = time.monotonic() - began
    assert LOOKUP_TIMEOUT_S <= waited < LOOKUP_TIMEOUT_S + 20, waited


def test_a_node_without_the_label(apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path) -> None:
    apiserver.nodes[NODE] = node_object({"kubernetes.io/os": "linux"})
    config = config_for(apiserver, tls, tmp_path)
    assert with_node_instance_type(config, {}) is config


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=80),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=40), inner),
    max_leaves=20,
)


@settings(deadline=None)
@given(
    st.one_of(
        _json,
        st.fixed_dictionaries({"metadata": _json}),
        st.fixed_dictionaries(
            {
                "metadata": st.fixed_dictionaries(
                    {"labels": st.dictionaries(st.sampled_from(INSTANCE_TYPE_LABELS), _json)}
                )
            }
        ),
    )
)
def test_any_answer_gives_a_label_value_or_nothing(node: object) -> None:
    value = instance_type_label(node)
    assert value == "" or (0 < len(value) <= 63 and value.isprintable())
    if value:
        assert isinstance(node, dict)
        assert value in node["metadata"]["labels"].values()


def test_the_estimate_uses_the_instance_from_the_label(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    """A node tree whose DMI name is GCP's: without the label the estimate can only use the CPU
    model; with it, the machine type's host CPU (basis="instance")."""
    tree = node_tree(tmp_path, dmi="Google Compute Engine")
    plain = replace(config_for(apiserver, tls, tmp_path), procfs=tree.procfs, sysfs=tree.sysfs)
    assert NodeModels(plain).estimate(4).basis != INSTANCE
    labelled = with_node_instance_type(plain, {})
    est = NodeModels(labelled).estimate(4)
    assert (est.basis, est.instance_type) == (INSTANCE, MACHINE)


def test_serve_reads_the_label_at_start(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    """`wattprobe serve` in a cluster (KUBERNETES_SERVICE_HOST set) on a node with no measured
    power: wattprobe_estimate_info names the machine type from the node's label."""
    tree = node_tree(tmp_path, dmi="Google Compute Engine")
    token = tmp_path / "token"
    token.write_text(TOKEN)
    exporter = start_exporter(
        [
            *("--path.procfs", str(tree.procfs), "--path.sysfs", str(tree.sysfs)),
            *("--kube.pod-source", "none", "--kube.apiserver-url", apiserver.url),
            *("--kube.token-file", str(token), "--kube.ca-file", str(tls.ca)),
            *("--no-collector.nvml", "--no-collector.drm", "--activity.source", "procfs"),
        ],
        log_dir=tmp_path,
        env={"NODE_NAME": NODE, "KUBERNETES_SERVICE_HOST": "127.0.0.1"},
        test_args=(),
    )
    try:
        samples = parse_samples(exporter.wait_next_interval())
        (labels,) = select(samples, "wattprobe_estimate_info")
        assert dict(labels)["instance_type"] == MACHINE
        assert dict(labels)["basis"] == INSTANCE
    finally:
        exporter.stop()
