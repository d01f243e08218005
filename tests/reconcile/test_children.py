"""reconcile/children.py decides, with no I/O, which rendered children to write, which live ones to keep or delete,
and what counts as drift. These tests feed it the renderer's real output and objects shaped as the API server
returns them (server-set metadata, defaulted fields, status)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from specdecode_operator.api.documents import load_sdds
from specdecode_operator.reconcile import children
from specdecode_operator.render import RenderOptions, render
from specdecode_operator.render.names import INPUT_HASH_ANNOTATION, MANAGED_BY

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pcie8-glm5-eagle3.yaml"
OWNER = {
    "apiVersion": "specdecode.io/v1alpha1",
    "kind": "SpecDecodeDeployment",
    "metadata": {"name": "glm5-pcie", "namespace": "default", "uid": "uid-owner"},
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict]:
    """The example's children by kind (the first of each kind), with our owner reference, as the operator applies."""
    sdd = load_sdds(str(EXAMPLE))[0]
    out: dict[str, dict] = {}
    for manifest in render(sdd, RenderOptions()):
        out.setdefault(manifest["kind"], children.with_owner(manifest, OWNER))
    return out


def served(manifest: dict) -> dict:
    """``manifest`` as the API server returns it after an apply: server metadata, defaults and a status added."""
    live = copy.deepcopy(manifest)
    md = live["metadata"]
    md.update(
        uid="uid-child",
        resourceVersion="42",
        generation=1,
        creationTimestamp="2026-01-01T00:00:00Z",
        managedFields=[{"manager": "specdecode-operator", "operation": "Apply", "fieldsV1": {"f:spec": {}}}],
    )
    if live["kind"] == "Deployment":
        live["spec"].setdefault("progressDeadlineSeconds", 600)
        live["spec"].setdefault("revisionHistoryLimit", 10)
        live["spec"]["template"]["spec"].setdefault("restartPolicy", "Always")
        live["spec"]["template"]["spec"].setdefault("dnsPolicy", "ClusterFirst")
        live["status"] = {
            "replicas": 1,
            "readyReplicas": 1,
            "updatedReplicas": 1,
            "observedGeneration": 1,
            "conditions": [{"type": "Available", "status": "True"}],
        }
    if live["kind"] == "Service":
        live["spec"].update(clusterIP="10.0.0.7", clusterIPs=["10.0.0.7"], sessionAffinity="None")
    return live


def test_a_missing_child_is_written(rendered):
    assert children.needs_apply(rendered["Deployment"], None)


@pytest.mark.parametrize("kind", ["ConfigMap", "Service", "Deployment", "PodDisruptionBudget", "NetworkPolicy"])
def test_fields_the_server_adds_are_not_drift(rendered, kind):
    desired = rendered[kind]
    assert not children.needs_apply(desired, served(desired))
    assert not children.needs_apply(desired, children.cache_record(served(desired)))  # the watch cache's record


def test_labels_and_annotations_others_add_are_kept(rendered):
    live = served(rendered["Deployment"])
    live["metadata"]["labels"]["team"] = "inference"
    live["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "3"
    assert not children.needs_apply(rendered["Deployment"], live)


def test_a_changed_field_we_set_is_drift(rendered):
    live = served(rendered["Deployment"])
    live["spec"]["template"]["spec"]["containers"][0]["image"] = "someone/else:latest"
    assert children.needs_apply(rendered["Deployment"], live)
    assert children.needs_apply(rendered["Deployment"], children.cache_record(live))


def test_a_removed_label_or_owner_reference_is_drift(rendered):
    live = served(rendered["Service"])
    del live["metadata"]["labels"][children.MANAGED_BY_LABEL]
    assert children.needs_apply(rendered["Service"], live)
    live = served(rendered["Service"])
    live["metadata"]["ownerReferences"] = []
    assert children.needs_apply(rendered["Service"], live)


def test_a_list_with_an_entry_added_is_drift(rendered):
    live = served(rendered["Deployment"])
    live["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "busybox"})
    assert children.needs_apply(rendered["Deployment"], live)


def test_a_new_input_hash_is_written_even_when_the_fields_match(rendered):
    live = served(rendered["ConfigMap"])
    live["metadata"]["annotations"][INPUT_HASH_ANNOTATION] = "0000000000000000"
    assert children.needs_apply(rendered["ConfigMap"], live)


def test_status_differences_are_not_drift(rendered):
    live = served(rendered["Deployment"])
    live["status"] = {"replicas": 0, "readyReplicas": 0}
    assert not children.needs_apply(rendered["Deployment"], live)


def test_the_cache_record_keeps_what_the_checks_read_and_drops_managed_fields(rendered):
    live = served(rendered["Deployment"])
    record = children.cache_record(live)
    assert "managedFields" not in record["metadata"] and "creationTimestamp" not in record["metadata"]
    assert record["status"] == {"replicas": 1, "readyReplicas": 1, "updatedReplicas": 1, "observedGeneration": 1}
    assert record["spec"] == {"replicas": live["spec"]["replicas"]}
    again = children.expand(record)
    assert again["spec"] == live["spec"] and again["metadata"]["labels"] == live["metadata"]["labels"]
    assert "conditions" not in again["status"]
    assert children.expand(live) is live  # a whole object passes through


def test_cache_records_of_separately_decoded_events_share_their_strings_and_pin_nothing(rendered):
    """Each watch event is decoded afresh, so two children of one owner carry equal but distinct strings (label
    names, the owner reference); their records keep one interned copy and containers of their own."""
    first, second = (json.loads(json.dumps(served(rendered[kind]))) for kind in ("Deployment", "Service"))
    assert first["metadata"]["ownerReferences"][0]["uid"] is not second["metadata"]["ownerReferences"][0]["uid"]
    a, b = children.cache_record(first, fields=False), children.cache_record(second, fields=False)
    for path in (("ownerReferences", 0, "uid"), ("ownerReferences", 0, "kind"), ("labels", children.INSTANCE_LABEL)):
        x, y = a["metadata"], b["metadata"]
        for step in path:
            x, y = x[step], y[step]
        assert x == y and x is y, path
    key_a = next(k for k in a["metadata"]["labels"] if k == children.MANAGED_BY_LABEL)
    key_b = next(k for k in b["metadata"]["labels"] if k == children.MANAGED_BY_LABEL)
    assert key_a is key_b
    for field in ("labels", "annotations", "ownerReferences"):
        assert a["metadata"][field] == first["metadata"][field]
        assert a["metadata"][field] is not first["metadata"][field]  # the decoded event is not kept alive
    assert a["metadata"]["ownerReferences"][0] is not first["metadata"]["ownerReferences"][0]


def test_children_of_one_owner_share_one_owner_reference_and_equal_label_sets_one_copy(rendered):
    """The seven children of an object carry the same owner reference: their records hold one list between them,
    and a child with a different owner gets its own."""
    first, second = (json.loads(json.dumps(served(rendered[kind]))) for kind in ("Deployment", "Service"))
    a, b = children.cache_record(first, fields=False), children.cache_record(second, fields=False)
    assert a["metadata"]["ownerReferences"] is b["metadata"]["ownerReferences"]
    if first["metadata"]["labels"] == second["metadata"]["labels"]:
        assert a["metadata"]["labels"] is b["metadata"]["labels"]
    other = json.loads(json.dumps(first))
    other["metadata"]["ownerReferences"][0]["uid"] = "another-owner"
    c = children.cache_record(other, fields=False)
    assert c["metadata"]["ownerReferences"] is not a["metadata"]["ownerReferences"]
    assert c["metadata"]["ownerReferences"][0]["uid"] == "another-owner"
    assert a["metadata"]["ownerReferences"] == first["metadata"]["ownerReferences"]


def test_a_stub_rebuilt_from_its_key_and_hash_is_the_stub(rendered):
    desired = rendered["Deployment"]
    assert children.stub_of(children.key_of(desired), children.input_hash(desired)) == children.stub(desired)


def test_keys_added_to_a_selector_we_own_are_found_and_removed(rendered):
    desired = rendered["Service"]
    live = served(desired)
    live["spec"]["selector"]["canary"] = "true"
    added = children.added_keys(desired, children.cache_record(live))
    assert added == {("spec", "selector"): ["canary"]}
    assert children.removal_patch(added) == {"spec": {"selector": {"canary": None}}}
    assert children.added_keys(desired, served(desired)) == {}
    # labels are shared with others: a key added there is not ours to remove
    live = served(rendered["Deployment"])
    live["metadata"]["labels"]["team"] = "inference"
    assert children.added_keys(rendered["Deployment"], live) == {}


def test_replicas_changed_by_someone_else_are_reported_for_the_same_input_only(rendered):
    desired = rendered["Deployment"]
    live = served(desired)
    live["spec"]["replicas"] = desired["spec"]["replicas"] + 2  # an HPA scaled it
    assert children.replicas_overridden(desired, live) == desired["spec"]["replicas"] + 2
    assert children.replicas_overridden(desired, served(desired)) is None
    live["metadata"]["annotations"][INPUT_HASH_ANNOTATION] = "another-input"  # the spec changed: ours wins
    assert children.replicas_overridden(desired, live) is None
    assert children.replicas_overridden(desired, None) is None


def test_ownership_is_the_controller_reference_only(rendered):
    live = served(rendered["ConfigMap"])
    assert children.is_ours(live, "uid-owner") and not children.is_ours(live, "uid-other")
    live["metadata"]["ownerReferences"][0]["controller"] = False  # an owner, but not the controller
    assert children.controller_uid(live) is None and not children.is_ours(live, "uid-owner")
    assert children.controller_uid({"metadata": {}}) is None


def test_stale_children_are_ours_managed_and_no_longer_rendered(rendered):
    desired_keys = {children.key_of(m) for m in rendered.values()}
    gone = served(rendered["Deployment"])
    gone["metadata"]["name"] = "glm5-pcie-old"
    foreign = copy.deepcopy(gone)
    foreign["metadata"]["ownerReferences"][0]["uid"] = "uid-other"
    unmanaged = copy.deepcopy(gone)
    unmanaged["metadata"]["labels"][children.MANAGED_BY_LABEL] = "helm"
    current = served(rendered["Service"])
    assert children.stale([gone, foreign, unmanaged, current], desired_keys, "uid-owner") == [gone]


def test_a_stub_is_compared_by_its_input_hash(rendered):
    desired = rendered["Deployment"]
    s = children.stub(desired)
    assert children.key_of(s) == children.key_of(desired) and s[children.STUB]
    assert children.input_hash(s) == children.input_hash(desired) is not None
    assert set(s) == {"apiVersion", "kind", "metadata", children.STUB}


def test_with_owner_leaves_the_rendered_manifest_alone(rendered):
    manifest = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "labels": {}}}
    owned = children.with_owner(manifest, OWNER)
    assert "ownerReferences" not in manifest["metadata"]
    assert owned["metadata"]["ownerReferences"] == [
        {
            "apiVersion": OWNER["apiVersion"],
            "kind": OWNER["kind"],
            "name": "glm5-pcie",
            "uid": "uid-owner",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert MANAGED_BY == rendered["ConfigMap"]["metadata"]["labels"][children.MANAGED_BY_LABEL]
