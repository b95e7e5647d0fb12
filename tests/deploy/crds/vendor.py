"""Vendor JSON schemas of the Prometheus Operator kinds the manifests use.

The schemas are those of prometheus-operator v0.80.1, as shipped on PyPI in the
cloudcoil-models-prometheus-operator package (its version 0.80.1.0 is generated from that
release's CRDs). This is run by hand, in a throwaway venv, and its output is committed, so the
test suite needs neither the package nor a network:

  python3 -m venv /tmp/promop
  /tmp/promop/bin/pip install cloudcoil-models-prometheus-operator==0.80.1.0
  /tmp/promop/bin/python tests/deploy/crds/vendor.py

Every object schema that lists its properties gets additionalProperties: false, which is how
the apiserver treats a structural CRD schema under `kubectl apply` (field validation Strict by
default since 1.27): an unknown or misspelled field is an error, not silently dropped. Go's
'^(?i)...' patterns become '(?i)^...' (same meaning; Python wants global flags first).
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

PACKAGE = "cloudcoil-models-prometheus-operator"
PINNED = f"{PACKAGE}==0.80.1.0"
OUT = Path(__file__).parent
KINDS = ("ServiceMonitor", "PodMonitor", "PrometheusRule")


def adapted(schema: Any) -> Any:
    """additionalProperties: false on every object that names its properties, and Go's
    mid-pattern '^(?i)' written '(?i)^' so Python's re (used by jsonschema) compiles it."""
    if isinstance(schema, dict):
        result = {key: adapted(value) for key, value in schema.items()}
        if "properties" in result and "additionalProperties" not in result:
            result["additionalProperties"] = False
        pattern = result.get("pattern")
        if isinstance(pattern, str) and pattern.startswith("^(?i)"):
            result["pattern"] = "(?i)^" + pattern.removeprefix("^(?i)")
        return result
    if isinstance(schema, list):
        return [adapted(item) for item in schema]
    return schema


def main() -> int:
    # imported here: only the throwaway venv that runs this script has the package
    from cloudcoil.models.prometheus_operator import v1  # type: ignore[import-not-found]  # noqa: PLC0415

    installed = f"{PACKAGE}=={version(PACKAGE)}"
    if installed != PINNED:
        sys.stderr.write(f"vendor: need {PINNED}, found {installed}\n")
        return 1
    for kind in KINDS:
        schema = adapted(getattr(v1, kind).model_json_schema(by_alias=True, mode="validation"))
        schema["$comment"] = f"{kind} from {PINNED} (prometheus-operator v0.80.1); see vendor.py"
        path = OUT / f"{kind.lower()}.schema.json"
        path.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        sys.stderr.write(f"vendor: wrote {path}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
