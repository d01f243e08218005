"""The docs' laptop flow (docs/operator.md, "A real API server on a laptop") on a real API server that serves no
add-on APIs: no prometheus-operator CRDs (ServiceMonitor), no LeaderWorkerSet.

The example asks for a ServiceMonitor. The operator leaves it out, says which API is missing and what to install
(condition ApisAvailable=False and one Event), applies every other child, and is not Degraded: on a cluster without
pods the only things short of Ready are the replicas and the tuner's NoPods. Installing the CRDs later is picked up
at the next discovery check, with no restart and no spec change. A TP16 object, whose LeaderWorkerSet is its only
serving workload, is Degraded with the same message.
"""

from __future__ import annotations

import time

import pytest
import yaml

from tests.k8s.apiserver import OperatorProcess, kubectl, third_party_crds
from tests.k8s.cluster import condition, wait_for
from tests.k8s.fixtures import ROOT, TEST_CONFIG
from tests.k8s.realapi import started_environment

RECHECK = 2.0  # api_recheck_seconds under test
SLACK = 20.0  # a loaded 2-core machine: the operator process's pass and the status write behind it


@pytest.fixture
def bare_api(tmp_path):
    env = started_environment(tmp_path / "envtest")
    try:
        yield env
    finally:
        env.stop()


def _get(env, path: str):
    import kubernetes

    from tests.k8s.cluster import raw_call

    api = kubernetes.client.ApiClient(env.configuration())
    try:
        return raw_call(api, "GET", path)
    except Exception:  # noqa: BLE001 - absent is what some checks wait for
        return None
    finally:
        api.close()


def _sdd(env, ns: str, name: str) -> dict:
    return _get(env, f"/apis/specdecode.io/v1alpha1/namespaces/{ns}/specdecodedeployments/{name}") or {}


def test_the_laptop_flow_without_add_on_apis_ends_short_of_ready_only_for_lack_of_pods(bare_api, tmp_path):
    env, kc = bare_api, bare_api.kubeconfig
    # the docs' steps, with the kubectl `make tools` fetched
    kubectl(kc, "apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl(kc, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    kubectl(kc, "create", "namespace", "llm")
    kubectl(kc, "apply", "-f", str(ROOT / "examples" / "pcie8-glm5-eagle3.yaml"))
    name = yaml.safe_load((ROOT / "examples" / "pcie8-glm5-eagle3.yaml").read_text())["metadata"]["name"]
    config = {**TEST_CONFIG, "api_recheck_seconds": RECHECK}
    with OperatorProcess(kc, ("llm",), tmp_path / "operator.log", **config) as op:

        def settled():
            obj = _sdd(env, "llm", name)
            return (
                obj
                if condition(obj, "ApisAvailable").get("status") == "False"
                and condition(obj, "MetricsAvailable").get("reason") == "NoPods"
                else None
            )

        obj = wait_for(settled, timeout=SLACK, interval=0.2, what=f"settled:\n{op.log_tail()}")
        apis = condition(obj, "ApisAvailable")
        assert apis["reason"] == "ApiNotServed"
        assert "ServiceMonitor (monitoring.coreos.com/v1)" in apis["message"]
        assert (
            "prometheus-operator CRDs" in apis["message"] and "spec.monitoring.serviceMonitor: false" in apis["message"]
        )
        assert condition(obj, "Degraded")["status"] == "False"
        assert condition(obj, "SpecValid")["status"] == "True"
        ready = condition(obj, "Ready")
        assert ready["status"] == "False" and ready["reason"] == "RollingOut"  # no pods on a bare API server
        for path in (
            f"/apis/apps/v1/namespaces/llm/deployments/{name}",
            f"/api/v1/namespaces/llm/services/{name}",
            f"/api/v1/namespaces/llm/configmaps/{name}-runtime",
        ):
            assert _get(env, path) is not None, path
        events = (_get(env, "/api/v1/namespaces/llm/events") or {}).get("items") or []
        not_served = [e for e in events if e["reason"] == "ApiNotServed"]
        assert len(not_served) == 1 and not_served[0]["type"] == "Warning"
        assert "ServiceMonitor" in not_served[0]["message"]

        # passes kept coming (resync), and none of them retried the write: discovery was asked instead
        passes = op.reconcile_passes()
        wait_for(lambda: op.reconcile_passes() >= passes + 3, timeout=SLACK, what="more passes")
        audited = env.audit_events(0)
        assert not [e for e in audited if (e.get("objectRef") or {}).get("resource") == "servicemonitors"]
        assert [
            e
            for e in audited
            if e.get("requestURI", "").startswith("/apis/monitoring.coreos.com/v1")
            and not (e.get("objectRef") or {}).get("resource")
        ]
        # the CRDs installed later: the next discovery check finds them and the ServiceMonitor follows
        installed = time.monotonic()
        kubectl(kc, "apply", "--server-side", "-f", "-", input=third_party_crds())
        kubectl(kc, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        wait_for(
            lambda: _get(env, f"/apis/monitoring.coreos.com/v1/namespaces/llm/servicemonitors/{name}"),
            timeout=RECHECK + SLACK,
            interval=0.2,
            what="the ServiceMonitor after the CRD",
        )
        wait_for(
            lambda: not condition(_sdd(env, "llm", name), "ApisAvailable"), timeout=SLACK, what="ApisAvailable gone"
        )
        assert time.monotonic() - installed <= RECHECK + SLACK


def test_a_multi_node_object_without_leaderworkerset_is_degraded_naming_it(bare_api, tmp_path):
    env, kc = bare_api, bare_api.kubeconfig
    kubectl(kc, "apply", "--server-side", "-f", str(ROOT / "crds"))
    kubectl(kc, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
    kubectl(kc, "create", "namespace", "llm")
    kubectl(kc, "apply", "-f", str(ROOT / "examples" / "multinode-tp16-lws.yaml"))
    name = yaml.safe_load((ROOT / "examples" / "multinode-tp16-lws.yaml").read_text())["metadata"]["name"]
    with OperatorProcess(kc, ("llm",), tmp_path / "operator.log", **TEST_CONFIG) as op:
        obj = wait_for(
            lambda: (o := _sdd(env, "llm", name)) and condition(o, "Degraded").get("status") == "True" and o,
            timeout=SLACK,
            interval=0.2,
            what=f"Degraded:\n{op.log_tail()}",
        )
        assert "LeaderWorkerSet (leaderworkerset.x-k8s.io/v1) is not served" in condition(obj, "Degraded")["message"]
        assert "lws.sigs.k8s.io" in condition(obj, "ApisAvailable")["message"]
        assert _get(env, f"/api/v1/namespaces/llm/services/{name}") is not None  # the rest still applies
