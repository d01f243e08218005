"""controlAuth: by default the operator requests a short-lived token of its own ServiceAccount per deployment
(TokenRequest, granted on that ServiceAccount by name in the release namespace only) and mounts no long-lived
runtime-audience token; mode Secret grants no TokenRequest and keeps the Secret grants."""

from specdecode_operator.config import OperatorConfig
from tests.chart.chartlib import NAMESPACE, of_kind, one, render


def operator_pod(values=None) -> dict:
    return one(render(values or {}), "Deployment")["spec"]["template"]["spec"]


def token_request_rules(docs) -> list[tuple[str | None, dict]]:
    return [
        (role["metadata"].get("namespace"), rule)
        for role in of_kind(docs, "Role") + of_kind(docs, "ClusterRole")
        for rule in role["rules"]
        if "serviceaccounts/token" in rule.get("resources", [])
    ]


def test_default_requests_per_deployment_tokens_of_its_own_service_account_only():
    docs = render({})
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    assert not [v for v in pod["volumes"] if "projected" in v], "no long-lived runtime-audience token is mounted"
    container = pod["containers"][0]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    (sa_env,) = [e for e in container["env"] if e["name"] == "SPECDECODE_CONTROL_SERVICE_ACCOUNT"]
    assert sa_env["valueFrom"] == {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}
    config = OperatorConfig.from_env({**env, "SPECDECODE_CONTROL_SERVICE_ACCOUNT": pod["serviceAccountName"]})
    assert config.control_auth == "ServiceAccount" and config.control_audience == "specdecode-runtime"
    ((ns, rule),) = token_request_rules(docs)
    assert ns == NAMESPACE and rule["verbs"] == ["create"] and rule["resourceNames"] == [pod["serviceAccountName"]]
    assert not [r for r in of_kind(docs, "ClusterRole") if r["metadata"]["name"].endswith("-control-token")]
    assert not [b for b in of_kind(docs, "RoleBinding") if b["roleRef"]["name"].endswith("-control-token")]


def test_secret_mode_requests_no_tokens():
    docs = render({"controlAuth": {"mode": "Secret"}, "rbac": {"controlTokenNamespaces": ["llm"]}})
    pod = one(docs, "Deployment")["spec"]["template"]["spec"]
    env = {e["name"]: e["value"] for e in pod["containers"][0]["env"] if "value" in e}
    assert OperatorConfig.from_env(env).control_auth == "Secret"
    assert token_request_rules(docs) == []
    assert [
        b["metadata"]["namespace"] for b in of_kind(docs, "RoleBinding") if "-control-token" in b["roleRef"]["name"]
    ] == ["llm"]
