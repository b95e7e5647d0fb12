#!/bin/sh
# Merge Debian's split kernel headers (linux-headers-<ver>-common + linux-headers-<ver>-<arch>)
# into one self-contained tree (include/linux/kconfig.h and include/generated/autoconf.h side by
# side), which the agent takes as --ebpf.kernel-headers / WATTPROBE_EBPF_KERNEL_HEADERS.
# Used by deploy/Dockerfile at build time and by tests/deploy/test_capabilities.py, which loads
# the agent's probes against the result (wattprobe check/serve --ebpf.kernel-headers).
#   merge-kernel-headers.sh [SRC_DIR [DEST_DIR]]   defaults: /usr/src /opt/wattprobe/kernel-headers
set -eu
src=${1:-/usr/src}
dest=${2:-/opt/wattprobe/kernel-headers}
common=$(find "$src" -maxdepth 1 -type d -name 'linux-headers-*-common' | sort | tail -n 1)
[ -n "$common" ] || { echo "merge-kernel-headers: no linux-headers-*-common under $src" >&2; exit 1; }
version=${common#"$src"/linux-headers-}
version=${version%-common}
arch=$(find "$src" -maxdepth 1 -type d -name "linux-headers-$version-*" ! -name '*-common' | sort | head -n 1)
[ -n "$arch" ] || { echo "merge-kernel-headers: no arch headers for $version under $src" >&2; exit 1; }
mkdir -p "$dest/arch"
# bcc only reads include/ and arch/<arch>/include/; the arch tree's generated headers go on top.
cp -a "$common/include" "$dest/"
for dir in "$arch"/arch/*; do
  cp -a "$common/arch/${dir##*/}" "$dest/arch/"
done
cp -a "$arch/include" "$arch/arch" "$dest/"
echo "$version" > "$dest/.version"
# what exporter/sources/activity/ebpf/kheaders.py takes as a full tree: fail the image build, not the agent
for needed in include/linux/kconfig.h include/generated/autoconf.h include/generated/utsrelease.h; do
  [ -f "$dest/$needed" ] || { echo "merge-kernel-headers: no $needed in $dest" >&2; exit 1; }
done
echo "merge-kernel-headers: $common + $arch -> $dest" >&2
