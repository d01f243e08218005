"""Render and lint the chart offline with helm-python-sdk (Helm v4 Go SDK), shared by the chart tests."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

import helm_python as helm
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "specdecode-operator"
RELEASE, NAMESPACE = "sd", "specdecode-system"

# Values combinations every object of which must validate. Keys name them in test ids.
COMBOS: dict[str, dict] = {
    "defaults": {},
    "single-replica": {"replicaCount": 1},
    "namespaced": {"watch": {"allNamespaces": False, "namespaces": ["team-a", "team-b"]}},
    "namespaced-single": {"replicaCount": 1, "watch": {"allNamespaces": False, "namespaces": ["team-a"]}},
    # assumeMonitoringAPI: an offline render knows no monitoring.coreos.com/v1 (GitOps renders this way)
    "monitoring-on": {
        "metrics": {
            "enabled": True,
            "port": 9090,
            "assumeMonitoringAPI": True,
            "serviceMonitor": {"enabled": True, "labels": {"release": "kps"}},
            "prometheusRule": {"enabled": True, "acceptLengthFloor": 1.5},
        },
        "dashboards": {"enabled": True, "namespace": "monitoring"},
    },
    # the metrics certificate from cert-manager (its CA verified) and a scraper token Secret of the user's
    "monitoring-cert-manager": {
        "metrics": {
            "enabled": True,
            "port": 8443,
            "certSecret": "sd-metrics-tls",
            "assumeMonitoringAPI": True,
            "serviceMonitor": {"enabled": True, "authorization": {"secretName": "prometheus-scraper", "key": "jwt"}},
        },
    },
    "metrics-off": {"metrics": {"enabled": False, "port": 8080}},
    # a private registry mirror for every default image, and the label Prometheus selects per-deployment monitors by
    "private-registry": {
        "global": {"imageRegistry": "mirror.example.com:5000/cache"},
        "imagePullSecrets": [{"name": "mirror-cred"}],
        "runtime": {"serviceMonitor": {"labels": {"release": "kps"}}},
    },
    "no-rbac-existing-sa": {"rbac": {"create": False}, "serviceAccount": {"create": False, "name": "ops-sa"}},
    "overrides": {
        "replicaCount": 3,
        "fullnameOverride": "sdop",
        "image": {"repository": "registry.example.com:5000/sd/op", "tag": "1.2.3"},
        "runtime": {"image": "registry.example.com/sd/runtime@sha256:" + "a" * 64},
        "logLevel": "debug",
        "imagePullSecrets": [{"name": "regcred"}],
        "priorityClassName": "system-cluster-critical",
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
        "podDisruptionBudget": {"enabled": True, "maxUnavailable": "50%"},
        "leaderElection": {"leaseName": "sd-lease"},
        "extraEnv": [{"name": "SPECDECODE_EXTRA", "value": "1"}],
        "podAnnotations": {"a": "b"},
    },
}


@functools.cache
def chart() -> helm.Chart:
    return helm.Chart.load(str(CHART))


@functools.cache
def _render(values_json: str, namespace: str) -> tuple[dict, ...]:
    out = chart().render(json.loads(values_json), name=RELEASE, namespace=namespace, is_install=True)
    return tuple(
        d for path, text in sorted(out.items()) if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d
    )


def render(values: dict | None = None, namespace: str = NAMESPACE) -> list[dict]:
    """Rendered template objects (CRDs excluded), deep-copied so that tests may mutate them."""
    return copy.deepcopy(list(_render(json.dumps(values or {}, sort_keys=True), namespace)))


def render_notes(values: dict | None = None) -> str:
    out = chart().render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for path, text in out.items() if path.endswith("NOTES.txt"))


def crds() -> list[dict]:
    return [d for c in chart().crds for d in yaml.safe_load_all(c["data"]) if d]


def of_kind(docs: list[dict], kind: str) -> list[dict]:
    return [d for d in docs if d["kind"] == kind]


def one(docs: list[dict], kind: str) -> dict:
    found = of_kind(docs, kind)
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]
