"""Every verb the operator's RBAC grants is used by the operator in this scenario (an unused grant fails here and
must be removed from specdecode_operator/rbac.py), and every request it makes is granted. The scenario runs the
product's process (leader election on) against the emulator and covers each code path that needs a permission:
creation, the Lease, status, removing the finalizer earlier versions added, the tuner's endpoint discovery, drift
repair, and the children a spec change drops."""

from __future__ import annotations

import threading

import pytest

from specdecode_operator import rbac
from specdecode_operator.operator_process import OperatorProcess
from specdecode_operator.registry import FINALIZER
from tests.k8s.cluster import minimal_sdd, wait_for
from tests.k8s.fixtures import operator_config

APPS, LWS = "apps/v1", "leaderworkerset.x-k8s.io/v1"


def used_by_operator(log) -> set[tuple[str, str, str]]:
    """(group, resource[/subresource], verb) of every request the operator made. An apply that created the
    object (201) used RBAC's create as well as patch."""
    out = set()
    for r in log:
        if not r.user_agent.lower().startswith(("kopf", "specdecode-operator")):
            continue
        resource = r.resource + (f"/{r.subresource}" if r.subresource else "")
        verb = "patch" if r.verb == "apply" else r.verb
        out.add((r.group, resource, verb))
        if r.verb == "apply" and r.status == 201:
            out.add((r.group, resource, "create"))
    return out


@pytest.mark.timeout(120)
def test_every_granted_verb_is_used_and_every_call_is_granted(cluster_factory):
    cluster = cluster_factory(operator=False)
    if cluster.emulator is None:
        pytest.skip("needs the emulator's request log")
    process = OperatorProcess(
        operator_config(
            server=cluster.server.url, leader_election=True, identity="op", operator_namespace="specdecode-system"
        ),
        exit_on_lost=False,
    )
    thread = threading.Thread(target=process.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: process.role == "leader", timeout=40, what="leads")
        body = minimal_sdd("llama", tp=8)
        body["spec"]["monitoring"] = {"serviceMonitor": True}
        cluster.create_sdd(body)
        wait_for(
            lambda: cluster.get("monitoring.coreos.com/v1", "servicemonitors", "llama"), timeout=40, what="children"
        )
        # mid-rollout (a surge pod beside the old one): the reconciler lists the pods for unschedulable ones
        dep = cluster.get(APPS, "deployments", "llama")
        cluster.call(
            "PATCH",
            f"/apis/apps/v1/namespaces/{cluster.namespace}/deployments/llama/status",
            {"status": {"observedGeneration": dep["metadata"]["generation"], "replicas": 2, "updatedReplicas": 1}},
            content_type="application/merge-patch+json",
        )
        wait_for(
            lambda: any(r.resource == "pods" for r in cluster.emulator.log),
            timeout=30,
            what="the rollout's pods listed",
        )
        # an object from an earlier version, with its kopf finalizer: removed once (the patch grant)
        upgraded = minimal_sdd("upgraded", tp=8)
        upgraded["metadata"]["finalizers"] = [FINALIZER]
        cluster.create_sdd(upgraded)
        wait_for(
            lambda: (
                not (s := cluster.get_sdd("upgraded"))["metadata"].get("finalizers")
                and (s.get("status") or {}).get("observedGeneration") == 1
            ),
            timeout=40,
            what="the earlier versions' finalizer removed, the object reconciled",
        )
        cluster.delete_sdd("upgraded")
        wait_for(
            lambda: cluster.get_sdd("upgraded") is None and cluster.get(APPS, "deployments", "upgraded") is None,
            timeout=20,
            what="upgraded object and its children gone",
        )
        cluster.make_ready(APPS, "deployments", "llama")  # ready replicas: the tuner lists EndpointSlices
        wait_for(
            lambda: any(r.resource == "endpointslices" for r in cluster.emulator.log),
            timeout=30,
            what="the tuner's endpoint discovery",
        )
        cluster.call(
            "PATCH",
            f"/api/v1/namespaces/{cluster.namespace}/services/llama",
            {"spec": {"selector": {"extra": "x"}}},
            content_type="application/merge-patch+json",
            query=[("fieldManager", "someone-else")],
        )
        wait_for(
            lambda: "extra" not in cluster.get("v1", "services", "llama")["spec"]["selector"],
            timeout=40,
            what="drift repaired",
        )
        # a spec change that drops children: TP 16 replaces the Deployment, monitoring off drops the ServiceMonitor,
        # the plain SGLang launcher drops the control port's NetworkPolicy
        cluster.patch_sdd(
            "llama",
            {
                "spec": {
                    "target": {"tensorParallelSize": 16},
                    "monitoring": {"serviceMonitor": False},
                    "runtime": {"launcher": "sglang"},
                    "draft": {"tensorParallelSize": 16},
                }
            },
        )
        wait_for(
            lambda: (
                cluster.get(LWS, "leaderworkersets", "llama")
                and not cluster.get(APPS, "deployments", "llama")
                and not cluster.get("monitoring.coreos.com/v1", "servicemonitors", "llama")
                and not cluster.list("networking.k8s.io/v1", "networkpolicies")
            ),
            timeout=40,
            what="children dropped",
        )
        cluster.patch_sdd("llama", {"spec": {"target": {"tensorParallelSize": 8}, "draft": {"tensorParallelSize": 8}}})
        wait_for(
            lambda: cluster.get(APPS, "deployments", "llama") and not cluster.get(LWS, "leaderworkersets", "llama"),
            timeout=40,
            what="back to a Deployment",
        )
    finally:
        process.stop()
        thread.join(20)
    used = used_by_operator(cluster.emulator.log)
    # the metrics endpoint's reviews run per scrape, on the real API server: tests/e2e/test_metrics_auth.py shows
    # them used (audit log) and allowed
    scrape_reviews = {
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
    }
    # TokenRequest per deployment (ServiceAccount step control) runs on the real API server under exactly the chart's
    # grant: tests/e2e/test_control_sa_auth.py and tests/e2e/test_default_install_live_control.py
    token_requests = {("", "serviceaccounts/token", "create")}
    # the training Job of spec.draft.adaptation.training runs on the real API server under exactly the chart's
    # grant: tests/e2e/test_adaptation_job_real.py
    training_jobs = {("batch", "jobs", v) for v in ("get", "create", "patch")}
    granted = (
        {(r.api_group, r.resource, v) for r in rbac.RULES for v in r.verbs}
        - scrape_reviews
        - token_requests
        - training_jobs
    )
    assert sorted(used - granted) == [], "calls without a grant"
    assert sorted(granted - used) == [], f"grants no call uses (remove them from rbac.py): {sorted(granted - used)}"
