"""spec.podTemplate, the deployment's own labels and spec.monitoring.labels in the rendered manifests.

What each merge rule promises: every allow-listed pod field reaches every runtime pod (Deployment; LeaderWorkerSet
leader and workers); a user's ServiceAccount replaces the operator's on the pods and still mounts no automatic
token; tolerations are appended and node selectors merged; the operator's identity labels and config hash
win over anything a user gives, even where admission was bypassed; the deployment's own labels reach every child but
no selector and no pod; the ServiceMonitor's labels are the operator default, then spec, then the operator's own.
"""

from __future__ import annotations

import copy

import pytest
import yaml

from specdecode_operator.api.models import SpecDecodeDeployment
from specdecode_operator.api.validate import apply_defaults, parse
from specdecode_operator.render import RenderOptions, names, render
from specdecode_operator.render.control_auth import ControlAuth


def base(name: str) -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name},
        "spec": {
            "target": {"model": "/models/t", "tensorParallelSize": 8},
            "draft": {"model": "/models/d", "tensorParallelSize": 1},
        },
    }


def with_(path: str, value, obj: dict) -> dict:
    obj = copy.deepcopy(obj)
    node = obj
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return obj


AUTH = ControlAuth("https://issuer.example", "specdecode-runtime", ("system:serviceaccount:ops:op",))

TEMPLATE = {
    "metadata": {"labels": {"tenant": "a", "team": "pods"}, "annotations": {"example.com/owner": "platform"}},
    "serviceAccountName": "tenant-a",
    "imagePullSecrets": [{"name": "regcred"}, {"name": "mirror"}],
    "priorityClassName": "gpu-high",
    "schedulerName": "volcano",
    "runtimeClassName": "nvidia",
    "tolerations": [{"key": "example.com/tenant", "operator": "Equal", "value": "a", "effect": "NoSchedule"}],
    "nodeSelector": {"example.com/tenant": "a"},
}
PLACEMENT = {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}]}


def document(tp: int = 8, template: dict | None = None, labels: dict | None = None) -> dict:
    doc = with_("spec.placement", copy.deepcopy(PLACEMENT), base("tenant"))
    doc["spec"]["target"]["tensorParallelSize"] = tp
    doc["metadata"]["namespace"] = "team-a"
    if template is not None:
        doc["spec"]["podTemplate"] = copy.deepcopy(template)
    if labels is not None:
        doc["metadata"]["labels"] = dict(labels)
    return doc


def unchecked(doc: dict) -> SpecDecodeDeployment:
    """The typed object without admission's rules: what an operator renders for an object stored under a CRD
    installed without them."""
    return SpecDecodeDeployment.model_validate(apply_defaults(doc))


def pod_templates(manifests: list[dict]) -> list[dict]:
    out = []
    for m in manifests:
        if m["kind"] == "Deployment":
            out.append(m["spec"]["template"])
        elif m["kind"] == "LeaderWorkerSet":
            out += [m["spec"]["leaderWorkerTemplate"][k] for k in ("leaderTemplate", "workerTemplate")]
    assert out
    return out


def of_kind(manifests: list[dict], kind: str) -> list[dict]:
    return [m for m in manifests if m["kind"] == kind]


def selectors(manifests: list[dict]) -> list[dict]:
    """Every label selector the manifests carry (workload, Services, PodDisruptionBudget, NetworkPolicy rules,
    ServiceMonitor)."""
    found: list[dict] = []

    def walk(node, key=None):
        if isinstance(node, dict):
            if key in ("selector", "podSelector") or (key == "matchLabels"):
                found.append(node)
            for k, v in node.items():
                walk(v, k)
        elif isinstance(node, list):
            for v in node:
                walk(v, key)

    for m in manifests:
        walk(m.get("spec"))
    return found


@pytest.mark.parametrize("tp", [8, 16], ids=["Deployment", "LeaderWorkerSet"])
def test_every_allowed_field_reaches_every_runtime_pod(tp):
    manifests = render(parse(document(tp, TEMPLATE)))
    for template in pod_templates(manifests):
        spec = template["spec"]
        assert spec["serviceAccountName"] == "tenant-a"
        assert spec["automountServiceAccountToken"] is False
        assert spec["imagePullSecrets"] == [{"name": "regcred"}, {"name": "mirror"}]
        assert (spec["priorityClassName"], spec["schedulerName"], spec["runtimeClassName"]) == (
            "gpu-high",
            "volcano",
            "nvidia",
        )
        assert spec["tolerations"] == [*PLACEMENT["tolerations"], *TEMPLATE["tolerations"]]  # appended
        assert spec["nodeSelector"] == {"example.com/tenant": "a", "pool": "gpu"}
        assert template["metadata"]["labels"] == {"tenant": "a", "team": "pods", **names.labels("tenant", "runtime")}
        assert template["metadata"]["annotations"]["example.com/owner"] == "platform"
        assert names.CONFIG_HASH_ANNOTATION in template["metadata"]["annotations"]


def test_a_users_service_account_replaces_the_operators_on_the_pods():
    """The operator's own account stays rendered, unused (dropping it would need a grant to delete ServiceAccounts in
    every watched namespace): the same object as without podTemplate, holding nothing and mounting no token."""
    own = render(parse(document()))
    (account,) = of_kind(own, "ServiceAccount")
    assert account["metadata"]["name"] == names.service_account("tenant")
    assert account["automountServiceAccountToken"] is False
    assert pod_templates(own)[0]["spec"]["serviceAccountName"] == names.service_account("tenant")
    theirs = render(parse(document(template={"serviceAccountName": "tenant-a"})))
    assert of_kind(theirs, "ServiceAccount") == [account]
    assert pod_templates(theirs)[0]["spec"]["serviceAccountName"] == "tenant-a"
    # other podTemplate fields keep the operator's account on the pods
    labelled = render(parse(document(template={"metadata": {"labels": {"tenant": "a"}}})))
    assert pod_templates(labelled)[0]["spec"]["serviceAccountName"] == names.service_account("tenant")


def test_service_account_step_control_projects_a_token_of_the_users_account_and_automounts_none():
    """The pods accept the operator's token by issuer, audience and subject (the operator's account); their own
    account only reads the issuer's keys, with the projected token. With a user's account that token is the user's
    account's: no automounted one besides it."""
    (template,) = pod_templates(render(parse(document(template=TEMPLATE)), RenderOptions(control_auth=AUTH)))
    spec = template["spec"]
    assert spec["serviceAccountName"] == "tenant-a" and spec["automountServiceAccountToken"] is False
    (projected,) = [v for v in spec["volumes"] if v["name"] == "control-issuer"]
    assert {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}} in projected["projected"]["sources"]
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert env["SPECDECODE_CONTROL_SUBJECTS"] == "system:serviceaccount:ops:op"  # the operator, not the pod's account


def test_without_a_pod_template_the_pods_are_as_before():
    plain = render(parse(document()))
    empty = render(parse(document(template={})))
    assert plain == empty
    (template,) = pod_templates(plain)
    assert set(template["spec"]) >= {"serviceAccountName", "nodeSelector", "tolerations"}
    assert not set(template["spec"]) & {"imagePullSecrets", "priorityClassName", "schedulerName", "runtimeClassName"}
    assert template["metadata"]["labels"] == names.labels("tenant", "runtime")
    assert list(template["metadata"]["annotations"]) == [names.CONFIG_HASH_ANNOTATION]


@pytest.mark.parametrize("tp", [8, 16], ids=["Deployment", "LeaderWorkerSet"])
def test_the_operators_labels_and_annotations_win_even_past_admission(tp):
    """Admission refuses these; an object stored without the rules must still render pods the selectors select and
    the operator's config hash."""
    hostile = {
        "metadata": {
            "labels": {k: "hijack" for k in names.labels("x", "runtime")},
            "annotations": {names.CONFIG_HASH_ANNOTATION: "stale"},
        },
        "nodeSelector": {"pool": "elsewhere"},
    }
    sdd = unchecked(document(tp, hostile))
    proper = render(parse(document(tp)))
    manifests = render(sdd)
    for template, reference in zip(pod_templates(manifests), pod_templates(proper)):
        assert template["metadata"]["labels"] == names.labels("tenant", "runtime")
        assert template["metadata"]["annotations"] == reference["metadata"]["annotations"]
        assert template["spec"]["nodeSelector"]["pool"] == "gpu"  # placement's value stands
    workload = of_kind(manifests, "Deployment" if tp == 8 else "LeaderWorkerSet")[0]
    if tp == 8:
        selector = workload["spec"]["selector"]["matchLabels"]
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert all(pod_labels.get(k) == v for k, v in selector.items())


def test_the_deployments_own_labels_reach_every_child_but_no_selector_and_no_pod():
    own = {
        "team": "ml",
        "example.com/cost-center": "42",
        "argocd.argoproj.io/instance": "apps",
        "app.kubernetes.io/instance": "argo-app",
        "specdecode.io/shard": "a",
    }
    plain = render(parse(document(16, TEMPLATE)))
    labelled = render(parse(document(16, TEMPLATE, labels=own)))
    assert [m["metadata"]["name"] for m in labelled] == [m["metadata"]["name"] for m in plain]
    for before, after in zip(plain, labelled):
        expected = {"example.com/cost-center": "42", "team": "ml", **before["metadata"]["labels"]}
        assert after["metadata"]["labels"] == expected, after["kind"]
        assert list(after["metadata"]["labels"])[-4:] == list(names.labels("x", "y"))  # identity labels last
        assert selectors([after]) == selectors([before]), after["kind"]
    assert selectors(labelled)  # the walk found them
    assert pod_templates(labelled) == pod_templates(plain)  # a label edit rolls no pod


def test_a_label_edit_changes_the_childrens_input_hash():
    """The operator re-applies a child when its input hash changes: a label edit (no generation bump) must show."""
    a = render(parse(document(labels={"team": "a"})))
    b = render(parse(document(labels={"team": "b"})))
    for x, y in zip(a, b):
        assert (
            x["metadata"]["annotations"][names.INPUT_HASH_ANNOTATION]
            != (y["metadata"]["annotations"][names.INPUT_HASH_ANNOTATION])
        ), x["kind"]


def test_service_monitor_labels_default_then_spec_then_the_operators_own():
    doc = document(labels={"team": "ml", "release": "from-object"})
    doc["spec"]["monitoring"] = {"serviceMonitor": True, "labels": {"release": "kps", "extra": "1"}}
    options = RenderOptions(service_monitor_labels={"release": "default", "prometheus": "main"})
    (monitor,) = of_kind(render(parse(doc), options), "ServiceMonitor")
    assert monitor["metadata"]["labels"] == {
        "release": "kps",
        "team": "ml",
        "extra": "1",
        "prometheus": "main",
        **names.labels("tenant", "metrics"),
    }
    assert monitor["spec"]["selector"]["matchLabels"] == names.labels("tenant", "metrics")
    del doc["spec"]["monitoring"]["labels"]
    (monitor,) = of_kind(render(parse(doc), options), "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "default"  # the operator's default over the object's own
    hostile = unchecked(with_("spec.monitoring.labels", {"app.kubernetes.io/component": "x"}, doc))
    (monitor,) = of_kind(render(hostile, options), "ServiceMonitor")
    assert monitor["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics"
    # only the ServiceMonitor gets them
    for m in render(parse(doc), options):
        if m["kind"] != "ServiceMonitor":
            assert "prometheus" not in m["metadata"]["labels"]


def test_the_golden_case_is_a_valid_document():
    from test_render import CASES

    for path in CASES:
        for doc in yaml.safe_load_all(path.read_text()):
            assert parse(doc).spec.podTemplate is not None
