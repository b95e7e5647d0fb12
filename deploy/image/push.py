"""Push what `make image` built: each image's multi-platform index, with every platform, to a
registry, digests unchanged (skopeo copy --all --preserve-digests), so the digests in
build/image/<name>-<version>.json are the ones signed and attested (docs/release.md).

  python -m deploy.image.push [--out build/image] [--registry ghcr.io/wattprobe]

Prints one `<repository>@<index digest>` line per image (and writes them to --digests-file).
Log in first (`skopeo login`, `podman login`: they share the auth file).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from deploy.image import spec
from deploy.image.build import REPO


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=REPO / "build" / "image")
    parser.add_argument(
        "--registry", default="", help="replaces the registry/owner part of each image name"
    )
    parser.add_argument("--digests-file", type=Path, default=None)
    parser.add_argument(
        "--tls-verify",
        choices=("true", "false"),
        default="true",
        help="false only for a plain-HTTP registry on loopback (the suite's)",
    )
    args = parser.parse_args(argv)
    summaries = sorted(args.out.glob("*-*.json"))
    summaries = [p for p in summaries if not p.name.endswith(".cdx.json")]
    if not summaries:
        print(f"push: nothing built under {args.out} (make image first)", file=sys.stderr)
        return 1
    pushed = []
    for path in summaries:
        summary = json.loads(path.read_text())
        repository = spec.repository(str(summary["image"]), args.registry)
        version = summary["version"]
        source = f"oci-archive:{args.out / summary['archive']}:{version}"
        subprocess.run(
            [
                "skopeo",
                "copy",
                "--all",
                "--preserve-digests",
                f"--dest-tls-verify={args.tls_verify}",
                source,
                f"docker://{repository}:{version}",
            ],
            check=True,
        )
        pushed.append(f"{repository}@{summary['index']}")
    print("\n".join(pushed))
    if args.digests_file:
        args.digests_file.write_text("\n".join(pushed) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
