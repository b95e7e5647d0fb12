"""Small builders for Grafana dashboard JSON (schemaVersion 42, Grafana 12/13).

Plain dicts, no SDK: each builder returns what Grafana itself would save, with every panel and
target bound to the `datasource` template variable. A Layout places panels left to right in
rows of 24 grid units, so positions never overlap and ids are unique by construction (the
tests check both anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

SCHEMA_VERSION = 42  # what @grafana/schema's defaultDashboard carries; tests compare the two
GRID_WIDTH = 24
DATASOURCE: JSON = {"type": "prometheus", "uid": "${datasource}"}


# -- queries --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Query:
    """One PromQL target. instant=True for tables, bar gauges and single values."""

    expr: str
    legend: str = ""
    instant: bool = False
    table: bool = False


def _target(query: Query, ref_id: str) -> JSON:
    out: JSON = {
        "datasource": DATASOURCE,
        "editorMode": "code",
        "expr": query.expr,
        "instant": query.instant,
        "range": not query.instant,
        "refId": ref_id,
    }
    if query.legend:
        out["legendFormat"] = query.legend
    if query.table:
        out["format"] = "table"
    return out


def _targets(queries: Sequence[Query]) -> list[JSON]:
    return [_target(q, chr(ord("A") + i)) for i, q in enumerate(queries)]


# -- field config ---------------------------------------------------------------------------


def thresholds(*steps: tuple[str, float | None]) -> JSON:
    """Absolute thresholds; the first step is the base (value None)."""
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


BASE_THRESHOLDS = thresholds(("green", None))


def dashed(matcher_id: str, options: str) -> JSON:
    """An override drawing the matched series as a dashed line (forecasts, limits, estimates)."""
    return {
        "matcher": {"id": matcher_id, "options": options},
        "properties": [{"id": "custom.lineStyle", "value": {"dash": [10, 10], "fill": "dash"}}],
    }


def value_map(mapping: dict[str, tuple[str, str]]) -> list[JSON]:
    """Value mappings: raw value -> (text, color)."""
    options = {
        raw: {"color": color, "index": i, "text": text}
        for i, (raw, (text, color)) in enumerate(mapping.items())
    }
    return [{"type": "value", "options": options}]


def special_map(match: str, text: str) -> list[JSON]:
    """A value mapping for a special value ("nan", "null", "empty"...) -> text."""
    return [{"type": "special", "options": {"match": match, "result": {"index": 0, "text": text}}}]


def _field_config(
    unit: str,
    *,
    custom: JSON | None = None,
    min_value: float | None = None,
    max_value: float | None = None,
    steps: JSON | None = None,
    mappings: list[JSON] | None = None,
    overrides: list[JSON] | None = None,
    decimals: int | None = None,
) -> JSON:
    defaults: JSON = {
        "color": {"mode": "palette-classic" if steps is None else "thresholds"},
        "mappings": mappings or [],
        "thresholds": steps or BASE_THRESHOLDS,
        "unit": unit,
    }
    if custom is not None:
        defaults["custom"] = custom
    if min_value is not None:
        defaults["min"] = min_value
    if max_value is not None:
        defaults["max"] = max_value
    if decimals is not None:
        defaults["decimals"] = decimals
    return {"defaults": defaults, "overrides": overrides or []}


def _graph_custom(*, bars: bool = False, threshold_style: str = "off") -> JSON:
    return {
        "axisBorderShow": False,
        "axisCenteredZero": False,
        "axisColorMode": "text",
        "axisLabel": "",
        "axisPlacement": "auto",
        "barAlignment": 0,
        "drawStyle": "bars" if bars else "line",
        "fillOpacity": 60 if bars else 10,
        "gradientMode": "none",
        "hideFrom": {"legend": False, "tooltip": False, "viz": False},
        "insertNulls": False,
        "lineInterpolation": "linear",
        "lineWidth": 1,
        "pointSize": 4,
        "scaleDistribution": {"type": "linear"},
        "showPoints": "never",
        "spanNulls": False,
        "stacking": {"group": "A", "mode": "none"},
        "thresholdsStyle": {"mode": threshold_style},
    }


def _legend(
    *, as_table: bool = True, calcs: Sequence[str] = ("mean", "lastNotNull", "max")
) -> JSON:
    return {
        "calcs": list(calcs),
        "displayMode": "table" if as_table else "list",
        "placement": "bottom",
        "showLegend": True,
    }


def _reduce(calc: str = "lastNotNull") -> JSON:
    return {"calcs": [calc], "fields": "", "values": False}


# -- panels ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Panel:
    """A panel without position; Layout gives it an id and a gridPos."""

    body: JSON
    width: int
    height: int


def _panel(kind: str, title: str, description: str, queries: Sequence[Query], **body: Any) -> JSON:
    return {
        "type": kind,
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "targets": _targets(queries),
        **body,
    }


def timeseries(
    title: str,
    description: str,
    queries: Sequence[Query],
    unit: str,
    *,
    width: int = 12,
    height: int = 8,
    min_value: float | None = 0,
    max_value: float | None = None,
    steps: JSON | None = None,
    threshold_style: str = "off",
    overrides: list[JSON] | None = None,
    bars: bool = False,
) -> Panel:
    body = _panel(
        "timeseries",
        title,
        description,
        queries,
        fieldConfig=_field_config(
            unit,
            custom=_graph_custom(bars=bars, threshold_style=threshold_style),
            min_value=min_value,
            max_value=max_value,
            steps=steps,
            overrides=overrides,
        ),
        options={
            "legend": _legend(),
            "tooltip": {"hideZeros": False, "mode": "multi", "sort": "desc"},
        },
    )
    if steps is not None:
        # thresholds colour the threshold lines, the series keep their palette colours
        body["fieldConfig"]["defaults"]["color"] = {"mode": "palette-classic"}
    return Panel(body, width, height)


def stat(
    title: str,
    description: str,
    queries: Sequence[Query],
    unit: str,
    *,
    width: int = 6,
    height: int = 5,
    steps: JSON | None = None,
    calc: str = "lastNotNull",
    decimals: int | None = None,
    mappings: list[JSON] | None = None,
) -> Panel:
    body = _panel(
        "stat",
        title,
        description,
        queries,
        fieldConfig=_field_config(
            unit, steps=steps or BASE_THRESHOLDS, decimals=decimals, mappings=mappings
        ),
        options={
            "colorMode": "value" if steps is not None else "none",
            "graphMode": "area",
            "justifyMode": "auto",
            "orientation": "auto",
            "percentChangeColorMode": "standard",
            "reduceOptions": _reduce(calc),
            "showPercentChange": False,
            "textMode": "auto",
            "wideLayout": True,
        },
    )
    return Panel(body, width, height)


def bargauge(
    title: str,
    description: str,
    queries: Sequence[Query],
    unit: str,
    *,
    width: int = 12,
    height: int = 8,
    steps: JSON | None = None,
    max_value: float | None = None,
) -> Panel:
    body = _panel(
        "bargauge",
        title,
        description,
        queries,
        fieldConfig=_field_config(
            unit, steps=steps or BASE_THRESHOLDS, min_value=0, max_value=max_value
        ),
        options={
            "displayMode": "gradient",
            "legend": {
                "calcs": [],
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": False,
            },
            "maxVizHeight": 300,
            "minVizHeight": 16,
            "minVizWidth": 8,
            "namePlacement": "auto",
            "orientation": "horizontal",
            "reduceOptions": _reduce(),
            "showUnfilled": True,
            "sizing": "auto",
            "valueMode": "color",
        },
    )
    return Panel(body, width, height)


def table(
    title: str,
    description: str,
    queries: Sequence[Query],
    unit: str,
    *,
    width: int = 12,
    height: int = 8,
    rename: dict[str, str] | None = None,
    hide: Sequence[str] = ("Time",),
    sort_by: str | None = None,
    mappings: list[JSON] | None = None,
) -> Panel:
    """Instant queries shown as rows; several queries are merged on their common labels."""
    transformations: list[JSON] = []
    if len(queries) > 1:
        transformations.append({"id": "merge", "options": {}})
    transformations.append(
        {
            "id": "organize",
            "options": {
                "excludeByName": dict.fromkeys(hide, True),
                "indexByName": {},
                "renameByName": rename or {},
            },
        }
    )
    custom: JSON = {
        "align": "auto",
        "cellOptions": {"type": "auto"},
        "filterable": True,
        "inspect": False,
    }
    options: JSON = {"cellHeight": "sm", "frameIndex": 0, "showHeader": True}
    if sort_by:
        options["sortBy"] = [{"desc": True, "displayName": sort_by}]
    body = _panel(
        "table",
        title,
        description,
        queries,
        fieldConfig=_field_config(unit, custom=custom, mappings=mappings),
        options=options,
        transformations=transformations,
    )
    return Panel(body, width, height)


def state_timeline(
    title: str,
    description: str,
    queries: Sequence[Query],
    *,
    mappings: list[JSON],
    steps: JSON,
    width: int = 24,
    height: int = 9,
) -> Panel:
    body = _panel(
        "state-timeline",
        title,
        description,
        queries,
        fieldConfig=_field_config(
            "none",
            custom={
                "fillOpacity": 80,
                "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                "lineWidth": 0,
            },
            steps=steps,
            mappings=mappings,
        ),
        options={
            "alignValue": "left",
            "legend": {
                "calcs": [],
                "displayMode": "list",
                "placement": "bottom",
                "showLegend": False,
            },
            "mergeValues": True,
            "rowHeight": 0.9,
            "showValue": "never",
            "tooltip": {"hideZeros": False, "mode": "single", "sort": "none"},
        },
    )
    return Panel(body, width, height)


# -- layout ---------------------------------------------------------------------------------


@dataclass
class Layout:
    """Places panels left to right, wrapping at 24 units; rows start on a new line."""

    panels: list[JSON] = field(default_factory=list)
    _x: int = 0
    _y: int = 0
    _line_height: int = 0

    def _next_id(self) -> int:
        return len(self.panels) + 1

    def _newline(self) -> None:
        self._y += self._line_height
        self._x = 0
        self._line_height = 0

    def row(self, title: str) -> None:
        if self._x:
            self._newline()
        self.panels.append(
            {
                "type": "row",
                "id": self._next_id(),
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": GRID_WIDTH, "x": 0, "y": self._y},
                "panels": [],
            }
        )
        self._y += 1

    def add(self, *panels: Panel) -> None:
        for p in panels:
            if not 0 < p.width <= GRID_WIDTH:
                raise ValueError(f"panel {p.body['title']!r}: width {p.width} not in 1..24")
            if self._x + p.width > GRID_WIDTH:
                self._newline()
            grid = {"h": p.height, "w": p.width, "x": self._x, "y": self._y}
            self.panels.append({"id": self._next_id(), "gridPos": grid, **p.body})
            self._x += p.width
            self._line_height = max(self._line_height, p.height)


# -- variables ------------------------------------------------------------------------------


def datasource_variable() -> JSON:
    return {
        "hide": 0,
        "includeAll": False,
        "label": "Data source",
        "multi": False,
        "name": "datasource",
        "options": [],
        "query": "prometheus",
        "refresh": 1,
        "regex": "",
        "type": "datasource",
    }


def query_variable(
    name: str,
    label: str,
    query: str,
    *,
    multi: bool = False,
    include_all: bool = False,
    hide: int = 0,
) -> JSON:
    """A label_values() variable, refreshed when the time range changes."""
    variable: JSON = {
        "datasource": DATASOURCE,
        "hide": hide,
        "includeAll": include_all,
        "label": label,
        "multi": multi,
        "name": name,
        "options": [],
        "query": query,
        "refresh": 2,
        "regex": "",
        "skipUrlSync": False,
        "sort": 1,
        "type": "query",
    }
    if include_all:
        # ".*" instead of a list of every value keeps queries short on big fleets
        variable["allValue"] = ".*"
        variable["current"] = {"selected": True, "text": ["All"], "value": ["$__all"]}
    return variable


# -- dashboard ------------------------------------------------------------------------------


def dashboard(
    *,
    uid: str,
    title: str,
    description: str,
    tags: Sequence[str],
    variables: Sequence[JSON],
    layout: Layout,
    time_from: str = "now-6h",
) -> JSON:
    return {
        "annotations": {
            "list": [
                {
                    "builtIn": 1,
                    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
                    "enable": True,
                    "hide": True,
                    "iconColor": "rgba(0, 211, 255, 1)",
                    "name": "Annotations & Alerts",
                    "type": "dashboard",
                }
            ]
        },
        "description": description,
        "editable": True,
        "fiscalYearStartMonth": 0,
        "graphTooltip": 1,
        "links": [
            {
                "asDropdown": True,
                "icon": "external link",
                "includeVars": True,
                "keepTime": True,
                "tags": ["wattprobe"],
                "targetBlank": False,
                "title": "wattprobe",
                "tooltip": "",
                "type": "dashboards",
            }
        ],
        "panels": layout.panels,
        "refresh": "1m",
        "schemaVersion": SCHEMA_VERSION,
        "tags": list(tags),
        "templating": {"list": list(variables)},
        "time": {"from": time_from, "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "title": title,
        "uid": uid,
        "version": 1,
        "weekStart": "",
    }
