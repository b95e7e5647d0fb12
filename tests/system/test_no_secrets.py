"""The service-account token is read from its file and never shown: not in the log at debug
level, not on /metrics, not in `wattprobe check`, through every kubelet fault, a rejected token
and a rotated one. (Web passwords and keys: tests/test_websec_*.py.)"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from click.testing import CliRunner

from exporter.app.cli import cli
from tests.conftest import StartExporter
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import (
    TOKEN,
    add_nvidia_gpus,
    kube_node,
    source_up,
    ticking,
    wait_samples,
)
from tests.support.running import REPO, ExporterProcess, parse_samples

ROTATED = "rotated-token-0f9e8d7c6b5a49382716"
FAST = ["--interval", "0.2s", "--kube.poll-interval", "0.3s", "--kube.timeout", "1s"]


def secrets_in(text: str) -> list[str]:
    return [s for s in (TOKEN, ROTATED) if s in text]


def wait_kubelet(exp: ExporterProcess, want: tuple[float, str]) -> None:
    wait_samples(exp, lambda s: source_up(s, "kubelet") == want, f"kubelet {want}")


def test_no_flag_takes_a_token_value() -> None:
    """Secrets come from files: a token on the command line would be in `ps` for every user."""
    for command in ("serve", "check"):
        result = CliRunner().invoke(cli, [command, "--help"], terminal_width=200)
        flags = [w.strip(",") for w in result.output.split() if w.startswith("--")]
        for flag in flags:
            if "token" in flag or "password" in flag:
                assert flag.endswith("-file"), flag


def test_token_never_logged_or_served(
    host: FixtureHost, exporter: StartExporter, tmp_path: Path
) -> None:
    add_nvidia_gpus(host)
    # one broken RAPL zone: a debug line every interval, proof that debug logging is on
    (host.rapl_dir("intel-rapl:0:1") / "energy_uj").write_text("garbage\n")
    with kube_node(tmp_path) as node, ticking(host):
        args = [*host.args(), *FAST, *node.kubelet_args(), "--log.level", "debug"]
        exp = exporter(*args)
        wait_kubelet(exp, (1.0, ""))
        bodies = [exp.metrics()]
        for mode, reason in [
            ("5xx", "server error"),
            ("garbage", "bad response"),
            ("forbidden", "forbidden"),
            ("slow", "timeout"),
        ]:
            node.kubelet.mode = mode
            wait_kubelet(exp, (0.0, reason))
            bodies.append(exp.metrics())
            node.kubelet.mode = "ok"
            node.kubelet.closing.set()
            wait_kubelet(exp, (1.0, ""))
            node.kubelet.closing.clear()
        node.kubelet.token = "something-else"  # the kubelet rejects ours
        wait_kubelet(exp, (0.0, "unauthorized"))
        bodies.append(exp.metrics())
        checks = [check_output(args, node.kubelet.url)]
        node.token_file.write_text(ROTATED)  # rotated, as projected tokens are
        node.kubelet.token = ROTATED
        wait_kubelet(exp, (1.0, ""))
        assert node.kubelet.auth_headers[-1] == f"Bearer {ROTATED}"  # it was sent, not shown
        bodies.append(exp.metrics())
        checks.append(check_output(args, node.kubelet.url))
        node.kubelet.stop()
        wait_kubelet(exp, (0.0, "unreachable"))
        bodies.append(exp.metrics())
        time.sleep(0.5)
        exp.stop()
        log = exp.log()
    assert "DEBUG exporter.sources.power.rapl" in log  # debug logging was on
    assert f"Bearer {TOKEN}" in " ".join(h or "" for h in node.kubelet.auth_headers)
    assert secrets_in(log) == [], "token in the log"
    for body in bodies:
        assert parse_samples(body)
        assert secrets_in(body) == [], "token on /metrics"
    for out in checks:
        assert "kubelet" in out
        assert secrets_in(out) == [], "token in check's output"


def check_output(args: list[str], url: str) -> str:
    """`wattprobe check`, plain and --json, with the same flags (--interval is serve's only)."""
    i = args.index("--interval")
    check_args = args[:i] + args[i + 2 :]
    out = []
    for extra in ([], ["--json"]):
        done = subprocess.run(
            [sys.executable, "-m", "exporter", "check", *extra, *check_args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        out.append(done.stdout + done.stderr)
    assert url in "".join(out), out  # it did talk to the kubelet
    return "\n".join(out)
