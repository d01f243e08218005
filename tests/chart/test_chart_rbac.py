"""The chart grants exactly the API calls the operator makes (specdecode_operator.rbac), no more, no less."""

import pytest
import yaml

from tests.chart import chartlib
from tests.chart.chartlib import CHART, COMBOS, NAMESPACE, of_kind, one

CRD_NAME = "specdecodedeployments.specdecode.io"


def is_hook(doc: dict) -> bool:
    return "helm.sh/hook" in ((doc.get("metadata") or {}).get("annotations") or {})


def render(values: dict | None = None) -> list[dict]:
    """The operator's objects: the CRD upgrade hook has its own ServiceAccount and grants (tested below)."""
    return [d for d in chartlib.render(values) if not is_hook(d)]


CLUSTER_SCOPED = {
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("authentication.k8s.io", "tokenreviews"),
    ("authorization.k8s.io", "subjectaccessreviews"),
}
# What the operator needs whatever its implementation details.
REQUIRED = {
    ("specdecode.io", "specdecodedeployments"): {"list", "watch", "patch"},
    ("specdecode.io", "specdecodedeployments/status"): {"patch"},
    ("apps", "deployments"): {"get", "list", "watch", "create", "patch", "delete"},
    ("leaderworkerset.x-k8s.io", "leaderworkersets"): {"get", "list", "watch", "create", "patch", "delete"},
    ("", "services"): {"get", "list", "watch", "create", "patch"},
    ("", "configmaps"): {"get", "list", "watch", "create", "patch"},
    ("discovery.k8s.io", "endpointslices"): {"list"},
    ("", "events"): {"create"},
    ("apiextensions.k8s.io", "customresourcedefinitions"): {"list", "watch"},
}
READ_ONLY = {("discovery.k8s.io", "endpointslices"), ("apiextensions.k8s.io", "customresourcedefinitions")}


def triples(rules) -> set[tuple[str, str, str]]:
    """API resource grants (a nonResourceURLs rule, the metrics reader's, grants no API resource)."""
    return {
        (g, r, v)
        for rule in rules
        if "apiGroups" in rule
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


@pytest.mark.parametrize("secure", [True, False])
def test_metrics_reader_role_grants_only_get_metrics_and_binds_nobody(secure):
    docs = render({"metrics": {"enabled": True, "port": 8080, "secure": secure}})
    readers = [r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-metrics-reader")]
    if not secure:
        assert readers == []
        return
    (reader,) = readers
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert reader["metadata"]["name"] not in {b["roleRef"]["name"] for b in of_kind(docs, "ClusterRoleBinding")}


def granted(docs, kinds=("ClusterRole", "Role")) -> set[tuple[str, str, str]]:
    return set().union(*(triples(d["rules"]) for k in kinds for d in of_kind(docs, k)))


def by_resource(ts) -> dict[tuple[str, str], set[str]]:
    out: dict = {}
    for g, r, v in ts:
        out.setdefault((g, r), set()).add(v)
    return out


def operator_rules() -> list[dict]:
    """The operator's declared API calls (specdecode_operator.rbac.RULES) as RBAC rules."""
    from specdecode_operator.rbac import RULES

    return [r.to_dict() for r in RULES]


def test_chart_rules_equal_the_operators_declared_api_calls():
    declared = triples(operator_rules())
    chart = triples(
        r for part in yaml.safe_load((CHART / "files" / "rbac-rules.yaml").read_text()).values() for r in part
    )
    assert chart == declared, (
        f"only in the chart: {sorted(chart - declared)}; only in rbac.py: {sorted(declared - chart)}. "
        "Run `python tests/chart/regen.py`."
    )
    # every rule is rendered in some mode: namespaced mode renders each scope, Secret mode the Secret grants
    rendered = granted(render(COMBOS["namespaced"])) | granted(render({"controlAuth": {"mode": "Secret"}}))
    assert rendered == declared


REVIEWS = {
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
}


@pytest.mark.parametrize(
    "values",
    [
        {"metrics": {"enabled": True, "port": 8080, "secure": False}},
        {"metrics": {"enabled": False, "port": 8080, "secure": True}},
    ],
)
def test_token_and_access_reviews_are_granted_only_with_secure_metrics(values):
    assert REVIEWS <= cluster_wide(render({}))  # the default: /metrics secured
    assert not REVIEWS & granted(render(values))


def test_secrets_are_granted_only_in_secret_mode():
    for values in ({}, {"rbac": {"controlTokenNamespaces": ["llm"]}}, COMBOS["namespaced"]):
        docs = render(values)
        assert not any(r == "secrets" for _, r, _ in granted(docs)), values
    docs = render({"controlAuth": {"mode": "Secret"}, **COMBOS["namespaced"]})
    assert any(r == "secrets" for _, r, _ in granted(docs))


def cluster_wide(docs) -> set[tuple[str, str, str]]:
    """What the operator may do in every namespace: ClusterRoles bound by a ClusterRoleBinding."""
    bound = {b["roleRef"]["name"] for b in of_kind(docs, "ClusterRoleBinding")}
    return set().union(*(triples(r["rules"]) for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"] in bound))


def test_cluster_wide_grants_cover_the_minimum_and_nothing_dangerous():
    docs = render()
    rules = by_resource(cluster_wide(docs))
    for resource, verbs in REQUIRED.items():
        assert verbs <= rules.get(resource, set()), (resource, rules.get(resource))
    for resource in READ_ONLY:
        assert rules[resource] <= {"get", "list", "watch"}, resource
    flat = granted(docs)
    assert not any("*" in t for t in flat)
    assert not any(
        v in {"escalate", "bind", "impersonate", "deletecollection", "update"} for _, _, v in flat if _ != "leases"
    )
    assert not any(
        r
        in {
            "nodes",
            "pods/exec",
            "pods/attach",
            "pods/portforward",
            "clusterroles",
            "clusterrolebindings",
            "roles",
            "rolebindings",
        }
        for _, r, _ in flat
    )
    # ServiceAccounts: the runtime pods' own, applied like any child; never deleted, updated or given tokens here
    assert {v for _, r, v in flat if r == "serviceaccounts"} <= {"get", "list", "watch", "create", "patch"}
    # TokenRequest: on the operator's own ServiceAccount only, in the release namespace only
    assert not any(r == "serviceaccounts/token" for _, r, _ in cluster_wide(docs))
    sa = one(docs, "ServiceAccount")["metadata"]["name"]
    for role in of_kind(docs, "Role") + of_kind(docs, "ClusterRole"):
        for rule in role["rules"]:
            if "serviceaccounts/token" in rule.get("resources", []):
                assert role["kind"] == "Role" and role["metadata"]["namespace"] == NAMESPACE
                assert rule["resourceNames"] == [sa] and rule["verbs"] == ["create"]
    # pods: listed only (a rollout's unschedulable pods); their templates are the Deployments' it already reads
    assert {v for _, r, v in flat if r == "pods"} <= {"list"}


@pytest.mark.parametrize("combo", ["defaults", "namespaced", "overrides"])
def test_no_cluster_wide_secret_access(combo):
    docs = render({**COMBOS[combo], "controlAuth": {"mode": "Secret"}})
    assert not any(r == "secrets" for _, r, _ in cluster_wide(docs))
    token_role = next(r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-control-token"))
    assert by_resource(triples(token_role["rules"])) == {("", "secrets"): {"get", "create", "patch"}}


def test_control_token_secrets_are_bound_per_namespace():
    def bindings(values):
        return sorted(
            b["metadata"]["namespace"]
            for b in of_kind(render({**values, "controlAuth": {"mode": "Secret"}}), "RoleBinding")
            if b["roleRef"]["name"].endswith("-control-token")
        )

    assert bindings({}) == []  # all namespaces, none listed: no Secret access anywhere
    assert bindings({"rbac": {"controlTokenNamespaces": ["llm", "search"]}}) == ["llm", "search"]
    assert bindings(COMBOS["namespaced"]) == ["team-a", "team-b"]  # namespaced mode: the watched namespaces


def test_the_lease_is_granted_in_the_release_namespace_only():
    docs = render()
    lease = [
        (r["metadata"].get("namespace"), t)
        for r in of_kind(docs, "Role") + of_kind(docs, "ClusterRole")
        for t in triples(r["rules"])
        if t[1] == "leases"
    ]
    assert lease and {ns for ns, _ in lease} == {NAMESPACE}
    assert {v for _, (_, _, v) in lease} == {"get", "create", "update"}


def test_namespaced_mode_keeps_namespaced_grants_in_roles_only():
    docs = render(COMBOS["namespaced"])
    assert set(by_resource(cluster_wide(docs))) <= CLUSTER_SCOPED
    roles = [r for r in of_kind(docs, "Role") if r["metadata"]["name"] == "sd-specdecode-operator"]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    everywhere = by_resource(cluster_wide(render()))
    for role in roles:
        got = by_resource(triples(role["rules"]))
        assert not set(got) & CLUSTER_SCOPED
        assert got == {k: v for k, v in everywhere.items() if k not in CLUSTER_SCOPED}


def test_bindings_point_at_the_operator_service_account():
    for combo in ("defaults", "namespaced"):
        docs = render(COMBOS[combo])
        sa = one(docs, "ServiceAccount")["metadata"]["name"]
        assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == sa
        for binding in of_kind(docs, "ClusterRoleBinding") + of_kind(docs, "RoleBinding"):
            assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
            role_kind = binding["roleRef"]["kind"]
            ns = binding["metadata"].get("namespace") if role_kind == "Role" else None
            assert any(
                r["metadata"]["name"] == binding["roleRef"]["name"] and r["metadata"].get("namespace") == ns
                for r in of_kind(docs, role_kind)
            )


def hook_objects(values: dict | None = None) -> list[dict]:
    return [d for d in chartlib.render(values) if is_hook(d)]


def test_the_crd_upgrade_hook_may_only_get_create_and_patch_our_crd():
    hooks = hook_objects()
    assert sorted(d["kind"] for d in hooks) == ["ClusterRole", "ClusterRoleBinding", "Job", "ServiceAccount"]
    (role,) = of_kind(hooks, "ClusterRole")
    assert role["rules"] == [
        {
            "apiGroups": ["apiextensions.k8s.io"],
            "resources": ["customresourcedefinitions"],
            "resourceNames": [CRD_NAME],
            "verbs": ["get", "create", "patch"],
        }
    ]
    (binding,) = of_kind(hooks, "ClusterRoleBinding")
    (sa,) = of_kind(hooks, "ServiceAccount")
    (job,) = of_kind(hooks, "Job")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": NAMESPACE}]
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == sa["metadata"]["name"] != one(render(), "ServiceAccount")["metadata"]["name"]
    assert pod["containers"][0]["command"][:3] == ["specdecode", "crd", "apply"]
    for d in hooks:
        md = d["metadata"]["annotations"]
        assert md["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert "hook-succeeded" in md["helm.sh/hook-delete-policy"]
        assert "before-hook-creation" in md["helm.sh/hook-delete-policy"]
    # the Job runs after its ServiceAccount and grants exist
    assert int(job["metadata"]["annotations"]["helm.sh/hook-weight"]) > int(
        role["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    # the pod is not taken for an operator replica (Service, PodDisruptionBudget, control-port NetworkPolicy)
    operator = one(render(), "Deployment")["spec"]["selector"]["matchLabels"]
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert not operator.items() <= labels.items()


@pytest.mark.parametrize(
    "values", [{"crds": {"upgrade": False}}, {"rbac": {"create": False}, "serviceAccount": {"create": False}}]
)
def test_the_crd_upgrade_hook_is_off_with_the_switch_or_without_rbac(values):
    assert hook_objects(values) == []
