"""Where pod names come from: one entry per pod-identity source, as --kube.pod-source names it.

A source runs on a background thread and keeps a PodStore current (exporter/kube/background.py);
`wattprobe check` asks it for one read. POD_SOURCES lists them: the flag's choices, the
`kubernetes` check entry and KubeWorkloads' choice all follow from it, so a new pod source is its
module plus one entry here (tests/kube/test_podsources.py registers one from the test alone).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from exporter.kube.apiserver import ApiserverPodSource
from exporter.kube.kubeapi import Endpoint, KubeClient
from exporter.kube.kubelet import KubeletPodSource, parse_pod_list
from exporter.kube.pods import PodStore
from exporter.model.config import Config, PodSource
from exporter.model.readings import SourceError, SourceStatus

log = logging.getLogger(__name__)

KUBELET_PORT = 10250
AUTO = PodSource.AUTO.value  # the kubelet inside a cluster, else none
NONE = PodSource.NONE.value


class PodSourceThread(Protocol):
    name: str

    def statuses(self) -> list[SourceStatus]: ...
    def start(self) -> None: ...
    def stop(self) -> None: ...


@runtime_checkable
class RefreshOnRequest(Protocol):
    """A polling source that re-reads at once when the monitor meets an unknown container."""

    def request_refresh(self) -> None: ...


@dataclass(frozen=True)
class PodSourceKind:
    name: str  # its --kube.pod-source value, and its source label on wattprobe_source_up
    help: str  # for the flag's help
    # the running source: config, the environment (in-cluster variables), the store it fills
    build: Callable[[Config, Mapping[str, str], PodStore], PodSourceThread]
    # `wattprobe check`: one read, what it found in one line; a SourceError when it failed
    check: Callable[[Config, Mapping[str, str]], str]


def kubelet_url(config: Config, environ: Mapping[str, str]) -> str:
    """--kube.kubelet-url, else the node's IP (NODE_IP or HOST_IP from the downward API's
    status.hostIP: node names rarely resolve from pods), its name, or loopback."""
    if config.kubelet_url:
        return config.kubelet_url
    host = environ.get("NODE_IP") or environ.get("HOST_IP") or config.node_name or "127.0.0.1"
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"https://{host}:{KUBELET_PORT}"


def apiserver_url(config: Config, environ: Mapping[str, str]) -> str:
    """--kube.apiserver-url, else the in-cluster service address; "" when neither exists."""
    if config.apiserver_url:
        return config.apiserver_url
    host = environ.get("KUBERNETES_SERVICE_HOST", "")
    if not host:
        return ""
    port = environ.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


def endpoint(config: Config, url: str) -> Endpoint:
    return Endpoint(
        url=url,
        token_file=config.kube_token_file,
        ca_file=config.kube_ca_file,
        insecure_skip_verify=config.kube_insecure_skip_tls_verify,
        timeout_s=config.kube_timeout_s,
    )


class Misconfigured:
    """Stands in for a pod source that cannot start: says why on every interval."""

    def __init__(self, name: str, reason: str, detail: str) -> None:
        self.name = name
        self._status = SourceStatus(name, False, reason, detail)

    def statuses(self) -> list[SourceStatus]:
        return [self._status]

    def start(self) -> None:
        log.error("%s: %s", self.name, self._status.detail)

    def stop(self) -> None:
        pass


def _kubelet(config: Config, environ: Mapping[str, str], store: PodStore) -> PodSourceThread:
    url = kubelet_url(config, environ)
    try:
        client = KubeClient(endpoint(config, url))
    except ValueError as exc:
        return Misconfigured("kubelet", "bad url", f"--kube.kubelet-url: {exc}")
    return KubeletPodSource(
        client, store, interval_s=config.kube_poll_interval_s, label_keys=config.kube_pod_labels
    )


def _apiserver(config: Config, environ: Mapping[str, str], store: PodStore) -> PodSourceThread:
    url = apiserver_url(config, environ)
    if not url:
        return Misconfigured(
            "apiserver",
            "no url",
            "not in a cluster (KUBERNETES_SERVICE_HOST unset): give --kube.apiserver-url "
            "(http://127.0.0.1:10550 for KubeEdge's MetaServer)",
        )
    try:
        client = KubeClient(endpoint(config, url))
    except ValueError as exc:
        return Misconfigured("apiserver", "bad url", f"--kube.apiserver-url: {exc}")
    return ApiserverPodSource(
        client,
        store,
        node_name=config.node_name,
        poll_interval_s=config.kube_poll_interval_s,
        label_keys=config.kube_pod_labels,
    )


def _client(config: Config, url: str) -> KubeClient:
    if not url:
        raise SourceError("no url", "not in a cluster")
    try:
        return KubeClient(endpoint(config, url))
    except ValueError as exc:
        raise SourceError("bad url", str(exc)) from None


def _kubelet_check(config: Config, environ: Mapping[str, str]) -> str:
    url = kubelet_url(config, environ)
    pods = parse_pod_list(_client(config, url).get_json("/pods"))
    return f"{len(pods)} pods from {url}/pods"


def _apiserver_check(config: Config, environ: Mapping[str, str]) -> str:
    url = apiserver_url(config, environ)
    source = ApiserverPodSource(
        _client(config, url),
        PodStore(ttl_s=config.kube_metadata_ttl_s, deleted_retention_s=config.retention_s),
        node_name=config.node_name,
        poll_interval_s=config.kube_poll_interval_s,
    )
    listed, _version = source.list_once()
    return f"{len(listed)} pods on node {config.node_name} from {url}"


KUBELET = PodSourceKind("kubelet", "the node's kubelet (/pods)", _kubelet, _kubelet_check)
APISERVER = PodSourceKind(
    "apiserver", "the apiserver, list and watch (also KubeEdge's MetaServer)", _apiserver,
    _apiserver_check,
)  # fmt: skip
POD_SOURCES: tuple[PodSourceKind, ...] = (KUBELET, APISERVER)


def choices(sources: Sequence[PodSourceKind] = POD_SOURCES) -> list[str]:
    """--kube.pod-source's values."""
    return [AUTO, NONE, *(s.name for s in sources)]


def resolve_pod_source(choice: str, environ: Mapping[str, str]) -> str:
    """auto: the kubelet inside a cluster, else none; any other choice as it is."""
    if choice != AUTO:
        return choice
    return KUBELET.name if environ.get("KUBERNETES_SERVICE_HOST") else NONE


def kind_of(name: str, sources: Sequence[PodSourceKind] = POD_SOURCES) -> PodSourceKind | None:
    return next((s for s in sources if s.name == name), None)
