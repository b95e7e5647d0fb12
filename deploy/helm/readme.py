"""The chart README's values table, from values.yaml and its comments (helm-docs' layout).

    python deploy/helm/readme.py           # rewrite deploy/helm/wattprobe/README.md's table
    python deploy/helm/readme.py --check   # exit 1 if the README is not what values.yaml gives

One row per value: a map is split into its keys, except the maps in WHOLE (one Kubernetes
object each, documented as one value). A value's description is the comment block right
above it and its own line's trailing comment, else its nearest parent's description.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

CHART = Path(__file__).resolve().parent / "wattprobe"
MARKER = (
    "<!-- The table below is generated from values.yaml by deploy/helm/readme.py: edit there. -->"
)
# maps whose default is one Kubernetes object (or a quantity pair): one row, not one per key
WHOLE = frozenset(
    {
        "affinity",
        "podSecurityContext",
        "updateStrategy",
        "resources",
        "edge.resources",
        "edge.forwarder.resources",
        "edge.forwarder.livenessProbe",
        "edge.forwarder.readinessProbe",
        "edge.forwarder.startupProbe",
    }
)
_KEY = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z0-9_]+):(?P<rest>.*)$")
_TRAILING = re.compile(r"\s#\s?(?P<comment>.*)$")


def comments(text: str) -> dict[str, str]:
    """Dotted path -> description, from the comments of values.yaml."""
    found: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    block: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            block = []
            continue
        if stripped.startswith("#"):
            block.append(stripped.lstrip("#").strip())
            continue
        match = _KEY.match(line)
        if not match:  # a list item or a continuation inside a default
            block = []
            continue
        indent = len(match["indent"])
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, match["key"]))
        path = ".".join(key for _, key in stack)
        text_here = " ".join(block)
        block = []
        rest = match["rest"].strip()
        if rest[:1] in ("'", '"'):  # a quoted value may hold a '#'
            rest = rest[rest.find(rest[0], 1) + 1 :]
        trailing = _TRAILING.search(f" {rest}")
        if trailing:
            own = trailing["comment"].strip()
            text_here = f"{text_here} {own}".strip() if text_here else own
        if text_here:
            found[path] = text_here
    return found


def describe(described: dict[str, str], path: str) -> str:
    """A value's description, else its nearest parent's."""
    parts = path.split(".")
    for end in range(len(parts), 0, -1):
        if text := described.get(".".join(parts[:end])):
            return text
    return ""


def leaves(values: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in WHOLE:
            out.extend(leaves(value, f"{path}."))
        else:
            out.append((path, value))
    return out


def _type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "float"
    if isinstance(value, str):
        return "string"
    return "list" if isinstance(value, list) else "object"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def table(values_text: str) -> str:
    values = yaml.safe_load(values_text)
    described = comments(values_text)
    rows = ["| Key | Type | Default | Description |", "|-----|------|---------|-------------|"]
    for path, value in leaves(values):
        default = json.dumps(value, separators=(",", ":"))
        description = _cell(describe(described, path))
        rows.append(f"| `{path}` | {_type(value)} | `{_cell(default)}` | {description} |")
    return "\n".join(rows) + "\n"


def readme(current: str, values_text: str) -> str:
    """The README with everything after MARKER replaced by the values table."""
    head = current.split(MARKER, 1)[0].rstrip("\n")
    return f"{head}\n\n{MARKER}\n\n{table(values_text)}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report drift, write nothing")
    parser.add_argument("--chart", type=Path, default=CHART)
    args = parser.parse_args(argv)
    path = args.chart / "README.md"
    current = path.read_text(encoding="utf-8")
    wanted = readme(current, (args.chart / "values.yaml").read_text(encoding="utf-8"))
    if args.check:
        if current != wanted:
            print(f"{path} is stale: run python deploy/helm/readme.py", file=sys.stderr)
            return 1
        return 0
    path.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
