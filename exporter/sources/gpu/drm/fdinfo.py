"""Parse one DRM client's usage stats from /proc/<pid>/fdinfo/<fd> (drm-usage-stats).

The kernel's format (Documentation/gpu/drm-usage-stats.rst) is one `key:<whitespace>value` pair
per line. The keys used here:
- drm-driver, drm-pdev (the PCI address), drm-client-id (unique per open DRM file, shared by
  fds dup'ed or inherited from one open);
- drm-engine-<engine>: <uint> ns, cumulative busy time of the client on that engine class
  (amdgpu, i915, msm, ...); drm-engine-capacity-<engine> is how many engines the class has;
- drm-cycles-<engine> and drm-total-cycles-<engine> (xe, and newer Intel): the client's busy
  GPU cycles and the GPU's timestamp cycles, both cumulative;
- drm-memory-<region>: <uint> [KiB|MiB] (older amdgpu) and drm-total-<region> / drm-resident-
  <region> (drm_print_memory_stats): memory per region; device-local regions are "vram",
  "vram0".. (amdgpu, xe) and "local0".. (i915).
Anything else (pos, flags, amd-*, pasid) is ignored; a malformed value skips that line, not the
file, and a file without drm-driver, drm-pdev or drm-client-id is not a DRM client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

_UNITS = {"": 1, "B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3}
_LOCAL_PREFIXES = ("vram", "local")  # device memory regions; system/gtt/cpu/stolen are host RAM


@dataclass(frozen=True, slots=True)
class DrmClient:
    """One DRM client (an open DRM file) as its fdinfo describes it. Values are cumulative."""

    driver: str
    pdev: str  # PCI address, e.g. 0000:03:00.0
    client_id: int
    engine_ns: Mapping[str, int] = field(default_factory=dict)  # engine class -> busy ns
    cycles: Mapping[str, int] = field(default_factory=dict)  # engine class -> busy cycles
    total_cycles: Mapping[str, int] = field(default_factory=dict)  # engine class -> GPU cycles
    capacity: Mapping[str, int] = field(default_factory=dict)  # engine class -> engine count
    memory: Mapping[str, int] = field(default_factory=dict)  # region -> bytes (total/memory)

    @property
    def busy_ns(self) -> int:
        return sum(self.engine_ns.values())

    @property
    def busy_cycles(self) -> int:
        return sum(self.cycles.values())

    @property
    def local_memory_bytes(self) -> int | None:
        """Device-local memory the client holds; None when fdinfo names no such region."""
        local = [v for region, v in self.memory.items() if region.startswith(_LOCAL_PREFIXES)]
        return sum(local) if local else None


def _uint(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() else None


def _with_unit(value: str, allowed: tuple[str, ...]) -> int | None:
    """ "123 ns" / "14336 KiB" / "42": the number in base units, None on garbage."""
    parts = value.split()
    if not parts or len(parts) > 2:
        return None
    number = _uint(parts[0])
    unit = parts[1] if len(parts) == 2 else ""
    if number is None or unit not in allowed:
        return None
    return number * _UNITS.get(unit, 1)


def parse_fdinfo(text: str) -> DrmClient | None:
    """The DRM client an fdinfo file describes, or None when it is not one (or too garbled)."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key[0].isspace():
            fields.setdefault(key, value.strip())
    driver = fields.get("drm-driver", "")
    pdev = fields.get("drm-pdev", "")
    client_id = _uint(fields.get("drm-client-id", ""))
    if not driver or not pdev or client_id is None or not driver.isprintable():
        return None
    engine_ns: dict[str, int] = {}
    cycles: dict[str, int] = {}
    total_cycles: dict[str, int] = {}
    capacity: dict[str, int] = {}
    memory: dict[str, int] = {}
    for key, value in fields.items():
        if key.startswith("drm-engine-capacity-"):
            _put(capacity, key[len("drm-engine-capacity-") :], _uint(value))
        elif key.startswith("drm-engine-"):
            _put(engine_ns, key[len("drm-engine-") :], _with_unit(value, ("ns",)))
        elif key.startswith("drm-total-cycles-"):
            _put(total_cycles, key[len("drm-total-cycles-") :], _uint(value))
        elif key.startswith("drm-cycles-"):
            _put(cycles, key[len("drm-cycles-") :], _uint(value))
        elif key.startswith(("drm-memory-", "drm-total-")):
            region = key.split("-", 2)[2]
            # drm-total- wins over the older drm-memory- for the same region
            if key.startswith("drm-memory-") and region in memory:
                continue
            _put(memory, region, _with_unit(value, ("", "KiB", "MiB", "GiB")))
    return DrmClient(
        driver=driver,
        pdev=pdev,
        client_id=client_id,
        engine_ns=engine_ns,
        cycles=cycles,
        total_cycles=total_cycles,
        capacity=capacity,
        memory=memory,
    )


def _put(into: dict[str, int], name: str, value: int | None) -> None:
    if name and value is not None:
        into[name] = value
