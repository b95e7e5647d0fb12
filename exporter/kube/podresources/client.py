"""A typed client for the kubelet's v1 PodResourcesLister on its unix socket.

grpc is imported only here, and this module only when PodResources is in use: grpcio and
protobuf cost about 21 MiB RSS (docs/kubernetes.md).
"""

from __future__ import annotations

import stat
import threading
from pathlib import Path
from typing import Any

import grpc

from exporter.kube.gpus import ClaimDevice, DeviceAssignment
from exporter.kube.podresources import api_pb2, api_pb2_grpc
from exporter.model.config import PODRESOURCES_SOCKET
from exporter.model.readings import SourceError

DEFAULT_SOCKET = PODRESOURCES_SOCKET
_CHANNEL_OPTIONS = [
    # a restarted kubelet must be found again within seconds, not gRPC's default 2 minutes
    ("grpc.initial_reconnect_backoff_ms", 500),
    ("grpc.min_reconnect_backoff_ms", 500),
    ("grpc.max_reconnect_backoff_ms", 5000),
    ("grpc.max_receive_message_length", 16 << 20),
]
_REASONS = {
    grpc.StatusCode.UNAVAILABLE: "unreachable",
    grpc.StatusCode.DEADLINE_EXCEEDED: "timeout",
    grpc.StatusCode.UNIMPLEMENTED: "unimplemented",
    grpc.StatusCode.PERMISSION_DENIED: "permission denied",
    grpc.StatusCode.UNAUTHENTICATED: "unauthorized",
}


class PodResourcesClient:
    def __init__(self, socket_path: Path = DEFAULT_SOCKET, timeout_s: float = 5.0) -> None:
        self.socket_path = socket_path
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None

    def list_assignments(self) -> list[DeviceAssignment]:
        """Every device plugin device assigned to every container on the node."""
        return self.list_all()[0]

    def list_all(self) -> tuple[list[DeviceAssignment], list[ClaimDevice]]:
        """Every device assigned to every container on the node: by device plugins, and by DRA
        claims (dynamic_resources: one ClaimDevice per ClaimResource)."""
        response: api_pb2.ListPodResourcesResponse = self._call(
            "List", api_pb2.ListPodResourcesRequest()
        )
        return _devices(response), _claims(response)

    def allocatable_devices(self) -> list[tuple[str, str]]:
        """(resource name, device id) of every device the kubelet can hand out."""
        response: api_pb2.AllocatableResourcesResponse = self._call(
            "GetAllocatableResources", api_pb2.AllocatableResourcesRequest()
        )
        return [(d.resource_name, i) for d in response.devices for i in d.device_ids]

    def close(self) -> None:
        with self._lock:
            if self._channel is not None:
                self._channel.close()
            self._channel = self._stub = None

    def _call(self, method: str, request: object) -> Any:
        self._check_socket()
        with self._lock:
            if self._stub is None:
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket_path}", options=_CHANNEL_OPTIONS
                )
                self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
            stub = self._stub
        try:
            return getattr(stub, method)(request, timeout=self._timeout_s)
        except grpc.RpcError as exc:
            # start afresh next time: a kubelet restart replaces the socket
            self.close()
            # the raised errors are also grpc.Call objects, which carry the status
            code_of, details_of = getattr(exc, "code", None), getattr(exc, "details", None)
            code: grpc.StatusCode | None = code_of() if callable(code_of) else None
            details = str(details_of()) if callable(details_of) else str(exc)
            reason = _REASONS.get(code, code.name.lower()) if code else "rpc error"
            if "Permission denied" in details:  # connect(2) on the socket: EACCES
                reason = "permission denied"
            raise SourceError(reason, f"{self.socket_path} {method}: {details}") from None

    def _check_socket(self) -> None:
        try:
            mode = self.socket_path.stat().st_mode
        except FileNotFoundError:
            raise SourceError(
                "socket missing", f"{self.socket_path} does not exist (not mounted?)"
            ) from None
        except PermissionError as exc:
            raise SourceError("permission denied", f"{self.socket_path}: {exc.strerror}") from None
        except OSError as exc:
            raise SourceError("unreachable", f"{self.socket_path}: {exc}") from None
        if not stat.S_ISSOCK(mode):
            raise SourceError("unreachable", f"{self.socket_path} is not a socket")


def _devices(response: api_pb2.ListPodResourcesResponse) -> list[DeviceAssignment]:
    out = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for devices in container.devices:
                for device_id in devices.device_ids:
                    out.append(
                        DeviceAssignment(
                            namespace=pod.namespace,
                            pod=pod.name,
                            container=container.name,
                            resource=devices.resource_name,
                            device_id=device_id,
                        )
                    )
    return out


def _claims(response: api_pb2.ListPodResourcesResponse) -> list[ClaimDevice]:
    out = []
    for pod in response.pod_resources:
        for container in pod.containers:
            for dynamic in container.dynamic_resources:
                for resource in dynamic.claim_resources:
                    out.append(
                        ClaimDevice(
                            namespace=pod.namespace,
                            pod=pod.name,
                            container=container.name,
                            claim_namespace=dynamic.claim_namespace,
                            claim=dynamic.claim_name,
                            cdi_devices=tuple(d.name for d in resource.cdi_devices),
                            driver=resource.driver_name,
                            pool=resource.pool_name,
                            device=resource.device_name,
                        )
                    )
    return out
