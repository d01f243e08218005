"""Services, disruption budget, ServiceMonitor and the NetworkPolicy that keeps the control port operator-only."""

from __future__ import annotations

from typing import Any

from ..api.models import SpecDecodeDeployment
from . import names, pod


def _serving_selector(name: str, nodes: int) -> dict[str, str]:
    sel = names.selector(name)
    if nodes > 1:  # only the leader of a multi-node group runs the HTTP server
        sel = {**sel, names.LWS_WORKER_INDEX_LABEL: "0"}
    return sel


def client_service(sdd: SpecDecodeDeployment, nodes: int) -> dict[str, Any]:
    name = sdd.metadata.name
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.client_service(name), "labels": names.labels(name, "service")},
        "spec": {
            "type": "ClusterIP",
            "selector": _serving_selector(name, nodes),
            "ports": [{"name": "http", "port": sdd.spec.runtime.port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def headless_service(sdd: SpecDecodeDeployment, nodes: int) -> dict[str, Any]:
    """Per-pod discovery: the tuner scrapes and controls each pod through this Service's EndpointSlices."""
    name = sdd.metadata.name
    ports = [{"name": "http", "port": sdd.spec.runtime.port, "targetPort": "http", "protocol": "TCP"}]
    if pod.serves_control(sdd):
        ports.append(
            {"name": "control", "port": sdd.spec.runtime.controlPort, "targetPort": "control", "protocol": "TCP"}
        )
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": names.headless_service(name), "labels": names.labels(name, "metrics")},
        "spec": {
            "clusterIP": "None",
            "selector": _serving_selector(name, nodes),
            "ports": ports,
        },
    }


def disruption_budget(sdd: SpecDecodeDeployment, nodes: int) -> dict[str, Any]:
    name = sdd.metadata.name
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": names.workload(name), "labels": names.labels(name, "runtime")},
        "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _serving_selector(name, nodes)}},
    }


def service_monitor(sdd: SpecDecodeDeployment, default_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """Labels: the operator's default (``default_labels``, e.g. the ``release`` label a kube-prometheus-stack
    Prometheus selects ServiceMonitors by), then spec.monitoring.labels over it, then the operator's own (admission
    refuses those in spec; the operator's configuration refuses them in its default)."""
    name = sdd.metadata.name
    labels = {
        **dict(sorted((default_labels or {}).items())),
        **dict(sorted(sdd.spec.monitoring.labels.items())),
        **names.labels(name, "metrics"),
    }
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": names.workload(name), "labels": labels},
        "spec": {
            "selector": {"matchLabels": names.labels(name, "metrics")},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def control_network_policy(
    sdd: SpecDecodeDeployment, nodes: int, operator_namespace: str, operator_labels: dict[str, str]
) -> dict[str, Any]:
    """The policy the step-control call relies on: the serving port is open, the control port admits only pods
    with the operator's labels in the operator's namespace. Rendered whenever the pods open a control port
    (``pod.serves_control``), whatever the autotune mode: no option turns it off.

    A multi-node group also admits every port between its own pods (NCCL and SGLang's distributed init pick ports
    at run time, and a NetworkPolicy cannot exempt one port from such a rule without port ranges, which plugins
    that do not support ``endPort`` narrow to a single port); those pods run the same tenant-chosen image as the
    leader. A single-node deployment's pods talk to no other pod, so it gets no such rule."""
    name = sdd.metadata.name
    ingress: list[dict[str, Any]] = [
        {"ports": [{"protocol": "TCP", "port": sdd.spec.runtime.port}]},
        {
            "ports": [{"protocol": "TCP", "port": sdd.spec.runtime.controlPort}],
            "from": [
                {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": operator_namespace}},
                    "podSelector": {"matchLabels": dict(sorted(operator_labels.items()))},
                }
            ],
        },
    ]
    if nodes > 1:
        ingress.append({"from": [{"podSelector": {"matchLabels": names.selector(name)}}]})
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": names.network_policy(name), "labels": names.labels(name, "control")},
        "spec": {
            "podSelector": {"matchLabels": names.selector(name)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }
