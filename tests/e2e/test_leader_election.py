"""Leader election on a coordination.k8s.io/v1 Lease: a standby replica makes no call but its Lease polls and
reconciles nothing; when the holder stops renewing it takes over within the lease duration; a clean stop hands
the Lease over at once. Emulator only (the request log tells the replica's calls apart by User-Agent).
Process-level failover (SIGKILL, partition, chart defaults) is in tests/chaos/test_leader_election.py."""

from __future__ import annotations

import datetime
import threading
import time

import pytest

from specdecode_operator.operator_process import OperatorProcess
from tests.k8s.cluster import minimal_sdd, wait_for
from tests.k8s.fixtures import operator_config

LEASE_NS, LEASE = "specdecode-system", "specdecode-operator"
LEASE_PATH = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Replica:
    def __init__(self, server: str, identity: str):
        self.process = OperatorProcess(
            operator_config(
                server=server, leader_election=True, identity=identity, operator_namespace=LEASE_NS, lease_name=LEASE
            ),
            exit_on_lost=False,
        )
        self.thread = threading.Thread(target=self.process.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.process.stop()
        self.thread.join(20)


class OtherHolder:
    """Someone else holds the Lease and renews it every second until ``release``d (stops renewing)."""

    def __init__(self, cluster):
        self.cluster = cluster
        self.renewing = True
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": LEASE},
            "spec": {"holderIdentity": "other", "leaseDurationSeconds": 8, "acquireTime": now(), "renewTime": now()},
        }
        cluster.call("POST", LEASE_PATH, body)
        self.thread = threading.Thread(target=self._renew, daemon=True)
        self.thread.start()

    def _renew(self) -> None:
        while self.renewing:
            lease = self.cluster.call("GET", f"{LEASE_PATH}/{LEASE}")
            if lease["spec"].get("holderIdentity") != "other":
                return
            lease["spec"]["renewTime"] = now()
            self.cluster.call("PUT", f"{LEASE_PATH}/{LEASE}", lease)
            time.sleep(1.0)

    def stop_renewing(self) -> None:
        self.renewing = False
        self.thread.join(5)


def holder(cluster) -> str | None:
    return cluster.call("GET", f"{LEASE_PATH}/{LEASE}")["spec"].get("holderIdentity")


@pytest.mark.timeout(90)
def test_standby_stays_idle_then_takes_over_when_the_holder_stops_renewing(emulator_factory):
    cluster = emulator_factory(operator=False)  # the emulator's request log tells the replicas' calls apart
    other = OtherHolder(cluster)
    mark = len(cluster.emulator.log)
    standby = Replica(cluster.server.url, "standby")
    try:
        cluster.create_sdd(minimal_sdd("llama", tp=8))
        created = len(cluster.emulator.log)

        def ours(since: int) -> list:
            return [r for r in cluster.emulator.log[since:] if r.user_agent.startswith(("specdecode-operator", "kopf"))]

        # the standby has polled the Lease several times since the object appeared, and done nothing else
        wait_for(
            lambda: len([r for r in ours(created) if r.resource == "leases"]) >= 3,
            timeout=20,
            what="three Lease polls by the standby",
        )
        assert standby.process.role == "standby"
        assert cluster.get("apps/v1", "deployments", "llama") is None
        calls = ours(mark)
        assert calls and {(r.resource, r.verb) for r in calls} <= {("leases", "get")}, sorted(
            {(r.resource, r.verb) for r in calls}
        )
        assert standby.process.health() == (True, {"role": "standby", "identity": "standby", "reconciles": 0})
        stopped = time.monotonic()
        other.stop_renewing()
        wait_for(lambda: cluster.get("apps/v1", "deployments", "llama"), timeout=20, what="takeover")
        took = time.monotonic() - stopped
        assert holder(cluster) == "standby" and standby.process.role == "leader"
        assert took <= 10 + 1 + 6, took  # the standby's lease duration (10 s, its own clock) + a poll + kopf start
    finally:
        other.renewing = False
        standby.stop()


@pytest.mark.timeout(90)
def test_a_clean_stop_releases_the_lease_and_the_standby_takes_over_at_once(emulator_factory):
    cluster = emulator_factory(operator=False)  # the emulator's request log tells the replicas' calls apart
    first = Replica(cluster.server.url, "first")
    wait_for(lambda: first.process.role == "leader", timeout=15, what="first leads")
    second = Replica(cluster.server.url, "second")
    try:
        wait_for(lambda: second.process.role == "standby", timeout=15, what="second waits")
        cluster.create_sdd(minimal_sdd("llama", tp=8))
        wait_for(lambda: cluster.get("apps/v1", "deployments", "llama"), timeout=15, what="first reconciles")
        stopped = time.monotonic()
        first.process.stop()
        wait_for(lambda: holder(cluster) == "second", timeout=5, what="second takes the released Lease")
        assert time.monotonic() - stopped < 4  # released, not left to expire (10 s)
        first.thread.join(20)
        cluster.call("DELETE", f"/apis/apps/v1/namespaces/{cluster.namespace}/deployments/llama")
        wait_for(lambda: cluster.get("apps/v1", "deployments", "llama"), timeout=15, what="second repairs")
    finally:
        first.stop()
        second.stop()


def test_a_replica_that_lost_the_lease_writes_nothing():
    """The fence: every write of the API client is refused once the Lease is not provably held."""
    import asyncio

    import kubernetes

    from specdecode_operator.kube_client import ApiError, KubeClient

    cfg = kubernetes.client.Configuration()
    cfg.host = "http://127.0.0.1:9"  # nothing listens: a write that got past the fence would fail differently
    client = KubeClient(cfg, fence=lambda: False, retries=0)
    try:
        with pytest.raises(ApiError) as err:
            asyncio.run(
                client.apply(
                    {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "default"}},
                    "configmaps",
                )
            )
        assert err.value.reason == "NotLeader" and client.calls == 0
    finally:
        asyncio.run(client.close())
