"""NvmlSource through the real pynvml binding against the fake libnvidia-ml.so.1, in process."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pynvml
import pytest

from exporter.model.gpu_readings import GpuProcess, GpuReading, GpuReadings
from exporter.model.readings import ABSENT, SourceAbsent, SourceError
from exporter.sources.gpu.nvml.source import NvmlSource, merge_processes, sum_utilization
from tests.sources.gpu.nvml.conftest import LoadScenario
from tests.sources.gpu.nvml.scenario import Scenario

GiB = 1024**3


@pytest.fixture
def sources(tmp_path: Path) -> Iterator[list[NvmlSource]]:
    """NvmlSources made by a test; all closed after it (NVML shut down, XID threads stopped)."""
    made: list[NvmlSource] = []
    yield made
    for source in made:
        source.close()


def new_source(
    made: list[NvmlSource],
    procfs: Path,
    *,
    retry_s: float = 60.0,
    clock: Callable[[], float] = time.monotonic,
) -> NvmlSource:
    source = NvmlSource(procfs, retry_s=retry_s, clock=clock)
    made.append(source)
    return source


def gpu(reading: GpuReadings, index: int) -> GpuReading:
    return reading.gpus[index]


def test_reads_every_field_in_base_units(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    reading = new_source(sources, tmp_path).read()
    assert (reading.driver_version, reading.nvml_version, reading.cuda_version) == (
        "550.54.15",
        "12.550.54.15",
        "12.4",
    )
    assert [g.index for g in reading.gpus] == list(range(8))
    assert [g.uuid for g in reading.gpus] == [s[f"gpu.{i}.uuid"] for i in range(8)]
    g0 = gpu(reading, 0)
    assert g0.name == "NVIDIA H100 80GB HBM3"
    assert g0.pci_bus_id == "00000000:1B:00.0"
    assert g0.mig_enabled is False
    assert g0.utilization_ratio == pytest.approx(0.85)
    assert g0.memory_utilization_ratio == pytest.approx(0.40)
    assert g0.memory_total_bytes == s.number("gpu.0.memory.total")
    assert g0.memory_used_bytes == s.number("gpu.0.memory.used")
    assert g0.memory_reserved_bytes == s.number("gpu.0.memory.reserved")
    assert g0.temperature_c == 58
    assert g0.power_w == pytest.approx(520.0)
    assert g0.power_limit_w == pytest.approx(700.0)
    assert g0.energy_mj == s.number("gpu.0.energy_mj")
    assert g0.sm_clock_hz == pytest.approx(1980e6)
    assert g0.memory_clock_hz == pytest.approx(2619e6)
    assert g0.clock_event_reasons == 0
    assert gpu(reading, 4).clock_event_reasons == 0x1  # idle
    assert gpu(reading, 1).clock_event_reasons == 0x4  # software power cap
    assert gpu(reading, 5).pcie_replays == 3
    assert gpu(reading, 3).ecc_corrected == 2
    assert gpu(reading, 3).ecc_uncorrected == 0
    assert [(p.pid, p.used_memory_bytes) for p in g0.processes] == [
        (5101, 20 * GiB),
        (5102, 10 * GiB),
    ]
    assert g0.processes[0].gpu_instance is None
    assert g0.process_utilization is not None
    assert [(u.pid, u.sm_percent) for u in g0.process_utilization] == [(5101, 60), (5102, 20)]
    # GPU 3 has processes but no utilization samples: an empty tuple, not "unsupported"
    assert gpu(reading, 3).process_utilization == ()
    assert reading.event_watch is not None and reading.event_watch.up


def test_process_utilization_is_read_since_the_last_sample(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    s["gpu.0.putil.0.ts"] = 1_000_000
    s["gpu.0.putil.1.ts"] = 2_000_000
    s.write()
    source = new_source(sources, tmp_path)
    first = gpu(source.read(), 0).process_utilization
    assert first is not None and {u.pid for u in first} == {5101, 5102}
    # nothing newer than the last timestamp seen: NVML answers NOT_FOUND, which means "none"
    assert gpu(source.read(), 0).process_utilization == ()
    s["gpu.0.putil.1.ts"] = 3_000_000
    s.write()
    third = gpu(source.read(), 0).process_utilization
    assert third is not None and [(u.pid, u.sm_percent) for u in third] == [(5102, 20)]


def test_unsupported_field_is_dropped_and_logged_once(
    scenario: LoadScenario,
    sources: list[NvmlSource],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = scenario("h100x8-timesliced")
    s["gpu.1.error.ecc"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    s.write()
    source = new_source(sources, tmp_path)
    with caplog.at_level(logging.INFO, logger="exporter.sources.gpu.nvml.source"):
        for _ in range(3):
            reading = source.read()
    assert gpu(reading, 1).ecc_corrected is None
    assert gpu(reading, 1).ecc_uncorrected is None
    assert gpu(reading, 2).ecc_corrected == 0  # other GPUs keep the field
    messages = [r.getMessage() for r in caplog.records if "GPU 1" in r.getMessage()]
    assert sum("): corrected ECC error count not supported" in m for m in messages) == 1
    assert sum("uncorrected ECC error count not supported" in m for m in messages) == 1
    # not asked again: even once the (fake) GPU would answer, the field stays dropped
    del s["gpu.1.error.ecc"]
    s.write()
    assert gpu(source.read(), 1).ecc_corrected is None


def test_older_drivers_fall_back_to_older_calls(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    for field in ("memory_v2", "temperature_v", "clock_events"):
        s[f"gpu.0.error.{field}"] = pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
    s.write()
    g0 = gpu(new_source(sources, tmp_path).read(), 0)
    # nvmlDeviceGetMemoryInfo v1 counts the driver's reservation as used and has no reserved
    assert g0.memory_used_bytes == s.number("gpu.0.memory.used") + s.number("gpu.0.memory.reserved")
    assert g0.memory_reserved_bytes is None
    assert g0.temperature_c == 58
    assert g0.clock_event_reasons == 0  # from the older "throttle reasons" call


def test_transient_error_costs_one_interval(
    scenario: LoadScenario,
    sources: list[NvmlSource],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    s = scenario("h100x8-timesliced")
    s["gpu.2.error.energy"] = pynvml.NVML_ERROR_UNKNOWN
    s.write()
    source = new_source(sources, tmp_path)
    with caplog.at_level(logging.WARNING, logger="exporter.sources.gpu.nvml.source"):
        assert gpu(source.read(), 2).energy_mj is None
        assert gpu(source.read(), 2).energy_mj is None
    assert sum("total energy counter" in r.getMessage() for r in caplog.records) == 1
    del s["gpu.2.error.energy"]
    s.write()
    assert gpu(source.read(), 2).energy_mj == s.number("gpu.2.energy_mj")


def test_lost_gpu_keeps_identity_and_spares_the_others(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    source = new_source(sources, tmp_path)
    source.read()
    s["gpu.3.lost"] = 1
    s.write()
    reading = source.read()
    lost = gpu(reading, 3)
    assert lost.lost
    assert (lost.uuid, lost.name) == (s["gpu.3.uuid"], "NVIDIA H100 80GB HBM3")
    assert lost.power_w is None and lost.energy_mj is None and lost.processes == ()
    assert all(not g.lost and g.power_w is not None for g in reading.gpus if g.index != 3)
    s["gpu.3.lost"] = 0
    s.write()
    back = gpu(source.read(), 3)
    assert not back.lost and back.power_w == pytest.approx(250.0)


def test_mig_devices_and_their_processes(
    scenario: LoadScenario,
    sources: list[NvmlSource],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    scenario("a100-mig")
    source = new_source(sources, tmp_path)
    with caplog.at_level(logging.INFO, logger="exporter.sources.gpu.nvml.source"):
        source.read()
        g0 = gpu(source.read(), 0)
    assert g0.mig_enabled is True
    # MIG GPUs give no utilization: dropped (logged once), not an error every interval
    assert g0.utilization_ratio is None
    assert sum("utilization rates not supported" in r.getMessage() for r in caplog.records) == 1
    assert g0.process_utilization is None
    summary = [
        (i.profile, i.gpu_instance, i.compute_instance, i.memory_total_bytes, len(i.processes))
        for i in g0.mig_instances
    ]
    assert summary == [
        ("3g.20gb", 1, 0, 20937965568, 1),
        ("2g.10gb", 5, 0, 10468982784, 1),
        ("1g.5gb", 13, 0, 4966055936, 1),
        ("1g.5gb", 14, 0, 4966055936, 0),
    ]
    assert g0.mig_instances[0].uuid == "MIG-8c4c5a27-e508-5556-b2ea-7e549465741e"
    assert [(p.pid, p.gpu_instance, p.used_memory_bytes) for p in g0.processes] == [
        (5201, 1, 12 * GiB),
        (5202, 5, 6 * GiB),
        (5203, 13, 2 * GiB),
    ]


def test_pre_volta_gpu_has_no_energy_counter(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    scenario("p100-no-energy")
    g0 = gpu(new_source(sources, tmp_path).read(), 0)
    assert g0.energy_mj is None
    assert g0.power_w == pytest.approx(125.0)


def test_no_driver_is_absent_but_a_loaded_driver_is_a_fault(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    s["init_error"] = pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    s.write()
    with pytest.raises(SourceAbsent) as absent:
        new_source(sources, tmp_path).read()
    assert absent.value.reason == ABSENT
    procfs = tmp_path / "proc"
    (procfs / "driver" / "nvidia").mkdir(parents=True)
    with pytest.raises(SourceError) as fault:
        new_source(sources, procfs).read()
    assert fault.value.reason == "driver not loaded"


def test_init_is_retried_after_the_retry_interval(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    s["init_error"] = pynvml.NVML_ERROR_NO_PERMISSION
    s.write()
    now = [100.0]
    source = new_source(sources, tmp_path, retry_s=60.0, clock=lambda: now[0])
    with pytest.raises(SourceError, match="nvmlInit") as first:
        source.read()
    assert first.value.reason == "permission denied"
    del s["init_error"]
    s.write()
    now[0] += 30  # before the retry time the cached failure stands: no init storm
    with pytest.raises(SourceError) as again:
        source.read()
    assert again.value is not first.value
    assert (again.value.reason, again.value.detail) == (first.value.reason, first.value.detail)
    now[0] += 31
    assert len(source.read().gpus) == 8


def test_nvml_failing_midway_fails_the_read_and_reinitialises(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    source = new_source(sources, tmp_path)
    source.read()
    s["gpu.0.error.power"] = pynvml.NVML_ERROR_UNINITIALIZED
    s.write()
    with pytest.raises(SourceError) as exc:
        source.read()
    assert exc.value.reason == "uninitialized"
    del s["gpu.0.error.power"]
    s.write()
    assert gpu(source.read(), 0).power_w == pytest.approx(520.0)


def wait_for_xids(source: NvmlSource, index: int, want: tuple[tuple[int, int], ...]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if gpu(source.read(), index).xid_errors == want:
            return
        time.sleep(0.05)
    raise AssertionError(f"GPU {index} XIDs {gpu(source.read(), index).xid_errors} != {want}")


def xid_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "nvml-xid"]


def test_xid_events_are_counted_and_the_watcher_stops(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    s.add_event(gpu=1, xid=13)  # before the event set exists: the driver would not report it
    s.write()
    source = new_source(sources, tmp_path)
    assert gpu(source.read(), 1).xid_errors == ()
    s.add_event(gpu=2, xid=79)
    s.write()
    wait_for_xids(source, 2, ((79, 1),))
    s.add_event(gpu=2, xid=79)
    s.add_event(gpu=2, xid=48)
    s.write()
    wait_for_xids(source, 2, ((48, 1), (79, 2)))
    assert gpu(source.read(), 1).xid_errors == ()
    assert len(xid_threads()) == 1
    started = time.monotonic()
    source.close()
    assert xid_threads() == []
    assert time.monotonic() - started < 2.0
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_xid_counts_survive_an_nvml_reinitialisation(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s = scenario("h100x8-timesliced")
    source = new_source(sources, tmp_path)
    source.read()
    s.add_event(gpu=4, xid=94)
    s.write()
    wait_for_xids(source, 4, ((94, 1),))
    s["gpu.0.error.power"] = pynvml.NVML_ERROR_UNINITIALIZED  # NVML goes away ...
    s.write()
    with pytest.raises(SourceError):
        source.read()
    del s["gpu.0.error.power"]  # ... and comes back with a new event set
    s.write()
    assert gpu(source.read(), 4).xid_errors == ((94, 1),)
    s.add_event(gpu=4, xid=94)
    s.write()
    wait_for_xids(source, 4, ((94, 2),))
    assert len(xid_threads()) == 1


def test_xid_watch_reports_gpus_without_event_support(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    s: Scenario = scenario("a100-mig")
    s["gpu.0.events_supported"] = 0
    s.write()
    reading = new_source(sources, tmp_path).read()
    assert reading.event_watch is not None
    assert not reading.event_watch.up
    assert reading.event_watch.reason == "not supported"
    assert xid_threads() == []


def test_per_process_sums_are_clamped_and_merged() -> None:
    summed = sum_utilization([(1, 30, 5), (1, 40, 5), (2, 4_000_000_000, 0)])
    assert [(u.pid, u.sm_percent, u.samples) for u in summed] == [(1, 70, 2), (2, 100, 1)]
    merged = merge_processes(
        [GpuProcess(7, 100, "compute"), GpuProcess(7, 300, "graphics"), GpuProcess(8, None)]
    )
    assert [(p.pid, p.used_memory_bytes, p.kind) for p in merged] == [
        (7, 300, "compute"),
        (8, None, "compute"),
    ]


def test_a_failed_process_list_is_reported_and_an_unsupported_one_is_not(
    scenario: LoadScenario, sources: list[NvmlSource], tmp_path: Path
) -> None:
    """processes_unread makes the monitor hold the GPU's energy for the next list
    (tests/accounting/test_gpu_pending.py); a call the GPU does not support must not."""
    s = scenario("h100x8-timesliced")
    s["gpu.0.putil.0.ts"] = 1_000_000
    s["gpu.0.putil.1.ts"] = 2_000_000
    s["gpu.0.error.processes"] = pynvml.NVML_ERROR_UNKNOWN
    s["gpu.0.error.process_util"] = pynvml.NVML_ERROR_UNKNOWN
    s["gpu.1.error.processes"] = pynvml.NVML_ERROR_NOT_SUPPORTED
    s.write()
    source = new_source(sources, tmp_path)
    first = source.read()
    assert gpu(first, 0).processes_unread == (
        "reading compute processes, per-process utilization failed"
    )
    assert gpu(first, 0).process_utilization is None
    assert gpu(first, 1).processes_unread == ""
    assert gpu(first, 2).processes_unread == ""
    del s["gpu.0.error.processes"], s["gpu.0.error.process_util"]
    s.write()
    again = gpu(source.read(), 0)
    assert again.processes_unread == ""
    # the samples come from where the last good read left off: they cover the failed interval
    assert again.process_utilization is not None
    assert {u.pid for u in again.process_utilization} == {5101, 5102}
