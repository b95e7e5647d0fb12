"""The incremental /proc scanner: what it reads again, and that it sees what a full read sees."""

from __future__ import annotations

from pathlib import Path

from exporter.host.cgroupfs.classify import classify_cgroup
from exporter.host.procstat import CLOCK_TICKS, PF_KTHREAD, parse_stat
from exporter.sources.activity.procfs.scan import ProcScanner
from exporter.sources.activity.procfs.source import ProcfsSource
from tests.benchmarks.synthetic import HostShape, SyntheticHost
from tests.support.fixturehost import FixtureHost, stat_line, write_atomic

POD = "0::/kubepods.slice/kubepods-pod11111111_2222_4333_8444_555555555555.slice/"
IN_CONTAINER = POD + f"cri-containerd-{'c' * 64}.scope\n"
SHIM = "0::/system.slice/containerd.service\n"


def scanner(host: FixtureHost, recheck_every: int = 1000) -> ProcScanner:
    return ProcScanner(
        str(host.procfs),
        parse_stat=parse_stat,
        kthread_flag=PF_KTHREAD,
        ticks_per_second=CLOCK_TICKS,
        recheck_every=recheck_every,
    )


def by_pid(s: ProcScanner) -> dict[int, tuple[tuple[int, int], str, str, float]]:
    return {t.pid: (t.key, t.comm, t.cgroup, t.cpu_seconds) for t in s.scan()}


def full_read(procfs: Path) -> dict[int, tuple[tuple[int, int], str, str, float]]:
    """What a reader keeping nothing between intervals sees."""
    out = {}
    for d in procfs.iterdir():
        if d.name.isdigit():
            st = parse_stat((d / "stat").read_bytes().decode("utf-8", "replace"))
            cpu = (st.utime_ticks + st.stime_ticks) / CLOCK_TICKS
            cgroup = (d / "cgroup").read_bytes().decode("utf-8", "replace")
            out[st.pid] = ((st.pid, st.start_ticks), st.comm, cgroup, cpu)
    return out


def set_comm(host: FixtureHost, pid: int, comm: str) -> None:
    _head, *rest = host.process_stat(pid)
    rest_text = " ".join(rest)
    write_atomic(host.procfs / str(pid) / "stat", f"{pid} ({comm}) {rest_text}\n")


def test_unchanged_processes_cost_no_cgroup_read(host: FixtureHost) -> None:
    s = scanner(host)
    first = by_pid(s)
    reads = s.cgroup_reads
    assert reads == len(first)
    host.add_process_ticks(1101, 500)
    second = by_pid(s)
    assert s.cgroup_reads == reads, "a process that only ran keeps its cgroup"
    assert second[1101][3] == first[1101][3] + 500 / CLOCK_TICKS
    assert {p: v for p, v in second.items() if p != 1101} == {
        p: v for p, v in first.items() if p != 1101
    }


def test_exec_rereads_the_cgroup(host: FixtureHost) -> None:
    """runc starts the workload in the shim's cgroup, moves it, then execs: the exec (a new
    comm) is when the scanner looks again."""
    host.add_process(7000, "runc:[2:INIT]", SHIM, start=99000)
    s = scanner(host)
    assert classify_cgroup(by_pid(s)[7000][2]).pseudo == "system_processes"
    (host.procfs / "7000" / "cgroup").write_text(IN_CONTAINER)
    assert by_pid(s)[7000][2] == SHIM, "no exec yet: the cached cgroup stands"
    set_comm(host, 7000, "python3")
    seen = by_pid(s)[7000]
    assert seen[1] == "python3" and seen[2] == IN_CONTAINER
    assert classify_cgroup(seen[2]).container_id == "c" * 64


def test_a_move_without_exec_is_seen_within_recheck_every_scans(host: FixtureHost) -> None:
    every = 4
    s = scanner(host, recheck_every=every)
    by_pid(s)
    (host.procfs / "412" / "cgroup").write_text(IN_CONTAINER)
    seen_after = None
    for n in range(1, every + 1):
        if by_pid(s)[412][2] == IN_CONTAINER:
            seen_after = n
            break
    assert seen_after is not None and seen_after <= every


def test_rechecks_are_spread_over_the_intervals(host: FixtureHost) -> None:
    every = 4
    s = scanner(host, recheck_every=every)
    total = len(by_pid(s))
    per_scan = []
    for _ in range(2 * every):
        before = s.cgroup_reads
        s.scan()
        per_scan.append(s.cgroup_reads - before)
    assert sum(per_scan) == 2 * total, "each process once every `every` scans"
    assert max(per_scan) < total, per_scan


def test_reused_pid_is_a_new_process(host: FixtureHost) -> None:
    s = scanner(host)
    old = by_pid(s)[1101]
    host.remove_process(1101)
    host.add_process(1101, "python3", IN_CONTAINER, start=old[0][1] + 1000, utime=3)
    new = by_pid(s)[1101]
    assert new[0] == (1101, old[0][1] + 1000)
    assert new[2] == IN_CONTAINER and new[3] == 3 / CLOCK_TICKS


def test_exited_processes_are_forgotten(host: FixtureHost) -> None:
    s = scanner(host)
    assert 1101 in by_pid(s)
    host.remove_process(1101)
    assert 1101 not in by_pid(s)
    assert "1101" not in s._known


def test_non_utf8_comm_is_kept(host: FixtureHost) -> None:
    d = host.procfs / "7001"
    d.mkdir()
    (d / "cgroup").write_text(IN_CONTAINER)
    line = stat_line(7001, "X", 10, 0, start=5).encode().replace(b"(X)", b"(a\xff\xfeb)")
    (d / "stat").write_bytes(line)
    seen = by_pid(scanner(host))[7001]
    assert seen[1] == "a\ufffd\ufffdb" and seen[2] == IN_CONTAINER


def test_long_stat_lines_are_read_whole(host: FixtureHost) -> None:
    host.add_process(7002, "x", IN_CONTAINER, start=1)
    path = host.procfs / "7002" / "stat"
    path.write_text(path.read_text().rstrip("\n") + " 0" * 3000 + "\n")  # over 4 KiB
    assert by_pid(scanner(host))[7002][0] == (7002, 1)


def test_same_as_a_full_read_on_a_churning_node(tmp_path: Path) -> None:
    synthetic = SyntheticHost.create(tmp_path / "node", HostShape(processes=600, pods=10))
    source = ProcfsSource(synthetic.procfs)
    for _ in range(5):
        synthetic.advance(5.0)
        got = {t.pid: (t.key, t.comm, t.cgroup, t.cpu_seconds) for t in source.tasks()}
        assert got == full_read(synthetic.procfs)


ODD_COMMS = ["my (weird) proc", "a) b (c", ") )", "x (y)", "tab\there", "", "ab) S) x"]


def test_processes_with_odd_names_that_run(host: FixtureHost) -> None:
    for i, comm in enumerate(ODD_COMMS):
        host.add_process(7100 + i, comm, IN_CONTAINER, start=500 + i, utime=10)
    s = scanner(host)
    by_pid(s)
    for i in range(len(ODD_COMMS)):
        host.add_process_ticks(7100 + i, 5, 2)
    seen = by_pid(s)
    for i, comm in enumerate(ODD_COMMS):
        assert seen[7100 + i] == ((7100 + i, 500 + i), comm, IN_CONTAINER, 17 / CLOCK_TICKS)
    assert seen == full_read(host.procfs)


def test_a_new_name_that_parses_like_the_old_one_is_a_new_name(host: FixtureHost) -> None:
    """'ab) S) x' renamed to 'ab) S': the stat lines agree up to the new name's last ')'."""
    host.add_process(7200, "ab) S) x", SHIM, start=42, utime=1)
    s = scanner(host)
    by_pid(s)
    (host.procfs / "7200" / "cgroup").write_text(IN_CONTAINER)
    write_atomic(host.procfs / "7200" / "stat", stat_line(7200, "ab) S", 9, 0, start=42))
    seen = by_pid(s)[7200]
    assert seen[1] == "ab) S" and seen[2] == IN_CONTAINER and seen[3] == 9 / CLOCK_TICKS


def _set_utime(host: FixtureHost, pid: int, utime: str) -> None:
    head, *rest = host.process_stat(pid)
    rest[11] = utime
    write_atomic(host.procfs / str(pid) / "stat", head + " " + " ".join(rest) + "\n")


def test_a_long_number_in_one_stat_skips_that_process_only(host: FixtureHost) -> None:
    s = scanner(host)
    before = by_pid(s)
    victim, *others = sorted(before)
    # 309+ digits overflowed the float division that makes cpu_seconds (the whole scan failed);
    # 4301+ is past int()'s digit limit; 21 is one more than a u64 has
    for digits in (21, 309, 4301):
        _set_utime(host, victim, "9" * digits)
        after = by_pid(s)  # the fast path: a known process that ran
        assert victim not in after
        assert {pid: after[pid] for pid in others} == {pid: before[pid] for pid in others}
        assert victim not in by_pid(scanner(host))  # the full parser on a fresh scanner too
    host.add_process_ticks(others[0], 5)
    _set_utime(host, victim, "12")
    after = by_pid(s)
    assert after[victim][3] == (12 + int(host.process_stat(victim)[13])) / CLOCK_TICKS
    assert after[others[0]][3] == before[others[0]][3] + 5 / CLOCK_TICKS
