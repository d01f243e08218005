"""Leader election with the chart's defaults, on operator processes: exactly one replica acts, a SIGKILLed leader
is replaced within the Lease's takeover bound plus start-up (tests/chaos/timing.py), and a leader cut off from the
API server stops before anyone else starts."""

from __future__ import annotations

import time

import pytest

from tests.chaos.chaoslib import Outcome, Pool, chart_operator_command, sdds, time_until
from tests.chaos.timing import FAILOVER_LIMIT_S
from tests.k8s.cluster import minimal_sdd

LEASE = "sd-specdecode-operator"  # the chart's default Lease name for release "sd"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kills", [1, 6])
def test_chart_defaults_one_replica_acts_and_a_killed_leader_is_replaced(bed, kills):
    pool = Pool(bed, chart_operator_command()[2])
    try:
        assert pool.count == 2  # the chart's default replicaCount
        for r in pool.live:
            r.wait_serving()
        names = sdds(bed, 20)
        converged = time_until(lambda: bed.converged(names), 90, "20 SDDs converged", bed=bed)
        leader = pool.by_identity(bed.lease_holder(LEASE))
        standby = next(r for r in pool.live if r is not leader)
        assert standby.health()["role"] == "standby" and leader.health()["role"] == "leader"
        # the standby never started kopf: no watch, no API call of the operator's, no reconcile
        assert standby.metric("specdecode_operator_api_requests_total") == 0
        assert standby.metric("specdecode_operator_reconciles_total") == 0
        failovers = []
        for k in range(kills):
            leader = pool.by_identity(bed.lease_holder(LEASE))
            killed_at = time.monotonic()
            leader.kill()
            name = f"after{k}"
            bed.cluster.create_sdd(minimal_sdd(name, tp=8))
            pool.wait(lambda name=name: bed.converged([name]), FAILOVER_LIMIT_S + 30, "takeover")
            failovers.append(time.monotonic() - killed_at)
            assert bed.lease_holder(LEASE) not in (None, leader.identity)
            names.append(name)
            pool.wait(lambda: all(r.health() for r in pool.live), 30, "the replacement serves")
        assert bed.converged(names)
        lost, dup = bed.lost_and_duplicated(names)
        Outcome(
            f"leader SIGKILL x{kills}",
            f"SIGKILL of the leader x{kills} (chart defaults: 2 replicas; 20 CRs, 1 new CR after each kill)",
            round(max(failovers), 2),
            lost,
            dup,
            pool.crashed(),
            pool.peak_rss_mb(),
            notes={
                "first_convergence_s": round(converged, 2),
                "failovers_s": [round(f, 2) for f in failovers],
                "self_fenced_restarts": pool.restarts - kills,
            },
        ).record()
        assert max(failovers) <= FAILOVER_LIMIT_S, failovers
        assert (lost, dup, pool.crashed()) == (0, 0, 0)
    finally:
        pool.close()
