"""What a PromQL expression refers to: metric names, selectors and label names.

A small lexical reading, enough for the expressions of our rules and dashboards (Prometheus
2.42 has no parse endpoint to ask): string literals are set aside first, so label values such
as "system_processes" or "48|63" are never taken for names. Prometheus itself still parses
every expression in the liveness test; this only says what to look up.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'" + r"|`[^`]*`")
# after a "$" a name is a Grafana variable ($__range in "offset $__range"), not a metric
_IDENT = re.compile(r"(?<![\w.:$])[a-zA-Z_:][a-zA-Z0-9_:]*")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(\x00\d+\x00)")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")
_LEGEND = re.compile(r"\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}")
_LABEL_VALUES = re.compile(r"^\s*label_values\((.*),\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$", re.S)

KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool"}
    | {"and", "or", "unless", "atan2", "inf", "nan", "Inf", "NaN"}
    # aggregation operators, which may stand before their parentheses: sum by (x) (...)
    | {"sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values"}
    | {"bottomk", "topk", "quantile"}
)

# Grafana's built-in variables and what the liveness test substitutes for them
GRAFANA_BUILTINS = frozenset({"__rate_interval", "__interval", "__interval_ms", "__range", "__all"})


@dataclass(frozen=True)
class Matcher:
    label: str
    op: str
    value: str


@dataclass(frozen=True)
class Selector:
    metric: str  # "" for a selector without a name: {__name__=~...}
    matchers: tuple[Matcher, ...]


@dataclass
class Refs:
    metrics: set[str] = field(default_factory=set)
    selectors: list[Selector] = field(default_factory=list)
    grouping_labels: set[str] = field(default_factory=set)

    @property
    def matcher_labels(self) -> set[str]:
        return {m.label for s in self.selectors for m in s.matchers if m.label != "__name__"}


def _hide_strings(expr: str) -> tuple[str, list[str]]:
    strings: list[str] = []

    def keep(match: re.Match[str]) -> str:
        strings.append(match.group(0)[1:-1])
        return f"\x00{len(strings) - 1}\x00"

    return _STRING.sub(keep, expr), strings


def refs(expr: str) -> Refs:
    """Metric names, selectors and grouping labels an expression refers to."""
    text, strings = _hide_strings(expr)
    out = Refs()
    for match in _GROUPING.finditer(text):
        out.grouping_labels.update(x.strip() for x in match.group(2).split(",") if x.strip())
    text = _GROUPING.sub(lambda m: m.group(1), text)
    # selectors with braces: name{...} or {...}
    for match in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)?\s*\{([^}]*)\}", text):
        name = match.group(1) or ""
        if name in KEYWORDS:
            name = ""
        matchers = tuple(
            Matcher(m.group(1), m.group(2), strings[int(m.group(3).strip("\x00"))])
            for m in _MATCHER.finditer(match.group(2))
        )
        out.selectors.append(Selector(name, matchers))
        if name:
            out.metrics.add(name)
    # bare names: identifiers that are neither functions, keywords nor inside {} or []
    bare = re.sub(r"\{[^}]*\}", " ", text)
    bare = re.sub(r"\[[^\]]*\]", " ", bare)
    for match in _IDENT.finditer(bare):
        word = match.group(0)
        rest = bare[match.end() :].lstrip()
        if word in KEYWORDS or rest.startswith("("):
            continue
        if word not in out.metrics:
            out.metrics.add(word)
            out.selectors.append(Selector(word, ()))
    return out


def legend_labels(legend: str) -> set[str]:
    return set(_LEGEND.findall(legend))


def label_values_query(query: str) -> tuple[str, str] | None:
    """label_values(EXPR, LABEL) -> (EXPR, LABEL); None for other variable queries."""
    match = _LABEL_VALUES.match(query)
    return (match.group(1).strip(), match.group(2)) if match else None


def template_variables(text: str) -> set[str]:
    """Names of Grafana variables used in a string: $name, ${name}, ${name:fmt}, [[name]]."""
    found = set(re.findall(r"\$\{([a-zA-Z_][a-zA-Z0-9_]*)(?::[^}]*)?\}", text))
    found |= set(re.findall(r"\$([a-zA-Z_][a-zA-Z0-9_]*)", text))
    found |= set(re.findall(r"\[\[([a-zA-Z_][a-zA-Z0-9_]*)\]\]", text))
    return found


def _constant(value: str) -> Callable[[re.Match[str]], str]:
    return lambda _match: value


def substitute(text: str, values: dict[str, str]) -> str:
    """Replace Grafana variables by values; the longest names first ($__range_s vs $__range)."""
    for name in sorted(values, key=len, reverse=True):
        value = values[name]
        text = text.replace("${" + name + "}", value).replace("[[" + name + "]]", value)
        # a function, not a replacement string: values may hold backslashes (regexes)
        text = re.sub(r"\$" + re.escape(name) + r"(?![a-zA-Z0-9_])", _constant(value), text)
    return text
