"""Loopback stand-ins for the Kubernetes endpoints wattprobe reads, speaking the real protocols:

- FakeKubelet: HTTPS (a CA and a serving certificate made here), bearer token checked, GET /pods.
- FakeApiserver: GET /api/v1/pods list (fieldSelector, limit/continue) and watch (chunked
  JSON-lines stream, BOOKMARK, 410 Gone as an HTTP status or an ERROR event). metaserver=True
  behaves like KubeEdge's MetaServer: plain HTTP, field selectors only on metadata.*.
- FakePodResources: a real gRPC server implementing the kubelet's v1 PodResourcesLister on a
  unix socket.
Each can misbehave on demand (down, slow, 5xx, garbage) for the fault tests.
"""

from __future__ import annotations

import datetime
import json
import ssl
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from exporter.kube.podresources import api_pb2, api_pb2_grpc

# -- certificates -------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    ca: Path
    cert: Path
    key: Path


def make_tls(directory: Path, hosts: Sequence[str] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """A CA and a serving certificate for `hosts` signed by it (like a cluster CA and a kubelet
    serving certificate from TLS bootstrap)."""
    import ipaddress  # noqa: PLC0415

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wattprobe-test-ca")])
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = []
    for h in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            names.append(x509.DNSName(h))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "node-1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "ca.crt", directory / "tls.crt", directory / "tls.key")
    files.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


# -- pod objects shaped like the kubelet's and the apiserver's --------------------------


@dataclass
class Ctr:
    name: str
    container_id: str = ""  # "containerd://<64 hex>", "cri-o://...", "docker://..."; "" waiting
    image: str = "registry.example/app:1.0"
    previous_id: str = ""  # lastState.terminated.containerID after a restart
    terminated: bool = False  # for init containers that completed


def pod_object(
    *,
    name: str,
    namespace: str,
    uid: str,
    node: str = "node-1",
    containers: Sequence[Ctr] = (),
    init_containers: Sequence[Ctr] = (),
    labels: Mapping[str, str] | None = None,
    qos: str = "Burstable",
    phase: str = "Running",
    annotations: Mapping[str, str] | None = None,
    resource_version: str = "1",
) -> dict[str, Any]:
    """A v1 Pod as the kubelet's /pods or the apiserver return it (the fields that matter to
    wattprobe, plus the usual clutter around them)."""
    started = "2026-05-04T10:00:00Z"

    def status_of(c: Ctr, *, init: bool) -> dict[str, Any]:
        if c.container_id and c.terminated:
            state: dict[str, Any] = {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": started,
                    "finishedAt": started,
                    "containerID": c.container_id,
                }
            }
        elif c.container_id:
            state = {"running": {"startedAt": started}}
        else:
            state = {"waiting": {"reason": "PodInitializing" if not init else "ContainerCreating"}}
        out: dict[str, Any] = {
            "name": c.name,
            "state": state,
            "lastState": {},
            "ready": bool(c.container_id) and not c.terminated,
            "restartCount": 1 if c.previous_id else 0,
            "image": c.image,
            "imageID": c.image + "@sha256:" + "0" * 64,
            "started": bool(c.container_id) and not c.terminated,
        }
        if c.container_id:
            out["containerID"] = c.container_id
        if c.previous_id:
            out["lastState"] = {
                "terminated": {
                    "exitCode": 137,
                    "reason": "OOMKilled",
                    "startedAt": started,
                    "finishedAt": started,
                    "containerID": c.previous_id,
                }
            }
        return out

    def spec_of(c: Ctr) -> dict[str, Any]:
        return {
            "name": c.name,
            "image": c.image,
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            "terminationMessagePath": "/dev/termination-log",
            "imagePullPolicy": "IfNotPresent",
        }

    obj: dict[str, Any] = {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": resource_version,
            "creationTimestamp": started,
            "labels": dict(labels or {}),
            "annotations": {
                "kubernetes.io/config.seen": "2026-05-04T10:00:00.123456789Z",
                "kubernetes.io/config.source": "api",
                **(annotations or {}),
            },
        },
        "spec": {
            "containers": [spec_of(c) for c in containers],
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 30,
            "dnsPolicy": "ClusterFirst",
            "serviceAccountName": "default",
            "nodeName": node,
            "schedulerName": "default-scheduler",
            "tolerations": [
                {
                    "key": "node.kubernetes.io/not-ready",
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
            ],
        },
        "status": {
            "phase": phase,
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": started},
                {"type": "Ready", "status": "True", "lastTransitionTime": started},
            ],
            "hostIP": "10.0.0.11",
            "podIP": "10.244.1.23",
            "podIPs": [{"ip": "10.244.1.23"}],
            "startTime": started,
            "containerStatuses": [status_of(c, init=False) for c in containers],
            "qosClass": qos,
        },
    }
    if init_containers:
        obj["spec"]["initContainers"] = [spec_of(c) for c in init_containers]
        obj["status"]["initContainerStatuses"] = [status_of(c, init=True) for c in init_containers]
    return obj


def pod_list(pods: Iterable[Mapping[str, Any]], resource_version: str = "") -> dict[str, Any]:
    return {
        "kind": "PodList",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": resource_version} if resource_version else {},
        "items": list(pods),
    }


# -- HTTP servers ---------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: _HttpFake


class _HttpFake:
    """Start/stop (on the same port: 'down' then 'up again'), TLS, token, fault modes."""

    def __init__(
        self, *, tls: TlsFiles | None, token: str | None, handler: type[BaseHTTPRequestHandler]
    ) -> None:
        self.tls = tls
        self.token = token
        self.mode = "ok"  # ok, 5xx, garbage, slow, forbidden
        self.slow_s = 30.0
        self.requests = 0
        self.auth_headers: list[str | None] = []
        self._handler = handler
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self.closing = threading.Event()

    @property
    def url(self) -> str:
        scheme = "https" if self.tls else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.closing.clear()
        server = _Server(("127.0.0.1", self.port), self._handler)
        server.fake = self
        if self.tls is not None:
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(self.tls.cert, self.tls.key)
            # the handshake runs in the handler thread, not in accept()
            server.socket = ctx.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Down: the port refuses connections until start() again."""
        self.closing.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5)

    def authorized(self, header: str | None) -> bool:
        self.auth_headers.append(header)
        return self.token is None or header == f"Bearer {self.token}"


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass

    def send_json(self, code: int, body: object) -> None:
        self.send_bytes(code, json.dumps(body).encode(), "application/json")

    def send_bytes(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def status(self, code: int, reason: str, message: str) -> None:
        self.send_json(
            code,
            {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": reason,
                "code": code,
            },
        )

    def faulted(self) -> bool:
        """Apply the fake's fault mode; True when the request has been answered by it."""
        fake = self.server.fake
        fake.requests += 1
        if not fake.authorized(self.headers.get("Authorization")):
            self.status(401, "Unauthorized", "Unauthorized")
            return True
        if fake.mode == "slow":
            fake.closing.wait(fake.slow_s)
            return True  # never answers (the client must time out)
        if fake.mode == "5xx":
            self.status(503, "ServiceUnavailable", "the server is currently unable to handle it")
            return True
        if fake.mode == "garbage":
            self.send_bytes(200, b'{"kind": "PodList", "items": [{"metad', "application/json")
            return True
        if fake.mode == "forbidden":
            self.status(403, "Forbidden", "nodes/proxy is forbidden: User cannot get resource")
            return True
        return False


class FakeKubelet(_HttpFake):
    """GET /pods over HTTPS with a bearer token, from a settable list of pod objects."""

    def __init__(self, tls: TlsFiles, token: str) -> None:
        super().__init__(tls=tls, token=token, handler=_KubeletHandler)
        self._pods: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def set_pods(self, pods: Iterable[dict[str, Any]]) -> None:
        with self._lock:
            self._pods = list(pods)

    def body(self) -> bytes:
        with self._lock:
            return json.dumps(pod_list(self._pods)).encode()


class _KubeletHandler(_Handler):
    def do_GET(self) -> None:
        if self.faulted():
            return
        fake = self.server.fake
        assert isinstance(fake, FakeKubelet)
        if self.path.split("?")[0] != "/pods":
            self.status(404, "NotFound", "404 page not found")
            return
        self.send_bytes(200, fake.body(), "application/json")


@dataclass
class _WatchEvent:
    rv: int
    kind: str
    obj: dict[str, Any]


@dataclass
class _ApiState:
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)  # uid -> object
    rv: int = 100
    history: list[_WatchEvent] = field(default_factory=list)
    oldest_rv: int = 100  # watches from before this get 410 Gone
    expire_generation: int = 0


class FakeApiserver(_HttpFake):
    """Pods list + watch. Mutations (add/modify/delete) become watch events."""

    def __init__(
        self, *, tls: TlsFiles | None, token: str | None, metaserver: bool = False
    ) -> None:
        super().__init__(tls=tls, token=token, handler=_ApiHandler)
        self.metaserver = metaserver
        self.state = _ApiState()
        self.cond = threading.Condition()
        self.lists = 0
        self.watches = 0
        self.queries: list[dict[str, str]] = []
        self.watch_unsupported = False  # answer watches with 404 (an endpoint that cannot watch)
        self.nodes: dict[str, dict[str, Any]] = {}  # GET /api/v1/nodes/<name>, by name

    def _event(self, kind: str, obj: dict[str, Any]) -> None:
        self.state.rv += 1
        obj = json.loads(json.dumps(obj))
        obj["metadata"]["resourceVersion"] = str(self.state.rv)
        self.state.history.append(_WatchEvent(self.state.rv, kind, obj))
        if kind == "DELETED":
            self.state.pods.pop(obj["metadata"]["uid"], None)
        else:
            self.state.pods[obj["metadata"]["uid"]] = obj
        self.cond.notify_all()

    def add(self, obj: dict[str, Any]) -> None:
        with self.cond:
            kind = "MODIFIED" if obj["metadata"]["uid"] in self.state.pods else "ADDED"
            self._event(kind, obj)

    def delete(self, uid: str) -> None:
        with self.cond:
            obj = self.state.pods.get(uid)
            if obj is not None:
                self._event("DELETED", obj)

    def compact(self) -> None:
        """Compact past every version handed out so far (as if etcd compacted while the client
        was between watches): a watch from any of them gets HTTP 410."""
        with self.cond:
            self.state.history.clear()
            self.state.oldest_rv = self.state.rv + 2

    def expire_watches(self) -> None:
        """Open watches get a 410 ERROR event (etcd compacted under them)."""
        with self.cond:
            self.state.expire_generation += 1
            self.state.history.clear()
            self.state.oldest_rv = self.state.rv + 1
            self.cond.notify_all()

    def matches(self, obj: Mapping[str, Any], selector: str) -> bool:
        for term in filter(None, selector.split(",")):
            key, _, want = term.partition("=")
            if key == "spec.nodeName":
                # MetaServer knows only metadata.name/namespace: any other field matches nothing
                have = None if self.metaserver else obj["spec"].get("nodeName")
            elif key == "metadata.name":
                have = obj["metadata"]["name"]
            elif key == "metadata.namespace":
                have = obj["metadata"]["namespace"]
            else:
                have = None
            if have != want:
                return False
        return True


class _ApiHandler(_Handler):
    server: _Server

    @property
    def fake(self) -> FakeApiserver:
        fake = self.server.fake
        assert isinstance(fake, FakeApiserver)
        return fake

    def do_GET(self) -> None:
        if self.faulted():
            return
        url = urllib.parse.urlsplit(self.path)
        query = dict(urllib.parse.parse_qsl(url.query))
        self.fake.queries.append(query)
        if url.path.startswith("/api/v1/nodes/"):
            self.node(urllib.parse.unquote(url.path.removeprefix("/api/v1/nodes/")))
            return
        if url.path != "/api/v1/pods":
            self.status(404, "NotFound", "the server could not find the requested resource")
            return
        if query.get("watch") in ("1", "true"):
            self.watch(query)
        else:
            self.list(query)

    def node(self, name: str) -> None:
        if name in self.fake.nodes:
            self.send_json(200, self.fake.nodes[name])
        else:
            self.status(404, "NotFound", f'nodes "{name}" not found')

    def list(self, query: Mapping[str, str]) -> None:
        fake = self.fake
        fake.lists += 1
        with fake.cond:
            items = [
                o
                for o in fake.state.pods.values()
                if fake.matches(o, query.get("fieldSelector", ""))
            ]
            rv = str(fake.state.rv)
        items.sort(key=lambda o: str(o["metadata"]["uid"]))
        start = int(query.get("continue") or 0)
        limit = int(query.get("limit") or 0) or len(items) or 1
        page = items[start : start + limit]
        body = pod_list(page, rv)
        if start + limit < len(items):
            body["metadata"]["continue"] = str(start + limit)
        self.send_json(200, body)

    def watch(self, query: Mapping[str, str]) -> None:
        fake = self.fake
        fake.watches += 1
        if fake.watch_unsupported:
            self.status(404, "NotFound", "watch is not supported here")
            return
        since = int(query.get("resourceVersion") or 0)
        with fake.cond:
            if since and since < fake.state.oldest_rv - 1:
                gone = True
            else:
                gone = False
                generation = fake.state.expire_generation
        if gone:
            self.status(410, "Expired", f"too old resource version: {since}")
            return
        deadline = time.monotonic() + float(query.get("timeoutSeconds") or 60)
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = since
        try:
            while time.monotonic() < deadline and not fake.closing.is_set():
                with fake.cond:
                    if fake.state.expire_generation != generation:
                        events = [
                            {
                                "type": "ERROR",
                                "object": {
                                    "kind": "Status",
                                    "apiVersion": "v1",
                                    "metadata": {},
                                    "status": "Failure",
                                    "message": f"too old resource version: {sent}",
                                    "reason": "Expired",
                                    "code": 410,
                                },
                            }
                        ]
                        done = True
                    else:
                        new = [e for e in fake.state.history if e.rv > sent]
                        if not new:
                            fake.cond.wait(0.1)
                            continue
                        events = [{"type": e.kind, "object": e.obj} for e in new]
                        sent = new[-1].rv
                        done = False
                for event in events:
                    self.chunk(json.dumps(event).encode() + b"\n")
                if done:
                    break
            self.chunk(b"")
        except OSError:
            pass  # the client went away

    def chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()


# -- PodResources -------------------------------------------------------------------------


@dataclass
class Assigned:
    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: Sequence[str]


@dataclass
class Claimed:
    """A device a container holds through a DRA ResourceClaim (one ClaimResource)."""

    namespace: str
    pod: str
    container: str
    claim: str
    cdi_devices: Sequence[str]
    driver: str = "gpu.nvidia.com"
    pool: str = "node-1"
    device: str = ""
    share_id: str | None = None


class _Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.assigned: list[Assigned] = []
        self.claimed: list[Claimed] = []
        self.allocatable: list[tuple[str, Sequence[str]]] = []
        self.allocatable_unimplemented = False
        self.calls = 0

    def List(
        self, request: api_pb2.ListPodResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.ListPodResourcesResponse:
        self.calls += 1
        pods: dict[tuple[str, str], api_pb2.PodResources] = {}
        for a in self.assigned:
            pod = pods.setdefault(
                (a.namespace, a.pod), api_pb2.PodResources(name=a.pod, namespace=a.namespace)
            )
            container = next((c for c in pod.containers if c.name == a.container), None)
            if container is None:
                container = pod.containers.add(name=a.container, cpu_ids=[2, 3])
            container.devices.add(resource_name=a.resource, device_ids=list(a.device_ids))
        for c in self.claimed:
            pod = pods.setdefault(
                (c.namespace, c.pod), api_pb2.PodResources(name=c.pod, namespace=c.namespace)
            )
            container = next((x for x in pod.containers if x.name == c.container), None)
            if container is None:
                container = pod.containers.add(name=c.container)
            # one DynamicResource per claim and container, a ClaimResource per device
            dynamic = next(
                (d for d in container.dynamic_resources if d.claim_name == c.claim), None
            )
            if dynamic is None:
                dynamic = container.dynamic_resources.add(
                    claim_name=c.claim, claim_namespace=c.namespace
                )
            resource = dynamic.claim_resources.add(
                cdi_devices=[api_pb2.CDIDevice(name=n) for n in c.cdi_devices],
                driver_name=c.driver,
                pool_name=c.pool,
                device_name=c.device,
            )
            if c.share_id is not None:
                resource.share_id = c.share_id
        return api_pb2.ListPodResourcesResponse(pod_resources=list(pods.values()))

    def GetAllocatableResources(
        self, request: api_pb2.AllocatableResourcesRequest, context: grpc.ServicerContext
    ) -> api_pb2.AllocatableResourcesResponse:
        if self.allocatable_unimplemented:
            context.abort(
                grpc.StatusCode.UNIMPLEMENTED, "method GetAllocatableResources not implemented"
            )
        return api_pb2.AllocatableResourcesResponse(
            devices=[
                api_pb2.ContainerDevices(resource_name=r, device_ids=list(ids))
                for r, ids in self.allocatable
            ],
            cpu_ids=[0, 1, 2, 3],
        )


class FakePodResources:
    """The kubelet's PodResources gRPC service on a unix socket (start/stop like a kubelet)."""

    def __init__(self, socket_path: Path) -> None:
        self.socket_path = socket_path
        self.lister = _Lister()
        self._server: grpc.Server | None = None

    def start(self) -> None:
        self.socket_path.unlink(missing_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self.lister, server)
        server.add_insecure_port(f"unix://{self.socket_path}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        self.socket_path.unlink(missing_ok=True)
