"""Write the Grafana dashboards of dashboards/wattprobe.py as JSON files.

python -m dashboards.generate            rewrite dashboards/*.json
python -m dashboards.generate --check    exit 1 when a committed file drifted
python -m dashboards.generate --job J --multi-cluster --out DIR
                                         render for another scrape job name and/or with
                                         the cluster picker shown (what `make monitoring`
                                         runs)
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from alerts.generate import DEFAULT_JOB
from dashboards.grafana import JSON
from dashboards.wattprobe import Settings, build_all

log = logging.getLogger("dashboards.generate")

DASHBOARDS_DIR = Path(__file__).resolve().parent


def render(dashboard: JSON) -> str:
    """Stable text: sorted keys, two-space indent, trailing newline (diff-friendly)."""
    return json.dumps(dashboard, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def rendered(settings: Settings) -> dict[str, str]:
    return {name: render(d) for name, d in build_all(settings).items()}


def drifted(directory: Path = DASHBOARDS_DIR) -> list[str]:
    """Names of committed files that differ from the generator's default output."""
    out = []
    for name, text in rendered(Settings()).items():
        path = directory / name
        if not path.exists() or path.read_text() != text:
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(prog="python -m dashboards.generate", description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed JSON drifted")
    parser.add_argument("--job", default=DEFAULT_JOB, help="scrape job name of wattprobe")
    parser.add_argument("--multi-cluster", action="store_true", help="show the cluster picker")
    parser.add_argument("--out", type=Path, help="write here instead of dashboards/")
    args = parser.parse_args(argv)

    if args.check:
        bad = drifted()
        for name in bad:
            log.error(
                "dashboards/%s drifted from the generator: run python -m dashboards.generate", name
            )
        return 1 if bad else 0
    settings = Settings(job=args.job, multi_cluster=args.multi_cluster)
    if args.out is None and settings != Settings():
        parser.error("--job/--multi-cluster need --out (the committed files keep the defaults)")
    out: Path = args.out or DASHBOARDS_DIR
    out.mkdir(parents=True, exist_ok=True)
    for name, text in rendered(settings).items():
        (out / name).write_text(text)
        log.info("wrote %s", out / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
