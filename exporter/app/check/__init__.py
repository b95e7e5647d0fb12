"""`wattprobe check`: for each source, whether it works here, what it found, and how to fix it.

The checks come from the registry (exporter/app/registry.py): each source's SPEC names its probe.
A probe reads the source once, the way the exporter would, and returns a Finding; the runner
adds the name and kind, reports switched-off collectors as disabled and turns a probe's crash
into a FAIL, so `check` never ends in a traceback. To check a new source, give its SPEC a probe
(the JSON schema stays the same: docs/check.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from exporter.app.registry import REGISTRY, Registry
from exporter.model.config import Config
from exporter.model.spec import (
    ABSENT_STATUS,
    ACTIVITY,
    DISABLED,
    FAIL,
    FIX_BUG,
    FIX_UNKNOWN,
    KUBERNETES,
    MOUNT_PROCFS,
    MOUNT_SYSFS,
    OK,
    POWER,
    BuildContext,
    CheckResult,
    Finding,
    Probe,
)

__all__ = [
    "ABSENT_STATUS",
    "ACTIVITY",
    "DISABLED",
    "FAIL",
    "FIX_UNKNOWN",
    "KUBERNETES",
    "MOUNT_PROCFS",
    "MOUNT_SYSFS",
    "OK",
    "POWER",
    "CheckResult",
    "Finding",
    "GroupCheck",
    "SourceCheck",
    "checks_of",
    "exit_status",
    "run_checks",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SourceCheck:
    source: str
    kind: str
    probe: Probe
    collector: str | None = None  # the --collector.NAME that switches it; None: always on


@dataclass(frozen=True)
class GroupCheck:
    """Checks whose sources depend on the configuration (kubelet or apiserver): one function
    returning their results; a crash becomes one FAIL named after the group."""

    name: str
    kind: str
    run: Callable[[Config, BuildContext], Sequence[CheckResult]]


def checks_of(registry: Registry) -> tuple[SourceCheck | GroupCheck, ...]:
    """The registry's sources in report order: a SourceCheck per probe, a GroupCheck per group."""
    checks: list[SourceCheck | GroupCheck] = []
    for spec in registry.specs:
        collector = spec.name if spec.switchable else None
        if spec.probe is not None:
            checks.append(SourceCheck(spec.name, spec.check_kind, spec.probe, collector))
        if spec.group_probe is not None:
            checks.append(GroupCheck(spec.name, spec.check_kind, spec.group_probe))
    return tuple(checks)


CHECKS = checks_of(REGISTRY)
FIXES = REGISTRY.fixes()


# -- running -----------------------------------------------------------------------------


def run_one(
    check: SourceCheck,
    config: Config,
    earlier: Sequence[CheckResult],
    registry: Registry = REGISTRY,
) -> CheckResult:
    if check.collector is not None and not registry.enabled(config, check.collector):
        return CheckResult(
            check.source,
            check.kind,
            False,
            reason="disabled",
            fix=f"--collector.{check.collector} to enable",
            disabled=True,
        )
    try:
        f = check.probe(config, earlier, registry.build_context(config))
    except Exception as exc:  # a check must report, never crash
        log.debug("check %s crashed", check.source, exc_info=True)
        return CheckResult(
            check.source,
            check.kind,
            False,
            reason="internal error",
            detail=f"{type(exc).__name__}: {exc}",
            fix=FIX_BUG,
        )
    return CheckResult(
        check.source,
        check.kind,
        f.ok,
        found=f.found,
        reason=f.reason or ("" if f.ok else "failed"),
        fix=f.fix or ("" if f.ok or f.absent or f.disabled else FIX_UNKNOWN),
        disabled=f.disabled,
        absent=f.absent,
        detail=f.detail,
        items=f.items,
        zones=f.zones,
    )


def run_group(group: GroupCheck, config: Config, context: BuildContext) -> list[CheckResult]:
    try:
        return [_with_fix(r) for r in group.run(config, context)]
    except Exception as exc:  # a check must report, never crash
        log.debug("check %s crashed", group.name, exc_info=True)
        return [
            CheckResult(
                group.name,
                group.kind,
                False,
                reason="internal error",
                detail=f"{type(exc).__name__}: {exc}",
                fix=FIX_BUG,
            )
        ]


def _with_fix(r: CheckResult) -> CheckResult:
    """Every failure says what to do, even one a group did not foresee."""
    if r.status != FAIL or r.fix:
        return r
    return replace(r, fix=FIX_UNKNOWN, reason=r.reason or "failed")


def run_checks(
    config: Config,
    checks: Sequence[SourceCheck | GroupCheck] | None = None,
    registry: Registry = REGISTRY,
) -> list[CheckResult]:
    """checks: the registry's (checks_of) when None."""
    config = registry.resolve(config)
    results: list[CheckResult] = []
    for check in checks_of(registry) if checks is None else checks:
        if isinstance(check, GroupCheck):
            results.extend(run_group(check, config, registry.build_context(config)))
        else:
            results.append(run_one(check, config, tuple(results), registry))
    return results


def exit_status(results: Sequence[CheckResult]) -> int:
    """0 when at least one power source and one activity source work, else 1."""
    power = any(r.ok for r in results if r.kind == POWER)
    activity = any(r.ok for r in results if r.kind == ACTIVITY)
    return 0 if power and activity else 1
