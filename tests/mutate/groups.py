"""Which tests cover which billing module: each group's mutants run only against its tests.

Fast tier only (no `slow`, no `real` marker): a mutant costs one pytest start and these tests.
A module's mutants are killed only by the tests named here, so a group's survivors may still be
killed by slower tests elsewhere; docs/testing.md says which.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Group:
    name: str
    mutate: tuple[str, ...]  # source files, relative to the repository root
    tests: tuple[str, ...]  # pytest paths

    @property
    def runner_args(self) -> tuple[str, ...]:
        return ("-x", "-q", "-p", "no:cacheprovider", "-m", "not slow and not real", *self.tests)


A = "tests/accounting/"
R = "tests/app/report/"
P = "tests/sources/power/"
PROCFS = "tests/sources/activity/"
NVML = "tests/sources/gpu/nvml/"

# Most billing-critical first: `make mutate` runs them in this order.
GROUPS: tuple[Group, ...] = (
    Group("attribution", ("exporter/accounting/attribution.py",), (A + "test_attribution.py",)),
    Group("idle", ("exporter/accounting/idle.py",), (A + "test_idle.py", A + "test_meter.py")),
    Group("meter", ("exporter/accounting/meter.py",), (A + "test_meter.py", A + "test_idle.py")),
    Group("ledger", ("exporter/accounting/ledger.py",), (A + "test_ledger.py",)),
    Group(
        "report-compute",
        ("exporter/app/report/compute.py",),
        # the quick hand-computed tests first: with -x most mutants die in them
        (R + "test_compute_gpu.py", R + "test_mig_price.py", R + "test_compute_props.py"),
    ),
    Group(
        "workloads",
        ("exporter/accounting/workloads.py",),
        (A + "test_ledger.py", A + "test_expiry_sums.py"),
    ),
    Group(
        "report-promql",
        ("exporter/app/report/promql.py",),
        (R + "test_idle_minutes.py", R + "test_alert_agreement.py"),
    ),
    Group(
        "gpu-attribution",
        ("exporter/accounting/gpu_attribution.py", "exporter/accounting/gpu.py"),
        (A + "test_gpu_pending.py", NVML + "test_attribution.py", NVML + "test_monitor_gpu.py"),
    ),
    Group(
        "accounting-stages",
        (
            "exporter/accounting/nodezones.py",
            "exporter/accounting/pending.py",
            "exporter/accounting/zones.py",
        ),
        (A + "test_monitor.py", A + "test_pending.py", A + "test_zone_fill.py"),
    ),
    Group(
        "power-sources",
        ("exporter/sources/power/rapl.py", "exporter/sources/power/hwmon.py"),
        (
            P + "test_rapl.py",
            P + "test_rapl_faults.py",
            P + "test_rapl_stuck.py",
            P + "test_hwmon.py",
            P + "test_hwmon_faults.py",
            P + "test_power_faults_devices.py",
        ),
    ),
    Group(
        "procfs",
        (
            "exporter/sources/activity/procfs/cgroupcpu.py",
            "exporter/sources/activity/procfs/scan.py",
            "exporter/sources/activity/procfs/exited.py",
        ),
        (
            PROCFS + "test_procfs.py",
            PROCFS + "test_procfs_cgroupcpu.py",
            PROCFS + "test_procfs_cgroupcpu_props.py",
            PROCFS + "test_procfs_exited.py",
            PROCFS + "test_procfs_scan.py",
        ),
    ),
    Group(
        "exposition-counters",
        ("exporter/exposition/collector.py", "exporter/exposition/gpu.py"),
        ("tests/exposition/test_text.py", "tests/exposition/test_metrics_doc.py"),
    ),
)

BY_NAME = {g.name: g for g in GROUPS}
