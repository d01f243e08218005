"""Level-based repair and the operator's own endpoints: what an SRE relies on when someone edits a child by hand or
when the operator pod is probed and scraped."""

from __future__ import annotations

import socket
import urllib.request

from tests.k8s.cluster import condition, minimal_sdd, wait_for

APPS = "apps/v1"


def sdd(name: str = "llama") -> dict:
    return minimal_sdd(name, tp=8)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _container(dep: dict) -> dict:
    return dep["spec"]["template"]["spec"]["containers"][0]


def test_a_hand_edited_child_is_repaired_but_other_managers_fields_are_kept(cluster):
    cluster.create_sdd(sdd())
    dep = wait_for(lambda: cluster.get(APPS, "deployments", "llama"), what="Deployment")
    image = _container(dep)["image"]
    # someone edits a field the operator owns, and adds a label of their own, with another field manager
    cluster.call(
        "PATCH",
        f"/apis/apps/v1/namespaces/{cluster.namespace}/deployments/llama",
        {
            "metadata": {"labels": {"team": "search"}},
            "spec": {"template": {"spec": {"containers": [{"name": "runtime", "image": "evil:latest"}]}}},
        },
        content_type="application/strategic-merge-patch+json",
        query=[("fieldManager", "kubectl-edit")],
    )
    repaired = wait_for(
        lambda: (d := cluster.get(APPS, "deployments", "llama")) and _container(d)["image"] == image and d,
        timeout=15,
        what="the operator restores the image it owns",
    )
    assert repaired["metadata"]["labels"]["team"] == "search"  # server-side apply leaves others' fields alone


def test_a_deleted_child_is_recreated(cluster):
    cluster.create_sdd(sdd())
    cm = wait_for(lambda: cluster.get("v1", "configmaps", "llama-runtime"), what="ConfigMap")
    cluster.call("DELETE", f"/api/v1/namespaces/{cluster.namespace}/configmaps/llama-runtime")
    again = wait_for(
        lambda: (
            (c := cluster.get("v1", "configmaps", "llama-runtime"))
            and c["metadata"]["uid"] != cm["metadata"]["uid"]
            and c
        ),
        timeout=15,
        what="ConfigMap recreated",
    )
    assert again["data"] == cm["data"]


def test_metrics_and_liveness_endpoints_serve(cluster_factory):
    metrics_port, live_port = _free_port(), _free_port()
    cluster = cluster_factory(metrics_port=metrics_port, liveness_endpoint=f"http://127.0.0.1:{live_port}/healthz")
    cluster.create_sdd(sdd())
    wait_for(lambda: condition(cluster.get_sdd("llama"), "SpecValid").get("status") == "True", what="reconciled")

    def text(url):
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read().decode()

    status, body = wait_for(lambda: text(f"http://127.0.0.1:{metrics_port}/metrics"), what="/metrics")
    assert status == 200
    assert "specdecode_operator_reconciles_total" in body
    assert "specdecode_operator_reconcile_duration_seconds_bucket" in body
    ok = [
        line
        for line in body.splitlines()
        if line.startswith("specdecode_operator_reconciles_total{") and 'result="ok"' in line
    ]
    assert ok and float(ok[0].rsplit(" ", 1)[1]) >= 1
    status, _ = wait_for(lambda: text(f"http://127.0.0.1:{live_port}/healthz"), what="/healthz")
    assert status == 200


def _events(cluster, reason: str) -> list[dict]:
    return [e for e in cluster.list("v1", "events") if e.get("reason") == reason]


def test_a_key_added_to_a_selector_we_own_is_removed_and_reported(cluster):
    """Server-side apply keeps fields of other managers, so an extra selector key (which makes the Service select
    no pod) is not undone by re-applying: the operator removes it and says so."""
    cluster.create_sdd(sdd())
    svc = wait_for(lambda: cluster.get("v1", "services", "llama"), what="Service")
    selector = dict(svc["spec"]["selector"])
    patched = cluster.call(
        "PATCH",
        f"/api/v1/namespaces/{cluster.namespace}/services/llama",
        {"spec": {"selector": {"canary": "true"}}},
        content_type="application/merge-patch+json",
        query=[("fieldManager", "someone-else")],
    )
    # the PATCH's own answer: a later GET can already see the operator's repair (it raced the test on a busy box)
    assert patched["spec"]["selector"]["canary"] == "true"
    repaired = wait_for(
        lambda: (s := cluster.get("v1", "services", "llama")) and "canary" not in s["spec"]["selector"] and s,
        timeout=15,
        what="the added selector key removed",
    )
    assert repaired["spec"]["selector"] == selector
    event = wait_for(lambda: _events(cluster, "DriftRepaired"), timeout=10, what="DriftRepaired Event")
    assert "spec.selector: canary" in event[0]["message"] and event[0]["type"] == "Warning"


def test_an_hpa_scaling_the_rendered_deployment_is_reverted_with_an_event(cluster):
    """The supported path is the SpecDecodeDeployment's scale subresource; a change of the Deployment's replicas
    by another client is put back and explained in an Event."""
    cluster.create_sdd(sdd())
    wait_for(lambda: cluster.get(APPS, "deployments", "llama"), what="Deployment")
    cluster.call(
        "PATCH",
        f"/apis/apps/v1/namespaces/{cluster.namespace}/deployments/llama",
        {"spec": {"replicas": 3}},
        content_type="application/merge-patch+json",
        query=[("fieldManager", "horizontal-pod-autoscaler")],
    )
    wait_for(
        lambda: cluster.get(APPS, "deployments", "llama")["spec"]["replicas"] == 1, timeout=15, what="replicas put back"
    )
    event = wait_for(lambda: _events(cluster, "ReplicasOverridden"), timeout=10, what="ReplicasOverridden Event")
    assert "scale the SpecDecodeDeployment" in event[0]["message"]
    cluster.scale("llama", 2)  # the supported path works and raises no such Event
    wait_for(
        lambda: cluster.get(APPS, "deployments", "llama")["spec"]["replicas"] == 2,
        timeout=15,
        what="scaled through the SDD",
    )
    assert len(_events(cluster, "ReplicasOverridden")) == 1


def test_objects_get_no_finalizer_and_an_earlier_versions_finalizer_is_removed_once(cluster):
    """No finalizer: the children carry the object's controller owner reference, so a deletion needs no hook of
    the operator's. An object that carries the finalizer earlier versions added has it removed once (kopf does so
    when no handler requires it), so its deletion never waits for the operator."""
    from specdecode_operator.registry import FINALIZER

    mark = cluster.log_mark()
    cluster.create_sdd(sdd("fresh"))
    old = sdd("inherited")
    old["metadata"]["finalizers"] = [FINALIZER]
    cluster.create_sdd(old)
    for name in ("fresh", "inherited"):
        wait_for(
            lambda name=name: (cluster.get_sdd(name).get("status") or {}).get("observedGeneration") == 1,
            what=f"{name} reconciled",
        )
    wait_for(lambda: not cluster.get_sdd("inherited")["metadata"].get("finalizers"), what="the old finalizer removed")
    cluster.wait_passes(4)
    assert not cluster.get_sdd("fresh")["metadata"].get("finalizers")
    # the operator's only write to the objects themselves (status aside): one removal of the old finalizer
    if cluster.emulator is not None:
        main = [
            (r.verb, r.name)
            for r in cluster.emulator.writes(since=mark, resource="specdecodedeployments")
            if r.subresource is None and r.field_manager != "e2e-user" and r.verb != "create"
        ]
        assert main == [("patch", "inherited")], main
    cluster.delete_sdd("inherited")
    wait_for(lambda: cluster.get_sdd("inherited") is None, timeout=5, what="deletion not held by a finalizer")
