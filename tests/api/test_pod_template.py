"""spec.podTemplate and spec.monitoring.labels at admission: the allow-list of pod fields, label and annotation
syntax, the operator's own labels refused with the field and the key named, and the node selector merge rule.

Each row's two documents also join the real API server parity corpus (tests/api/cel_corpus.py), so the API server
confirms every verdict and field path here; ``test_cel_parity_real.py`` checks the server's own words for the
label-override refusal.
"""

from __future__ import annotations

import random
import string

import pytest
from cel_corpus import base, with_

from specdecode_operator.api import labels as lb
from specdecode_operator.api import rules
from specdecode_operator.api.validate import _cel_holds, parse, validate_object
from specdecode_operator.render import names

LABELS = "spec.podTemplate.metadata.labels"
ANNOTATIONS = "spec.podTemplate.metadata.annotations"
TOLERATIONS = "spec.podTemplate.tolerations"
NODE_SELECTOR = "spec.podTemplate.nodeSelector"
MONITORING = "spec.monitoring.labels"

# (field to set, good value, bad value, path of the problem, fragment of its message)
CASES = [
    (LABELS, {"team": "ml", "app.kubernetes.io/part-of": "x"}, {"app.kubernetes.io/instance": "b"}, LABELS,
     "may not set app.kubernetes.io/instance, one of the operator's own labels"),
    (LABELS, {"example.com/tier": "gold"}, {"app.kubernetes.io/name": "x"}, LABELS, "may not set app.kubernetes.io/name"),
    (LABELS, {"app.kubernetes.io/version": "1"}, {"app.kubernetes.io/component": "x"}, LABELS,
     "may not set app.kubernetes.io/component"),
    (LABELS, {"managed-by": "me"}, {"app.kubernetes.io/managed-by": "me"}, LABELS,
     "may not set app.kubernetes.io/managed-by"),
    (LABELS, {"notspecdecode.io/x": "1"}, {"specdecode.io/x": "1"}, LABELS, "may not set specdecode.io/x"),
    (LABELS, {"specdecode.example.com/x": "1"}, {"tuner.specdecode.io/x": "1"}, LABELS, "may not set tuner.specdecode"),
    (LABELS, {"k8s.io/x": "1"}, {"leaderworkerset.sigs.k8s.io/worker-index": "0"}, LABELS,
     "may not set leaderworkerset.sigs.k8s.io/worker-index"),
    (LABELS, {"k": ""}, {"k": "-dash-first"}, LABELS, "the value of k is not a label value"),
    (LABELS, {"k": "A.b_c-9"}, {"k": "a b"}, LABELS, "is not a label value"),
    (LABELS, {"k_1.x-Y": "v"}, {"_k": "v"}, LABELS, "_k is not a label key"),
    (LABELS, {"a" * 63: "v"}, {"a" * 64: "v"}, LABELS, "is not a label key"),
    (LABELS, {"a" * 253 + "/k": "v"}, {"a" * 254 + "/k": "v"}, LABELS, "is not a label key"),
    (LABELS, {"a.b/k": "v"}, {"A.b/k": "v"}, LABELS, "A.b/k is not a label key"),
    (LABELS, {"a.b/k": "v"}, {"a/b/k": "v"}, LABELS, "is not a label key"),
    (ANNOTATIONS, {"example.com/note": 'any text: "quoted", / and spaces'}, {"specdecode.io/config-hash": "x"},
     ANNOTATIONS, "may not set specdecode.io/config-hash: keys under specdecode.io/ are the operator's own"),
    (ANNOTATIONS, {"specdecode.io.example.com/x": "y"}, {"bad key": "x"}, ANNOTATIONS,
     "bad key is not an annotation key"),
    (TOLERATIONS, [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
     [{"operator": "Equal", "value": "x"}], f"{TOLERATIONS}[0].operator", "without a key needs operator Exists"),
    (TOLERATIONS, [{"operator": "Exists"}], [{"key": "k", "operator": "Exists", "value": "v"}],
     f"{TOLERATIONS}[0].value", "takes no value"),
    (TOLERATIONS, [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 30}],
     [{"key": "k", "effect": "NoSchedule", "tolerationSeconds": 30}], f"{TOLERATIONS}[0].tolerationSeconds",
     "needs effect NoExecute"),
    (TOLERATIONS, [{"key": "a" * 253 + "/k", "operator": "Exists"}], [{"key": "a" * 254 + "/k", "operator": "Exists"}],
     f"{TOLERATIONS}[0].key", "at most 253"),
    (NODE_SELECTOR, {"tenant": "a", "example.com/pool": "x"}, {"tenant": "a b"}, NODE_SELECTOR,
     "the value of tenant is not a label value"),
    (NODE_SELECTOR, {"tenant": "a"}, {"-tenant": "a"}, NODE_SELECTOR, "-tenant is not a label key"),
    (MONITORING, {"release": "kube-prometheus-stack"}, {"app.kubernetes.io/instance": "x"}, MONITORING,
     "monitoring.labels may not set app.kubernetes.io/instance"),
    (MONITORING, {"release": "kps"}, {"release": "a/b"}, MONITORING, "is not a label value"),
]  # fmt: skip

# Mistakes the schema catches (the allow-list: any other pod field is an unknown field).
SCHEMA_CASES = [
    ("serviceAccountName pattern", "spec.podTemplate.serviceAccountName", "Tenant_SA", "should match"),
    ("serviceAccountName length", "spec.podTemplate.serviceAccountName", "a" * 254, "too long"),
    ("serviceAccountName empty", "spec.podTemplate.serviceAccountName", "", "non-empty"),
    ("priorityClassName pattern", "spec.podTemplate.priorityClassName", "High", "should match"),
    ("schedulerName pattern", "spec.podTemplate.schedulerName", "my scheduler", "should match"),
    ("runtimeClassName pattern", "spec.podTemplate.runtimeClassName", "nvidia/", "should match"),
    ("imagePullSecrets name", "spec.podTemplate.imagePullSecrets", [{"name": "Reg"}], "should match"),
    ("imagePullSecrets without a name", "spec.podTemplate.imagePullSecrets", [{}], "Required value"),
    ("imagePullSecrets count", "spec.podTemplate.imagePullSecrets", [{"name": f"s{i}"} for i in range(17)], ""),
    ("toleration effect", TOLERATIONS, [{"key": "k", "effect": "Sometimes"}], "Unsupported value"),
    ("toleration operator", TOLERATIONS, [{"key": "k", "operator": "In"}], "Unsupported value"),
    ("toleration key pattern", TOLERATIONS, [{"key": "a b", "operator": "Exists"}], "should match"),
    ("toleration value pattern", TOLERATIONS, [{"key": "k", "value": "a b"}], "should match"),
    ("label count", LABELS, {f"k{i}": "v" for i in range(33)}, ""),
    ("label value length", LABELS, {"example.com/k": "v" * 64}, "too long"),
    ("annotation count", ANNOTATIONS, {f"k{i}": "v" for i in range(65)}, ""),
    ("monitoring label value length", MONITORING, {"release": "v" * 64}, "too long"),
    ("hostNetwork is not allowed", "spec.podTemplate.hostNetwork", True, "unknown field"),
    ("securityContext is not allowed", "spec.podTemplate.securityContext", {"runAsUser": 0}, "unknown field"),
    ("containers are not allowed", "spec.podTemplate.containers", [{"name": "x", "image": "y"}], "unknown field"),
]


def schema_documents() -> list[tuple[str, dict]]:
    return [(f"schema:podTemplate {name}", with_(field, value)) for name, field, value, _ in SCHEMA_CASES]


def conflict_document(pod_key: str = "pool") -> dict:
    doc = with_("spec.placement", {"nodeSelector": {"pool": "gpu"}})
    return with_("spec.podTemplate.nodeSelector", {pod_key: "a"}, doc)


def corpus_documents() -> list[tuple[str, dict]]:
    """Every document of this module, for the real API server parity corpus."""
    out = []
    for field, good, bad, _path, _fragment in CASES:
        out.append((f"rule-ok:{field}={good!r}"[:90], with_(field, good)))
        out.append((f"rule-bad:{field}={bad!r}"[:90], with_(field, bad)))
    out.append(("rule-bad:podTemplate.nodeSelector repeats placement", conflict_document()))
    out.append(("rule-ok:podTemplate.nodeSelector beside placement", conflict_document("tenant")))
    out.append(("rule-ok:podTemplate every field", full_document()))
    return out + schema_documents()


def full_document() -> dict:
    doc = with_("spec.placement", {"nodeSelector": {"pool": "gpu"}, "tolerations": [{"operator": "Exists"}]})
    return with_(
        "spec.podTemplate",
        {
            "metadata": {"labels": {"team": "ml"}, "annotations": {"example.com/owner": "ml-platform"}},
            "serviceAccountName": "tenant-a",
            "imagePullSecrets": [{"name": "regcred"}],
            "priorityClassName": "gpu-high",
            "schedulerName": "volcano",
            "runtimeClassName": "nvidia",
            "tolerations": [{"key": "tenant", "operator": "Equal", "value": "a", "effect": "NoSchedule"}],
            "nodeSelector": {"tenant": "a"},
        },
        doc,
    )


@pytest.mark.parametrize("field,good,bad,path,fragment", CASES, ids=[f"{c[0]}={c[2]!r}"[:70] for c in CASES])
def test_rule_accepts_and_refuses_naming_the_field(field, good, bad, path, fragment):
    assert validate_object(with_(field, good)) == []
    problems = validate_object(with_(field, bad))
    assert [p.path for p in problems] == [path], problems
    assert fragment in problems[0].message, problems[0].message


@pytest.mark.parametrize("name,field,value,fragment", SCHEMA_CASES, ids=[c[0] for c in SCHEMA_CASES])
def test_schema_refuses_naming_the_field(name, field, value, fragment):
    problems = validate_object(with_(field, value))
    assert problems, name
    assert all(p.path.startswith(field) for p in problems), problems
    assert any(fragment.lower() in p.message.lower() for p in problems), problems


def test_a_node_selector_key_may_be_set_in_one_place_only():
    (problem,) = validate_object(conflict_document())
    assert problem.path == NODE_SELECTOR
    assert "may not repeat pool, a key of placement.nodeSelector" in problem.message
    assert validate_object(conflict_document("tenant")) == []
    # without placement.nodeSelector (defaulted to {}) nothing conflicts
    assert validate_object(with_("spec.podTemplate.nodeSelector", {"pool": "a"})) == []


def test_every_allowed_field_parses_and_nothing_is_defaulted_into_a_document_without_it():
    sdd = parse(full_document())
    template = sdd.spec.podTemplate
    assert template is not None and template.serviceAccountName == "tenant-a"
    assert [t.model_dump(exclude_none=True) for t in template.tolerations] == [
        {"key": "tenant", "operator": "Equal", "value": "a", "effect": "NoSchedule"}
    ]
    assert parse(base()).spec.podTemplate is None
    assert parse(with_("spec.podTemplate", {})).spec.podTemplate.metadata.labels == {}


def test_the_operator_identity_labels_are_the_ones_admission_reserves():
    """The renderer's labels (what the selectors are made of) are exactly the keys the rules refuse: a label added
    to names.labels without reserving it would let a user's label override it."""
    for component in ("runtime", "metrics", "service", "config", "control"):
        assert set(names.labels("x", component)) == set(lb.IDENTITY_LABEL_KEYS)
    assert set(names.selector("x")) <= set(lb.IDENTITY_LABEL_KEYS)
    for key in (names.LWS_WORKER_INDEX_LABEL, names.LWS_GROUP_INDEX_LABEL):
        assert lb.is_reserved_label(key)
    for key in (names.CONFIG_HASH_ANNOTATION, names.INPUT_HASH_ANNOTATION, names.PAUSE_ANNOTATION):
        assert lb.in_domain(key, lb.OPERATOR_DOMAIN)


KEY_ALPHABET = string.ascii_letters + string.digits + "-_./" + " :"


def _random_key(rng: random.Random) -> str:
    shape = rng.random()
    if shape < 0.3:
        prefix = rng.choice(
            [
                "",
                "app.kubernetes.io/",
                "specdecode.io/",
                "a.specdecode.io/",
                "leaderworkerset.sigs.k8s.io/",
                "example.com/",
                "Example.com/",
                "-a.b/",
                "a..b/",
                "x" * 254 + "/",
                "x" * 253 + "/",
            ]
        )
        name = rng.choice(
            ["name", "instance", "component", "managed-by", "part-of", "x", "x" * 63, "x" * 64, "-x", "x_"]
        )
        return prefix + name
    return "".join(rng.choice(KEY_ALPHABET) for _ in range(rng.randint(0, 12)))  # fmt: skip


def test_the_python_label_checks_agree_with_the_cel_rules():
    """The operator's configuration checks its ServiceMonitor label default with ``api.labels``; admission with the
    CEL rules. Both must say the same of every key and value."""
    rng = random.Random(7)
    key_rule, value_rule, reserved_rule = rules.label_map_rules("x", "labels")
    keys = [_random_key(rng) for _ in range(600)] + list(lb.IDENTITY_LABEL_KEYS)
    for key in keys:
        self = {"labels": {key: "v"}}
        assert _cel_holds(key_rule.rule, self, None) == (lb.key_problem(key) is None), key
        if lb.key_problem(key) is None:
            assert _cel_holds(reserved_rule.rule, self, None) == (not lb.is_reserved_label(key)), key
    for value in ["", "a", "a" * 63, "-a", "a-", "a b", "A.b_c", "a/b", *(_random_key(rng) for _ in range(300))]:
        if len(value) <= lb.VALUE_MAX:
            self = {"labels": {"k": value}}
            assert _cel_holds(value_rule.rule, self, None) == (lb.value_problem(value) is None), value


def test_propagated_labels_leave_out_kubernetes_the_operator_and_gitops_tracking():
    given = {
        "team": "ml",
        "example.com/cost-center": "42",
        "app.kubernetes.io/instance": "argo-app",
        "app.kubernetes.io/part-of": "x",
        "kubernetes.io/metadata.name": "x",
        "kueue.x-k8s.io/queue-name": "q",
        "specdecode.io/shard": "a",
        "helm.sh/chart": "c",
        "argocd.argoproj.io/instance": "a",
        "kustomize.toolkit.fluxcd.io/name": "f",
    }
    assert lb.propagated(given) == {"example.com/cost-center": "42", "team": "ml"}
