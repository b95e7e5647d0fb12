#!/bin/sh
# mmdebstrap --customize-hook for the agent image: Debian's generic kernel headers for the
# chroot's architecture (linux-headers-amd64 / -arm64), merged into one tree at
# /opt/wattprobe/kernel-headers. The packages are downloaded and unpacked, not installed: as
# installed packages they would bring gcc and kbuild into the image and put the tree under
# /usr/src, which the DaemonSet's host mount shadows. What was unpacked is listed in
# /opt/wattprobe/kernel-headers/.packages (name version architecture) for the SBOM.
#   kernel-headers.sh ROOTFS     (mmdebstrap exports MMDEBSTRAP_APT_CONFIG to its hooks)
set -eu
root=$1
here=$(cd "$(dirname "$0")" && pwd)
export APT_CONFIG="$MMDEBSTRAP_APT_CONFIG"
arch=$(apt-config dump | sed -n 's/^APT::Architecture "\(.*\)";$/\1/p')
flavour=$(apt-cache depends "linux-headers-$arch" | sed -n 's/^ *Depends: \(linux-headers-[^ ]*\)$/\1/p' | head -n 1)
[ -n "$flavour" ] || { echo "kernel-headers: linux-headers-$arch depends on no headers package" >&2; exit 1; }
common=$(apt-cache depends "$flavour" | sed -n 's/^ *Depends: \(linux-headers-[^ ]*-common\)$/\1/p' | head -n 1)
[ -n "$common" ] || { echo "kernel-headers: $flavour depends on no -common package" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# apt's sandbox user cannot write into a root-only temp dir; the download is as root either way
(cd "$tmp" && apt-get -q -o APT::Sandbox::User=root download "$flavour" "$common")
dest=$root/opt/wattprobe/kernel-headers
for deb in "$tmp"/*.deb; do
  dpkg-deb -x "$deb" "$tmp/src"
done
sh "$here/merge-kernel-headers.sh" "$tmp/src/usr/src" "$dest"
for deb in "$tmp"/*.deb; do
  dpkg-deb -f "$deb" Package Version Architecture | awk '{printf "%s%s", sep, $2; sep=" "} END {print ""}'
done | sort > "$dest/.packages"
