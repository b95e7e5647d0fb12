"""apiserver faults end to end (the kubelet's: tests/kube/test_kube_faults.py): 5xx, garbage, no
answer and 403 on the re-list after a watch expired. Each: `wattprobe serve` keeps serving,
source_up{source="apiserver"} goes 0 with the reason, the names of the last good list stay,
energy and CPU counters go on and never back, and the source recovers by itself."""

from __future__ import annotations

from collections.abc import Callable

from tests.conftest import StartExporter
from tests.kube.test_kube_faults import FAST, nginx
from tests.support.faults_support import CounterWatch
from tests.support.fixturehost import FixtureHost
from tests.support.kubeenv import (
    apiserver_args,
    apiserver_for,
    as_apiserver_pods,
    fixture_pods,
    source_up,
    ticking,
)
from tests.support.running import Samples, select

NAMES = ("shop", "web-7d9c8b6f5-x2k4p", "nginx")
MODES = [
    ("5xx", "server error"),
    ("garbage", "bad response"),
    ("slow", "timeout"),
    ("forbidden", "forbidden"),
]


def pod_j(samples: Samples) -> float:
    return sum(select(samples, "wattprobe_pod_energy_joules_total", pod=NAMES[1]).values())


def down_with(reason: str) -> Callable[[Samples], bool]:
    return lambda s: source_up(s, "apiserver") == (0.0, reason)


def test_apiserver_faults_keep_names_and_recover(
    host: FixtureHost, exporter: StartExporter
) -> None:
    with apiserver_for(as_apiserver_pods(fixture_pods()), metaserver=False) as api, ticking(host):
        exp = exporter(
            *host.args(),
            *FAST,
            *apiserver_args(api.url),
        )
        watch = CounterWatch(exp)

        def until(check: Callable[[Samples], bool], what: str, limit: int = 150) -> Samples:
            for _ in range(limit):
                samples = watch.next(1)
                if check(samples):
                    return samples
            raise AssertionError(f"timed out waiting for {what}:\n{exp.log()}")

        until(lambda s: nginx(s) == NAMES and source_up(s, "apiserver") == (1.0, ""), "names")
        for mode, reason in MODES:
            api.mode = mode
            api.expire_watches()  # the re-list meets the fault
            samples = until(down_with(reason), reason)
            energy = pod_j(samples)

            def counts_on_under_old_names(
                s: Samples, mode: str = mode, energy: float = energy
            ) -> bool:
                assert nginx(s) == NAMES, mode  # last known names kept in every scrape
                return pod_j(s) > energy  # its energy counts on under those names

            # a few intervals, not one: on a loaded machine a fixture tick can miss an interval
            until(counts_on_under_old_names, f"energy growing after {mode}", limit=10)
            assert exp.get("/healthz")[0] == 200
            api.mode = "ok"
            api.closing.set()  # release a request held by "slow"
            until(lambda s: source_up(s, "apiserver") == (1.0, ""), f"up after {mode}")
            api.closing.clear()
        assert exp.proc.poll() is None
        assert "Traceback" not in exp.log()
