"""deploy/components/showback and the chart's showback values: every agent reads
--showback.config from the ConfigMap mounted as a directory (so the kubelet's updates reach it),
the shipped example sets nothing and parses, and the chart's flag values reach `wattprobe serve`
under the names it reads."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest

from exporter.app.cli import serve
from exporter.exposition.showback_file import parse_showback
from exporter.model.showback import GpuHourPrice, Price, Showback, validate
from tests.deploy.helmchart import CHART, helm, render
from tests.deploy.manifests import (
    DEPLOY,
    Obj,
    build_with_components,
    env_of,
    of_kind,
    one,
    version_tuple,
)

COMPONENT = DEPLOY / "components" / "showback"
CONFIG_FILE = "/etc/wattprobe/showback/showback.yaml"
# as tests/deploy/test_build.py: every version from the oldest supported
KUBE_VERSIONS = [
    v for v in kubernetes_validate.utils.all_versions() if version_tuple(v)[:2] >= (1, 29)
]


def _agent(ds: Obj) -> Obj:
    return next(c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "wattprobe")


def _reads_the_configmap(ds: Obj, configmap: str) -> None:
    agent = _agent(ds)
    assert env_of(agent)["WATTPROBE_SHOWBACK_CONFIG"] == CONFIG_FILE
    mounts = [m for m in agent["volumeMounts"] if m["name"] == "showback"]
    # the directory: a subPath mount is never updated by the kubelet
    assert mounts == [
        {"name": "showback", "mountPath": str(Path(CONFIG_FILE).parent), "readOnly": True}
    ]
    volumes = [v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "showback"]
    assert volumes == [{"name": "showback", "configMap": {"name": configmap}}]


def test_every_agent_reads_the_showback_configmap(tmp_path: Path) -> None:
    """kubeedge: the cloud agent and the edge agent. What the component adds or changes
    validates strictly (unknown fields are errors) for every supported Kubernetes version."""
    objs = build_with_components(tmp_path, "kubeedge", "showback")
    daemonsets = of_kind(objs, "DaemonSet")
    assert {ds["metadata"]["name"] for ds in daemonsets} == {"wattprobe", "wattprobe-edge"}
    for ds in daemonsets:
        _reads_the_configmap(ds, "wattprobe-showback")
    configmap = one(objs, "ConfigMap", "wattprobe-showback")
    assert configmap["metadata"]["namespace"] == "wattprobe"
    assert configmap["data"] == {"showback.yaml": (COMPONENT / "showback.yaml").read_text()}
    for obj in (configmap, *daemonsets):
        for version in KUBE_VERSIONS:
            kubernetes_validate.validate(obj, version, strict=True)


def test_the_shipped_example_sets_nothing_and_its_lines_parse() -> None:
    text = (COMPONENT / "showback.yaml").read_text()
    assert validate(parse_showback(text)) == Showback()  # no made-up price
    uncommented = "\n".join(
        re.sub(r"^# ?", "", line) for line in text.splitlines() if re.match(r"# ?[ a-z_-]+:", line)
    )
    assert validate(parse_showback(uncommented)) == Showback(
        pue=1.3,
        energy_price=Price(0.21),
        currency="EUR",
        carbon_intensity=350.0,
        gpu_hour_prices=(
            GpuHourPrice(Price(2.5), model="NVIDIA H100 80GB HBM3"),
            GpuHourPrice(Price(0.4), resource="nvidia.com/mig-1g.10gb"),
        ),
    )


def _serve_params(env: dict[str, str | None], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What `wattprobe serve` makes of the container's WATTPROBE_SHOWBACK_* variables."""
    for name, value in env.items():
        if name.startswith("WATTPROBE_SHOWBACK_") and value is not None:
            monkeypatch.setenv(name, value)
    with click.Context(serve) as ctx:
        serve.parse_args(ctx, [])
    return {k: v for k, v in ctx.params.items() if k.startswith("showback_")}


def test_chart_values_reach_the_agents_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    values = {
        "edge": {"enabled": True},
        "showback": {
            "pue": 1.3,
            "energyPrice": "0.21",
            "currency": "EUR",
            "carbonIntensity": "350",
            "configMap": {"enabled": True, "file": "pue: 1.25\n"},
        },
    }
    objs = render(values)
    assert one(objs, "ConfigMap", "wattprobe-showback")["data"] == {"showback.yaml": "pue: 1.25\n"}
    for ds in of_kind(objs, "DaemonSet"):
        _reads_the_configmap(ds, "wattprobe-showback")
        params = _serve_params(env_of(_agent(ds)), monkeypatch)
        assert params["showback_pue"] == Showback(pue=1.3)
        assert params["showback_energy_price"] == Showback(energy_price=Price(0.21))
        assert params["showback_currency"] == Showback(currency="EUR")
        assert params["showback_carbon_intensity"] == Showback(carbon_intensity=350.0)
        assert params["showback_config_file"] == Path(CONFIG_FILE)


def test_chart_defaults_set_nothing_and_the_example_is_the_components() -> None:
    defaults = render()
    ds = one(defaults, "DaemonSet")
    assert not [n for n in env_of(_agent(ds)) if n.startswith("WATTPROBE_SHOWBACK_")]
    assert not [v for v in ds["spec"]["template"]["spec"]["volumes"] if v["name"] == "showback"]
    assert all(
        c["metadata"]["name"] != "wattprobe-showback" for c in of_kind(defaults, "ConfigMap")
    )
    shipped = one(
        render({"showback": {"configMap": {"enabled": True}}}), "ConfigMap", "wattprobe-showback"
    )
    assert shipped["data"]["showback.yaml"] == (COMPONENT / "showback.yaml").read_text()
    # your own ConfigMap: mounted, not rendered
    own = render({"showback": {"configMap": {"enabled": True, "create": False, "name": "mine"}}})
    _reads_the_configmap(one(own, "DaemonSet"), "mine")
    assert all(c["metadata"]["name"] != "mine" for c in of_kind(own, "ConfigMap"))
    assert (CHART / "files" / "generated" / "showback" / "showback.yaml").read_text() == (
        COMPONENT / "showback.yaml"
    ).read_text()


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"showback": {"currency": "eur"}}, "/showback/currency"),
        ({"showback": {"pue": [1.3]}}, "/showback/pue"),
        ({"showback": {"colour": "blue"}}, "colour"),
    ],
)
def test_schema_refuses_bad_showback_values(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm().HelmValuesError) as refused:
        render(values)
    assert message in str(refused.value)
