"""What the emulator knows about each kind it serves, and the kinds outside our CRD that the operator touches."""

from __future__ import annotations

import dataclasses
import datetime
from typing import Callable

Validator = Callable[[dict, "dict | None"], list[str]]
Defaulter = Callable[[dict], dict]

_DEPLOYMENT_SCALE = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.selector",
}
_LWS_SCALE = {
    "specReplicasPath": ".spec.replicas",
    "statusReplicasPath": ".status.replicas",
    "labelSelectorPath": ".status.hpaPodSelector",
}


_BUILTIN_GROUPS = {
    "",
    "apps",
    "policy",
    "networking.k8s.io",
    "discovery.k8s.io",
    "events.k8s.io",
    "coordination.k8s.io",
    "apiextensions.k8s.io",
    "rbac.authorization.k8s.io",
    "batch",
}


@dataclasses.dataclass
class ResourceMeta:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = False
    scale: dict | None = None  # {specReplicasPath, statusReplicasPath, labelSelectorPath}
    validate: Validator | None = None
    default: Defaulter | None = None
    builtin: bool = False  # served by kube-apiserver itself: list items carry no apiVersion/kind

    def __post_init__(self):
        if self.group in _BUILTIN_GROUPS:
            self.builtin = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


def builtin_kinds() -> list[ResourceMeta]:
    """The built-in kinds the operator reads or writes, with the subresources the real server has."""
    return [
        ResourceMeta("apps", "v1", "deployments", "Deployment", status=True, scale=dict(_DEPLOYMENT_SCALE)),
        ResourceMeta("", "v1", "serviceaccounts", "ServiceAccount"),
        ResourceMeta("", "v1", "configmaps", "ConfigMap"),
        ResourceMeta("", "v1", "secrets", "Secret"),
        ResourceMeta("", "v1", "services", "Service", status=True),
        ResourceMeta("", "v1", "pods", "Pod", status=True),
        ResourceMeta("", "v1", "events", "Event"),
        ResourceMeta("events.k8s.io", "v1", "events", "Event"),
        ResourceMeta("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", status=True),
        ResourceMeta("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
        ResourceMeta("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
        ResourceMeta("coordination.k8s.io", "v1", "leases", "Lease"),
        ResourceMeta(
            "apiextensions.k8s.io",
            "v1",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            namespaced=False,
            status=True,
        ),
    ]


def third_party_kinds() -> list[ResourceMeta]:
    """CRDs of other projects that our children use: LeaderWorkerSet, ServiceMonitor, kopf peering."""
    return [
        ResourceMeta(
            "leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet", status=True, scale=dict(_LWS_SCALE)
        ),
        ResourceMeta("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor"),
        ResourceMeta("kopf.dev", "v1", "kopfpeerings", "KopfPeering"),
        ResourceMeta("kopf.dev", "v1", "clusterkopfpeerings", "ClusterKopfPeering", namespaced=False),
    ]


def meta_of_crd(crd: dict) -> ResourceMeta:
    """The names, scope and subresources of a CustomResourceDefinition's storage version."""
    spec = crd["spec"]
    version = next(v for v in spec["versions"] if v.get("storage", True))
    sub = version.get("subresources", {})
    return ResourceMeta(
        spec["group"],
        version["name"],
        spec["names"]["plural"],
        spec["names"]["kind"],
        namespaced=spec.get("scope", "Namespaced") == "Namespaced",
        status="status" in sub,
        scale=sub.get("scale"),
    )


def now() -> str:
    """A timestamp in the server's format (whole seconds, UTC), as in creationTimestamp and managedFields."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
