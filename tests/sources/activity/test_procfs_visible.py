"""hidepid detection (exporter/sources/activity/procfs/visible.py) on mountinfo text; the real
mount and the
capability that lifts it: tests/system/test_least_privilege.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.host.caps import CAP_SYS_PTRACE
from exporter.model.readings import TaskSample
from exporter.sources.activity.procfs.visible import (
    ProcMount,
    VisibleProcfs,
    hidden_reason,
    parse_mountinfo,
)

MOUNTINFO = (
    "22 1 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "98 22 0:44 / /proc/sys/fs/binfmt_misc rw,relatime shared:50 - autofs systemd-1 rw\n"
    "120 30 0:51 / /host/proc rw,relatime - proc proc rw,hidepid=invisible,gid=1001\n"
    "121 30 0:52 / /odd\\040dir rw,relatime - proc proc rw,hidepid=2\n"
    "130 30 0:53 / /host/proc rw,relatime - tmpfs none rw\n"
)


def test_parse_mountinfo() -> None:
    assert parse_mountinfo(MOUNTINFO, "/proc") == ProcMount("/proc", "", None)
    assert parse_mountinfo(MOUNTINFO, "/host/proc") == ProcMount("/host/proc", "invisible", 1001)
    assert parse_mountinfo(MOUNTINFO, "/odd dir") == ProcMount("/odd dir", "2", None)
    assert parse_mountinfo(MOUNTINFO, "/tmp/fixture/proc") is None
    assert parse_mountinfo("garbage\n\n - \n", "/proc") is None


@pytest.mark.parametrize(
    ("mount", "caps", "groups", "hidden"),
    [
        (None, 0, [], False),  # not a mount (a fixture tree)
        (ProcMount("/proc", "", None), 0, [], False),
        (ProcMount("/proc", "off", None), 0, [], False),
        (ProcMount("/proc", "2", None), 0, [65534], True),
        (ProcMount("/proc", "invisible", None), 1 << CAP_SYS_PTRACE, [], False),
        (ProcMount("/proc", "noaccess", 1001), 0, [1001], False),
        (ProcMount("/proc", "noaccess", 1001), 0, [65534], True),
    ],
)
def test_hidden_reason(mount: ProcMount | None, caps: int, groups: list[int], hidden: bool) -> None:
    reason = hidden_reason(mount, caps, groups)
    assert (reason is not None) == hidden
    if reason is not None:
        assert "CAP_SYS_PTRACE" in reason


def test_a_fixture_tree_is_read_as_is(tmp_path: Path) -> None:
    sample = TaskSample((1, 1), 1, "init", "0::/init.scope\n", False, 1.0)
    assert VisibleProcfs(lambda: [sample], tmp_path).tasks() == [sample]
