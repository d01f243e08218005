"""The operator's ``specdecode_deployment_condition`` gauge follows the conditions it writes into each
SpecDecodeDeployment's status, on the API emulator and on a real kube-apiserver: a deployment whose names are taken
by a foreign object reads Degraded=True and Stalled=True, a healthy one Degraded=False, each under its own namespace
and name labels; the deleted one's series are gone at the next scrape."""

from __future__ import annotations

import urllib.request

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.k8s.cluster import condition, minimal_sdd, wait_for

GAUGE = "specdecode_deployment_condition"


def exposition(cluster) -> str:
    """The operator's /metrics text (its process' endpoint, or the registry of an operator in a thread)."""
    port = getattr(cluster.operator, "metrics_port", None)
    if port:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            return r.read().decode()
    return generate_latest(cluster.operator.context.metrics.registry).decode()


def conditions(cluster) -> dict[tuple[str, str, str], str]:
    """(namespace, name, type) -> the status the gauge holds at 1, checking each type has all three statuses."""
    out: dict = {}
    seen: dict = {}
    for family in text_string_to_metric_families(exposition(cluster)):
        if family.name != GAUGE:
            continue
        for s in family.samples:
            key = (s.labels["namespace"], s.labels["name"], s.labels["type"])
            seen.setdefault(key, set()).add(s.labels["status"])
            if s.value == 1:
                assert key not in out, f"two statuses of {key} at 1"
                out[key] = s.labels["status"]
    assert all(v == {"True", "False", "Unknown"} for v in seen.values()) and set(seen) == set(out), seen
    return out


def test_the_condition_gauge_names_each_deployment_and_leaves_with_it(cluster):
    ns = cluster.namespace
    cluster.create("v1", "configmaps", {"metadata": {"name": "taken-runtime"}, "data": {"owner": "someone else"}})
    cluster.create_sdd(minimal_sdd("taken"))
    cluster.create_sdd(minimal_sdd("healthy"))
    taken = wait_for(
        lambda: (o := cluster.get_sdd("taken")) and condition(o, "Degraded").get("reason") == "NameCollision" and o,
        timeout=30,
        what="taken: Degraded/NameCollision",
    )
    healthy = wait_for(
        lambda: (o := cluster.get_sdd("healthy")) and condition(o, "Degraded").get("status") == "False" and o,
        timeout=30,
        what="healthy: reconciled",
    )

    def as_written(name: str, obj: dict) -> dict:
        return {(ns, name, c["type"]): c["status"] for c in obj["status"]["conditions"]}

    def both_exported():
        got = conditions(cluster)
        want = {**as_written("taken", cluster.get_sdd("taken")), **as_written("healthy", cluster.get_sdd("healthy"))}
        return got == want and got

    got = wait_for(both_exported, timeout=30, what="the gauge holds what the status holds")
    assert got[(ns, "taken", "Degraded")] == "True" and got[(ns, "taken", "Stalled")] == "True"
    assert got[(ns, "healthy", "Degraded")] == "False" and got[(ns, "healthy", "Stalled")] == "False"
    assert got[(ns, "healthy", "Ready")] == "False"  # no pod runs here: not ready
    assert {t for (_, n, t) in got if n == "taken"} == {c["type"] for c in taken["status"]["conditions"]}
    assert {t for (_, n, t) in got if n == "healthy"} == {c["type"] for c in healthy["status"]["conditions"]}

    cluster.delete_sdd("taken")
    wait_for(
        lambda: {n for (_, n, _) in conditions(cluster)} == {"healthy"},
        timeout=30,
        what="the deleted deployment's series gone",
    )
