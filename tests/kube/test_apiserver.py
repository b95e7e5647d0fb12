"""The apiserver pod source against a loopback apiserver: list + watch, 410 re-lists, faults,
and KubeEdge's MetaServer flavour (plain HTTP, no node field selector)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.kube.apiserver import ApiserverPodSource
from exporter.kube.kubeapi import Endpoint, KubeClient
from exporter.kube.pods import PodStore
from exporter.model.readings import SourceStatus
from tests.support.kubefakes import Ctr, FakeApiserver, TlsFiles, make_tls, pod_object
from tests.support.wait import eventually

TOKEN = "apiserver-token"


def cid(n: int) -> str:
    return f"{n:064x}"


def pod(n: int, node: str = "node-1", containers: int = 1) -> dict[str, object]:
    return pod_object(
        name=f"job-{n}",
        namespace="batch",
        uid=f"00000000-0000-4000-8000-{n:012d}",
        node=node,
        containers=[Ctr(f"c{i}", f"containerd://{cid(n * 10 + i)}") for i in range(containers)],
    )


@pytest.fixture
def tls(tmp_path: Path) -> TlsFiles:
    return make_tls(tmp_path / "tls")


@pytest.fixture
def apiserver(tls: TlsFiles) -> Iterator[FakeApiserver]:
    fake = FakeApiserver(tls=tls, token=TOKEN)
    for n in range(1, 6):
        fake.add(pod(n))
    fake.add(pod(99, node="node-2"))  # another node's pod: never ours
    fake.start()
    yield fake
    fake.stop()


def make_source(
    fake: FakeApiserver,
    tls: TlsFiles | None,
    tmp_path: Path,
    *,
    watch_timeout_s: float = 300.0,
    timeout_s: float = 5.0,
    idle_timeout_s: float = 5.0,
) -> tuple[ApiserverPodSource, PodStore]:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    client = KubeClient(
        Endpoint(
            url=fake.url,
            token_file=token,
            ca_file=tls.ca if tls else None,
            timeout_s=timeout_s,
        )
    )
    store = PodStore(ttl_s=3600, deleted_retention_s=600)
    source = ApiserverPodSource(
        client,
        store,
        node_name="node-1",
        poll_interval_s=0.3,
        watch_timeout_s=watch_timeout_s,
        idle_timeout_s=idle_timeout_s,
        page_size=2,
    )
    return source, store


def known(store: PodStore, n: int) -> bool:
    return cid(n * 10) in store.index().containers


def status(source: ApiserverPodSource) -> SourceStatus:
    """The source's status; 'pending' before its first attempt ended."""
    return source.status() or SourceStatus("apiserver", False, "pending")


def test_list_then_watch(apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path) -> None:
    source, store = make_source(apiserver, tls, tmp_path)
    source.start()
    try:
        eventually(lambda: all(known(store, n) for n in range(1, 6)), "the listed pods")
        assert not known(store, 99)
        lists = [q for q in apiserver.queries if "watch" not in q]
        assert len(lists) == 3  # 5 pods, pages of 2
        assert all(q["fieldSelector"] == "spec.nodeName=node-1" for q in apiserver.queries)
        assert apiserver.auth_headers[0] == f"Bearer {TOKEN}"
        eventually(lambda: status(source).up, "a healthy watch")

        apiserver.add(pod(6))  # ADDED
        eventually(lambda: known(store, 6), "an added pod")
        apiserver.add(pod(6, containers=2))  # MODIFIED: a second container started
        eventually(lambda: cid(61) in store.index().containers, "a modified pod")
        apiserver.delete(pod(2)["metadata"]["uid"])  # type: ignore[index]
        eventually(lambda: store.counts() == (5, 1), "a deleted pod")
        assert known(store, 2)  # its names stay for the retention window
        assert apiserver.lists == 3  # all of that over one watch
    finally:
        source.stop()


def test_watch_error_410_re_lists(apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path) -> None:
    source, store = make_source(apiserver, tls, tmp_path)
    source.start()
    try:
        eventually(lambda: status(source).up, "a healthy watch")
        lists = apiserver.lists
        apiserver.expire_watches()
        apiserver.add(pod(7))  # lands between the 410 and the re-list
        eventually(lambda: apiserver.lists > lists, "a re-list after 410")
        eventually(lambda: known(store, 7), "the pod added meanwhile")
        eventually(lambda: status(source).up, "up again")
        apiserver.add(pod(8))
        eventually(lambda: known(store, 8), "events after the re-list")
    finally:
        source.stop()


def test_http_410_on_a_re_watch_re_lists(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    # the server ends each watch after about a second; the client re-watches from its version
    source, store = make_source(apiserver, tls, tmp_path, watch_timeout_s=1.0)
    source.start()
    try:
        eventually(lambda: status(source).up, "a healthy watch")
        watches = apiserver.watches
        eventually(lambda: apiserver.watches > watches, "a re-watch")
        lists = apiserver.lists
        apiserver.compact()  # the next re-watch's version is too old: HTTP 410
        eventually(lambda: apiserver.lists > lists, "a re-list after HTTP 410", timeout=15)
        apiserver.add(pod(9))
        eventually(lambda: known(store, 9), "events after the re-list")
        assert status(source).up
    finally:
        source.stop()


@pytest.mark.parametrize(
    ("mode", "expected"),
    [("5xx", "server error"), ("garbage", "bad response"), ("slow", "timeout"), ("down", "")],
)
def test_faults_keep_names_report_and_recover(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path, mode: str, expected: str
) -> None:
    source, store = make_source(apiserver, tls, tmp_path, timeout_s=0.5)
    source.start()
    try:
        eventually(lambda: status(source).up, "a healthy watch")
        if mode == "down":
            apiserver.stop()
            expected = "unreachable"
        else:
            apiserver.mode = mode
            apiserver.expire_watches()  # the open watch ends; what follows meets the fault
        eventually(lambda: not status(source).up, "the fault reported")
        assert status(source).reason == expected
        assert known(store, 1)  # last known names kept
        if mode == "down":
            apiserver.start()
        apiserver.mode = "ok"
        eventually(lambda: status(source).up, "recovery", timeout=15)
        apiserver.add(pod(10))
        eventually(lambda: known(store, 10), "events after recovery")
    finally:
        source.stop()


def test_kubeedge_metaserver(tmp_path: Path) -> None:
    fake = FakeApiserver(tls=None, token=None, metaserver=True)
    fake.add(pod(1))
    fake.add(pod(99, node="node-2"))
    fake.start()
    source, store = make_source(fake, None, tmp_path)
    source.start()
    try:
        eventually(lambda: known(store, 1), "the node's pod over plain HTTP")
        assert not known(store, 99)  # filtered here, since MetaServer cannot
        assert all("fieldSelector" not in q for q in fake.queries)
        assert set(fake.auth_headers) == {None}  # no token over plain HTTP
        fake.add(pod(2))
        eventually(lambda: known(store, 2), "a watched pod")
    finally:
        source.stop()
        fake.stop()


def test_an_endpoint_that_cannot_watch_is_polled(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    apiserver.watch_unsupported = True
    source, store = make_source(apiserver, tls, tmp_path)
    source.start()
    try:
        eventually(lambda: status(source).up, "up while polling")
        assert "polled" in status(source).detail
        apiserver.add(pod(11))
        eventually(lambda: known(store, 11), "a polled pod")
    finally:
        source.stop()


def test_a_quiet_watch_is_reopened_without_a_re_list(
    apiserver: FakeApiserver, tls: TlsFiles, tmp_path: Path
) -> None:
    source, store = make_source(apiserver, tls, tmp_path, idle_timeout_s=0.3)
    source.start()
    try:
        eventually(lambda: status(source).up, "a healthy watch")
        eventually(lambda: apiserver.watches >= 3, "re-watches after idle periods")
        assert apiserver.lists == 3  # one paged list, never again
        assert status(source).up
        apiserver.add(pod(12))
        eventually(lambda: known(store, 12), "an event after idle periods")
    finally:
        source.stop()
