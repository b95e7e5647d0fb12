"""The --kube.* flags, shared by `serve` and `check` (each also reads WATTPROBE_KUBE_*)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from exporter.kube.podsources import POD_SOURCES, PodSourceKind, choices
from exporter.model.config import (
    CDI_SPEC_DIRS,
    DEFAULT_GPU_RESOURCES,
    INTERVAL_RANGE,
    PODRESOURCES_SOCKET,
    RETENTION_RANGE,
    SERVICE_ACCOUNT_DIR,
    TIMEOUT_RANGE,
    DurationRange,
    bounded_duration,
)

F = TypeVar("F", bound=Callable[..., Any])


def _env(flag: str) -> str:
    return "WATTPROBE_" + flag.lstrip("-").replace(".", "_").replace("-", "_").upper()


def _duration(bounds: DurationRange) -> Callable[[click.Context, click.Parameter, str], float]:
    parse = bounded_duration(bounds)

    def convert(_ctx: click.Context, _param: click.Parameter, value: str) -> float:
        try:
            return parse(value)
        except ValueError as exc:
            raise click.BadParameter(str(exc)) from None

    return convert


def _optional_path(_ctx: click.Context, _param: click.Parameter, value: str) -> Path | None:
    # "none" too: an empty environment variable counts as unset for click
    return Path(value) if value and value != "none" else None


def _label_list(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    keys = tuple(dict.fromkeys(k.strip() for k in value.split(",") if k.strip()))
    for key in keys:
        if "*" in key or " " in key:
            raise click.BadParameter(f"{key!r}: give exact label keys, comma-separated")
    return keys


def _path_list(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[Path, ...]:
    return tuple(dict.fromkeys(Path(p.strip()) for p in value.split(",") if p.strip()))


def _gpu_resources(_ctx: click.Context, _param: click.Parameter, value: str) -> tuple[str, ...]:
    patterns = tuple(dict.fromkeys(p.strip() for p in value.split(",") if p.strip()))
    for p in patterns:
        if " " in p or "/" not in p:
            raise click.BadParameter(f"{p!r}: give resource names or patterns like vendor.com/gpu*")
    if not patterns:
        raise click.BadParameter("give at least one GPU resource name")
    return patterns


def kube_options(func: F, pod_sources: Sequence[PodSourceKind] = POD_SOURCES) -> F:
    """The --kube.* flags; --kube.pod-source's choices are the registered pod sources'."""

    def option(flag: str, dest: str, **kwargs: Any) -> Callable[[F], F]:
        kwargs.setdefault("show_default", True)
        return click.option(flag, dest, envvar=_env(flag), show_envvar=True, **kwargs)

    opts = [
        option(
            "--kube.pod-source",
            "pod_source",
            default="auto",
            type=click.Choice(choices(pod_sources)),
            help="where pod names come from: auto (kubelet in a cluster, else none), none, "
            + ", ".join(f"{s.name} ({s.help})" for s in pod_sources),
        ),
        option(
            "--kube.node-name",
            "node_name",
            default=lambda: os.environ.get("NODE_NAME", ""),
            show_default="$NODE_NAME",
            help="this node's name",
        ),
        option(
            "--kube.kubelet-url",
            "kubelet_url",
            default="",
            show_default="https://$NODE_IP:10250, else https://<node name>:10250",
            help="kubelet API for --kube.pod-source=kubelet",
        ),
        option(
            "--kube.apiserver-url",
            "apiserver_url",
            default="",
            show_default="in-cluster https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT",
            help="apiserver for --kube.pod-source=apiserver; KubeEdge: http://127.0.0.1:10550",
        ),
        option(
            "--kube.token-file",
            "kube_token_file",
            default=str(SERVICE_ACCOUNT_DIR / "token"),
            # no access(2) check here: it ignores CAP_DAC_READ_SEARCH, and a token the agent
            # cannot read is the kube source's "permission denied", not a start-up failure
            type=click.Path(path_type=Path, readable=False),
            help="bearer token, re-read when it changes; sent over https only",
        ),
        option(
            "--kube.ca-file",
            "kube_ca_file",
            default=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
            type=click.Path(path_type=Path, readable=False),
            help="CA bundle that signed the kubelet/apiserver certificate",
        ),
        option(
            "--kube.insecure-skip-tls-verify",
            "kube_insecure_skip_tls_verify",
            is_flag=True,
            default=False,
            help="do not verify the kubelet/apiserver certificate (self-signed kubelet certs)",
        ),
        option(
            "--kube.timeout",
            "kube_timeout_s",
            default="10s",
            callback=_duration(TIMEOUT_RANGE),
            help="timeout of every kubelet, apiserver and PodResources call",
        ),
        option(
            "--kube.poll-interval",
            "kube_poll_interval_s",
            default="10s",
            callback=_duration(INTERVAL_RANGE),
            help="how often the kubelet's /pods and PodResources are read",
        ),
        option(
            "--kube.metadata-ttl",
            "kube_metadata_ttl_s",
            default="1h",
            callback=_duration(RETENTION_RANGE),
            help="how long the last known pods stay once their source stops answering",
        ),
        option(
            "--kube.pod-labels",
            "kube_pod_labels",
            default="",
            callback=_label_list,
            help="pod label keys exported on wattprobe_pod_info (comma-separated; "
            "empty: no wattprobe_pod_info)",
        ),
        option(
            "--kube.podresources-socket",
            "podresources_socket",
            default=str(PODRESOURCES_SOCKET),
            callback=_optional_path,
            help='kubelet PodResources socket (GPU -> pod); "none" or empty turns it off',
        ),
        option(
            "--kube.gpu-resources",
            "gpu_resources",
            default=",".join(DEFAULT_GPU_RESOURCES),
            callback=_gpu_resources,
            help="device plugin resources that are GPUs, comma-separated shell patterns (add a "
            "sharing plugin's renamed resource here; docs/kubernetes.md lists the ID formats)",
        ),
        option(
            "--kube.cdi-spec-dirs",
            "cdi_spec_dirs",
            default=",".join(str(d) for d in CDI_SPEC_DIRS),
            callback=_path_list,
            help="CDI spec directories (the host's, as mounted), comma-separated: how DRA "
            "claims' CDI devices name GPUs; later ones win a clash",
        ),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func
