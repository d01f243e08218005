"""A default chart install gets Live step control in a new namespace that holds no Secret, on a real API server.

`helm install` of the chart with its default values (CRDs included). There is no kubelet, so the test plays it
(tests/k8s/kubelet.py): the operator runs as its own process with the installed Deployment's arguments and
environment and the API credentials of the chart's ServiceAccount (held to the chart's RBAC, which lets it request
tokens of that ServiceAccount only: one per deployment, bound to the deployment's own audience). In a namespace created afterwards,
with nothing but its ``default`` ServiceAccount, a Live SpecDecodeDeployment's runtime pod is a process of its own
(tests/k8s/runtime_pod.py) started from the Deployment the operator rendered: its environment, its runtime.yaml, its
own projected token, verifying the operator's token against the API server's issuer keys. The test plays the
Deployment and EndpointSlice controllers (ready replica, the pod's address); the tuner then moves the step table and
the runtime accepts the PUT (200), with no ControlTokenUnavailable or StepTablePushFailed Event and no Secret.
The operator's /metrics, secured as the chart configures it, answers 401 without a token, 403 to a ServiceAccount
without the chart's metrics-reader ClusterRole and 200 to one bound to it, and counts the accepted PUTs.

The same install with ``nameOverride`` and ``fullnameOverride`` (other object and ServiceAccount names) tunes too.

Clocks as in test_tuner_e2e.py: the operator's tuner runs 10x (``SPECDECODE_TUNE_INTERVAL_SCALE=0.1``, a
test-only knob) and the runtime simulates at speed 10.
"""

from __future__ import annotations

import json
import os
import pathlib
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request

import pytest
import yaml

from specdecode_operator.render import names
from specdecode_runtime.contract.config import (
    CONFIG_FILE_NAME,
    CONFIG_MOUNT_DIR,
    RuntimeConfig,
)
from specdecode_runtime.contract.step_table import STEPS_PATH
from tests.e2e.test_tuner_e2e import HIGH_ACCEPTANCE, scenario_doc, sdd
from tests.k8s import tools
from tests.k8s.apiserver import CHART, OperatorProcess
from tests.k8s.cluster import Cluster, condition, wait_for
from tests.k8s.envtest import free_port
from tests.k8s.fixtures import ROOT
from tests.k8s.kubelet import start_container, token_request
from tests.k8s.realapi import started_environment

RELEASE, OPERATOR_NS, NS = "sd", "specdecode-system", "team-live"
SCALE, SPEED = 0.1, 10.0
SLACK = 60.0  # a loaded 2-core machine: operator start, leader election, a few tuner intervals of 0.5 s wall


@pytest.fixture
def env(tmp_path):
    env = started_environment(tmp_path / "envtest")
    try:
        yield env
    finally:
        env.stop()


class ChartOperator(OperatorProcess):
    """``specdecode operator run`` with the installed Deployment's container arguments and environment."""

    def __init__(self, kubeconfig, log_path, args: list[str], environ: dict[str, str], liveness_port: int):
        super().__init__(kubeconfig, (), log_path, liveness_endpoint=f"http://127.0.0.1:{liveness_port}/healthz")
        self.args, self.environ = args, environ

    def command(self) -> list[str]:
        return [os.path.join(os.path.dirname(sys.executable), "specdecode"), "operator", "run", *self.args]

    def environment(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "SPECDECODE_", "KUBERNETES_"))}
        return {**base, **self.environ, "KUBECONFIG": self.kubeconfig}


def get(env, path: str) -> dict:
    status, out = env.request("GET", path)
    assert status == 200, f"GET {path}: {status} {out}"
    return out


def operator_as_the_chart_deploys_it(env, tmp_path) -> ChartOperator:
    listed = get(
        env, f"/apis/apps/v1/namespaces/{OPERATOR_NS}/deployments?labelSelector=app.kubernetes.io/component%3Doperator"
    )["items"]
    assert len(listed) == 1, [d["metadata"]["name"] for d in listed]
    template = listed[0]["spec"]["template"]
    files = start_container(env, OPERATOR_NS, f"{RELEASE}-operator-0", template, tmp_path / "operator-pod")
    kubeconfig = env.service_account_kubeconfig(OPERATOR_NS, template["spec"]["serviceAccountName"])
    liveness = free_port()  # the pod's ports, moved off the fixed ones another process on this machine may hold
    args = [
        a.replace("$(POD_NAME)", files.env["POD_NAME"])
        for a in template["spec"]["containers"][0]["args"]
        if not a.startswith("--liveness-port=")
    ] + [f"--liveness-port={liveness}"]
    assert files.env["SPECDECODE_METRICS_PORT"] != "0"
    environ = {
        **files.env,
        "SPECDECODE_METRICS_PORT": str(free_port()),
        "SPECDECODE_TUNE_INTERVAL_SCALE": str(SCALE),
    }
    op = ChartOperator(kubeconfig, tmp_path / "operator.log", args, environ, liveness)
    op.metrics_port = int(environ["SPECDECODE_METRICS_PORT"])
    op.service_account = template["spec"]["serviceAccountName"]
    return op


def scrape(port: int, token: str | None) -> tuple[int, str]:
    """GET the operator's /metrics over HTTPS (its self-signed certificate: the ServiceMonitor skips verification)."""
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    req = urllib.request.Request(
        f"https://127.0.0.1:{port}/metrics", headers={"Authorization": f"Bearer {token}"} if token else {}
    )
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, r.read(1 << 20).decode()
    except urllib.error.HTTPError as e:
        return e.code, ""


def check_metrics_access(env, op: ChartOperator) -> float:
    """The operator's /metrics as the chart serves it: 401 without a token, 403 for a ServiceAccount not bound to the
    chart's metrics-reader ClusterRole, 200 for one bound to it. Returns the count of step-table PUTs that succeeded."""
    readers = [
        r["metadata"]["name"]
        for r in get(env, "/apis/rbac.authorization.k8s.io/v1/clusterroles")["items"]
        if r["metadata"]["name"].endswith("-metrics-reader")
    ]
    assert len(readers) == 1, f"a default install has one metrics-reader ClusterRole (metrics.secure): {readers}"
    reader = readers[0]
    for name in ("prometheus", "intruder"):
        env.service_account_kubeconfig("monitoring", name)
    status, out = env.request(
        "POST",
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "prometheus-specdecode"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
            "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": "monitoring"}],
        },
    )
    assert status == 201, out

    def bound() -> bool:  # the API server's RBAC cache has the binding (the operator caches answers for 60 s)
        status, out = env.request(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {
                    "user": "system:serviceaccount:monitoring:prometheus",
                    "groups": ["system:serviceaccounts", "system:serviceaccounts:monitoring"],
                    "nonResourceAttributes": {"path": "/metrics", "verb": "get"},
                },
            },
        )
        return status == 201 and out["status"].get("allowed")

    wait_for(bound, timeout=SLACK, interval=0.1, what="the metrics-reader binding in effect")
    assert scrape(op.metrics_port, None)[0] == 401
    assert scrape(op.metrics_port, token_request(env, "monitoring", "intruder", None, 600))[0] == 403
    status, text = scrape(op.metrics_port, token_request(env, "monitoring", "prometheus", None, 600))
    assert status == 200
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "specdecode_tuner_table_pushes_total" and s.labels.get("result") == "ok"
    )


def runtime_pod(env, cluster: Cluster, name: str, tmp_path, ip: str) -> tuple[subprocess.Popen, RuntimeConfig, object]:
    """The runtime container of the Deployment the operator rendered, as kubelet would start it."""
    template = cluster.get("apps/v1", "deployments", name)["spec"]["template"]
    files = start_container(env, NS, f"{name}-0", template, tmp_path / "runtime-pod")
    config_file = files.path(f"{CONFIG_MOUNT_DIR}/{CONFIG_FILE_NAME}")
    cfg = RuntimeConfig.from_yaml(pathlib.Path(config_file).read_text())
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(scenario_doc(HIGH_ACCEPTANCE)))
    base = {k: v for k, v in os.environ.items() if not k.startswith(("KUBECONFIG", "SPECDECODE_", "KUBERNETES_"))}
    with open(tmp_path / "runtime.log", "ab") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-u",
                "-m",
                "tests.k8s.runtime_pod",
                "--ip",
                ip,
                "--config",
                config_file,
                "--scenario",
                str(scenario),
                "--speed",
                str(SPEED),
                "--token-file",
                files.path(cfg.server.token_file),
            ],
            env={**base, **files.env},
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    wait_for(
        lambda: proc.poll() is not None or "serving on" in (tmp_path / "runtime.log").read_text(),
        timeout=30,
        what="the runtime pod listening",
    )
    assert proc.poll() is None, (tmp_path / "runtime.log").read_text()
    return proc, cfg, files


def pod_address() -> str:
    """A non-loopback IPv4 address of this machine (EndpointSlices refuse loopback ones) for the runtime pod."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.254", 9))  # no packet is sent: this only picks the address of the outgoing route
            ip = s.getsockname()[0]
        except OSError:
            ip = ""
    if not ip or ip.startswith(("127.", "169.254.")):
        pytest.skip("no non-loopback IPv4 address to give the runtime pod (EndpointSlices refuse loopback)")
    return ip


def two_free_ports(ip: str) -> int:
    """A port P on ``ip`` with P + 1 free too."""
    for _ in range(50):
        with socket.socket() as a, socket.socket() as b:
            a.bind((ip, 0))
            port = a.getsockname()[1]
            try:
                b.bind((ip, port + 1))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no two consecutive free ports on {ip}")


def pairs(table: list[dict] | None) -> list[tuple[int, int]]:
    return [(b["minBatch"], b["steps"]) for b in table or []]


def publish_ready_endpoint(cluster: Cluster, name: str, pod: str, ip: str, cfg: RuntimeConfig) -> None:
    """What the Deployment and EndpointSlice controllers would write once the pod is ready."""
    cluster.make_ready("apps/v1", "deployments", name)
    cluster.create(
        "discovery.k8s.io/v1",
        "endpointslices",
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{names.headless_service(name)}-0",
                "labels": {"kubernetes.io/service-name": names.headless_service(name)},
            },
            "addressType": "IPv4",
            "endpoints": [
                {
                    "addresses": [ip],
                    "conditions": {"ready": True},
                    "targetRef": {"kind": "Pod", "name": pod, "namespace": cluster.namespace},
                }
            ],
            "ports": [
                {"name": "http", "port": cfg.server.port, "protocol": "TCP"},
                {"name": "control", "port": cfg.server.control_port, "protocol": "TCP"},
            ],
        },
    )


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "overrides",
    [(), ("--set", "nameOverride=sd-ops", "--set", "fullnameOverride=platform-sd")],
    ids=["defaults", "name-overrides"],
)
def test_a_default_install_tunes_live_in_a_new_namespace_without_a_secret(env, tmp_path, overrides):
    ip = pod_address()
    tools.run(
        "helm",
        "install",
        RELEASE,
        str(CHART),
        "--namespace",
        OPERATOR_NS,
        "--create-namespace",
        "--set",
        "crds.upgrade=false",  # no Job controller here: the CRD upgrade hook Job would never complete
        *overrides,
        kubeconfig=env.kubeconfig,
        home=tmp_path / "helm",
    )
    with operator_as_the_chart_deploys_it(env, tmp_path) as op:
        # a namespace made after the install: only the ServiceAccount its controller would create
        env.service_account_kubeconfig(NS, "default")
        cluster = Cluster(env.configuration(), NS)
        port = two_free_ports(ip)  # the runtime's port and control port (the next one)
        cluster.create_sdd(sdd("live", "Live", 3, port))
        wait_for(
            lambda: cluster.get("apps/v1", "deployments", "live"),
            timeout=SLACK,
            interval=0.2,
            what=f"the runtime Deployment:\n{op.log_tail()}",
        )
        proc, cfg, files = runtime_pod(env, cluster, "live", tmp_path, ip)
        try:
            publish_ready_endpoint(cluster, "live", "live-0", ip, cfg)
            log = tmp_path / "runtime.log"
            try:
                wait_for(
                    lambda: f"PUT {STEPS_PATH} HTTP/1.1 200" in log.read_text(),
                    timeout=SLACK,
                    interval=0.2,
                    what="an accepted step-table PUT",
                )
            except AssertionError as e:
                raise AssertionError(
                    f"{e}\nruntime:\n{log.read_text()[-3000:]}\noperator:\n{op.log_tail()}\n"
                    f"status: {cluster.get_sdd('live').get('status')}"
                ) from None
            pushes = [line for line in log.read_text().splitlines() if line.startswith(f"PUT {STEPS_PATH}")]
            assert pushes and all(line.endswith(" 200") for line in pushes), pushes
            # the runtime runs the table the tuner reports, moved from the rendered 3 steps
            operator_token = token_request(
                env, OPERATOR_NS, op.service_account, files.env["SPECDECODE_CONTROL_AUDIENCE"], 600
            )

            def same_table():
                req = urllib.request.Request(
                    f"http://{ip}:{cfg.server.control_port}{STEPS_PATH}",
                    headers={"Authorization": f"Bearer {operator_token}"},
                )
                with urllib.request.urlopen(req, timeout=5) as r:
                    running = json.loads(r.read())["table"]
                reported = ((cluster.get_sdd("live").get("status") or {}).get("speculative") or {}).get("stepTable")
                return running if pairs(running) == pairs(reported) else None

            running = wait_for(same_table, timeout=SLACK, interval=0.2, what="status and runtime agree")
            assert running[0]["steps"] != 3, running
            # nothing but the ServiceAccount token could have been accepted: the shared token's file is absent
            assert not os.path.exists(files.path(cfg.server.token_file))
            # the operator counts them as it should, on the /metrics the chart secures
            assert check_metrics_access(env, op) >= len(pushes)
            # checked while the pod still runs: a push to a stopped pod fails, as it should
            events = [e for e in cluster.list("v1", "events") if e["involvedObject"]["name"] == "live"]
            bad = [
                f"{e['reason']}: {e['message']}"
                for e in events
                if e["reason"] in ("ControlTokenUnavailable", "StepTablePushFailed")
            ]
            assert not bad, bad
            pushes = [line for line in log.read_text().splitlines() if line.startswith(f"PUT {STEPS_PATH}")]
            assert all(line.endswith(" 200") for line in pushes), pushes
        finally:
            proc.terminate()
            proc.wait(10)
        assert cluster.list("v1", "secrets") == [], "Live step control made a Secret"
        assert condition(cluster.get_sdd("live"), "SpecValid")["status"] == "True"
        cluster.close()
