"""Every API permission the operator uses, declared once, with where the chart grants it.

The chart renders its (Cluster)Roles from this list (``files/rbac-rules.yaml``, written by
``tests/chart/regen.py``); one test checks that every request the operator makes is allowed by a rule here, another
that every granted verb is used by the operator in some test (an unused grant fails it).

Scopes:
- ``cluster``: cluster-scoped reads kopf needs in every mode (ClusterRole);
- ``metrics-review``: TokenReview and SubjectAccessReview for the secured ``/metrics`` (ClusterRole), granted only
  when the chart turns secure metrics on;
- ``operator-namespace``: the leader-election Lease, in the operator's own namespace only (Role);
- ``control-serviceaccount``: TokenRequest on the operator's own ServiceAccount (Role in its namespace, limited
  to that ServiceAccount by name), granted only in ServiceAccount step-control mode: a short-lived token per
  deployment (``control_identity``);
- ``watched``: the SpecDecodeDeployments and their children; a ClusterRole when watching every namespace, else a
  Role per watched namespace;
- ``control-token``: the per-deployment control-token Secrets. Never cluster-wide: a Role per watched namespace,
  and when watching every namespace, a RoleBinding (to a ClusterRole that is not bound cluster-wide) in each
  namespace the chart lists in ``rbac.controlTokenNamespaces``; granted only in Secret step-control mode. Elsewhere
  Live step control is unavailable and the object says so (``ControlTokenUnavailable``); everything else works.
"""

from __future__ import annotations

from typing import NamedTuple

READ = ("get", "list", "watch")
APPLY = ("create", "patch")  # server-side apply: patch, and create when the object does not exist yet
CHILD = READ + APPLY  # children every render produces
DROPPABLE = CHILD + ("delete",)  # children a spec change can drop (Deployment <-> LeaderWorkerSet, monitoring off, ...)
SCOPES = ("cluster", "metrics-review", "operator-namespace", "control-serviceaccount", "watched", "control-token")


class Rule(NamedTuple):
    api_group: str
    resource: str
    verbs: tuple[str, ...]
    why: str
    scope: str = "watched"

    def to_dict(self) -> dict:
        return {"apiGroups": [self.api_group], "resources": [self.resource], "verbs": list(self.verbs)}


RULES: list[Rule] = [
    Rule(
        "apiextensions.k8s.io",
        "customresourcedefinitions",
        ("list", "watch"),
        "kopf discovers served resources",
        "cluster",
    ),
    Rule(
        "authentication.k8s.io",
        "tokenreviews",
        ("create",),
        "metrics: authenticate a scraper's bearer token",
        "metrics-review",
    ),
    Rule(
        "authorization.k8s.io",
        "subjectaccessreviews",
        ("create",),
        "metrics: may that user get /metrics",
        "metrics-review",
    ),
    Rule(
        "coordination.k8s.io",
        "leases",
        ("get", "create", "update"),
        "leader election: one active replica",
        "operator-namespace",
    ),
    Rule(
        "",
        "serviceaccounts/token",
        ("create",),
        "step control: a short-lived token of our own ServiceAccount per deployment",
        "control-serviceaccount",
    ),
    Rule("specdecode.io", "specdecodedeployments", ("list", "watch", "patch"), "watch the CRs; kopf's finalizer"),
    Rule("specdecode.io", "specdecodedeployments/status", ("patch",), "status by server-side apply"),
    Rule("apps", "deployments", DROPPABLE, "single-node serving workload"),
    Rule("leaderworkerset.x-k8s.io", "leaderworkersets", DROPPABLE, "multi-node serving workload"),
    Rule("", "serviceaccounts", CHILD, "the runtime pods' own ServiceAccount, granted nothing"),
    Rule("", "configmaps", CHILD, "runtime configuration"),
    Rule("", "services", CHILD, "client and headless services"),
    Rule("policy", "poddisruptionbudgets", CHILD, "disruption budget"),
    Rule("networking.k8s.io", "networkpolicies", DROPPABLE, "only the operator reaches the control port"),
    Rule("monitoring.coreos.com", "servicemonitors", DROPPABLE, "optional Prometheus scraping"),
    Rule("", "events", ("create",), "Events on the CRs"),
    Rule("discovery.k8s.io", "endpointslices", ("list",), "tuner: endpoints of runtime pods"),
    Rule("", "pods", ("list",), "a rollout's unschedulable pods (RolloutBlocked); a training Job's verdict"),
    Rule("batch", "jobs", ("get",) + APPLY, "draft adaptation: the training Job (never deleted: its TTL)"),
    Rule("", "secrets", ("get",) + APPLY, "the per-deployment control token", "control-token"),
]


def allowed(api_group: str, resource: str, verb: str) -> bool:
    verb = "patch" if verb == "apply" else verb
    return any(r.api_group == api_group and r.resource == resource and verb in r.verbs for r in RULES)


def by_scope(scope: str) -> list[dict]:
    if scope not in SCOPES:
        raise ValueError(f"unknown scope {scope!r}; one of {SCOPES}")
    return [r.to_dict() for r in RULES if r.scope == scope]


def cluster_role(name: str = "specdecode-operator") -> dict:
    """The operator's ClusterRole when watching every namespace (without the control-token Secrets)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": by_scope("cluster") + by_scope("watched"),
    }
