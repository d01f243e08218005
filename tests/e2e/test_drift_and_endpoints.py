"""Level-based repair and the operator's own endpoints: what an SRE relies on when someone edits a child by hand or
when the operator pod is probed and scraped."""

from __future__ import annotations

import socket
import urllib.request

from k8s.cluster import condition, minimal_sdd, wait_for

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
        "PATCH", f"/apis/apps/v1/namespaces/{cluster.namespace}/deployments/llama",
        {"metadata": {"labels": {"team": "search"}},
         "spec": {"template": {"spec": {"containers": [{"name": "runtime", "image": "evil:latest"}]}}}},
        content_type="application/strategic-merge-patch+json", query=[("fieldManager", "kubectl-edit")],
    )
    repaired = wait_for(
        lambda: (d := cluster.get(APPS, "deployments", "llama")) and _container(d)["image"] == image and d,
        timeout=15, what="the operator restores the image it owns",
    )
    assert repaired["metadata"]["labels"]["team"] == "search"  # server-side apply leaves others' fields alone


def test_a_deleted_child_is_recreated(cluster):
    cluster.create_sdd(sdd())
    cm = wait_for(lambda: cluster.get("v1", "configmaps", "llama-runtime"), what="ConfigMap")
    cluster.call("DELETE", f"/api/v1/namespaces/{cluster.namespace}/configmaps/llama-runtime")
    again = wait_for(
        lambda: (c := cluster.get("v1", "configmaps", "llama-runtime")) and c["metadata"]["uid"] != cm["metadata"]["uid"] and c,
        timeout=15, what="ConfigMap recreated",
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
    ok = [line for line in body.splitlines() if line.startswith("specdecode_operator_reconciles_total{") and 'result="ok"' in line]
    assert ok and float(ok[0].rsplit(" ", 1)[1]) >= 1
    status, _ = wait_for(lambda: text(f"http://127.0.0.1:{live_port}/healthz"), what="/healthz")
    assert status == 200
