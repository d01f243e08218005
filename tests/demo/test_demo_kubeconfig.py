"""`specdecode demo --kubeconfig` against a real kube-apiserver, with the operator in its own process under the
chart's RBAC, as in a cluster. Nothing runs pods here (no scheduler, no kubelet), so the demo must show the objects
the operator made and the conditions it reported, and say plainly that nothing was measured."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from tests.k8s.apiserver import OperatorProcess
from tests.k8s.realapi import ApiServer

TESTS = Path(__file__).resolve().parents[1]

ROOT = TESTS.parent
NAMESPACE = "demo-real"


def test_demo_against_a_real_api_server(apiserver_bed, tmp_path):
    """On the session's API server (tests/conftest.py), prepared like a user's cluster (CRDs by kubectl, the chart's
    RBAC); the demo's objects live in a namespace of this test's own."""
    api = ApiServer(apiserver_bed.env.kubeconfig)
    api.ensure_namespace(NAMESPACE)
    apiserver_bed.grant(NAMESPACE)  # the chart's RBAC for an operator watching this namespace
    sdd = yaml.safe_load((ROOT / "examples" / "pcie8-glm5-eagle3.yaml").read_text())
    sdd["metadata"]["namespace"] = NAMESPACE
    sdd_file = tmp_path / "sdd.yaml"
    sdd_file.write_text(yaml.safe_dump(sdd))
    mark = apiserver_bed.env.audit_offset()
    with OperatorProcess(
        apiserver_bed.operator_kubeconfig,
        (NAMESPACE,),
        tmp_path / "operator.log",
        resync_seconds=1.0,
        request_timeout=5.0,
    ) as operator:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "specdecode_operator.cli",
                "demo",
                "--kubeconfig",
                str(apiserver_bed.env.kubeconfig),
                "-f",
                str(sdd_file),
                "--out",
                str(tmp_path / "out"),
                "--max-seconds",
                "12",
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
            env={**os.environ, "COLUMNS": "200"},
        )
        log = operator.log_tail()
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out[-4000:]
    assert done.returncode == 1, out[-4000:]  # nothing measured: no pod ran
    assert "applied sdd/glm5-pcie" in out
    table = out.split("children of SpecDecodeDeployment (cluster)")[1].split("CONDITION")[0]
    for kind, child in (
        ("ConfigMap", "glm5-pcie-runtime"),
        ("Service", "glm5-pcie-headless"),
        ("Deployment", "glm5-pcie"),
        ("PodDisruptionBudget", "glm5-pcie"),
        ("NetworkPolicy", "glm5-pcie-control"),
        ("ServiceMonitor", "glm5-pcie"),
    ):
        assert re.search(rf"│ {kind} +│ {child} +│ SpecDecodeDeployment/glm5-pcie +│ specdecode-operator", table), (
            f"{kind} {child} missing from the demo's object table:\n{out}"
        )
    assert "SIMULATED" not in out and "simulated" not in out, "a real cluster's run must not claim simulated numbers"
    assert "nothing measured yet: Ready=False" in out
    summary = yaml.safe_load((tmp_path / "out" / "summary.yaml").read_text())
    assert summary["simulated"] is False
    assert summary["tokens_per_s"] == {"measured": None}
    assert summary["conditions"]["SpecValid"] == "True"
    assert summary["conditions"]["Ready"] == "False"  # no pod of the Deployment is ready
    obj = api.call("GET", f"/apis/specdecode.io/v1alpha1/namespaces/{NAMESPACE}/specdecodedeployments/glm5-pcie")
    assert obj["status"]["observedGeneration"] == 1
    deployment = api.call("GET", f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments/glm5-pcie")
    assert deployment["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]
    assert apiserver_bed.forbidden(mark) == [], log[-3000:]
    api.close()
