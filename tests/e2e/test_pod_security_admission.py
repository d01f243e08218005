"""The real kube-apiserver's PodSecurity admission, enforcing `restricted` on a namespace, admits the runtime pods
the operator renders and the operator's own pod from the chart; a privileged pod is refused, so enforcement is on.
(The table-driven check of every control is tests/chart/test_pod_security.py.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.render import RenderOptions, render

ROOT = Path(__file__).resolve().parents[2]


def _pod(name: str, template: dict) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": template["metadata"].get("labels", {})},
        "spec": template["spec"],
    }


def pods() -> list[tuple[str, dict]]:
    out = []
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        sdd = yaml.safe_load(path.read_text())
        if "hostPath" in (sdd["spec"].get("runtime", {}).get("modelVolume") or {}):
            sdd["spec"]["runtime"]["modelVolume"] = {"persistentVolumeClaim": {"claimName": "models", "readOnly": True}}
        for m in render(parse(sdd), RenderOptions()):
            if m["kind"] == "Deployment":
                out.append((f"{path.stem}", m["spec"]["template"]))
            elif m["kind"] == "LeaderWorkerSet":
                out.append((f"{path.stem}-worker", m["spec"]["leaderWorkerTemplate"]["workerTemplate"]))
    from tests.chart.chartlib import one
    from tests.chart.chartlib import render as render_chart

    out.append(("operator", one(render_chart(), "Deployment")["spec"]["template"]))
    return out


def test_restricted_namespace_admits_the_rendered_pods(apiserver_bed):
    env = apiserver_bed.env
    ns = f"pss-{uuid.uuid4().hex[:6]}"
    status, body = env.request(
        "POST",
        "/api/v1/namespaces",
        {
            "metadata": {
                "name": ns,
                "labels": {
                    "pod-security.kubernetes.io/enforce": "restricted",
                    "pod-security.kubernetes.io/enforce-version": "latest",
                },
            }
        },
    )
    assert status == 201, body
    for name, template in pods():
        status, body = env.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", _pod(name, template))
        assert status == 201, (name, body.get("message") if isinstance(body, dict) else body)
    privileged = _pod("privileged", pods()[0][1])
    privileged["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    status, body = env.request("POST", f"/api/v1/namespaces/{ns}/pods?dryRun=All", privileged)
    assert status == 403 and "restricted" in body.get("message", ""), body
