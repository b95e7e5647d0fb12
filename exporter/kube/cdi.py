"""CDI specs (Container Device Interface): what each CDI device name stands for on this node.

A DRA driver hands a container its devices as fully qualified CDI names
(`vendor.com/class=name`, e.g. `k8s.gpu.nvidia.com/claim=<claim uid>-gpu-0`), which the kubelet's
PodResources API reports under dynamic_resources. The name means nothing by itself: the node's
CDI spec files (JSON or YAML in /etc/cdi and /var/run/cdi, the latter winning on a clash, as in
the CDI reference library) say what the runtime injects for it. What names a GPU there:

- the device's `containerEdits.env`: `NVIDIA_VISIBLE_DEVICES=<ids>` or `CUDA_VISIBLE_DEVICES=<ids>`
  with GPU-/MIG- UUIDs or indexes (`void`, `none` and `all` name no single GPU);
- its `containerEdits.deviceNodes`: `/dev/nvidia<N>` is the GPU behind minor number N, and
  `/dev/nvidia-caps/nvidia-cap<M>` the MIG GPU or compute instance whose capability has minor M
  (the NVIDIA DRA driver gives a MIG device its parent's node plus these two).

Spec-wide edits (the spec's own containerEdits) are shared by every device of the spec and name
none of them. Files are read with bounds (size, count, entries) and parsed once per change
(mtime and size); a file that cannot be read or parsed is reported, never raised.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from exporter.host.hostfile import read_bounded
from exporter.model.config import CDI_SPEC_DIRS as DEFAULT_SPEC_DIRS

MAX_SPEC_BYTES = 1 << 20  # a node-wide nvidia-ctk spec is ~50 KiB; a claim spec a few KiB
MAX_SPEC_FILES = 1024  # per directory: one transient spec per prepared claim
MAX_DEVICES = 1024  # per spec
MAX_EDITS = 256  # env entries and device nodes per device
GPU_ENV = ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

# CDI's own syntax (container-device-interface SPEC.md, pkg/parser): vendor is a domain-like
# name, class and device name are [A-Za-z0-9_.:-] with an alphanumeric first character.
_VENDOR = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_CLASS = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_KIND = re.compile(rf"^(?P<vendor>{_VENDOR})/(?P<class>{_CLASS})$")
_DEVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$")
_GPU_NODE = re.compile(r"^nvidia(?P<minor>\d{1,6})$")
_CAP_NODE = re.compile(r"^nvidia-cap(?P<minor>\d{1,9})$")
_GPU_ID = re.compile(r"^(?:GPU-[0-9A-Fa-f-]+|MIG-[0-9A-Za-z/-]+|\d{1,4}(?::\d{1,4})?)$")


@dataclass(frozen=True, slots=True)
class CdiDevice:
    """One device of a CDI spec and what its edits say about GPUs."""

    name: str  # fully qualified: vendor/class=name
    gpu_ids: tuple[str, ...] = ()  # UUIDs or indexes from NVIDIA_/CUDA_VISIBLE_DEVICES
    minors: tuple[int, ...] = ()  # /dev/nvidia<N>
    cap_minors: tuple[int, ...] = ()  # /dev/nvidia-caps/nvidia-cap<M> (MIG instances)
    spec: str = ""  # the file it came from

    @property
    def names_gpu(self) -> bool:
        return bool(self.gpu_ids or self.minors)


@dataclass(frozen=True, slots=True)
class SpecProblem:
    path: str
    reason: str

    @property
    def kind(self) -> str:
        """The reason in one word, a label of wattprobe_cdi_spec_rejections_total."""
        return problem_kind(self.reason)


# wattprobe_cdi_spec_rejections_total's reasons
PROBLEM_KINDS = ("not_a_file", "unreadable", "too_large", "too_many", "invalid")


def problem_kind(reason: str) -> str:
    if reason.startswith("not a regular file"):
        return "not_a_file"
    if reason.startswith("unreadable"):
        return "unreadable"
    if reason.startswith("larger than"):
        return "too_large"
    if " specs: read the first " in reason:
        return "too_many"
    return "invalid"


@dataclass(frozen=True)
class CdiIndex:
    """Every device of the node's CDI specs by qualified name, and what went wrong reading them."""

    devices: Mapping[str, CdiDevice] = field(default_factory=dict)
    specs: int = 0  # spec files read
    dirs: tuple[str, ...] = ()  # spec directories that exist
    missing_dirs: tuple[str, ...] = ()
    problems: tuple[SpecProblem, ...] = ()


EMPTY_INDEX = CdiIndex()


class SpecError(ValueError):
    """A CDI spec that is not one: the reason is short and fit for `check`."""


def split_name(qualified: str) -> tuple[str, str, str] | None:
    """'vendor.com/class=name' -> (vendor, class, name); None when it is not a CDI name."""
    kind, sep, name = qualified.strip().partition("=")
    match = _KIND.match(kind)
    if not sep or match is None or _DEVICE.match(name) is None:
        return None
    return match.group("vendor"), match.group("class"), name


def _as_list(value: object, what: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise SpecError(f"{what} is not a list")
    return value[:MAX_EDITS] if what != "devices" else value


def _edits(edits: object, where: str) -> tuple[tuple[str, ...], tuple[int, ...], tuple[int, ...]]:
    if edits is None:
        return (), (), ()
    if not isinstance(edits, dict):
        raise SpecError(f"{where}.containerEdits is not a mapping")
    ids: dict[str, None] = {}
    for entry in _as_list(edits.get("env"), f"{where}.env"):
        if not isinstance(entry, str):
            continue
        key, _, value = entry.partition("=")
        if key.strip() in GPU_ENV:
            for raw in value.split(","):
                token = raw.strip()
                if _GPU_ID.match(token):
                    ids[token] = None
    minors: dict[int, None] = {}
    caps: dict[int, None] = {}
    for node in _as_list(edits.get("deviceNodes"), f"{where}.deviceNodes"):
        if not isinstance(node, dict):
            continue
        path = node.get("hostPath") or node.get("path")
        if not isinstance(path, str):
            continue
        base = path.rstrip("/").rsplit("/", 1)[-1]
        if (gpu := _GPU_NODE.match(base)) is not None:
            minors[int(gpu.group("minor"))] = None
        elif (cap := _CAP_NODE.match(base)) is not None:
            caps[int(cap.group("minor"))] = None
    return tuple(ids), tuple(minors), tuple(caps)


def parse_spec(data: object, origin: str = "") -> list[CdiDevice]:
    """A decoded CDI spec -> its devices; SpecError when it is not a spec."""
    if not isinstance(data, dict):
        raise SpecError("not a mapping")
    kind = data.get("kind")
    if not isinstance(kind, str) or _KIND.match(kind) is None:
        raise SpecError(f"bad kind {str(kind)[:60]!r}")
    devices = _as_list(data.get("devices"), "devices")
    if len(devices) > MAX_DEVICES:
        raise SpecError(f"more than {MAX_DEVICES} devices")
    out: list[CdiDevice] = []
    for i, dev in enumerate(devices):
        if not isinstance(dev, dict):
            raise SpecError(f"devices[{i}] is not a mapping")
        name = dev.get("name")
        if not isinstance(name, str) or _DEVICE.match(name) is None:
            raise SpecError(f"devices[{i}] has a bad name {str(name)[:60]!r}")
        ids, minors, caps = _edits(dev.get("containerEdits"), f"devices[{i}]")
        out.append(CdiDevice(f"{kind}={name}", ids, minors, caps, origin))
    return out


def load_spec(path: Path) -> list[CdiDevice]:
    """Read and parse one spec file (JSON or YAML by its suffix, as CDI does)."""
    try:
        # non-blocking and regular files only: a FIFO named *.yaml must not hang the scan
        raw = read_bounded(str(path), MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"unreadable: {exc.strerror or exc}") from None
    if len(raw) > MAX_SPEC_BYTES:
        raise SpecError(f"larger than {MAX_SPEC_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
        data = json.loads(text) if path.suffix == ".json" else _yaml(text)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError, RecursionError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise SpecError(
            f"not {'JSON' if path.suffix == '.json' else 'YAML'}: {first[:80]}"
        ) from None
    return parse_spec(data, str(path))


def _yaml(text: str) -> object:
    # safe loaders only: a spec is data; libyaml's when built in (10x faster on big specs)
    if hasattr(yaml, "CSafeLoader"):
        return yaml.load(text, Loader=yaml.CSafeLoader)
    return yaml.safe_load(text)


def _is_file(entry: os.DirEntry[str]) -> bool:
    """A regular file, or a name to try reading anyway so the problem says what is wrong (a
    dangling symlink: no such file)."""
    try:
        return entry.is_file() or (entry.is_symlink() and not os.path.exists(entry.path))
    except OSError:  # a race with its removal
        return True


class CdiScanner:
    """The node's CDI specs, re-read only where a file changed (mtime, size)."""

    def __init__(self, dirs: Sequence[Path] = DEFAULT_SPEC_DIRS) -> None:
        self.dirs = tuple(dirs)
        self._cache: dict[Path, tuple[tuple[int, int], list[CdiDevice] | SpecError]] = {}

    def scan(self) -> CdiIndex:
        devices: dict[str, CdiDevice] = {}
        problems: list[SpecProblem] = []
        present: list[str] = []
        missing: list[str] = []
        seen: set[Path] = set()
        specs = 0
        for directory in self.dirs:  # later directories win, as in CDI's registry
            try:
                with os.scandir(directory) as it:
                    entries = [
                        e
                        for e in it
                        if e.name.endswith((".json", ".yaml")) and not e.name.startswith(".")
                    ]
                # FIFOs, sockets and devices are no specs: skipped without opening them (the
                # CDI library reads regular files only); a symlink counts by what it points to
                names = sorted(e.name for e in entries if _is_file(e))
                problems.extend(
                    SpecProblem(str(directory / e.name), "not a regular file")
                    for e in entries
                    if not _is_file(e)
                )
            except FileNotFoundError:
                missing.append(str(directory))
                continue
            except OSError as exc:
                problems.append(SpecProblem(str(directory), f"unreadable: {exc.strerror or exc}"))
                continue
            present.append(str(directory))
            if len(names) > MAX_SPEC_FILES:
                problems.append(
                    SpecProblem(
                        str(directory), f"{len(names)} specs: read the first {MAX_SPEC_FILES}"
                    )
                )
            for name in names[:MAX_SPEC_FILES]:
                path = directory / name
                seen.add(path)
                got = self._load(path)
                if isinstance(got, SpecError):
                    problems.append(SpecProblem(str(path), str(got)))
                    continue
                specs += 1
                for dev in got:
                    devices[dev.name] = dev
        for gone in set(self._cache) - seen:
            del self._cache[gone]
        return CdiIndex(devices, specs, tuple(present), tuple(missing), tuple(problems))

    def _load(self, path: Path) -> list[CdiDevice] | SpecError:
        try:
            st = path.stat()
        except OSError as exc:
            return SpecError(f"unreadable: {exc.strerror or exc}")
        key = (st.st_mtime_ns, st.st_size)
        cached = self._cache.get(path)
        if cached is not None and cached[0] == key:
            return cached[1]
        try:
            got: list[CdiDevice] | SpecError = load_spec(path)
        except SpecError as exc:
            got = exc
        self._cache[path] = (key, got)
        return got
