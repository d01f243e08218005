"""End-to-end: the operator's step tuner against simulated runtime pods (demo/kubelet.py runs
``specdecode-runtime simulate``'s app per pod on 127.0.0.N and publishes Pods, the headless Service's
EndpointSlice and Deployment status to the API emulator).

Clocks: the operator runs with ``tune_interval_scale=0.1`` (test/demo-only knob: an intervalSeconds of 5 lasts
0.5 s of wall time and the tuner's clock runs 10x) and the pods simulate at speed 10, so the tuner's clock and
the simulated clock agree. Every number here is simulated.
"""

from __future__ import annotations

import itertools
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

import kubernetes
import pytest
import yaml

from specdecode_operator.demo.kubelet import SimulatedKubelet
from specdecode_runtime.contract.scenario import parse_scenario
from tests.k8s.cluster import condition, wait_for

APPS = "apps/v1"
SPEED = 10.0
SCALE = 1 / SPEED
_ips = itertools.count(40, 4)
_ports = itertools.count(31000, 10)

# Best k at batch 1: goodput by k = {3: 223, 4: 237, 5: 241.5, 6: 238} tok/s (runtime goodput model).
HIGH_ACCEPTANCE = [0.9, 0.85, 0.8, 0.75, 0.7, 0.6, 0.5]
# Best k = 2 (139 tok/s), k = 7 gives 109: worth a restart when the restart is short.
LOW_ACCEPTANCE = [0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1]


def scenario_doc(acceptance, restart_seconds: float = 5.0) -> dict:
    return {
        "name": "tuner-e2e",
        "description": "batch-1 chat, draft on its own rank (simulated)",
        "cost": {
            "verify": {"base": 10, "perToken": 0.05},
            "draftStep": {"base": 1.0},
            "draftExtend": {"base": 1.0},
            "overhead": 0.5,
        },
        "draftTp": {
            "current": 1,
            "targetTp": 2,
            "computeMs": {"base": 1.0},
            "collectivesPerStep": 2,
            "allReduceUs": {2: 300},
            "broadcastUs": 0,
        },
        "restartSeconds": restart_seconds,
        "phases": [{"name": "chat", "seconds": 100000, "batchSize": 1, "acceptance": acceptance}],
    }


def sdd(name: str, mode: str, num_steps: int, port: int, annotations: dict | None = None) -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
        "spec": {
            "replicas": 1,
            "target": {"model": "/models/target", "tensorParallelSize": 2},
            "draft": {"model": "/models/draft", "algorithm": "EAGLE3", "tensorParallelSize": 1, "ranks": [0]},
            "speculative": {
                "numSteps": num_steps,
                "autotune": {"mode": mode, "minSteps": 1, "maxSteps": 7, "intervalSeconds": 5},
            },
            "placement": {"gpusPerNode": 8},
            "runtime": {"port": port, "controlPort": port + 1},
        },
    }


@pytest.fixture
def tuned_factory(emulator_factory, tmp_path):
    """Clusters whose operator tunes at 10x, each with a simulated kubelet factory ``cluster.kubelet``."""
    kubelets = []

    def build(**config):
        cluster = emulator_factory(tune_interval_scale=SCALE, resync_seconds=1.0, **config)
        if cluster.emulator is None:
            pytest.skip("needs the API emulator and simulated pods")

        def kubelet(acceptance, restart_seconds: float = 5.0) -> SimulatedKubelet:
            scenario = parse_scenario(scenario_doc(acceptance, restart_seconds))
            api = kubernetes.client.ApiClient(cluster.api.configuration)
            k = SimulatedKubelet(api, cluster.namespace, scenario, SPEED, tmp_path, first_ip=next(_ips)).__enter__()
            kubelets.append(k)
            return k

        cluster.kubelet = kubelet
        return cluster

    yield build
    for k in kubelets:
        k.__exit__(None, None, None)


@pytest.fixture
def tuned(tuned_factory):
    return tuned_factory()


def speculative(cluster, name: str) -> dict:
    return (cluster.get_sdd(name).get("status") or {}).get("speculative") or {}


def events(cluster, reason: str, name: str) -> list[dict]:
    return [e for e in cluster.list("v1", "events") if e["reason"] == reason and e["involvedObject"]["name"] == name]


def metrics_of(cluster):
    return cluster.operator.context.metrics


def decisions(cluster) -> float:
    """Tuner decisions so far, every action (one per bucket and interval; specdecode_tuner_decisions_total)."""
    return sum(
        s.value
        for family in metrics_of(cluster).registry.collect()
        for s in family.samples
        if s.name == "specdecode_tuner_decisions_total"
    )


def assert_spec_untouched(cluster, name: str, created: dict) -> None:
    final = cluster.get_sdd(name)
    assert final["spec"] == created["spec"]
    assert final["metadata"]["generation"] == created["metadata"]["generation"]
    for m in final["metadata"].get("managedFields") or []:
        if m["manager"] in ("specdecode-operator", "specdecode-tuner"):
            assert "f:spec" not in m["fieldsV1"], m


def put_steps(url: str, token: str | None) -> int:
    req = urllib.request.Request(
        url + "/specdecode/v1/steps",
        data=b'{"table": [{"minBatch": 1, "steps": 1}]}',
        method="PUT",
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status
    except urllib.error.HTTPError as e:
        return e.code


def test_live_mode_converges_pushes_with_token_and_reports(tuned):
    cluster = tuned
    port = next(_ports)
    created = cluster.create_sdd(sdd("live", "Live", 3, port))
    kubelet = cluster.kubelet(HIGH_ACCEPTANCE)
    engines = wait_for(lambda: kubelet.engines(), timeout=20, what="simulated pod")
    engine = engines[0]
    # the bucket of batch 1 climbs 3 -> 4 -> 5 (one past the deepest observed position at a time) and stays
    wait_for(
        lambda: speculative(cluster, "live").get("stepTable", [{}])[0].get("steps") == 5,
        timeout=40,
        what="bucket 1 tuned to k=5",
    )
    status = cluster.get_sdd("live")["status"]
    spec_status = status["speculative"]
    assert spec_status["numSteps"] == 5
    assert spec_status["acceptLength"] > 2.5 and spec_status["tokensPerSecond"] > 0
    assert spec_status["lastTuneTime"].endswith("Z")
    # no profile ConfigMap: the costs come from the simulated pod's start-up probe, refined by its live timings
    assert spec_status["costSource"] == "RefinedOnline", spec_status
    bucket1 = next(e for e in spec_status["costProfile"] if e["bucket"] == "1")
    assert bucket1["source"] == "RefinedOnline" and bucket1["cycleMs"] > bucket1["plainCycleMs"] > 0
    moves = [(h["fromSteps"], h["toSteps"]) for h in status["history"] if h["bucket"] == "1"]
    assert moves[:2] == [(3, 4), (4, 5)], status["history"]
    assert len(status["history"]) <= 50
    # the pod runs the pushed table (it was PUT with the Secret's token) ...
    wait_for(lambda: engine.table.lookup(1) == 5, timeout=10, what="the pod runs k=5")
    assert metrics_of(cluster).value("specdecode_tuner_table_pushes_total", result="ok") >= 2
    # ... and refuses a PUT without the token or with a wrong one
    pod_ip = kubelet.state.pods["live"][0].ip
    assert put_steps(f"http://{pod_ip}:{port + 1}", None) == 401
    assert put_steps(f"http://{pod_ip}:{port + 1}", "not-the-token") == 401
    assert engine.table.lookup(1) == 5
    ready = wait_for(
        lambda: (c := condition(cluster.get_sdd("live"), "MetricsAvailable")) and c["status"] == "True" and c
    )
    assert ready["reason"] in ("Scraped", "PartialMetrics")
    changed = wait_for(lambda: events(cluster, "StepsChanged", "live"))
    assert any("3 -> 4" in e["message"] for e in changed)
    assert metrics_of(cluster).value("specdecode_tuner_decisions_total", action="switch") >= 1
    # GitOps: spec, generation and spec ownership untouched; the tuner's fields have their own manager
    assert_spec_untouched(cluster, "live", created)
    final = cluster.get_sdd("live")
    managers = {m["manager"]: m for m in final["metadata"]["managedFields"]}
    assert managers["specdecode-tuner"]["subresource"] == "status"
    assert "f:speculative" in managers["specdecode-tuner"]["fieldsV1"]["f:status"]
    assert "f:conditions" not in managers["specdecode-tuner"]["fieldsV1"]["f:status"]
    # the reconciler's own status writes keep the tuner's fields (and vice versa)
    assert final["status"]["observedGeneration"] == 1 and final["status"]["speculative"]["numSteps"] == 5
    assert {c["type"] for c in final["status"]["conditions"]} >= {"Ready", "Degraded", "MetricsAvailable"}


def test_metrics_down_or_invalid_sets_condition_and_nothing_crashes(tuned):
    cluster = tuned
    cluster.create_sdd(sdd("down", "Live", 3, next(_ports)))
    wait_for(lambda: cluster.get(APPS, "deployments", "down"))
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    bad = _NanServer()

    def publish(port: int) -> None:
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {"name": "down-headless-x", "labels": {"kubernetes.io/service-name": "down-headless"}},
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": ["127.0.0.1"],
                    "conditions": {"ready": True},
                    "targetRef": {"kind": "Pod", "name": "down-0"},
                }
            ],
            "ports": [{"name": "http", "port": port}, {"name": "control", "port": port}],
        }
        if cluster.get("discovery.k8s.io/v1", "endpointslices", "down-headless-x"):
            cluster.call(
                "PATCH",
                "/apis/discovery.k8s.io/v1/namespaces/default/endpointslices/down-headless-x",
                body,
                content_type="application/merge-patch+json",
            )
        else:
            cluster.create("discovery.k8s.io/v1", "endpointslices", body)

    try:
        cluster.make_ready(APPS, "deployments", "down")  # the tuner lists endpoints only while replicas are ready
        wait_for(lambda: condition(cluster.get_sdd("down"), "Ready")["status"] == "True", timeout=15)
        publish(closed)
        c = wait_for(
            lambda: (
                (c := condition(cluster.get_sdd("down"), "MetricsAvailable")) and c["reason"] == "MetricsDown" and c
            ),
            timeout=15,
            what="MetricsAvailable=False MetricsDown",
        )
        assert c["status"] == "False" and "down-0" in c["message"]
        assert wait_for(lambda: events(cluster, "MetricsDown", "down"))[0]["type"] == "Warning"
        publish(bad.port)  # the "pod" answers, but with NaN counters
        c = wait_for(
            lambda: (
                (c := condition(cluster.get_sdd("down"), "MetricsAvailable")) and c["reason"] != "MetricsDown" and c
            ),
            timeout=15,
            what="a different MetricsAvailable reason",
        )
        assert c["status"] == "False" and c["reason"] == "MetricsInvalid", c
        # the operator keeps reconciling (a spec change rolls out) and the loop keeps running
        cluster.patch_sdd("down", {"spec": {"replicas": 2}})
        wait_for(lambda: cluster.get(APPS, "deployments", "down")["spec"]["replicas"] == 2, timeout=15)
        assert cluster.operator.error is None
        assert metrics_of(cluster).value("specdecode_tuner_decisions_total", action="skipped") >= 2
        assert not (cluster.get_sdd("down")["status"].get("speculative") or {}).get("lastTuneTime")
    finally:
        bad.close()


def test_rollout_rerenders_steps_when_the_gain_repays_the_restart(tuned):
    cluster = tuned
    port = next(_ports)
    # the calibrated profile (startup profiling's output) says a restart costs 5 s: a change of +10 % pays
    cluster.create(
        "v1",
        "configmaps",
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "profile"},
            "data": {"scenario.yaml": yaml.safe_dump(scenario_doc(LOW_ACCEPTANCE))},
        },
    )
    created = cluster.create_sdd(sdd("roll", "Rollout", 7, port, {"specdecode.io/tuner-profile": "profile"}))
    kubelet = cluster.kubelet(LOW_ACCEPTANCE)
    cm0 = wait_for(lambda: cluster.get("v1", "configmaps", "roll-runtime"))
    assert yaml.safe_load(cm0["data"]["runtime.yaml"])["speculative"]["numSteps"] == 7
    hash0 = wait_for(lambda: cluster.get(APPS, "deployments", "roll"))["spec"]["template"]["metadata"]["annotations"]
    tuned_steps = wait_for(
        lambda: (k := speculative(cluster, "roll").get("numSteps")) and k < 7 and k,
        timeout=40,
        what="a rollout to fewer steps",
    )
    assert 2 <= tuned_steps <= 4  # k = 2..4 predict 139/137/130 tok/s vs 109 at k = 7
    cm = wait_for(
        lambda: (
            (c := cluster.get("v1", "configmaps", "roll-runtime"))
            and yaml.safe_load(c["data"]["runtime.yaml"])["speculative"]["numSteps"] == tuned_steps
            and c
        )
    )
    assert cm["metadata"]["resourceVersion"] != cm0["metadata"]["resourceVersion"]
    # new template: the pods roll (the Deployment is applied after the ConfigMap, in the same pass)
    wait_for(
        lambda: cluster.get(APPS, "deployments", "roll")["spec"]["template"]["metadata"]["annotations"] != hash0,
        timeout=10,
        what="a new pod template",
    )
    wait_for(
        lambda: kubelet.state.restarts >= 1 and kubelet.engines()[0].table.lookup(1) == tuned_steps,
        timeout=15,
        what="the simulated pod restarted with the tuned steps",
    )
    history = cluster.get_sdd("roll")["status"]["history"]
    assert history[0]["bucket"] == "all" and (history[0]["fromSteps"], history[0]["toSteps"]) == (7, tuned_steps)
    assert wait_for(
        lambda: [e for e in events(cluster, "RolloutStarted", "roll") if "--speculative-num-steps" in e["message"]]
    )
    assert metrics_of(cluster).value("specdecode_tuner_decisions_total", action="rollout") == 1
    rec = wait_for(lambda: speculative(cluster, "roll").get("recommendation"), timeout=10)
    assert rec["draftTensorParallelSize"] == 1 and "simulated prediction" in rec["reason"]
    assert_spec_untouched(cluster, "roll", created)  # spec.speculative.numSteps stays 7


def test_rollout_skips_a_restart_that_does_not_pay(tuned_factory):
    # no profile: the operator's --tune-restart-seconds applies; an hour of lost serving is never repaid by
    # the ~+25 % the model predicts over the 1800 s horizon
    cluster = tuned_factory(tune_restart_seconds=3600)
    cluster.create_sdd(sdd("stay", "Rollout", 7, next(_ports)))
    kubelet = cluster.kubelet(LOW_ACCEPTANCE)
    wait_for(lambda: events(cluster, "RolloutSkipped", "stay"), timeout=30)
    cm = cluster.get("v1", "configmaps", "stay-runtime")
    assert yaml.safe_load(cm["data"]["runtime.yaml"])["speculative"]["numSteps"] == 7
    assert kubelet.state.restarts == 0
    assert speculative(cluster, "stay")["numSteps"] == 7


def test_off_mode_reports_without_acting(tuned):
    cluster = tuned
    created = cluster.create_sdd(sdd("off", "Off", 3, next(_ports)))
    kubelet = cluster.kubelet(HIGH_ACCEPTANCE)
    history = wait_for(lambda: cluster.get_sdd("off")["status"]["history"], timeout=30, what="a recommendation")
    assert "(mode Off: not applied)" in history[0]["reason"] and history[0]["toSteps"] > 3
    # a few more tuning intervals (each decides every bucket): the same recommendation is not repeated, nothing pushed
    per_interval = len(speculative(cluster, "off").get("costProfile") or [None])  # one decision per bucket
    decided = decisions(cluster)
    wait_for(lambda: decisions(cluster) >= decided + 3 * per_interval, timeout=20, what="three more tuning intervals")
    status = cluster.get_sdd("off")["status"]
    assert len([h for h in status["history"] if h["bucket"] == "1"]) == 1
    assert status["speculative"]["numSteps"] == 3 and status["speculative"]["tokensPerSecond"] > 0
    assert kubelet.engines()[0].table.lookup(1) == 3
    assert metrics_of(cluster).value("specdecode_tuner_table_pushes_total", result="ok") == 0
    assert events(cluster, "StepsRecommended", "off")
    assert_spec_untouched(cluster, "off", created)


class _NanServer:
    """A "pod" whose /metrics carries NaN counters (a broken exporter)."""

    TEXT = (
        b'specdecode_tokens_generated_total{simulated="true"} 100\n'
        b'specdecode_verify_cycles_total{bucket="1",simulated="true"} NaN\n'
    )

    def __init__(self):
        text = self.TEXT

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _FakePrometheus:
    """``/api/v1/query`` over the simulated pods' /metrics: what Prometheus would answer for an instant vector
    selector with ``namespace`` and ``pod`` target labels, plus an NCCL preflight gauge the simulator lacks."""

    def __init__(self, namespace: str):
        from urllib.parse import parse_qs, urlparse

        from prometheus_client.parser import text_string_to_metric_families

        self.queries: list[str] = []
        self.kubelet = None  # set once the simulated kubelet runs
        scraped: dict[str, tuple[float, str]] = {}  # pod -> (when, text): one consistent scrape per 0.2 s
        outer = self

        def text_of(pod) -> str:
            when, text = scraped.get(pod.name, (0.0, ""))
            if time.monotonic() - when > 0.2:
                when, text = scraped[pod.name] = (time.monotonic(), pod.engine.metrics_text())
            return text

        def series(metric: str) -> list[dict]:
            out = []
            for pods in outer.kubelet.state.pods.values() if outer.kubelet else []:
                for pod in pods:
                    labels = {"namespace": namespace, "pod": pod.name}
                    if metric == "specdecode_nccl_latency_seconds":
                        out.append({"metric": {**labels, "op": "all_reduce", "bytes": "4096"}, "value": [0, "3.5e-05"]})
                        continue
                    for family in text_string_to_metric_families(text_of(pod)):
                        for s in family.samples:
                            if s.name == metric:
                                out.append(
                                    {"metric": {**s.labels, **labels, "__name__": metric}, "value": [0, repr(s.value)]}
                                )
            return out

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                query = parse_qs(urlparse(self.path).query)["query"][0]
                outer.queries.append(query)
                body = {"status": "success", "data": {"resultType": "vector", "result": series(query.split("{")[0])}}
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_prometheus_url_reads_the_same_counters(tuned_factory):
    prom = _FakePrometheus("default")
    try:
        cluster = tuned_factory(prometheus_url=prom.url)
        created = cluster.create_sdd(sdd("prom", "Live", 3, next(_ports)))
        prom.kubelet = kubelet = cluster.kubelet(HIGH_ACCEPTANCE)
        wait_for(
            lambda: speculative(cluster, "prom").get("stepTable", [{}])[0].get("steps", 3) > 3,
            timeout=40,
            what="a step change decided from Prometheus data",
        )
        spec_status = wait_for(lambda: (s := speculative(cluster, "prom")).get("ncclLatencyMicroseconds") and s)
        assert spec_status["ncclLatencyMicroseconds"] == {"all_reduce/4096": 35.0}
        wait_for(lambda: condition(cluster.get_sdd("prom"), "MetricsAvailable")["status"] == "True")
        assert any(q.startswith('specdecode_verify_cycles_total{namespace="default"') for q in prom.queries)
        wait_for(lambda: kubelet.engines()[0].table.lookup(1) > 3, timeout=10, what="the pushed table")
        assert_spec_untouched(cluster, "prom", created)
    finally:
        prom.close()
