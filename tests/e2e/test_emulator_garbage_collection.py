"""The API emulator's garbage collection of objects written with an owner that no longer exists.

The real collector deletes an object all of whose ownerReferences name a missing owner (checked by kind, name and
uid), however the object came to be so: also when it is created or applied after its owner was deleted, as a
controller's pass still in flight at the deletion does. The API server accepts that write (2xx) and the object
disappears shortly after. The real test server has no kube-controller-manager, so this is the emulator alone.
"""

from __future__ import annotations

import time

from tests.k8s.cluster import wait_for

APPLY = "application/apply-patch+yaml"


def cm_path(cluster, name=None):
    base = f"/api/v1/namespaces/{cluster.namespace}/configmaps"
    return f"{base}/{name}" if name else base


def owned(name: str, owner: str, uid: str, **md) -> dict:
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": owner, "uid": uid, "controller": True}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "ownerReferences": [ref], **md},
        "data": {"a": "1"},
    }


def apply(cluster, body: dict) -> dict:
    path = cm_path(cluster, body["metadata"]["name"])
    return cluster.call("PATCH", path, body, query=[("fieldManager", "test"), ("force", "true")], content_type=APPLY)


def exists(cluster, name: str) -> bool:
    return cluster.get("v1", "configmaps", name) is not None


def test_an_object_written_with_a_missing_owner_is_accepted_then_collected(emulator_factory):
    cluster = emulator_factory(operator=False)
    owner = cluster.create("v1", "configmaps", {"metadata": {"name": "owner"}, "data": {}})
    kept = apply(cluster, owned("kept", "owner", owner["metadata"]["uid"]))
    # the write is accepted and answered with the object, as the real API server does
    orphan = apply(cluster, owned("orphan", "gone", "00000000-0000-0000-0000-000000000000"))
    assert orphan["metadata"]["uid"] and orphan["metadata"]["name"] == "orphan"
    posted = cluster.create("v1", "configmaps", owned("posted", "gone", "00000000-0000-0000-0000-000000000001"))
    assert posted["metadata"]["uid"]
    wait_for(lambda: not exists(cluster, "orphan") and not exists(cluster, "posted"), timeout=5, what="orphans gone")
    time.sleep(0.2)  # the collection runs right after a write: a live owner's dependent has had its chance
    assert cluster.get("v1", "configmaps", "kept")["metadata"]["uid"] == kept["metadata"]["uid"]


def test_a_recreated_owner_with_a_new_uid_does_not_keep_the_old_owners_dependent(emulator_factory):
    cluster = emulator_factory(operator=False)
    first = cluster.create("v1", "configmaps", {"metadata": {"name": "owner"}, "data": {}})
    cluster.delete("v1", "configmaps", "owner")
    second = cluster.create("v1", "configmaps", {"metadata": {"name": "owner"}, "data": {}})
    assert second["metadata"]["uid"] != first["metadata"]["uid"]
    apply(cluster, owned("old", "owner", first["metadata"]["uid"]))  # same owner name, the deleted uid
    apply(cluster, owned("new", "owner", second["metadata"]["uid"]))
    wait_for(lambda: not exists(cluster, "old"), timeout=5, what="the old owner's dependent collected")
    time.sleep(0.2)
    assert exists(cluster, "new") and exists(cluster, "owner")


def test_an_orphan_held_by_a_finalizer_is_marked_deleting(emulator_factory):
    cluster = emulator_factory(operator=False)
    apply(cluster, owned("held", "gone", "00000000-0000-0000-0000-000000000002", finalizers=["example.com/hold"]))
    held = wait_for(
        lambda: (obj := cluster.get("v1", "configmaps", "held"))["metadata"].get("deletionTimestamp") and obj,
        timeout=5,
        what="deletionTimestamp on the orphan",
    )
    cluster.call(
        "PATCH",
        cm_path(cluster, "held"),
        [{"op": "remove", "path": "/metadata/finalizers"}],
        content_type="application/json-patch+json",
    )
    wait_for(lambda: not exists(cluster, "held"), timeout=5, what="removed once its finalizer is released")
    assert held["metadata"]["finalizers"] == ["example.com/hold"]
