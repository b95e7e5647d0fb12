"""The kubelet pod source against a loopback HTTPS kubelet: TLS, token, faults, recovery."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from exporter.kube.kubeapi import Endpoint, KubeClient
from exporter.kube.kubelet import KubeletPodSource
from exporter.kube.pods import PodStore
from exporter.model.readings import SourceError, SourceStatus
from tests.support.kubefakes import FakeKubelet, TlsFiles, make_tls
from tests.support.paths import FIXTURES

TOKEN = "eyJhbGciOiJSUzI1NiJ9.test-token-first"
NGINX = "a1" * 32


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return make_tls(tmp_path / "tls")


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text(TOKEN + "\n")
    return path


@pytest.fixture
def kubelet(tls: TlsFiles) -> Iterator[FakeKubelet]:
    fake = FakeKubelet(tls, TOKEN)
    fake.set_pods(json.loads((FIXTURES / "kube" / "kubelet-pods.json").read_text())["items"])
    fake.start()
    yield fake
    fake.stop()


def client_for(
    kubelet: FakeKubelet,
    tls: TlsFiles,
    token_file: Path | None,
    *,
    insecure: bool = False,
    timeout_s: float = 5.0,
    ca: Path | None = None,
) -> KubeClient:
    return KubeClient(
        Endpoint(
            url=kubelet.url,
            token_file=token_file,
            ca_file=ca or tls.ca,
            insecure_skip_verify=insecure,
            timeout_s=timeout_s,
        )
    )


def source_for(client: KubeClient, interval_s: float = 30.0) -> tuple[KubeletPodSource, PodStore]:
    store = PodStore(ttl_s=3600, deleted_retention_s=600)
    return KubeletPodSource(client, store, interval_s=interval_s, label_keys=("team",)), store


def reason(fn: Callable[[], object]) -> str:
    with pytest.raises(SourceError) as err:
        fn()
    return err.value.reason


def wait_status(source: KubeletPodSource, up: bool, timeout: float = 10.0) -> SourceStatus:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = source.status()
        if status is not None and status.up == up:
            return status
        time.sleep(0.02)
    raise AssertionError(f"status never became up={up}: {source.status()}")


def test_polls_pods_over_verified_tls_with_the_token(
    kubelet: FakeKubelet, tls: TlsFiles, token_file: Path
) -> None:
    source, store = source_for(client_for(kubelet, tls, token_file))
    assert source.poll_once() == 8
    assert kubelet.auth_headers == [f"Bearer {TOKEN}"]
    pod, container = store.index().containers[NGINX]
    assert (pod.namespace, pod.name, container) == ("shop", "web-7d9c8b6f5-x2k4p", "nginx")
    assert pod.labels == (("team", "payments"),)


def test_the_token_is_re_read_when_it_rotates(
    kubelet: FakeKubelet, tls: TlsFiles, token_file: Path
) -> None:
    source, _store = source_for(client_for(kubelet, tls, token_file))
    source.poll_once()
    kubelet.token = "rotated-token"
    assert reason(source.poll_once) == "unauthorized"
    token_file.write_text("rotated-token")
    assert source.poll_once() == 8


def test_authentication_and_tls_failures(
    kubelet: FakeKubelet, tls: TlsFiles, token_file: Path, tmp_path: Path
) -> None:
    token_file.write_text("wrong")
    assert reason(source_for(client_for(kubelet, tls, token_file))[0].poll_once) == "unauthorized"
    missing = tmp_path / "no-such-token"
    with pytest.raises(SourceError) as err:
        source_for(client_for(kubelet, tls, missing))[0].poll_once()
    assert err.value.reason == "unauthorized"
    assert f"no token at {missing}" in err.value.detail
    token_file.write_text(TOKEN)
    other_ca = make_tls(tmp_path / "other").ca  # a kubelet cert the CA file did not sign
    wrong_ca = client_for(kubelet, tls, token_file, ca=other_ca)
    assert reason(source_for(wrong_ca)[0].poll_once) == "tls verify failed"
    insecure = client_for(kubelet, tls, token_file, ca=other_ca, insecure=True)
    assert source_for(insecure)[0].poll_once() == 8  # the explicit opt-in


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("5xx", "server error"), ("garbage", "bad response"), ("forbidden", "forbidden")],
)
def test_bad_answers(
    kubelet: FakeKubelet, tls: TlsFiles, token_file: Path, mode: str, expected: str
) -> None:
    kubelet.mode = mode
    assert reason(source_for(client_for(kubelet, tls, token_file))[0].poll_once) == expected


def test_a_slow_kubelet_times_out(kubelet: FakeKubelet, tls: TlsFiles, token_file: Path) -> None:
    kubelet.mode = "slow"
    source, _ = source_for(client_for(kubelet, tls, token_file, timeout_s=0.5))
    started = time.monotonic()
    assert reason(source.poll_once) == "timeout"
    assert time.monotonic() - started < 3.0


def test_down_kubelet_keeps_names_reports_and_recovers(
    kubelet: FakeKubelet, tls: TlsFiles, token_file: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    source, store = source_for(client_for(kubelet, tls, token_file), interval_s=0.2)
    source.start()
    try:
        assert wait_status(source, up=True).detail == "8 pods"
        kubelet.stop()
        down = wait_status(source, up=False)
        assert down.reason == "unreachable"
        assert NGINX in store.index().containers  # last known names kept (TTL 1h)
        kubelet.start()
        wait_status(source, up=True)
    finally:
        source.stop()
    assert TOKEN not in caplog.text
    assert TOKEN not in repr(down)


def test_an_unknown_container_asks_for_an_early_poll(
    kubelet: FakeKubelet, tls: TlsFiles, token_file: Path
) -> None:
    source, _ = source_for(client_for(kubelet, tls, token_file), interval_s=60.0)
    source.start()
    try:
        wait_status(source, up=True)
        before = kubelet.requests
        source.request_refresh()
        deadline = time.monotonic() + 5
        while kubelet.requests == before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert kubelet.requests == before + 1
    finally:
        source.stop()
