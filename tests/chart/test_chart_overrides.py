"""nameOverride and fullnameOverride rename objects and change nothing that selects: the operator's Deployment,
Service, PodDisruptionBudget and ServiceMonitor still select the operator pods, and the control-port NetworkPolicy the
operator renders for each SpecDecodeDeployment (configured from the chart's own environment) still admits them, so
Live step control keeps working."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.config import OperatorConfig
from specdecode_operator.render import RenderOptions
from specdecode_operator.render import render as render_sdd
from tests.chart.chartlib import NAMESPACE, one, render

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES = {
    "none": {},
    "nameOverride": {"nameOverride": "sd-ops"},
    "fullnameOverride": {"fullnameOverride": "platform-spec-operator"},
    "both": {"nameOverride": "x", "fullnameOverride": "y"},
}
MONITORED = {
    "replicaCount": 2,
    "metrics": {"enabled": True, "assumeMonitoringAPI": True, "serviceMonitor": {"enabled": True}},
}


def selects(selector: dict, labels: dict) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def operator_pod_labels(docs: list[dict]) -> dict:
    return one(docs, "Deployment")["spec"]["template"]["metadata"]["labels"]


@pytest.mark.parametrize("case", list(OVERRIDES))
def test_the_charts_own_selectors_still_select_the_operator_pods(case):
    docs = render({**MONITORED, **OVERRIDES[case]})
    pods = operator_pod_labels(docs)
    dep = one(docs, "Deployment")
    assert selects(dep["spec"]["selector"]["matchLabels"], pods)
    service = one(docs, "Service")
    assert selects(service["spec"]["selector"], pods)
    assert selects(one(docs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], pods)
    monitor = one(docs, "ServiceMonitor")
    assert selects(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    assert {e["port"] for e in monitor["spec"]["endpoints"]} <= {p["name"] for p in service["spec"]["ports"]}
    if OVERRIDES[case]:  # the override did rename the objects
        assert dep["metadata"]["name"] != one(render(MONITORED), "Deployment")["metadata"]["name"]


@pytest.mark.parametrize("case", list(OVERRIDES))
def test_the_control_port_network_policy_still_admits_the_operator(case):
    docs = render({**MONITORED, **OVERRIDES[case]})
    container = one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    config = OperatorConfig.from_env(env)  # the operator as the chart configures it
    sdd = parse(yaml.safe_load((ROOT / "examples" / "pcie8-glm5-eagle3.yaml").read_text()))
    options = RenderOptions(operator_namespace=config.operator_namespace, operator_labels=dict(config.operator_labels))
    (policy,) = [m for m in render_sdd(sdd, options) if m["kind"] == "NetworkPolicy"]
    control = sdd.spec.runtime.controlPort
    (rule,) = [r for r in policy["spec"]["ingress"] if {"protocol": "TCP", "port": control} in r.get("ports", [])]
    (peer,) = rule["from"]
    assert peer["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": NAMESPACE}
    assert selects(peer["podSelector"]["matchLabels"], operator_pod_labels(docs)), (
        f"the operator pods {operator_pod_labels(docs)} are not admitted to the control port by {peer}"
    )
