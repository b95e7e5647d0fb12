"""CDI specs: the NVIDIA DRA driver's and nvidia-ctk's formats, bounds, bad files, and
Hypothesis on the parser (never raises anything but SpecError; what a generated spec names is
what comes out)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.kube.cdi import (
    MAX_SPEC_BYTES,
    CdiDevice,
    CdiScanner,
    SpecError,
    load_spec,
    parse_spec,
    split_name,
)
from tests.support.paths import FIXTURES

FIXTURES = FIXTURES / "cdi"
MIG_NAME = "a1b2c3d4-6172-4091-82a3-b4c5d6e7f809-gpu-0-mig-3g20gb-9-4"


def test_the_dra_drivers_claim_spec() -> None:
    (dev,) = load_spec(
        FIXTURES / "run" / "k8s.gpu.nvidia.com-claim_5f0e9c1a-2d3b-4c5d-8e6f-708192a3b4c5.yaml"
    )
    # the spec-wide NVIDIA_VISIBLE_DEVICES=void and /dev/nvidiactl name no GPU
    assert dev == CdiDevice(
        "k8s.gpu.nvidia.com/claim=5f0e9c1a-2d3b-4c5d-8e6f-708192a3b4c5-gpu-1",
        minors=(1,),
        spec=dev.spec,
    )


def test_a_mig_device_has_its_parent_and_capability_nodes() -> None:
    (dev,) = load_spec(
        FIXTURES / "run" / "k8s.gpu.nvidia.com-claim_a1b2c3d4-6172-4091-82a3-b4c5d6e7f809.yaml"
    )
    assert dev.name == f"k8s.gpu.nvidia.com/claim={MIG_NAME}"
    assert (dev.minors, dev.cap_minors) == ((0,), (21, 22))


def test_gpus_named_in_the_environment_and_through_a_driver_root() -> None:
    by_env = load_spec(
        FIXTURES / "run" / "k8s.gpu.nvidia.com-claim_8b52e3f4-4f5d-4e7f-a081-92a3b4c5d6e7.yaml"
    )
    assert by_env[0].gpu_ids == ("GPU-5c8e1f3a-2b4d-4e6f-8a1b-3c5d7e9f0a01",)
    # hostPath under the GPU operator's driver root (/run/nvidia/driver/dev/nvidia0)
    (mps,) = load_spec(
        FIXTURES / "run" / "k8s.gpu.nvidia.com-claim_7a41d2e3-3e4c-4d6e-9f70-8192a3b4c5d6.yaml"
    )
    assert (mps.minors, mps.gpu_ids) == ((0,), ())


def test_nvidia_ctk_json_and_v25_3_base_spec() -> None:
    ctk = {d.name: d.minors for d in load_spec(FIXTURES / "etc" / "nvidia.com-gpu.json")}
    assert ctk == {
        "nvidia.com/gpu=0": (0,),
        "nvidia.com/gpu=GPU-6d9f2a4b-3c5e-4f70-9b2c-4d6e8fa01b12": (1,),
        "nvidia.com/gpu=all": (0, 1),
    }
    base = {d.name for d in load_spec(FIXTURES / "etc" / "k8s.gpu.nvidia.com-device_base.yaml")}
    assert base == {"k8s.gpu.nvidia.com/device=gpu-0", "k8s.gpu.nvidia.com/device=gpu-1"}


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[1, 2", "not YAML"),
        ("- a list", "not a mapping"),
        ("kind: nokind\ndevices: []", "bad kind"),
        ("kind: a.com/gpu\ndevices: {x: 1}", "devices is not a list"),
        ("kind: a.com/gpu\ndevices: [7]", "devices[0] is not a mapping"),
        ("kind: a.com/gpu\ndevices: [{name: '-bad'}]", "devices[0] has a bad name"),
        ("kind: a.com/gpu\ndevices: [{name: g, containerEdits: [1]}]", "not a mapping"),
        ("kind: a.com/gpu\ndevices: [{name: g, containerEdits: {env: x}}]", "env is not a list"),
        ("!!python/object/apply:os.system ['true']", "not YAML"),  # safe loader only
    ],
)
def test_malformed_specs_say_why(tmp_path: Path, text: str, reason: str) -> None:
    path = tmp_path / "x.yaml"
    path.write_text(text)
    with pytest.raises(SpecError, match=re.escape(reason)):
        load_spec(path)


def test_bounds(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_text(" " * (MAX_SPEC_BYTES + 1))
    with pytest.raises(SpecError, match="larger than"):
        load_spec(big)
    many = {"kind": "a.com/gpu", "devices": [{"name": f"d{i}"} for i in range(2000)]}
    with pytest.raises(SpecError, match="more than"):
        parse_spec(many)
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00kind")
    with pytest.raises(SpecError, match="not YAML"):
        load_spec(binary)


def test_scanner_reports_missing_dirs_and_bad_specs_and_rereads_changes(tmp_path: Path) -> None:
    etc, run = tmp_path / "etc", tmp_path / "run"
    shutil.copytree(FIXTURES / "etc", etc)
    shutil.copytree(FIXTURES / "run", run)
    (run / "notes.txt").write_text("not a spec: ignored, as CDI does")
    scanner = CdiScanner((etc, tmp_path / "none", run))
    index = scanner.scan()
    assert index.missing_dirs == (str(tmp_path / "none"),)
    assert index.dirs == (str(etc), str(run))
    assert index.specs == 7
    assert [p.path for p in index.problems] == [str(run / "k8s.gpu.nvidia.com-claim_broken.yaml")]
    # the later directory wins a clash (CDI's priority)
    (run / "override.json").write_text(
        json.dumps(
            {
                "kind": "nvidia.com/gpu",
                "devices": [
                    {"name": "0", "containerEdits": {"deviceNodes": [{"path": "/dev/nvidia5"}]}}
                ],
            }
        )
    )
    assert scanner.scan().devices["nvidia.com/gpu=0"].minors == (5,)
    # a changed file is parsed again; a removed one is forgotten
    broken = run / "k8s.gpu.nvidia.com-claim_broken.yaml"
    broken.write_text("kind: k8s.gpu.nvidia.com/claim\ndevices: [{name: fixed-gpu-3}]\n")
    os.utime(broken, ns=(1, 10**18))
    fixed = scanner.scan()
    assert fixed.problems == ()
    assert "k8s.gpu.nvidia.com/claim=fixed-gpu-3" in fixed.devices
    broken.unlink()
    assert "k8s.gpu.nvidia.com/claim=fixed-gpu-3" not in scanner.scan().devices


def test_an_unreadable_dir_is_a_problem_not_a_crash(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    index = CdiScanner((not_a_dir,)).scan()
    assert index.devices == {}
    assert [p.path for p in index.problems] == [str(not_a_dir)]


@pytest.mark.parametrize(
    ("name", "parts"),
    [
        ("k8s.gpu.nvidia.com/claim=abc-gpu-0", ("k8s.gpu.nvidia.com", "claim", "abc-gpu-0")),
        ("nvidia.com/gpu=all", ("nvidia.com", "gpu", "all")),
        ("nvidia.com/gpu=GPU-1:2", ("nvidia.com", "gpu", "GPU-1:2")),
        ("nvidia.com/gpu", None),
        ("gpu=0", None),
        ("nvidia.com/gpu=", None),
        ("a/b/c=0", None),
    ],
)
def test_split_name(name: str, parts: tuple[str, str, str] | None) -> None:
    assert split_name(name) == parts


# -- Hypothesis ----------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=5)
        | st.dictionaries(
            st.sampled_from(
                [
                    "kind",
                    "devices",
                    "name",
                    "containerEdits",
                    "env",
                    "deviceNodes",
                    "path",
                    "hostPath",
                ]
            )
            | st.text(max_size=8),
            children,
            max_size=6,
        )
    ),
    max_leaves=30,
)


@given(json_values)
@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
def test_parse_spec_raises_only_spec_errors(data: object) -> None:
    try:
        devices = parse_spec(data)
    except SpecError:
        return
    for dev in devices:
        assert split_name(dev.name) is not None
        assert all(m >= 0 for m in (*dev.minors, *dev.cap_minors))


@given(st.binary(max_size=400))
@settings(max_examples=300, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_load_spec_of_any_bytes_raises_only_spec_errors(tmp_path: Path, raw: bytes) -> None:
    for suffix in (".yaml", ".json"):
        path = tmp_path / f"spec{suffix}"
        path.write_bytes(raw)
        with contextlib.suppress(SpecError):
            load_spec(path)


names = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,20}", fullmatch=True)
uuids = st.uuids().map(lambda u: f"GPU-{u}")


@st.composite
def specs(
    draw: st.DrawFn,
) -> tuple[dict[str, object], dict[str, tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]]]:
    devices: list[dict[str, object]] = []
    expected: dict[str, tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]] = {}
    for name in draw(st.lists(names, max_size=6, unique=True)):
        ids = tuple(draw(st.lists(uuids, max_size=2, unique=True)))
        minors = tuple(draw(st.lists(st.integers(0, 999), max_size=3, unique=True)))
        caps = tuple(draw(st.lists(st.integers(0, 9999), max_size=2, unique=True)))
        nodes = [{"path": f"/dev/nvidia{m}"} for m in minors]
        nodes += [
            {"path": "/dev/nvidia-caps/x", "hostPath": f"/dev/nvidia-caps/nvidia-cap{c}"}
            for c in caps
        ]
        nodes.append({"path": "/dev/nvidiactl"})
        env = (
            [f"NVIDIA_VISIBLE_DEVICES={','.join(ids)}"] if ids else ["NVIDIA_VISIBLE_DEVICES=void"]
        )
        devices.append({"name": name, "containerEdits": {"env": env, "deviceNodes": nodes}})
        expected[f"vendor.example.com/gpu={name}"] = (ids, minors, caps)
    spec: dict[str, object] = {
        "cdiVersion": "0.6.0",
        "kind": "vendor.example.com/gpu",
        "devices": devices,
        "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-spec-wide-names-none"]},
    }
    return spec, expected


@given(specs(), st.booleans())
@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_a_generated_spec_names_what_it_was_made_with(
    tmp_path: Path,
    made: tuple[
        dict[str, object], dict[str, tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]]
    ],
    as_json: bool,
) -> None:
    spec, expected = made
    path = tmp_path / ("s.json" if as_json else "s.yaml")
    path.write_text(json.dumps(spec) if as_json else yaml.safe_dump(spec))
    got = {d.name: (d.gpu_ids, d.minors, d.cap_minors) for d in load_spec(path)}
    assert got == expected
