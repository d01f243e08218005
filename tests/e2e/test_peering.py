"""High availability: two operator replicas register in kopf's peering object with their priorities; when the
leader goes away, the standby takes over. Emulator only (a real cluster would need the peering CRDs installed by the chart)."""

from __future__ import annotations

import pytest

from k8s.cluster import minimal_sdd, wait_for
from k8s.fixtures import operator_config
from specdecode_operator.testbed.runner import OperatorThread

PEERING = "specdecode-operator"


def sdd(name: str = "llama") -> dict:
    return minimal_sdd(name, tp=4)


def test_peers_register_and_the_standby_takes_over(emulator_factory):
    cluster = emulator_factory(operator=False)
    if cluster.emulator is None:
        pytest.skip("peering CRDs are not guaranteed on an arbitrary cluster")
    cluster.call("POST", "/apis/kopf.dev/v1/clusterkopfpeerings",
                 {"apiVersion": "kopf.dev/v1", "kind": "ClusterKopfPeering", "metadata": {"name": PEERING}})
    server = cluster.server.url
    leader = OperatorThread(operator_config(server=server, standalone=False, peering_name=PEERING, priority=100))
    standby = OperatorThread(operator_config(server=server, standalone=False, peering_name=PEERING, priority=10))
    leader.__enter__()
    try:
        with standby:  # joins while the leader holds the peering: it must pause at once
            peers = wait_for(lambda: (p := cluster.call("GET", f"/apis/kopf.dev/v1/clusterkopfpeerings/{PEERING}")
                                      .get("status") or {}) and len(p) >= 2 and p, timeout=15, what="both peers")
            assert sorted(v["priority"] for v in peers.values()) == [10, 100]
            # Whether the standby has paused is kopf's business (its peering watch); the emulator's watch of the
            # peering object is not reliable enough to assert kopf's log line, so this test checks registration,
            # the leader's work and the takeover.
            cluster.create_sdd(sdd("first"))
            wait_for(lambda: cluster.get("apps/v1", "deployments", "first"), timeout=15, what="leader reconciles")
            # the leader stops and withdraws from the peering: the standby resumes and reconciles new objects
            leader.__exit__(None, None, None)
            leader = None
            cluster.create_sdd(sdd("second"))
            wait_for(lambda: cluster.get("apps/v1", "deployments", "second"), timeout=30, what="standby takes over")
    finally:
        if leader is not None:
            leader.__exit__(None, None, None)
