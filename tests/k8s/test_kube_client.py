"""The operator's API client against a server whose kept-alive connections go silent (a network fault leaves them
half-open) while new connections work: one timed-out request retires every connection opened before it, so the
retry goes out on a fresh one instead of timing out once per dead idle connection."""

from __future__ import annotations

import asyncio

import kubernetes
from aiohttp import web

from specdecode_operator.kube_client import KubeClient

TIMEOUT_S = 0.5  # the client's request timeout in this test
CONNECTIONS = 4


async def test_a_timeout_retires_the_connections_opened_before_it():
    frozen: set = set()  # transports (connections) that carry no answer any more
    seen: set = set()

    async def handler(request: web.Request) -> web.Response:
        transport = request.transport
        seen.add(transport)
        if transport in frozen:
            await asyncio.sleep(60)  # silent: the client's timeout decides
        await asyncio.sleep(0.05)  # concurrent requests each hold a connection open
        return web.json_response({"kind": "ConfigMap", "metadata": {"name": request.match_info["name"]}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/{ns}/configmaps/{name}", handler)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    cfg = kubernetes.client.Configuration()
    cfg.host = f"http://127.0.0.1:{port}"
    client = KubeClient(cfg, timeout=TIMEOUT_S, retries=6, backoff=0.01, workers=CONNECTIONS)
    try:
        await asyncio.gather(*(client.get("v1", "configmaps", "default", f"warm-{i}") for i in range(CONNECTIONS)))
        assert len(seen) == CONNECTIONS  # that many kept-alive connections in the client's pool
        frozen.update(seen)
        calls = client.calls
        started = asyncio.get_running_loop().time()
        got = await client.get("v1", "configmaps", "default", "after")
        assert got["metadata"]["name"] == "after"
        # one attempt on a dead connection (its timeout), then the retry on a new connection
        assert client.calls - calls == 2
        assert asyncio.get_running_loop().time() - started < 2 * TIMEOUT_S + 1.0
    finally:
        await client.close()
        await runner.cleanup()
