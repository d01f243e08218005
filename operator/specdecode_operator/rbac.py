"""Every API permission the operator uses, declared once: the chart renders its ClusterRole from this list and an
e2e test checks the emulator's request log against it (a new API call without a rule fails the test)."""

from __future__ import annotations

from typing import NamedTuple

READ = ("get", "list", "watch")
WRITE = ("create", "patch", "update", "delete")


class Rule(NamedTuple):
    api_group: str
    resource: str
    verbs: tuple[str, ...]
    why: str

    def to_dict(self) -> dict:
        return {"apiGroups": [self.api_group], "resources": [self.resource], "verbs": list(self.verbs)}


RULES: list[Rule] = [
    Rule("specdecode.io", "specdecodedeployments", READ + ("patch",), "watch the CRs; kopf's finalizer"),
    Rule("specdecode.io", "specdecodedeployments/status", ("get", "patch", "update"), "status by server-side apply"),
    Rule("apps", "deployments", READ + WRITE, "single-node serving workload"),
    Rule("leaderworkerset.x-k8s.io", "leaderworkersets", READ + WRITE, "multi-node serving workload"),
    Rule("", "configmaps", READ + WRITE, "runtime configuration"),
    Rule("", "services", READ + WRITE, "client and headless services"),
    Rule("", "secrets", READ + WRITE, "the per-deployment control token"),
    Rule("policy", "poddisruptionbudgets", READ + WRITE, "disruption budget"),
    Rule("networking.k8s.io", "networkpolicies", READ + WRITE, "only the operator reaches the control port"),
    Rule("monitoring.coreos.com", "servicemonitors", READ + WRITE, "optional Prometheus scraping"),
    Rule("", "events", ("create", "patch"), "Events on the CRs"),
    Rule("events.k8s.io", "events", ("create", "patch"), "Events on the CRs (new API)"),
    Rule("apiextensions.k8s.io", "customresourcedefinitions", READ, "kopf discovers served resources"),
    Rule("kopf.dev", "kopfpeerings", READ + ("patch",), "peering: only one replica acts"),
    Rule("kopf.dev", "clusterkopfpeerings", READ + ("patch",), "peering when cluster-wide"),
    Rule("", "pods", READ, "tuner: pod IPs of runtime pods"),
    Rule("discovery.k8s.io", "endpointslices", READ, "tuner: endpoints of runtime pods"),
]


def allowed(api_group: str, resource: str, verb: str) -> bool:
    verb = "patch" if verb == "apply" else verb
    return any(r.api_group == api_group and r.resource == resource and verb in r.verbs for r in RULES)


def cluster_role(name: str = "specdecode-operator") -> dict:
    """The ClusterRole the chart ships (rules grouped per API group and resource)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [{"apiGroups": [r.api_group], "resources": [r.resource], "verbs": list(r.verbs)} for r in RULES],
    }
