"""Coverage-guided fuzzing of wattprobe's parsers with atheris (libFuzzer for Python).

Not part of the pytest run. Install the fuzz extra, write the seed corpus, and run, e.g.:

    .venv/bin/pip install -e '.[test,fuzz]'
    .venv/bin/python -m tests.fuzz_atheris --seeds /tmp/wattprobe-corpus
    .venv/bin/python -m tests.fuzz_atheris -atheris_runs=2000000 /tmp/wattprobe-corpus

Each input's first byte picks a parser; the rest is its input. WATTPROBE_FUZZ_TARGET=<name>
runs one target alone (e.g. proc_scan, hwmon_power). A parser may return or raise
its documented error (ValueError, HttpError, WebConfigError); any other exception, or a result
that breaks its contract, is a crash that libFuzzer reports with the input that caused it.
docs/benchmarks-fuzz.md records the runs made.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import atheris
import bcrypt  # noqa: F401 (imported before instrumentation: only wattprobe is instrumented)
import yaml  # noqa: F401

with atheris.instrument_imports(include=["exporter"]):
    from exporter.accounting.meter import MAX_PLAUSIBLE_POWER_W, DeviceSample, ZoneMeter
    from exporter.host.cgroupfs.classify import cgroup_lines, parse_cgroup_path
    from exporter.host.procstat import CLOCK_TICKS, PF_KTHREAD, parse_cpu_times, parse_stat
    from exporter.model.config import IdlePower, parse_duration, parse_listen_address
    from exporter.model.identity import ContainerRef
    from exporter.model.readings import SourceError
    from exporter.sources.activity.procfs.scan import ProcScanner
    from exporter.sources.power.hwmon import MAX_SANE_LIMIT_W, HwmonSource
    from exporter.web.auth import parse_basic
    from exporter.web.config import WebConfigError, parse_web_config
    from exporter.web.http import HttpError, parse_head


def _text(fdp: atheris.FuzzedDataProvider) -> str:
    return str(fdp.ConsumeUnicodeNoSurrogates(fdp.remaining_bytes()))


def stat(fdp: atheris.FuzzedDataProvider) -> None:
    text = _text(fdp)
    try:
        parsed = parse_stat(text)
    except ValueError:
        return
    assert f"({parsed.comm})" in text


def cpu_times(fdp: atheris.FuzzedDataProvider) -> None:
    try:
        times = parse_cpu_times(_text(fdp))
    except ValueError:
        return
    assert times.ncpu >= 1


def cgroup(fdp: atheris.FuzzedDataProvider) -> None:
    for path in cgroup_lines(_text(fdp)):
        ref = parse_cgroup_path(path)
        assert ref is None or isinstance(ref, ContainerRef)
        if ref is not None and ref.container_id:
            assert len(ref.container_id) == 64


def duration(fdp: atheris.FuzzedDataProvider) -> None:
    try:
        seconds = parse_duration(_text(fdp))
    except ValueError:
        return
    assert seconds > 0 and seconds != float("inf")


def listen(fdp: atheris.FuzzedDataProvider) -> None:
    try:
        _host, port = parse_listen_address(_text(fdp))
    except ValueError:
        return
    assert 0 <= port <= 65535


def idle_power(fdp: atheris.FuzzedDataProvider) -> None:
    try:
        IdlePower.parse(_text(fdp))
    except ValueError:
        return


def http_head(fdp: atheris.FuzzedDataProvider) -> None:
    try:
        req = parse_head(fdp.ConsumeBytes(fdp.remaining_bytes()))
    except HttpError as exc:
        assert exc.status in (400, 431, 505)
        return
    assert req.path.startswith("/")


def authorization(fdp: atheris.FuzzedDataProvider) -> None:
    parsed = parse_basic(_text(fdp))
    assert parsed is None or isinstance(parsed[1], bytes)


def web_config(fdp: atheris.FuzzedDataProvider) -> None:
    try:
        parse_web_config(_text(fdp), Path("/etc/wattprobe"))
    except WebConfigError as exc:
        assert "\n" not in str(exc)


def counter(fdp: atheris.FuzzedDataProvider) -> None:
    """Any sequence of counter and power readings: the meter never counts more than the bound
    allows over the time that passed, and never a negative amount."""
    meter = ZoneMeter()
    stamp = counted = allowed = 0.0
    for interval in range(fdp.ConsumeIntInRange(1, 20)):
        step = fdp.ConsumeFloatInRange(1e-4, 3600.0)
        stamp += step
        allowed += MAX_PLAUSIBLE_POWER_W * max(step, 1e-3)
        energy = fdp.ConsumeIntInRange(0, 2**65) if fdp.ConsumeBool() else None
        power = fdp.ConsumeRegularFloat() if fdp.ConsumeBool() else None
        wrap = fdp.ConsumeIntInRange(0, 2**64) if fdp.ConsumeBool() else None
        sample = DeviceSample(stamp, energy_uj=energy, max_energy_uj=wrap, power_w=power)
        measured = meter.measure(sample, interval=interval, utilization=None)
        if measured is not None:
            assert measured.active_j >= 0 and measured.idle_j >= 0
            counted += measured.energy_j
    assert counted <= allowed * (1 + 1e-9)


# One small /proc and one hwmon tree for the file-reading targets, made once per process: the
# targets rewrite the fuzzed file in place (tmpfs-speed writes, no tree per input).
_TREES = Path(tempfile.mkdtemp(prefix="wattprobe-fuzz-"))
_PROC = _TREES / "proc"
_HWMON = _TREES / "sys" / "class" / "hwmon" / "hwmon0"
_GOOD_PIDS = (10, 11)
_FUZZED_PID = 12


def _stat_line(pid: int, utime: int) -> str:
    fields = ["S", "1", str(pid), str(pid), "0", "-1", "4194560", *["0"] * 4]
    fields += [str(utime), "5", *["0"] * 6, str(1000 + pid), "1000", "100"]
    return f"{pid} (w{pid}) " + " ".join(fields) + "\n"


def _make_trees() -> None:
    for pid in (*_GOOD_PIDS, _FUZZED_PID):
        (_PROC / str(pid)).mkdir(parents=True, exist_ok=True)
        (_PROC / str(pid) / "stat").write_text(_stat_line(pid, 100))
        (_PROC / str(pid) / "cgroup").write_text(f"0::/system.slice/s{pid}.service\n")
    _HWMON.mkdir(parents=True, exist_ok=True)
    (_HWMON / "name").write_text("board\n")
    (_HWMON / "power1_input").write_text("100000000\n")  # the fuzzed sensor
    (_HWMON / "power2_input").write_text("50000000\n")  # a healthy neighbour
    (_HWMON / "power2_label").write_text("rail\n")


_make_trees()


def proc_scan(fdp: atheris.FuzzedDataProvider) -> None:
    """The incremental scanner with one process's stat (and cgroup) fuzzed: once known (the
    fast path), once new (the full parser). The others come out exactly as before."""
    stat_bytes = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 6000))
    cgroup_bytes = fdp.ConsumeBytes(fdp.remaining_bytes())
    fuzzed = _PROC / str(_FUZZED_PID)
    (fuzzed / "stat").write_text(_stat_line(_FUZZED_PID, 100))
    (fuzzed / "cgroup").write_text("0::/\n")
    scanner = ProcScanner(
        str(_PROC), parse_stat=parse_stat, kthread_flag=PF_KTHREAD, ticks_per_second=CLOCK_TICKS
    )
    first = {t.pid: t for t in scanner.scan()}
    (fuzzed / "stat").write_bytes(stat_bytes)
    (fuzzed / "cgroup").write_bytes(cgroup_bytes)
    for samples in (
        scanner.scan(),
        ProcScanner(
            str(_PROC), parse_stat=parse_stat, kthread_flag=PF_KTHREAD, ticks_per_second=CLOCK_TICKS
        ).scan(),
    ):
        # (not by pid: the fuzzed stat may claim any pid, which no kernel would write)
        for pid in _GOOD_PIDS:
            assert first[pid] in samples
        for t in samples:
            assert math.isfinite(t.cpu_seconds) and t.cpu_seconds >= 0


def hwmon_power(fdp: atheris.FuzzedDataProvider) -> None:
    """One power sensor's input and limit files fuzzed: the source returns every sensor, the
    fuzzed one with a finite power or a fault, its bound sane or None; never another error."""
    for name in ("power1_input", "power1_max", "power1_crit"):
        data = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 5000))
        if fdp.ConsumeBool():
            (_HWMON / name).write_bytes(data)
        elif name != "power1_input" and (_HWMON / name).exists():
            os.unlink(_HWMON / name)
    try:
        readings = {r.zone: r for r in HwmonSource(_TREES / "sys").read()}
    except SourceError:
        return
    assert readings["board_rail"].power_w == 50.0
    r = readings["board_power1"]
    assert (r.power_w is None) == bool(r.fault)
    assert r.power_w is None or (math.isfinite(r.power_w) and 0 <= r.power_w < 2**64 / 1e6)
    assert r.max_power_w is None or 0 < r.max_power_w <= MAX_SANE_LIMIT_W


TARGETS: list[Callable[[atheris.FuzzedDataProvider], None]] = [
    stat,
    cpu_times,
    cgroup,
    duration,
    listen,
    idle_power,
    http_head,
    authorization,
    web_config,
    counter,
    proc_scan,
    hwmon_power,
]


# WATTPROBE_FUZZ_TARGET=<name> fuzzes one target alone (the first byte still selects nothing
# else), e.g. to give a new target a run of its own.
_ONLY = os.environ.get("WATTPROBE_FUZZ_TARGET", "")


def one_input(data: bytes) -> None:
    if not data:
        return
    if _ONLY:
        next(t for t in TARGETS if t.__name__ == _ONLY)(atheris.FuzzedDataProvider(data[1:]))
        return
    TARGETS[data[0] % len(TARGETS)](atheris.FuzzedDataProvider(data[1:]))


FIXTURES = Path(__file__).parent / "fixtures"
SEEDS: dict[Callable[[atheris.FuzzedDataProvider], None], list[bytes]] = {
    duration: [b"5s", b"1m30s", b"500ms", b"2.5"],
    listen: [b":28390", b"127.0.0.1:9000", b"[::1]:9000"],
    idle_power: [b"auto", b"12.5", b"package=20,dram=3W,*=1"],
    http_head: [
        b"GET /metrics HTTP/1.1\r\nHost: node:28390\r\nAccept-Encoding: gzip\r\n",
        b"HEAD http://node/metrics?x=1 HTTP/1.0\nConnection: keep-alive\nContent-Length: 0",
    ],
    authorization: [b"Basic dTpw", b"basic  YWxpY2U6c2VjcmV0"],
    web_config: [
        b"tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n"
        b"  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"
        b"  min_version: TLS13\n  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"
        b"http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
        b"basic_auth_users:\n  u: $2y$10$mDwo.lAisC94iLAyP81MCesa29IzH37oigHC/42V2pdJlUprsJPze\n",
    ],
}


def write_seeds(directory: Path) -> int:
    """A seed corpus from the fixture trees and typical values, one file per seed."""
    directory.mkdir(parents=True, exist_ok=True)
    seeds = {k: list(v) for k, v in SEEDS.items()}
    seeds[stat] = [p.read_bytes() for p in sorted((FIXTURES / "proc").glob("*/stat"))]
    seeds[cpu_times] = [(FIXTURES / "proc" / "stat").read_bytes()]
    seeds[cgroup] = [p.read_bytes() for p in sorted((FIXTURES / "proc").glob("*/cgroup"))]
    seeds[proc_scan] = [
        bytes([0x20, 0x00]) + _stat_line(12, 200).encode() + b"0::/kubepods/pod1/c1\n",
        bytes([0xFF, 0x01]) + _stat_line(12, 10**400).encode(),
    ]
    seeds[hwmon_power] = [b"\x10\x00" + b"1" * 16 + b"\x01", b"\xff\x0f" + b"9" * 400 + b"\x01"]
    count = 0
    for target, samples in seeds.items():
        for sample in samples:
            (directory / f"seed-{count:04d}").write_bytes(bytes([TARGETS.index(target)]) + sample)
            count += 1
    return count


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--seeds":
        print(f"wrote {write_seeds(Path(sys.argv[2]))} seeds to {sys.argv[2]}")
        return
    atheris.Setup(sys.argv, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
