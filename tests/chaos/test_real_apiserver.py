"""Leader SIGKILL on the real kube-apiserver + etcd (tests/k8s/envtest.py): two replicas from the chart's arguments
for a namespaced install, holding only the chart's RBAC (the Lease Role included), fail over within the Lease's
takeover bound plus start-up (tests/chaos/timing.py) with nothing lost and no request refused by RBAC."""

from __future__ import annotations

import time
import uuid

import pytest

from tests.chaos.chaoslib import Outcome, Pool, RealBed, sdds, time_until
from tests.chaos.timing import FAILOVER_LIMIT_S
from tests.k8s.cluster import minimal_sdd

LEASE = "sd-specdecode-operator"
LEASE_NS = "specdecode-system"


@pytest.mark.timeout(240)
def test_leader_sigkill_on_the_real_api_server(apiserver_bed, tmp_path):
    env = apiserver_bed.env
    namespace = f"chaos-{uuid.uuid4().hex[:6]}"
    env.request("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}})
    apiserver_bed.grant(namespace)
    try:
        env.request("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{LEASE}")
    except Exception:
        pass  # not there yet
    bed = RealBed(tmp_path, env, namespace, apiserver_bed.operator_kubeconfig)
    mark = env.audit_offset()
    pool = Pool(bed, 2, values=apiserver_bed.namespaced_values(namespace))
    try:
        pool.wait(lambda: bed.lease_holder(LEASE), 60, "a leader")
        names = sdds(bed, 5, prefix="r")
        first = time_until(lambda: bed.converged(names), 90, "converged", bed=bed)
        leader = pool.by_identity(bed.lease_holder(LEASE))
        killed = time.monotonic()
        leader.kill()
        bed.cluster.create_sdd(minimal_sdd("after", tp=8))
        pool.wait(lambda: bed.converged(names + ["after"]), 60, "takeover")
        failover = time.monotonic() - killed
        lost, dup = bed.lost_and_duplicated(names + ["after"])
        refused = apiserver_bed.forbidden(mark)
        Outcome(
            "leader SIGKILL (real API server)",
            "SIGKILL of the leader (2 replicas, namespaced chart RBAC, 5 CRs + 1 after)",
            round(failover, 2),
            lost,
            dup,
            pool.crashed(),
            pool.peak_rss_mb(),
            backend="kube-apiserver",
            notes={"first_convergence_s": round(first, 2), "rbac_refusals": len(refused)},
        ).record()
        assert refused == []
        assert failover <= FAILOVER_LIMIT_S and (lost, dup, pool.crashed()) == (0, 0, 0)
    finally:
        pool.close()
        bed.close()
