"""An operator upgrade that changes the default runtime image restarts no runtime pod: each deployment keeps the
image recorded in status.runtimeImage (across the operator's restart) until it is annotated to adopt the new one,
and a deployment from before the record keeps what its Deployment runs."""

from __future__ import annotations

from tests.k8s.cluster import minimal_sdd, wait_for

APPS = "apps/v1"
OLD, NEW = "registry.example.com/specdecode-runtime:0.1.0", "registry.example.com/specdecode-runtime:0.2.0"
ADOPT = "specdecode.io/adopt-default-image"


def _image(cluster) -> str | None:
    dep = cluster.get(APPS, "deployments", "llama")
    return dep and dep["spec"]["template"]["spec"]["containers"][0]["image"]


def _record(cluster) -> dict:
    return ((cluster.get_sdd("llama") or {}).get("status") or {}).get("runtimeImage") or {}


def _upgrade(cluster, **settings) -> None:
    cluster.stop_operator()
    cluster.operator_overrides.update(settings)
    cluster.start_operator()


def test_an_operator_upgrade_keeps_the_recorded_image_until_the_deployment_adopts_the_new_one(cluster_factory):
    cluster = cluster_factory(default_image=OLD)
    cluster.create_sdd(minimal_sdd("llama"))
    wait_for(lambda: _record(cluster).get("image") == OLD, what="status.runtimeImage recorded")
    generation = cluster.get(APPS, "deployments", "llama")["metadata"]["generation"]
    _upgrade(cluster, default_image=NEW)
    wait_for(lambda: _record(cluster).get("available") == NEW, what="the newer default is reported")
    cluster.wait_passes()
    dep = cluster.get(APPS, "deployments", "llama")
    assert (_image(cluster), dep["metadata"]["generation"]) == (OLD, generation)  # no rollout
    cluster.patch_sdd("llama", {"metadata": {"annotations": {ADOPT: "1"}}})
    wait_for(lambda: _image(cluster) == NEW, what="the annotated deployment rolls to the new default")
    wait_for(lambda: _record(cluster) == {"launcher": "specdecode", "image": NEW, "adoptedToken": "1"}, what="record")


def test_a_deployment_from_before_the_record_keeps_what_its_pods_run(cluster_factory):
    cluster = cluster_factory(default_image=OLD)
    cluster.create_sdd(minimal_sdd("llama"))
    wait_for(lambda: _record(cluster).get("image") == OLD, what="status.runtimeImage recorded")
    cluster.stop_operator()
    # as an operator release without the record left it: no status.runtimeImage
    cluster.call(
        "PATCH",
        cluster.sdd_path("llama", "status"),
        {"status": {"runtimeImage": None}},
        content_type="application/merge-patch+json",
    )
    assert _record(cluster) == {}
    cluster.operator_overrides.update(default_image=NEW)
    cluster.start_operator()
    wait_for(lambda: _record(cluster) == {"launcher": "specdecode", "image": OLD, "available": NEW}, what="record")
    cluster.wait_passes()
    assert _image(cluster) == OLD


def test_the_follow_policy_rolls_every_deployment_to_the_new_default(cluster_factory):
    cluster = cluster_factory(default_image=OLD)
    cluster.create_sdd(minimal_sdd("llama"))
    wait_for(lambda: _record(cluster).get("image") == OLD, what="status.runtimeImage recorded")
    _upgrade(cluster, default_image=NEW, runtime_image_policy="Follow")
    wait_for(lambda: _image(cluster) == NEW, what="Follow: the new default is rendered")
