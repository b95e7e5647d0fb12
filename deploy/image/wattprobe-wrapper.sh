#!/bin/sh
# /usr/local/bin/wattprobe in the image: picks the kernel headers bcc compiles the eBPF programs
# against, then runs the real console script. It is first on PATH, so `kubectl exec ... wattprobe
# check` gets the same choice as the agent.
#   1. BCC_KERNEL_SOURCE already set: kept.
#   2. the host's headers for the running kernel (host /lib/modules and /usr/src mounted at the
#      same paths): bcc finds /lib/modules/$(uname -r)/build itself.
#   3. the kernel's own /sys/kernel/kheaders.tar.xz (CONFIG_IKHEADERS): bcc unpacks it in /tmp.
#   4. else the generic Debian headers baked into the image. The programs use tracepoint
#      arguments and BPF helpers only, never kernel structs, so any recent headers compile them.
set -eu
modules=${WATTPROBE_HOST_MODULES:-/lib/modules}
if [ -z "${BCC_KERNEL_SOURCE:-}" ] \
  && [ ! -d "$modules/$(uname -r)/build" ] \
  && [ ! -e /sys/kernel/kheaders.tar.xz ]; then
  BCC_KERNEL_SOURCE=${WATTPROBE_GENERIC_HEADERS:-/opt/wattprobe/kernel-headers}
  export BCC_KERNEL_SOURCE
fi
exec "${WATTPROBE_REAL_BINARY:-/opt/wattprobe/venv/bin/wattprobe}" "$@"
