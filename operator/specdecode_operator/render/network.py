"""Services, disruption budget, ServiceMonitor and the NetworkPolicy that keeps the control port operator-only."""

from __future__ import annotations

from typing import Any

from ..api.models import SpecDecodeDeployment
from . import names


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
    if sdd.spec.runtime.launcher == "specdecode":
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


def service_monitor(sdd: SpecDecodeDeployment) -> dict[str, Any]:
    name = sdd.metadata.name
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": {"name": names.workload(name), "labels": names.labels(name, "metrics")},
        "spec": {
            "selector": {"matchLabels": names.labels(name, "metrics")},
            "endpoints": [{"port": "http", "path": "/metrics", "interval": "15s"}],
        },
    }


def control_network_policy(sdd: SpecDecodeDeployment, operator_namespace: str, operator_labels: dict[str, str]):
    """Serving port open, control port only from the operator, and everything between the pods of this deployment
    (NCCL and SGLang's distributed init between the nodes of a group must keep working)."""
    name = sdd.metadata.name
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": names.network_policy(name), "labels": names.labels(name, "control")},
        "spec": {
            "podSelector": {"matchLabels": names.selector(name)},
            "policyTypes": ["Ingress"],
            "ingress": [
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
                {"from": [{"podSelector": {"matchLabels": names.selector(name)}}]},
            ],
        },
    }
