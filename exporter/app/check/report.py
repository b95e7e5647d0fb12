"""The two faces of `wattprobe check`: a JSON document for scripts, lines of text for people.

The JSON schema is versioned (SCHEMA_VERSION) and documented in docs/check.md with a JSON Schema
in docs/check.schema.json; fields are only ever added within a version.
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter.app.check import (
    ABSENT_STATUS,
    ACTIVITY,
    DISABLED,
    FAIL,
    OK,
    POWER,
    CheckResult,
    exit_status,
)
from exporter.sources.power.estimate import ESTIMATED

SCHEMA_VERSION = 1
# Items listed per source in the text output; --json lists them all.
TEXT_ITEMS = 8
MARKS = {OK: "OK", FAIL: "FAIL", ABSENT_STATUS: "n/a", DISABLED: "off"}


def report(results: Sequence[CheckResult]) -> dict[str, object]:
    status = exit_status(results)
    return {
        "schema_version": SCHEMA_VERSION,
        "ok": status == 0,
        "exit_code": status,
        "power": [r.source for r in results if r.kind == POWER and r.ok],
        "activity": [r.source for r in results if r.kind == ACTIVITY and r.ok],
        "activity_source": activity_in_use(results),
        "sources": [r.as_dict() for r in results],
    }


def activity_in_use(results: Sequence[CheckResult]) -> str | None:
    """The activity source serve would measure tasks with: eBPF when it works (auto or ebpf),
    else procfs (eBPF's check is off under --activity.source procfs); None when neither works."""
    working = [r.source for r in results if r.kind == ACTIVITY and r.ok]
    if not working:
        return None
    return "ebpf" if "ebpf" in working else working[0]


def text_lines(results: Sequence[CheckResult]) -> list[str]:
    """One line per source, then what it found, or why not and the fix; a verdict at the end."""
    lines: list[str] = []
    # the widest source name (podresources) sets the column, so every row lines up
    width = max((len(r.source) for r in results), default=0)
    width = max(width, 10)
    pad = " " * (width + 6)
    for r in results:
        if r.ok:
            head = r.found
        elif r.disabled:
            head = r.reason or "disabled"
            head += f": {r.detail}" if r.detail else ""
        else:
            head = f"{r.reason}: {r.detail}" if r.detail and r.detail != r.reason else r.reason
        lines.append(f"{MARKS[r.status]:<4} {r.source:<{width}} {head}")
        shown = r.items[:TEXT_ITEMS]
        lines.extend(f"{pad}- {item}" for item in shown)
        if len(r.items) > len(shown):
            lines.append(f"{pad}- ... {len(r.items) - len(shown)} more (--json lists all)")
        if r.fix and not r.ok:
            label = "hint" if r.absent or r.disabled else "fix"
            lines.append(f"{pad}{label}: {r.fix}")
    lines.append("")
    lines.append(verdict(results))
    return lines


def verdict(results: Sequence[CheckResult]) -> str:
    power = [r.source for r in results if r.kind == POWER and r.ok]
    activity = [r.source for r in results if r.kind == ACTIVITY and r.ok]
    if exit_status(results) == 0:
        measured = [p for p in power if p != ESTIMATED]
        how = (
            f"power measured by {', '.join(measured)}"
            if measured
            else "power estimated (no sensor works)"
        )
        in_use = activity_in_use(results)
        also = [a for a in activity if a != in_use]
        spare = f" ({', '.join(also)} works too)" if also else ""
        return f"ready: {how}; per-process activity from {in_use}{spare} (exit 0)"
    missing = []
    if not power:
        missing.append("no power source works")
    if not activity:
        missing.append("no activity source works")
    return f"not ready: {' and '.join(missing)}; see the fixes above (exit 1)"
