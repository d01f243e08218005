"""The operator's secure /metrics on a real kube-apiserver: HTTPS with a self-signed certificate, TokenReview and
SubjectAccessReview under the chart's RBAC for the operator, and the chart's metrics-reader ClusterRole.

A ServiceAccount bound to the metrics-reader role -> 200 with the exposition; an authenticated ServiceAccount
without it -> 403; no token or a token the API server does not know -> 401. The operator's reviews are allowed by
the chart's ClusterRole (none refused, per the audit log), and answers are cached per token.
"""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import kubernetes
import yaml

from specdecode_operator.endpoints import Endpoints
from specdecode_operator.metrics import OperatorMetrics
from specdecode_operator.metrics_auth import CACHE_MAX, MetricsAuth, server_context
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


async def test_metrics_answer_200_403_401_by_token(apiserver_bed, caplog):
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
        metrics_auth=(auth := MetricsAuth(api)),
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
            with caplog.at_level(logging.INFO, logger="specdecode.operator"):
                status, body = await scrape(nobody)
            assert status == 403
            # the body names no role, user or reason; the log does
            assert body == "the caller is not allowed to read /metrics\n"
            assert f"system:serviceaccount:{ns}:nobody may not get /metrics" in caplog.text
            assert "metrics-reader" in caplog.text
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
            # a flood of unknown tokens, each one TokenReview the API server refuses: the refusals are cached apart,
            # so they push no decided token out (no review for the scraper after the flood)
            for i in range(CACHE_MAX + 44):
                assert (await scrape(f"unknown-{i}"))[0] == 401
            before = auth.reviews
            assert (await scrape(prometheus))[0] == 200 and (await scrape(nobody))[0] == 403
            assert (await scrape("unknown-0"))[0] == 401  # a refusal is cached too
            assert auth.reviews == before
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


async def _stalled_server():
    """A TCP server that accepts connections and never answers (a stalled API server)."""
    held: list = []

    async def hold(reader, writer):
        held.append(writer)
        await asyncio.sleep(3600)

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    return server, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"


async def test_an_api_server_outage_is_a_fast_503_that_holds_no_shared_thread():
    """Unreachable: 503 at once. Stalled: the first scrapes wait at most the review deadline, every later one gets
    503 at once; at most MAX_INFLIGHT reviews run; the event loop's default thread pool stays free throughout."""
    import time

    from specdecode_operator import metrics_auth

    refused = kubernetes.client.Configuration()
    refused.host = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    auth = MetricsAuth(kubernetes.client.ApiClient(refused))
    started = time.monotonic()
    assert await auth.status("Bearer a-token") == 503
    assert time.monotonic() - started < metrics_auth.REVIEW_DEADLINE
    auth.close()

    server, url = await _stalled_server()
    stalled = kubernetes.client.Configuration()
    stalled.host = url
    auth = MetricsAuth(kubernetes.client.ApiClient(stalled))
    try:
        started = time.monotonic()
        scrapes = asyncio.gather(*(auth.status(f"Bearer token-{i}") for i in range(32)))
        await asyncio.sleep(0.2)
        # meanwhile the default pool (asyncio.to_thread, kopf's sync handlers) is not held by the stalled reviews
        assert await asyncio.wait_for(asyncio.to_thread(lambda: "free"), timeout=1.0) == "free"
        answers = await scrapes
        assert set(answers) == {503}
        assert time.monotonic() - started < metrics_auth.REVIEW_DEADLINE + 1.5
        assert auth.reviews <= metrics_auth.MAX_INFLIGHT
        started = time.monotonic()
        assert await auth.status("Bearer another") == 503  # during the outage: no call, no wait
        assert time.monotonic() - started < 0.5 and auth.reviews <= metrics_auth.MAX_INFLIGHT
    finally:
        auth.close()
        server.close()


class _Answers:
    """A stand-in for MetricsAuth that answers each scrape with the next status."""

    def __init__(self, *statuses: int):
        self.statuses = list(statuses)

    async def status(self, _header: str | None) -> int:
        return self.statuses.pop(0)


async def test_refusals_name_nothing_and_a_503_says_when_to_retry():
    """401 carries the Bearer challenge, 403 only says the caller is not allowed (no ClusterRole, user or reason),
    and 503 (the API server cannot review now) carries Retry-After, in whole seconds."""
    from specdecode_operator import endpoints as endpoints_module
    from specdecode_operator.metrics_auth import OUTAGE_SECONDS

    metrics = OperatorMetrics()
    served = await Endpoints(
        metrics.registry,
        lambda: (True, {}),
        metrics_port=free_port(),
        health_port=None,
        host="127.0.0.1",
        metrics_auth=_Answers(401, 403, 503),
    ).start()
    try:
        async with aiohttp.ClientSession() as session:
            answers = []
            for _ in range(3):
                async with session.get(f"http://127.0.0.1:{served.ports['metrics']}/metrics") as r:
                    answers.append((r.status, dict(r.headers), await r.text()))
    finally:
        await served.stop()
    (s401, h401, _), (s403, h403, b403), (s503, h503, b503) = answers
    assert (s401, s403, s503) == (401, 403, 503)
    assert h401["WWW-Authenticate"].startswith("Bearer ")
    assert b403 == "the caller is not allowed to read /metrics\n" and "Retry-After" not in h403
    assert "ClusterRole" not in b403 and "metrics-reader" not in b403
    assert h503["Retry-After"] == str(endpoints_module.RETRY_AFTER_SECONDS)
    assert endpoints_module.RETRY_AFTER_SECONDS >= OUTAGE_SECONDS  # no retry lands inside the outage window
    assert "Retry-After" not in h401
