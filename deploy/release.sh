#!/bin/bash
# The registry steps of .github/workflows/release.yml, here so the suite runs the same code
# against a loopback registry (tests/deploy/test_release_registry.py). Log in first: release.yml
# points REGISTRY_AUTH_FILE and HELM_REGISTRY_CONFIG at ~/.docker/config.json.
#
#   deploy/release.sh push-images   push build/image's multi-arch images (digests unchanged);
#                                   prints agent-name=, agent-digest=, forwarder-name=,
#                                   forwarder-digest= lines for $GITHUB_OUTPUT
#   deploy/release.sh sign-images   cosign: sign each pushed index, attest each platform's SBOM
#   deploy/release.sh push-chart    package and push the chart (OCI), check the digest helm
#                                   reports is the registry's, sign it; prints digest=<digest>
#
# Environment: REGISTRY (ghcr.io/<owner>), VERSION (push-chart); PYTHON (.venv/bin/python),
# IMAGE_OUT (build/image), CHART (deploy/helm/wattprobe) and CHART_OUT (build/chart) default to
# what `make image` and the checkout give; TLS_VERIFY=false only for the suite's plain-HTTP
# loopback registry.
set -euo pipefail  # a failed push must never reach cosign, with an empty digest or any other

: "${REGISTRY:?REGISTRY=ghcr.io/<owner>}"
python=${PYTHON:-.venv/bin/python}
image_out=${IMAGE_OUT:-build/image}
chart=${CHART:-deploy/helm/wattprobe}
chart_out=${CHART_OUT:-build/chart}
tls_verify=${TLS_VERIFY:-true}

push_images() {
  # progress to stderr: stdout is for $GITHUB_OUTPUT
  "$python" -m deploy.image.push --out "$image_out" --registry "$REGISTRY" \
    --digests-file "$image_out/pushed.txt" --tls-verify "$tls_verify" >&2
  IMAGE_OUT="$image_out" "$python" - <<'EOF'
import json, os, pathlib
for path in sorted(pathlib.Path(os.environ["IMAGE_OUT"]).glob("*.json")):
    if path.name.endswith(".cdx.json"):
        continue
    s = json.loads(path.read_text())
    name = s["image"].rsplit("/", 1)[-1]
    key = "agent" if name == "wattprobe" else "forwarder"
    print(f"{key}-name={os.environ['REGISTRY']}/{name}")
    print(f"{key}-digest={s['index']}")
EOF
}

sign_images() {
  local ref sbom
  while read -r ref; do cosign sign --yes "$ref"; done < "$image_out/pushed.txt"
  IMAGE_OUT="$image_out" "$python" - <<'EOF' > "$image_out/attest.txt"
import json, os, pathlib
out = pathlib.Path(os.environ["IMAGE_OUT"])
for path in sorted(out.glob("*.json")):
    if path.name.endswith(".cdx.json"):
        continue
    s = json.loads(path.read_text())
    repo = f"{os.environ['REGISTRY']}/{s['image'].rsplit('/', 1)[-1]}"
    for arch, p in sorted(s["platforms"].items()):
        sbom = out / f"{path.stem}-{arch}.cdx.json"
        print(repo + "@" + p["manifest"], sbom)
EOF
  while read -r ref sbom; do
    cosign attest --yes --type cyclonedx --predicate "$sbom" "$ref"
  done < "$image_out/attest.txt"
}

push_chart() {
  : "${VERSION:?VERSION=x.y.z}"
  local digest stored
  if [ ! -d "$chart" ]; then
    echo "no chart in this release ($chart missing)" >&2
    return 0
  fi
  mkdir -p "$chart_out"
  helm package "$chart" --version "$VERSION" --app-version "$VERSION" -d "$chart_out" >&2
  helm push "$chart_out/wattprobe-$VERSION.tgz" "oci://$REGISTRY/charts" 2>&1 \
    | tee "$chart_out/push.log" >&2
  digest=$(sed -n 's/^Digest: //p' "$chart_out/push.log")
  case "$digest" in
    sha256:????????????????????????????????????????????????????????????????) ;;
    *) echo "no chart digest in helm push's output: '$digest'" >&2; return 1 ;;
  esac
  # the registry's own digest of the tag: the sha256 of the manifest it serves
  stored="sha256:$(skopeo inspect --raw --tls-verify="$tls_verify" "docker://$REGISTRY/charts/wattprobe:$VERSION" \
    | sha256sum | cut -d' ' -f1)"
  if [ "$digest" != "$stored" ]; then
    echo "helm push reported $digest, the registry serves $stored" >&2
    return 1
  fi
  cosign sign --yes "$REGISTRY/charts/wattprobe@$digest"
  echo "digest=$digest"
}

case "${1:-}" in
  push-images) push_images ;;
  sign-images) sign_images ;;
  push-chart) push_chart ;;
  *) echo "usage: $0 push-images|sign-images|push-chart" >&2; exit 2 ;;
esac
