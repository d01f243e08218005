"""The rendered runtime identity and control-port policy on a real kube-apiserver (its admission and defaulting).

For a single-node and a multi-node example in ServiceAccount step-control mode, the rendered ServiceAccount and
NetworkPolicy are server-side applied as the operator applies them (strict field validation); the stored policy,
after the API server's defaulting, still admits only the operator's pods to the control port (``netpol.py``). A
pod made from the rendered template is admitted with its ServiceAccount, and the API server mounts no token into it:
the only ServiceAccount token is the projected one the runtime reads the issuer's keys with.
Whether a cluster enforces the policy depends on its network plugin, which this API server does not have.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.render import RenderOptions, names, render
from specdecode_operator.render.control_auth import ControlAuth
from tests.k8s.cluster import unique_namespace
from tests.render.netpol import Pod, admits

ROOT = Path(__file__).resolve().parents[2]
OPERATOR_NS = "specdecode-system"
OPERATOR_LABELS = {"app.kubernetes.io/name": "specdecode-operator", "app.kubernetes.io/instance": "sd"}


def apply(env, path: str, obj: dict) -> dict:
    status, out = env.request(
        "PATCH",
        f"{path}/{obj['metadata']['name']}?fieldManager=specdecode-operator&fieldValidation=Strict&force=true",
        obj,
        content_type="application/apply-patch+yaml",
    )
    assert status in (200, 201), f"{obj['kind']}: {status} {out}"
    return out


@pytest.mark.parametrize("example", ["pcie8-glm5-eagle3", "multinode-tp16-lws"])
def test_the_api_server_takes_the_identity_and_policy_and_mounts_no_token(envtest_environment, example):
    env = envtest_environment
    ns = unique_namespace()
    assert env.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})[0] == 201
    doc = yaml.safe_load((ROOT / "examples" / f"{example}.yaml").read_text())
    doc["metadata"]["namespace"] = ns
    auth = ControlAuth(
        "https://kubernetes.default.svc", "specdecode-runtime", (f"system:serviceaccount:{OPERATOR_NS}:operator",)
    )
    options = RenderOptions(operator_namespace=OPERATOR_NS, operator_labels=OPERATOR_LABELS, control_auth=auth)
    manifests = {m["kind"]: m for m in render(parse(doc), options)}
    name = doc["metadata"]["name"]
    template = (
        manifests["Deployment"]["spec"]["template"]
        if "Deployment" in manifests
        else manifests["LeaderWorkerSet"]["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    )
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {**template["metadata"], "name": f"{name}-0"}}
    pod["spec"] = template["spec"]
    pods = f"/api/v1/namespaces/{ns}/pods"

    account = apply(env, f"/api/v1/namespaces/{ns}/serviceaccounts", manifests["ServiceAccount"])
    assert account["automountServiceAccountToken"] is False
    policy = apply(env, f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies", manifests["NetworkPolicy"])
    status, stored = env.request(
        "GET", f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/{policy['metadata']['name']}"
    )
    assert status == 200
    control = doc["spec"]["runtime"].get("controlPort", 30001)
    labels = template["metadata"]["labels"]
    assert admits(stored, labels, Pod(OPERATOR_NS, dict(OPERATOR_LABELS)), control)
    for other in (Pod(ns, {"app": "client"}), Pod(OPERATOR_NS, {}), Pod(ns, dict(OPERATOR_LABELS))):
        assert not admits(stored, labels, other, control), other

    status, created = env.request("POST", pods, pod)
    assert status == 201, (status, created)
    spec = created["spec"]
    assert spec["serviceAccountName"] == names.service_account(name)
    # no kube-api-access volume: the only token is the projected one the runtime reads the issuer's keys with
    tokens = [
        v["name"]
        for v in spec["volumes"]
        if any("serviceAccountToken" in s for s in (v.get("projected") or {}).get("sources") or [])
    ]
    assert tokens == ["control-issuer"], spec["volumes"]
    assert not [v for v in spec["volumes"] if v.get("secret", {}).get("secretName") == names.control_secret(name)]
