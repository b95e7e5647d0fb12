"""exporter/app/agent.py: one owner starts every thread of `serve` and closes them all again."""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from exporter.app.agent import Agent
from exporter.model.config import ActivitySource, Config, PodSource
from tests.support.ebpfparts import require_ebpf
from tests.support.fixturehost import FixtureHost
from tests.support.running import start_exporter


def open_fds() -> dict[str, str]:
    fds = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds[fd] = os.readlink(f"/proc/self/fd/{fd}")
        except FileNotFoundError:
            continue  # the directory listing's own fd, closed already
    return fds


def steady_fds() -> set[tuple[str, str]]:
    """The fds open in three looks 50 ms apart: a running agent's threads open files for a
    moment while they read (/proc/<pid>/limits, the fixture's files), and those are not what a
    failed start could leak."""
    looks = []
    for _ in range(3):
        looks.append(set(open_fds().items()))
        time.sleep(0.05)
    return set.intersection(*looks)


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def wait_until_gone(before: set[threading.Thread], timeout_s: float = 2.0) -> set[threading.Thread]:
    # a served connection's thread ends once close() has shut its socket down
    deadline = time.monotonic() + timeout_s
    while (left := threads() - before) and time.monotonic() < deadline:
        time.sleep(0.01)
    return left


def config_for(host: FixtureHost, tmp_path: Path, **kw: object) -> Config:
    token = tmp_path / "token"
    token.write_text("not-a-token\n")
    return Config(
        procfs=host.procfs,
        sysfs=host.sysfs,
        listen_host="127.0.0.1",
        listen_port=0,
        interval_s=0.1,
        activity_source=ActivitySource.PROCFS,
        kube_token_file=token,
        **kw,  # type: ignore[arg-type]
    )


@pytest.mark.parametrize(
    "kube",
    [
        {"pod_source": PodSource.NONE},
        # a kubelet that is not there: its polling thread runs (and fails) until closed
        {"pod_source": PodSource.KUBELET, "kubelet_url": "http://127.0.0.1:9"},
    ],
    ids=["no-pods", "kubelet-thread"],
)
def test_close_leaves_no_thread_and_no_fd(
    host: FixtureHost, tmp_path: Path, kube: dict[str, object]
) -> None:
    config = config_for(host, tmp_path, **kube)
    fds_before, threads_before = open_fds(), threads()

    agent = Agent(config)
    agent.start()
    started = {t.name for t in threads() - threads_before}
    assert {"monitor", "http"} <= started
    if kube["pod_source"] == PodSource.KUBELET:
        assert len(started) > 2, started  # the pod source's poller
    host_, port = agent.address
    deadline = time.monotonic() + 20
    while True:
        with urllib.request.urlopen(f"http://{host_}:{port}/metrics", timeout=5) as resp:
            body = resp.read().decode()
        if "wattprobe_node_energy_joules_total{" in body or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert 'wattprobe_source_up{reason="",source="rapl"} 1' in body
    agent.close()
    agent.close()  # idempotent

    assert not wait_until_gone(threads_before), "threads left after close"
    assert open_fds() == fds_before


def test_a_failed_start_closes_what_it_started(host: FixtureHost, tmp_path: Path) -> None:
    config = config_for(host, tmp_path, pod_source=PodSource.NONE)
    blocker = Agent(config)
    blocker.start()
    try:
        assert blocker.parts is not None
        deadline = time.monotonic() + 20  # its threads are all there after its first intervals
        while blocker.parts.monitor.snapshot.sequence < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        fds_before, threads_before = steady_fds(), threads()
        taken = Config(**{**config.__dict__, "listen_port": blocker.address[1]})
        agent = Agent(taken)
        with pytest.raises(OSError):
            agent.start()  # the port is in use: the monitor was built, the server was not
        assert not wait_until_gone(threads_before)
        assert steady_fds() == fds_before
    finally:
        blocker.close()


def test_serve_exits_0_on_sigterm(host: FixtureHost, tmp_path: Path) -> None:
    running = start_exporter(
        [*host.args(), "--activity-source", "procfs", "--interval", "0.2s"], tmp_path
    )
    running.wait_next_interval()
    running.proc.send_signal(signal.SIGTERM)
    assert running.proc.wait(timeout=15) == 0
    assert "shutting down" in running.log()


def test_serve_exits_0_on_sigint(host: FixtureHost, tmp_path: Path) -> None:
    running = start_exporter([*host.args(), "--activity-source", "procfs"], tmp_path)
    running.proc.send_signal(signal.SIGINT)
    assert running.proc.wait(timeout=15) == 0


@pytest.mark.real
@pytest.mark.slow
def test_close_releases_the_ebpf_source(host: FixtureHost, tmp_path: Path) -> None:
    """eBPF's programs, maps and perf buffers are file descriptors: close() gives them all back."""
    require_ebpf()
    config = config_for(host, tmp_path, pod_source=PodSource.NONE)
    config = Config(
        **{
            **config.__dict__,
            "procfs": Path("/proc"),
            "cgroupfs": Path("/sys/fs/cgroup"),
            "activity_source": ActivitySource.EBPF,
        }
    )
    fds_before, threads_before = open_fds(), threads()
    agent = Agent(config)
    agent.start()
    assert agent.parts is not None
    assert agent.parts.activity.name == "ebpf"
    assert len(open_fds()) > len(fds_before)  # programs and maps
    deadline = time.monotonic() + 30
    while agent.parts.monitor.snapshot.sequence < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    agent.close()
    assert not wait_until_gone(threads_before), "threads left after close"
    assert open_fds() == fds_before
