#!/usr/bin/env bash
# What the official `kubernetes` Python client would cost wattprobe, against the stdlib HTTP client
# it uses (docs/kubernetes.md, "Why not the kubernetes client"). Makes a throw-away venv in /tmp
# with the same Python as .venv, installs the client, and measures import RSS and time, 3 runs each.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
venv=$(mktemp -d /tmp/wattprobe-kube-measure.XXXXXX)
trap 'rm -rf "$venv"' EXIT
/usr/bin/python3 -m venv "$venv"
"$venv/bin/pip" install -q kubernetes grpcio protobuf prometheus-client psutil click
"$venv/bin/pip" list 2>/dev/null | grep -iE '^(kubernetes|grpcio|protobuf|urllib3) '

cat > "$venv/measure.py" <<'EOF'
import importlib, sys, time
def rss_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
base = rss_kib()
start = time.perf_counter()
for name in sys.argv[1:]:
    importlib.import_module(name)
took = time.perf_counter() - start
print(f"| {' '.join(sys.argv[1:]) or '(python alone)'} | +{(rss_kib() - base) / 1024:.1f} | {took * 1000:.0f} |")
EOF
echo "| imports | RSS MiB | ms |"
echo "|---|---|---|"
for _ in 1 2 3; do
  "$venv/bin/python" "$venv/measure.py" prometheus_client psutil click http.client ssl json
  "$venv/bin/python" "$venv/measure.py" prometheus_client psutil click kubernetes.client kubernetes.watch kubernetes.config
  "$venv/bin/python" "$venv/measure.py" grpc google.protobuf.message
done
echo "(exporter as a whole: .venv/bin/python -m tests.support.kube_rss in $here)"
