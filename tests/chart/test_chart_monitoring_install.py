"""The chart's monitoring on a real kube-apiserver with the real helm: what kube-prometheus-stack meets.

1. On a cluster without the prometheus-operator CRDs, `helm install` with the ServiceMonitor and PrometheusRule
   switched on succeeds and leaves them out (its NOTES say so); once the CRDs are installed, `helm upgrade` adds them.
2. Prometheus' side, followed field by field from the installed ServiceMonitor: the bearer token from
   ``authorization.credentials`` (the chart's metrics-scraper ServiceAccount token Secret, filled here as the token
   controller fills it), the CA from ``tlsConfig.ca`` (the cert-manager Secret ``metrics.certSecret``) and
   ``serverName``. The operator's /metrics endpoint, reviewing tokens with the chart's operator ServiceAccount and
   serving that Secret as the kubelet mounts it, answers 200 to that scrape, verified; a renewed certificate is
   served at the next scrape. The scraper's token may get /metrics and nothing else.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl

import kubernetes
import pytest
import yaml

from specdecode_operator.endpoints import Endpoints
from specdecode_operator.metrics import OperatorMetrics
from specdecode_operator.metrics_auth import MetricsAuth, server_context
from tests.chart.chartlib import CHART
from tests.k8s import tools
from tests.k8s.envtest import free_port
from tests.k8s.realapi import ApiServer, started_environment
from tests.metrics.certs import Issuer, SecretVolume

RELEASE, NAMESPACE = "sd", "specdecode-system"
UPSTREAM = CHART.parents[1] / "tests" / "data" / "upstream-crds"
CERT_SECRET = "sd-metrics-tls"
VALUES = {
    "replicaCount": 1,
    "crds": {"upgrade": False},  # no Job controller here: the hook Job would never complete
    "metrics": {
        "certSecret": CERT_SECRET,
        "serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"enabled": True},
    },
}


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """An API server of this module's own: it starts without the prometheus-operator CRDs."""
    env = started_environment(tmp_path_factory.mktemp("envtest-monitoring"))
    try:
        yield env
    finally:
        env.stop()


@pytest.fixture(scope="module")
def api(env):
    api = ApiServer(env.kubeconfig)
    yield api
    api.close()


def helm(env, home, *args, **kw):
    return tools.run("helm", *args, kubeconfig=env.kubeconfig, home=home, **kw)


def get(api, path: str) -> dict | None:
    try:
        return api.call("GET", path)
    except Exception as e:  # Refusal
        if getattr(e, "status", None) == 404:
            return None
        raise


def install_monitoring_crds(api) -> None:
    for kind in ("servicemonitors", "prometheusrules"):
        api.apply_crd(yaml.safe_load((UPSTREAM / f"monitoring.coreos.com_{kind}.yaml").read_text()))


def secret_value(api, namespace: str, name: str, key: str) -> bytes:
    secret = api.call("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}")
    return base64.b64decode(secret["data"][key])


def fill_token(env, api, secret_name: str) -> None:
    """What the token controller does for a ``kubernetes.io/service-account-token`` Secret: write a token of the
    ServiceAccount it names (here one the API server issues through TokenRequest)."""
    secret = api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{secret_name}")
    sa = secret["metadata"]["annotations"]["kubernetes.io/service-account.name"]
    status, out = env.request(
        "POST",
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{sa}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}},
    )
    assert status == 201, out
    api.call(
        "PATCH",
        f"/api/v1/namespaces/{NAMESPACE}/secrets/{secret_name}",
        {"data": {"token": base64.b64encode(out["status"]["token"].encode()).decode()}},
        content_type="application/merge-patch+json",
    )


def issue_cert_secret(api, issuer: Issuer, leaf) -> None:
    """What cert-manager writes for a Certificate from a CA issuer (created, or updated on renewal)."""
    body = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": CERT_SECRET, "namespace": NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in issuer.secret_data(leaf).items()},
    }
    api.call(
        "PATCH",
        f"/api/v1/namespaces/{NAMESPACE}/secrets/{CERT_SECRET}",
        body,
        query=[("fieldManager", "cert-manager"), ("force", "true")],
        content_type="application/apply-patch+yaml",
    )


def mount(api, volume: SecretVolume) -> None:
    """The kubelet's update of the operator pod's metrics-tls volume from the Secret."""
    secret = api.call("GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{CERT_SECRET}")
    volume.write({k: base64.b64decode(v) for k, v in secret["data"].items()})


async def scrape_as_prometheus(api, monitor: dict, address: tuple[str, int]) -> tuple[bytes, int, str]:
    """One scrape as the prometheus-operator configures it from ``monitor``: (the certificate served, status, body)."""
    (ep,) = monitor["spec"]["endpoints"]
    ns = monitor["metadata"]["namespace"]
    assert ep["scheme"] == "https" and ep["authorization"]["type"] == "Bearer"
    cred = ep["authorization"]["credentials"]
    token = secret_value(api, ns, cred["name"], cred["key"]).decode()
    ca = ep["tlsConfig"]["ca"]["secret"]
    client = ssl.create_default_context(cadata=secret_value(api, ns, ca["name"], ca["key"]).decode())
    server_name = ep["tlsConfig"]["serverName"]
    reader, writer = await asyncio.open_connection(*address, ssl=client, server_hostname=server_name)
    try:
        served = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        writer.write(
            (
                f"GET {ep['path']} HTTP/1.1\r\nHost: {server_name}\r\nAuthorization: Bearer {token}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
        )
        await writer.drain()
        raw = (await reader.read()).decode()
    finally:
        writer.close()
    head, _, body = raw.partition("\r\n\r\n")
    return served, int(head.split()[1]), body


def may(env, token: str, attributes: dict) -> bool:
    status, out = env.request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview", "spec": attributes},
        token=token,
    )
    assert status == 201, out
    return out["status"]["allowed"]


async def test_install_without_the_crds_then_the_scrape_prometheus_makes(env, api, tmp_path):
    home = tmp_path / "helm"
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    monitors = f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/servicemonitors"

    # 1. no prometheus-operator CRDs: the install succeeds, without the kinds the cluster lacks
    done = helm(env, home, "install", RELEASE, str(CHART), "-n", NAMESPACE, "--create-namespace", "-f", str(values))
    assert "no ServiceMonitor was installed" in done.stdout and "no PrometheusRule was installed" in done.stdout
    manifest = helm(env, home, "get", "manifest", RELEASE, "-n", NAMESPACE).stdout
    objects = [d for d in yaml.safe_load_all(manifest) if d]
    assert "Deployment" in {d["kind"] for d in objects}
    assert not {"ServiceMonitor", "PrometheusRule"} & {d["kind"] for d in objects}
    # the scraper's credentials serve only the ServiceMonitor
    assert not [d for d in objects if d["metadata"]["name"].endswith(("-metrics-scraper", "-metrics-scraper-token"))]

    # ... installed later: the next upgrade finds them
    install_monitoring_crds(api)
    done = helm(env, home, "upgrade", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values))
    assert "was installed" not in done.stdout
    (monitor,) = api.call("GET", monitors)["items"]
    assert api.call("GET", f"/apis/monitoring.coreos.com/v1/namespaces/{NAMESPACE}/prometheusrules")["items"]
    assert "bearerTokenFile" not in json.dumps(monitor)

    # 2. what the cluster's controllers would do: the scraper's token, cert-manager's certificate, the mount
    fill_token(env, api, monitor["spec"]["endpoints"][0]["authorization"]["credentials"]["name"])
    issuer = Issuer()
    service = f"{RELEASE}-specdecode-operator-metrics"
    first, renewed = issuer.issue(f"{service}.{NAMESPACE}.svc"), issuer.issue(f"{service}.{NAMESPACE}.svc")
    issue_cert_secret(api, issuer, first)
    volume = SecretVolume(tmp_path / "metrics-tls")
    mount(api, volume)

    # the operator's endpoint, reviewing tokens as the chart's operator ServiceAccount
    operator_kubeconfig = env.service_account_kubeconfig(NAMESPACE, f"{RELEASE}-specdecode-operator")
    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(operator_kubeconfig), client_configuration=cfg)
    client = kubernetes.client.ApiClient(cfg)
    metrics = OperatorMetrics()
    metrics.set_conditions("uid-1", "llm", "glm5", [{"type": "Ready", "status": "True"}])
    import specdecode_operator.metrics_auth as metrics_auth

    check_seconds, metrics_auth.CERT_CHECK_SECONDS = metrics_auth.CERT_CHECK_SECONDS, 0.0
    try:
        tls = server_context(str(volume.path), ["localhost"])
    finally:
        metrics_auth.CERT_CHECK_SECONDS = check_seconds
    port = free_port()
    endpoints = await Endpoints(
        metrics.registry,
        lambda: (True, {}),
        metrics_port=port,
        health_port=None,
        host="127.0.0.1",
        metrics_auth=MetricsAuth(client),
        metrics_tls=tls,
    ).start()
    try:
        served, status, body = await scrape_as_prometheus(api, monitor, ("127.0.0.1", port))
        assert status == 200, body
        assert served == first.der
        assert 'specdecode_deployment_condition{name="glm5",namespace="llm",status="True",type="Ready"} 1.0' in body

        # cert-manager renews, the kubelet updates the volume: the next scrape verifies the new certificate
        issue_cert_secret(api, issuer, renewed)
        mount(api, volume)
        served, status, _ = await scrape_as_prometheus(api, monitor, ("127.0.0.1", port))
        assert (served, status) == (renewed.der, 200)
    finally:
        await endpoints.stop()
        client.close()

    # least privilege: the scraper's token reads /metrics and nothing else
    cred = monitor["spec"]["endpoints"][0]["authorization"]["credentials"]
    token = secret_value(api, NAMESPACE, cred["name"], cred["key"]).decode()
    assert may(env, token, {"nonResourceAttributes": {"path": "/metrics", "verb": "get"}})
    for attrs in (
        {"resourceAttributes": {"namespace": NAMESPACE, "resource": "secrets", "verb": "get"}},
        {"resourceAttributes": {"namespace": "llm", "resource": "pods", "verb": "list"}},
        {"resourceAttributes": {"group": "specdecode.io", "resource": "specdecodedeployments", "verb": "list"}},
        {"nonResourceAttributes": {"path": "/metrics", "verb": "post"}},
    ):
        assert not may(env, token, attrs), attrs

    # uninstall removes the scraper's identity and its token
    helm(env, home, "uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "60s")
    assert get(api, f"/api/v1/namespaces/{NAMESPACE}/secrets/{cred['name']}") is None
    assert api.call("GET", monitors)["items"] == []


@pytest.mark.parametrize(
    "how",
    [
        (),
        (
            "--api-versions",
            "monitoring.coreos.com/v1/ServiceMonitor",
            "--api-versions",
            "monitoring.coreos.com/v1/PrometheusRule",
        ),
        ("--set", "metrics.assumeMonitoringAPI=true"),
    ],
    ids=["offline", "api-versions", "assume-switch"],
)
def test_helm_template_renders_them_when_told_the_api_is_there(tmp_path, how):
    """GitOps renders offline: `helm template` knows the cluster's APIs only from --api-versions, or the switch."""
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(VALUES))
    out = tools.run("helm", "template", RELEASE, str(CHART), "-n", NAMESPACE, "-f", str(values), *how, home=tmp_path)
    kinds = {d["kind"] for d in yaml.safe_load_all(out.stdout) if d}
    assert ({"ServiceMonitor", "PrometheusRule"} <= kinds) == bool(how), kinds
