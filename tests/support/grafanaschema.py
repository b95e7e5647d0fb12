"""Type-check dashboard JSON against Grafana's published schema (npm @grafana/schema) with tsc.

Each dashboard becomes a TypeScript module assigning the JSON, as an object literal, to the
schema's Dashboard type; each panel's options and custom field config are assigned to the
panel plugin's own Options / FieldConfig types. Object literals get TypeScript's excess
property checks, so a misspelt or unknown key fails just like a wrong type or enum value.

The schema's string enums (LegendDisplayMode.List = "list") do not accept plain strings, so
the check goes through Lit<T>, which turns every string enum into the union of its values.

The npm packages live in tests/dashboards/node_modules (package.json and package-lock.json are
committed; `npm ci` there installs them, scripts/setup-debian.sh test does it).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

NPM_DIR = Path(__file__).resolve().parents[1] / "dashboards"
NODE_MODULES = NPM_DIR / "node_modules"
TSC = NODE_MODULES / "typescript" / "bin" / "tsc"

# panel type -> (directory under raw/composable, module prefix, has a custom FieldConfig type)
PANEL_SCHEMAS: dict[str, tuple[str, str, bool]] = {
    "timeseries": ("timeseries", "TimeSeriesPanelCfg", True),
    "stat": ("stat", "StatPanelCfg", False),
    "bargauge": ("bargauge", "BarGaugePanelCfg", False),
    "table": ("table", "TablePanelCfg", True),
    "state-timeline": ("statetimeline", "StateTimelinePanelCfg", True),
}

TSCONFIG = {
    "compilerOptions": {
        "strict": True,
        "noEmit": True,
        "module": "esnext",
        "moduleResolution": "bundler",
        "target": "es2022",
        "skipLibCheck": True,
        "types": [],
    },
    "include": ["*.ts"],
}

LIT = (
    "type Lit<T> = T extends string ? `${T}` : T extends (infer U)[] ? Lit<U>[] : "
    "T extends object ? { [K in keyof T]: Lit<T[K]> } : T;\n"
)


def _ident(panel_type: str) -> str:
    return panel_type.replace("-", "_")


def typescript_module(dashboard: dict[str, Any]) -> str:
    """A .ts module that compiles only if the dashboard matches Grafana's schema."""
    lines = ["import type { Dashboard } from '@grafana/schema';"]
    for kind, (folder, prefix, _) in PANEL_SCHEMAS.items():
        module = f"@grafana/schema/dist/esm/raw/composable/{folder}/panelcfg/x/{prefix}_types.gen"
        lines.append(f"import type * as {_ident(kind)} from '{module}';")
    lines.append(LIT)
    lines.append(f"export const dashboard: Lit<Dashboard> = {json.dumps(dashboard, indent=1)};")
    for panel in dashboard.get("panels", []):
        kind = panel["type"]
        if kind == "row":
            continue
        if kind not in PANEL_SCHEMAS:
            raise ValueError(f"panel {panel.get('title')!r}: no schema known for type {kind!r}")
        _, _, has_custom = PANEL_SCHEMAS[kind]
        name = f"panel{panel['id']}"
        options = json.dumps(panel.get("options", {}))
        lines.append(f"export const {name}Options: Lit<{_ident(kind)}.Options> = {options};")
        custom = panel.get("fieldConfig", {}).get("defaults", {}).get("custom")
        if custom is not None:
            if not has_custom:
                raise ValueError(f"panel {panel.get('title')!r}: {kind} has no custom field config")
            custom_type = f"Lit<{_ident(kind)}.FieldConfig>"
            lines.append(f"export const {name}Custom: {custom_type} = {json.dumps(custom)};")
    return "\n".join(lines) + "\n"


def typecheck(
    dashboards: dict[str, dict[str, Any]], workdir: Path
) -> subprocess.CompletedProcess[str]:
    """Run tsc over one module per dashboard in workdir; returncode 0 means all valid."""
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tsconfig.json").write_text(json.dumps(TSCONFIG))
    link = workdir / "node_modules"
    if not link.exists():
        os.symlink(NODE_MODULES, link)
    for name, dashboard in dashboards.items():
        (workdir / f"{Path(name).stem.replace('-', '_')}.ts").write_text(
            typescript_module(dashboard)
        )
    node = shutil.which("node") or "node"
    return subprocess.run(
        [node, str(TSC), "-p", str(workdir / "tsconfig.json")],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def grafana_schema_version() -> int:
    """The schemaVersion of the installed @grafana/schema's default dashboard."""
    node = shutil.which("node") or "node"
    script = "console.log(require('@grafana/schema').defaultDashboard.schemaVersion)"
    out = subprocess.run(
        [node, "-e", script], cwd=NPM_DIR, capture_output=True, text=True, timeout=60, check=True
    )
    return int(out.stdout.strip())
