#!/bin/bash
# The worked example of docs/attribution.md ("Memory where nothing measures it"): `wattprobe
# serve` on the fixture node with its RAPL dram domains removed (AMD-like: package only), an AMD
# EPYC 7R13 and 64 GiB, 10 s at 50 % CPU with two pods' processes running 2:1; prints the
# package and dram series. Run from the repository root after `make setup-test`.
set -euo pipefail
T=${T:-/tmp/amd}
PORT=${PORT:-28399}
rm -rf "$T" && mkdir -p "$T"
cp -a tests/fixtures/sys tests/fixtures/proc "$T"/
for z in 0:1 1:1; do # class/powercap links to the device directories under devices/
  rm -r "$(readlink -f "$T/sys/class/powercap/intel-rapl:$z")" "$T/sys/class/powercap/intel-rapl:$z"
done
printf 'processor\t: 0\nmodel name\t: AMD EPYC 7R13 48-Core Processor\n\n' >"$T/proc/cpuinfo"
printf 'MemTotal:       67108864 kB\n' >"$T/proc/meminfo"

.venv/bin/python -m exporter serve --path.sysfs "$T/sys" --path.procfs "$T/proc" \
  --activity-source procfs --interval 1s --web.listen-address "127.0.0.1:$PORT" \
  >"$T/serve.log" 2>&1 &
pid=$!
trap 'kill $pid' EXIT
sleep 3
for _ in $(seq 10); do
  # 400 ticks of /proc/stat: 200 busy, 200 idle (50 %); pods A (pid 1001) and B (1101) 120:60
  awk 'NR==1{$2+=200; $5+=200; $1="cpu "} {print}' "$T/proc/stat" >"$T/proc/.stat"
  mv "$T/proc/.stat" "$T/proc/stat"
  for p in 1001:120 1101:60; do
    f=$T/proc/${p%:*}/stat
    awk -v n="${p#*:}" '{$14+=n; print}' "$f" >"$f.new" && mv "$f.new" "$f"
  done
  for s in 0 1; do # 20 J per package per second
    f=$T/sys/class/powercap/intel-rapl:$s/energy_uj
    echo $(($(cat "$f") + 20000000)) >"$f"
  done
  sleep 1
done
curl -s "127.0.0.1:$PORT/metrics" |
  grep -E '^wattprobe_(node|pod|container)_energy_joules_total\{.*zone="(dram|package)"|^wattprobe_idle_power_watts\{.*zone="dram"' |
  sort
