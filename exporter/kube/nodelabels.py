"""The node's instance type from its Node object, for the power estimate on cloud VMs.

Cloud providers' node controllers label every node `node.kubernetes.io/instance-type` (the
`beta.` spelling on clusters older than 1.17). The DMI product name gives the same on AWS but
not on GCP ("Google Compute Engine") or Azure ("Virtual Machine"), and the downward API cannot
hand a pod its node's labels, so the agent asks the apiserver once at start-up: one GET of its
own Node, bounded in time, never retried. It needs `get` on nodes (deploy/components/node-labels,
the Helm chart's rbac.readNodeLabels); without it the estimate keeps its other bases and the
log says what to grant.
"""

from __future__ import annotations

import logging
import urllib.parse
from collections.abc import Mapping
from dataclasses import replace

from exporter.kube.kubeapi import KubeClient
from exporter.kube.podsources import apiserver_url, endpoint
from exporter.model.config import Config
from exporter.model.readings import SourceError

log = logging.getLogger(__name__)

INSTANCE_TYPE_LABELS = ("node.kubernetes.io/instance-type", "beta.kubernetes.io/instance-type")
LOOKUP_TIMEOUT_S = 5.0  # start-up waits at most this long for an apiserver that hangs
_MAX_LABEL = 63  # a label value's length limit


def instance_type_label(node: object) -> str:
    """The instance-type label of a Node object (decoded JSON), "" when it has none. A value
    that is not a valid label value (a hostile or broken answer) counts as none."""
    meta = node.get("metadata") if isinstance(node, dict) else None
    labels = meta.get("labels") if isinstance(meta, dict) else None
    if not isinstance(labels, dict):
        return ""
    for key in INSTANCE_TYPE_LABELS:
        value = labels.get(key)
        if isinstance(value, str) and 0 < len(value) <= _MAX_LABEL and value.isprintable():
            return value
    return ""


def read_instance_type(config: Config, environ: Mapping[str, str]) -> str:
    """The node's instance-type label from the apiserver; SourceError says why it cannot."""
    if not config.node_name:
        raise SourceError("no node name", "NODE_NAME is unset")
    url = apiserver_url(config, environ)
    if not url:
        raise SourceError("no url", "not in a cluster (KUBERNETES_SERVICE_HOST unset)")
    bounded = replace(endpoint(config, url), timeout_s=min(config.kube_timeout_s, LOOKUP_TIMEOUT_S))
    try:
        client = KubeClient(bounded)
    except ValueError as exc:
        raise SourceError("bad url", str(exc)) from None
    node = client.get_json(f"/api/v1/nodes/{urllib.parse.quote(config.node_name, safe='')}")
    return instance_type_label(node)


def with_node_instance_type(config: Config, environ: Mapping[str, str]) -> Config:
    """config with --estimate.instance-type taken from the node's label when the flag is unset
    and the agent runs in a cluster; unchanged otherwise (one log line says why)."""
    if config.estimate_instance_type or not (
        config.apiserver_url or environ.get("KUBERNETES_SERVICE_HOST")
    ):
        return config
    try:
        found = read_instance_type(config, environ)
    except SourceError as exc:
        log.info(
            "estimate: the node's instance-type label was not read (%s: %s); grant get on "
            "nodes (deploy/components/node-labels) or pass --estimate.instance-type",
            exc.reason,
            exc.detail,
        )
        return config
    if not found:
        log.info("estimate: node %s has no instance-type label", config.node_name)
        return config
    log.info("estimate: instance type %s from node %s's label", found, config.node_name)
    return replace(config, estimate_instance_type=found)
