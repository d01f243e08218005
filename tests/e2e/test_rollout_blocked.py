"""A rollout on nodes whose GPUs are all in use: the surge pod never schedules. The SDD says so (Progressing=False,
reason RolloutBlocked, naming the workload and the pod) once the pod has been refused for the configured bound, an
Event says what to change, and after ``spec.rollout.maxSurge: 0`` the rollout completes.

Runs on the emulator and on the real API server. Neither has a scheduler or a Deployment controller: the test plays
both, writing the Deployment's rollout status and the pod's ``PodScheduled=False/Unschedulable`` condition as the
scheduler writes it.
"""

from __future__ import annotations

import datetime
import time

from specdecode_operator.render import names
from tests.k8s.cluster import condition, resource_path, wait_for

from .test_operator_e2e import APPS, sdd

BOUND = 2.0  # rollout_blocked_seconds under test
RESYNC = 0.3  # the test operator's resync period (tests/k8s/fixtures.TEST_CONFIG)
SLACK = 15.0  # a loaded 2-core CI machine: the operator process's pass and the status write behind it
SCHEDULER_MESSAGE = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu."


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _deployment_status(cluster, name: str, **status) -> None:
    """Play the Deployment controller: the rollout state of the Deployment's current generation."""
    dep = cluster.get(APPS, "deployments", name)
    status = {"observedGeneration": dep["metadata"]["generation"], **status}
    cluster.call(
        "PATCH",
        resource_path(APPS, "deployments", cluster.namespace, name, "status"),
        {"status": status},
        content_type="application/merge-patch+json",
        query=[("fieldManager", "kube-controller-manager")],
    )


def _surge_pod(cluster, name: str) -> str:
    """Play the ReplicaSet controller and the scheduler: a pod of the new revision that fits on no node."""
    dep = cluster.get(APPS, "deployments", name)
    template = dep["spec"]["template"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{name}-surge",
            "labels": {**template["metadata"]["labels"], "pod-template-hash": "surge"},
        },
        "spec": {"containers": [{"name": "runtime", "image": template["spec"]["containers"][0]["image"]}]},
    }
    cluster.create("v1", "pods", pod)
    cluster.call(
        "PATCH",
        resource_path("v1", "pods", cluster.namespace, pod["metadata"]["name"], "status"),
        {
            "status": {
                "phase": "Pending",
                "conditions": [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "Unschedulable",
                        "message": SCHEDULER_MESSAGE,
                        "lastTransitionTime": _now(),
                    }
                ],
            }
        },
        content_type="application/merge-patch+json",
        query=[("fieldManager", "kube-scheduler")],
    )
    return pod["metadata"]["name"]


def test_a_surge_pod_that_never_schedules_is_reported_and_max_surge_zero_finishes_the_rollout(cluster_factory):
    cluster = cluster_factory(rollout_blocked_seconds=BOUND)
    cluster.create_sdd(sdd())
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"), what="Deployment llama")
    cluster.make_ready(APPS, "deployments", "llama")
    wait_for(lambda: condition(cluster.get_sdd("llama"), "Ready")["status"] == "True", timeout=30, what="Ready")

    # a template change: the Deployment controller surges one pod of the new revision, the old one keeps serving
    cluster.patch_sdd("llama", {"spec": {"speculative": {"numSteps": 4}}})
    wait_for(
        lambda: cluster.get(APPS, "deployments", "llama")["metadata"]["generation"] == 2,
        timeout=30,
        what="the new template applied",
    )
    _deployment_status(cluster, "llama", replicas=2, updatedReplicas=1, readyReplicas=1, availableReplicas=1)
    pod = _surge_pod(cluster, "llama")
    refused_at = time.monotonic()

    def blocked():
        c = condition(cluster.get_sdd("llama"), "Progressing")
        return c if c.get("reason") == "RolloutBlocked" else None

    c = wait_for(blocked, timeout=BOUND + RESYNC + SLACK, interval=0.1, what="Progressing=False/RolloutBlocked")
    # the condition's timestamp has whole seconds: the report may come up to 1 s before BOUND after our clock
    assert time.monotonic() - refused_at >= BOUND - 1.0
    assert c["status"] == "False"
    assert "Deployment llama" in c["message"] and pod in c["message"] and SCHEDULER_MESSAGE in c["message"]
    ready = condition(cluster.get_sdd("llama"), "Ready")
    assert ready["status"] == "False" and ready["reason"] == "RolloutBlocked"
    assert condition(cluster.get_sdd("llama"), "Degraded")["status"] == "False"  # nothing is wrong with the spec
    event = wait_for(
        lambda: [e for e in cluster.list("v1", "events") if e["reason"] == "RolloutBlocked"],
        timeout=10,
        what="a RolloutBlocked Event",
    )[0]
    assert event["type"] == "Warning" and event["involvedObject"]["name"] == "llama"
    assert "spec.rollout.maxSurge: 0" in event["message"] and "8 free nvidia.com/gpu" in event["message"]

    # what the Event says: replace in place
    cluster.patch_sdd("llama", {"spec": {"rollout": {"maxSurge": 0, "maxUnavailable": 1}}})

    def rolling_update():
        ru = cluster.get(APPS, "deployments", "llama")["spec"]["strategy"]["rollingUpdate"]
        return ru if ru["maxSurge"] == 0 else None

    rolling = wait_for(rolling_update, timeout=30, what="maxSurge 0 on the Deployment")
    assert rolling == {"maxSurge": 0, "maxUnavailable": 1}
    # the controller stops the old pod first; the new one takes its GPUs and becomes ready
    cluster.call(
        "PATCH",
        resource_path("v1", "pods", cluster.namespace, pod, "status"),
        {"status": {"conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": _now()}]}},
        content_type="application/merge-patch+json",
        query=[("fieldManager", "kube-scheduler")],
    )
    cluster.make_ready(APPS, "deployments", "llama")
    wait_for(
        lambda: condition(cluster.get_sdd("llama"), "Ready")["status"] == "True",
        timeout=30,
        what="Ready after the in-place rollout",
    )
    assert condition(cluster.get_sdd("llama"), "Progressing")["reason"] == "RolloutComplete"
    assert len([e for e in cluster.list("v1", "events") if e["reason"] == "RolloutBlocked"]) == 1


def test_pods_are_listed_with_the_objects_selector(cluster_factory):
    """The pods read are exactly the SDD's runtime pods: another SDD's unschedulable pod blocks nothing here."""
    cluster = cluster_factory(rollout_blocked_seconds=0.0)
    cluster.create_sdd(sdd())
    cluster.create_sdd(sdd("other"))
    wait_for(
        lambda: cluster.get(APPS, "deployments", "other") and cluster.get(APPS, "deployments", "llama"),
        what="both Deployments",
    )
    _deployment_status(cluster, "llama", replicas=2, updatedReplicas=1, readyReplicas=1)
    _deployment_status(cluster, "other", replicas=2, updatedReplicas=1, readyReplicas=1)
    _surge_pod(cluster, "other")
    wait_for(
        lambda: condition(cluster.get_sdd("other"), "Progressing").get("reason") == "RolloutBlocked",
        timeout=RESYNC + SLACK,
        what="other blocked",
    )
    c = condition(cluster.get_sdd("llama"), "Progressing")
    assert c["reason"] == "RollingOut" and names.selector_string("llama") != names.selector_string("other")
