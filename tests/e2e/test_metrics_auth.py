"""The operator's secure /metrics on a real kube-apiserver: HTTPS with a self-signed certificate, TokenReview and
SubjectAccessReview under the chart's RBAC for the operator, and the chart's metrics-reader ClusterRole.

A ServiceAccount bound to the metrics-reader role -> 200 with the exposition; an authenticated ServiceAccount
without it -> 403; no token or a token the API server does not know -> 401. The operator's reviews are allowed by
the chart's ClusterRole (none refused, per the audit log), and answers are cached per token.
"""

from __future__ import annotations

import aiohttp
import kubernetes
import yaml

from specdecode_operator.endpoints import Endpoints
from specdecode_operator.metrics import OperatorMetrics
from specdecode_operator.metrics_auth import MetricsAuth, server_context
from tests.k8s.apiserver import chart_rbac, kubectl
from tests.k8s.cluster import unique_namespace
from tests.k8s.envtest import free_port


def token_of(env, ns: str, name: str) -> str:
    env.service_account_kubeconfig(ns, name)  # the namespace and ServiceAccount
    status, out = env.request(
        "POST",
        f"/api/v1/namespaces/{ns}/serviceaccounts/{name}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}},
    )
    assert status == 201, out
    return out["status"]["token"]


async def test_metrics_answer_200_403_401_by_token(apiserver_bed):
    bed, env = apiserver_bed, apiserver_bed.env
    ns = unique_namespace()
    kubectl(env.kubeconfig, "create", "namespace", ns)
    bed.grant(ns)  # the chart's RBAC for the operator (its ClusterRole holds the review grants)
    reader = [
        d
        for d in chart_rbac({"metrics": {"enabled": True, "port": 8080, "secure": True}})
        if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-metrics-reader")
    ]
    assert len(reader) == 1
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"prometheus-{ns}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": reader[0]["metadata"]["name"],
        },
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": ns}],
    }
    kubectl(
        env.kubeconfig,
        "apply",
        "--server-side",
        "--field-manager=e2e-setup",
        "-f",
        "-",
        input=yaml.safe_dump_all([*reader, binding]),
    )
    prometheus, nobody = token_of(env, ns, "prometheus"), token_of(env, ns, "nobody")

    cfg = kubernetes.client.Configuration()
    kubernetes.config.load_kube_config(config_file=str(bed.operator_kubeconfig), client_configuration=cfg)
    api = kubernetes.client.ApiClient(cfg)
    metrics = OperatorMetrics()
    metrics.reconciles.labels("ok").inc()
    mark = env.audit_offset()
    port = free_port()
    endpoints = await Endpoints(
        metrics.registry,
        lambda: (True, {}),
        metrics_port=port,
        health_port=None,
        host="127.0.0.1",
        metrics_auth=MetricsAuth(api),
        metrics_tls=server_context(None, ["localhost", "127.0.0.1"]),
    ).start()
    try:
        async with aiohttp.ClientSession() as session:

            async def scrape(token: str | None) -> tuple[int, str]:
                headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
                async with session.get(f"https://127.0.0.1:{port}/metrics", headers=headers, ssl=False) as r:
                    return r.status, await r.text()

            status, body = await scrape(prometheus)
            assert status == 200 and 'specdecode_operator_reconciles_total{result="ok"} 1.0' in body
            assert (await scrape(nobody))[0] == 403
            assert (await scrape(None))[0] == 401
            assert (await scrape("not-a-token"))[0] == 401
            reviews = len(
                [
                    e
                    for e in env.audit_events(mark, user=bed.operator_user)
                    if e["objectRef"]["resource"] == "tokenreviews"
                ]
            )
            assert (await scrape(prometheus))[0] == 200  # cached: no second review
            assert (
                len(
                    [
                        e
                        for e in env.audit_events(mark, user=bed.operator_user)
                        if e["objectRef"]["resource"] == "tokenreviews"
                    ]
                )
                == reviews
            )
            try:  # plain HTTP is not served on the secure port
                async with session.get(f"http://127.0.0.1:{port}/metrics") as r:
                    assert r.status == 400
            except aiohttp.ClientError:
                pass
    finally:
        await endpoints.stop()
        api.close()
    used = {
        (e["objectRef"]["resource"], e["responseStatus"]["code"])
        for e in env.audit_events(mark, user=bed.operator_user)
    }
    assert ("tokenreviews", 201) in used and ("subjectaccessreviews", 201) in used
    assert bed.forbidden(mark) == []
