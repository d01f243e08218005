"""The chart grants exactly the API calls the operator makes (specdecode_operator.rbac), no more, no less."""

import pytest
import yaml

from chartlib import CHART, COMBOS, NAMESPACE, of_kind, one, render

CLUSTER_SCOPED = {("apiextensions.k8s.io", "customresourcedefinitions"), ("", "namespaces"), ("kopf.dev", "clusterkopfpeerings")}
# The lead's minimum: what the operator needs whatever its implementation details.
REQUIRED = {
    ("specdecode.io", "specdecodedeployments"): {"get", "list", "watch", "patch"},
    ("specdecode.io", "specdecodedeployments/status"): {"get", "patch", "update"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "pods"): {"get", "list", "watch"},
    ("discovery.k8s.io", "endpointslices"): {"get", "list", "watch"},
    ("", "events"): {"create", "patch"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
    ("kopf.dev", "clusterkopfpeerings"): {"get", "list", "watch", "patch"},
    ("kopf.dev", "kopfpeerings"): {"get", "list", "watch", "patch"},
}
READ_ONLY = {("", "pods"), ("discovery.k8s.io", "endpointslices"), ("apiextensions.k8s.io", "customresourcedefinitions")}


def triples(rules) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def granted(docs, kinds=("ClusterRole", "Role")) -> set[tuple[str, str, str]]:
    return set().union(*(triples(d["rules"]) for k in kinds for d in of_kind(docs, k)))


def by_resource(ts) -> dict[tuple[str, str], set[str]]:
    out: dict = {}
    for g, r, v in ts:
        out.setdefault((g, r), set()).add(v)
    return out


def operator_rules():
    rbac = pytest.importorskip("specdecode_operator.rbac", reason="specdecode_operator.rbac not written yet")
    rules = getattr(rbac, "RULES", None) or rbac.rules()
    return [r if isinstance(r, dict) else r.to_dict() for r in rules]


def test_chart_rules_equal_the_operators_declared_api_calls():
    declared = triples(operator_rules())
    chart = triples(r for part in yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text()).values() for r in part)
    assert chart == declared, (
        f"only in the chart: {sorted(chart - declared)}; only in rbac.py: {sorted(declared - chart)}. "
        "Run `python tests/chart/regen.py`."
    )


def test_cluster_wide_grants_cover_the_minimum_and_nothing_dangerous():
    docs = render()
    rules = by_resource(granted(docs))
    for resource, verbs in REQUIRED.items():
        assert verbs <= rules.get(resource, set()), (resource, rules.get(resource))
    for resource in READ_ONLY:
        assert rules[resource] <= {"get", "list", "watch"}, resource
    flat = granted(docs)
    assert not any("*" in t for t in flat)
    assert not any(v in {"escalate", "bind", "impersonate", "deletecollection"} for _, _, v in flat)
    assert not any(r in {"nodes", "clusterroles", "clusterrolebindings", "roles", "rolebindings", "serviceaccounts/token"} for _, r, _ in flat)


def test_namespaced_mode_keeps_namespaced_grants_in_roles_only():
    docs = render(COMBOS["namespaced"])
    cluster = by_resource(granted(docs, ("ClusterRole",)))
    assert set(cluster) <= CLUSTER_SCOPED
    assert ("", "namespaces") not in cluster and ("kopf.dev", "clusterkopfpeerings") not in cluster
    roles = of_kind(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    cluster_wide = by_resource(granted(render()))
    for role in roles:
        got = by_resource(triples(role["rules"]))
        assert not set(got) & CLUSTER_SCOPED
        assert got == {k: v for k, v in cluster_wide.items() if k not in CLUSTER_SCOPED}


def test_bindings_point_at_the_operator_service_account():
    for combo in ("defaults", "namespaced"):
        docs = render(COMBOS[combo])
        sa = one(docs, "ServiceAccount")["metadata"]["name"]
        assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == sa
        for binding in of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding"):
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
            role_kind = binding["roleRef"]["kind"]
            ns = binding["metadata"].get("namespace")
            assert any(r["metadata"]["name"] == binding["roleRef"]["name"] and r["metadata"].get("namespace") == ns for r in of_kind(docs, role_kind))
