"""Which character device majors are GPU devices, for the ioctl probe's dev_class map.

bpf/activity.c counts an `_IOC` type 'F' ioctl as NVIDIA's only when its file is a character
device of an NVIDIA major, and a type 'd' one as DRM's only on a DRM major. Two majors are fixed
(Documentation/admin-guide/devices.txt): 195 for /dev/nvidia0..N, nvidiactl and nvidia-modeset,
and 226 for /dev/dri/*. NVIDIA's other devices (nvidia-uvm, nvidia-caps, nvidia-nvlink,
nvidia-nvswitch, ...) get dynamic majors when their module loads, which can be after the agent
started (nvidia-uvm loads on a process's first CUDA call): /proc/devices names them, and
DeviceClasses re-reads it every interval.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from exporter.host.hostfile import read_text_bounded
from exporter.sources.activity.ebpf import maps as bpf_maps

log = logging.getLogger(__name__)

NVIDIA_MAJOR = 195  # "Nvidia graphics devices"
DRM_MAJOR = 226  # "DRI"
DEV_NVIDIA = 1  # dev_class values in bpf/activity.c (DRV_* + 1); 0: any other device
DEV_DRM = 2
MAX_MAJORS = 4096  # a kernel dev_t has 12 bits of major: the map's size
FIXED = {NVIDIA_MAJOR: DEV_NVIDIA, DRM_MAJOR: DEV_DRM}


def classify(proc_devices: str) -> dict[int, int]:
    """Major -> class for the character devices in /proc/devices text, plus the fixed ones.

    A name starting with "nvidia" is NVIDIA's (its modules name every device so); "drm" is DRM.
    Block devices share the number space but not the devices: only the character section counts.
    """
    classes = dict(FIXED)
    in_char = False
    for line in proc_devices.splitlines():
        stripped = line.strip()
        if stripped.endswith(":"):
            in_char = stripped == "Character devices:"
            continue
        parts = stripped.split(None, 1)
        if not in_char or len(parts) != 2 or not (parts[0].isascii() and parts[0].isdigit()):
            continue
        major, name = int(parts[0]), parts[1]
        if not 0 < major < MAX_MAJORS:
            continue
        if name.startswith("nvidia"):
            classes[major] = DEV_NVIDIA
        elif name == "drm":
            classes[major] = DEV_DRM
    # the fixed majors are assigned (Documentation/admin-guide/devices.txt): a line naming one
    # otherwise does not move it
    return {**classes, **FIXED}


class DeviceClasses:
    """Keeps a dev_class map (bcc table or bpf_maps.MapTable) equal to classify(/proc/devices)."""

    def __init__(self, table: Any, proc_devices: Path) -> None:
        self._table = table
        self._path = proc_devices
        # what the map holds besides zeros: read once, since another process (the loader)
        # may have filled it from an older /proc/devices
        self._written = {int(k.value): int(v.value) for k, v in table.items() if v.value}

    @property
    def classes(self) -> dict[int, int]:
        return dict(self._written)

    def refresh(self) -> None:
        """Re-read /proc/devices and write what changed (usually nothing). An unreadable file
        keeps the map as it is (an empty map gets the fixed majors regardless)."""
        try:
            # /proc/devices is under 2 KiB; through a fixture root it could be anything
            text = read_text_bounded(str(self._path), 65536)
        except OSError as exc:
            log.debug("cannot read %s: %s", self._path, exc)
            if self._written:
                return
            text = ""  # an empty map: the fixed majors at least
        wanted = classify(text)
        for major in sorted(set(wanted) | set(self._written)):
            value = wanted.get(major, 0)
            if self._written.get(major, 0) == value:
                continue
            try:
                bpf_maps.update(self._table.map_fd, self._table.Key(major), self._table.Leaf(value))
            except OSError as exc:  # the next refresh tries again
                log.warning("cannot write major %d to the dev_class map: %s", major, exc)
                continue
            if value:
                self._written[major] = value
            else:
                self._written.pop(major, None)
