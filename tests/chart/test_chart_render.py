"""The chart lints clean, and every object of several values combinations passes strict schema validation."""

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

from tests.chart.chartlib import CHART, COMBOS, crds, render
from tests.upstream_schemas import supported_kinds, validate_custom

K8S_VERSIONS = ["1.30", "1.33", "1.37"]  # the first: the floor of Chart.yaml kubeVersion (test_kube_version.py)


def test_lint_strict_is_clean():
    result = helm.lint(str(CHART), strict=True, kube_version="v1.33.0")
    assert result["errors"] == []
    assert [m for m in result["messages"] if m["severity"] >= 2] == [], result["messages"]


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_lint_each_combo(combo):
    result = helm.lint(str(CHART), COMBOS[combo], strict=True, kube_version="v1.33.0")
    assert result["errors"] == [] and all(m["severity"] < 2 for m in result["messages"]), result


@pytest.mark.parametrize("combo", sorted(COMBOS))
def test_every_object_validates_strictly(combo):
    docs = render(COMBOS[combo])
    assert docs, "nothing rendered"
    custom = set(supported_kinds())
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in custom:
            validate_custom(doc)
            continue
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_crds_validate_strictly():
    for doc in crds():
        for version in K8S_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_every_namespaced_object_has_a_namespace():
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding"}
    for combo in COMBOS.values():
        for doc in render(combo):
            assert (doc["kind"] in cluster_scoped) == ("namespace" not in doc["metadata"]), doc["kind"]


def test_names_are_unique_per_kind_and_namespace():
    for combo in COMBOS.values():
        keys = [(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]) for d in render(combo)]
        assert len(keys) == len(set(keys)), keys


def test_toggles_add_and_remove_objects():
    kinds = lambda values: sorted({d["kind"] for d in render(values)})  # noqa: E731
    base = kinds({})
    assert "ServiceMonitor" not in base and "PrometheusRule" not in base and "ConfigMap" not in base
    on = kinds(COMBOS["monitoring-on"])
    assert {"ServiceMonitor", "PrometheusRule", "ConfigMap"} <= set(on)
    assert "Service" not in kinds(COMBOS["metrics-off"])
    no_rbac = kinds(COMBOS["no-rbac-existing-sa"])
    assert not {"ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "ServiceAccount"} & set(no_rbac)


def test_values_yaml_is_documented():
    """Every top-level key of values.yaml has a comment line directly above it (or above its first child)."""
    lines = (CHART / "values.yaml").read_text().splitlines()
    top = [i for i, line in enumerate(lines) if line and not line.startswith((" ", "#"))]
    undocumented = []
    for i in top:
        above = lines[i - 1] if i else ""
        child_doc = any(lines[j].lstrip().startswith("#") for j in range(i + 1, min(i + 3, len(lines))))
        if not above.startswith("#") and not child_doc:
            undocumented.append(lines[i])
    assert undocumented == []
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert isinstance(values["replicaCount"], int)
