"""The operator's own HTTP endpoints: ``/metrics`` (prometheus-client exposition of its registry) and ``/healthz``.

Why not prometheus-client's ``start_http_server``: a thread per connection and no deadline, so slow clients hold
threads forever. Both endpoints here are served by aiohttp with the project's limits (``http_limits``): a request
head must arrive within the deadline, headers are capped, and only GET is routed (no request body is ever read).
``/healthz`` answers on standby replicas too (they run no kopf), so probes keep a waiting replica alive.

``/metrics`` is served over HTTPS to authenticated, authorized scrapers when ``metrics_auth`` is given
(``metrics_auth.py``, the chart's default); plain HTTP for anyone otherwise (local runs, ``metrics.secure: false``).
"""

from __future__ import annotations

import json
import socket
from typing import Callable
from urllib.parse import urlparse

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from specdecode_runtime.contract.http_limits import SERVER_LIMITS

HealthFn = Callable[[], tuple[bool, dict]]  # -> (healthy, details for the JSON body)
# A 503 of /metrics: the API server could not review the token (or reviews are saturated); uncached tokens are
# answered 503 without a call for metrics_auth.OUTAGE_SECONDS after a failure, so a retry sooner is wasted.
RETRY_AFTER_SECONDS = 2


class Endpoints:
    def __init__(
        self,
        registry,
        health: HealthFn,
        *,
        metrics_port: int,
        health_port: int | None,
        host: str = "0.0.0.0",
        metrics_auth=None,
        metrics_tls=None,
    ) -> None:
        self.registry, self.health = registry, health
        self.metrics_port, self.health_port, self.host = metrics_port, health_port, host
        self.metrics_auth, self.metrics_tls = metrics_auth, metrics_tls
        self._runners: list[web.AppRunner] = []
        self.ports: dict[str, int] = {}

    async def _metrics(self, request: web.Request) -> web.Response:
        if self.metrics_auth is not None:
            status = await self.metrics_auth.status(request.headers.get("Authorization"))
            if status != 200:
                # The body says no more than the status: no role, user or reason (metrics_auth logs those).
                why = {
                    401: "a bearer token the API server authenticates is required",
                    403: "the caller is not allowed to read /metrics",
                    503: "the token cannot be reviewed now; try again later",
                }[status]
                headers = {
                    401: {"WWW-Authenticate": 'Bearer realm="specdecode-operator"'},
                    503: {"Retry-After": str(RETRY_AFTER_SECONDS)},
                }.get(status, {})
                return web.Response(text=why + "\n", status=status, headers=headers)
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        ok, details = self.health()
        return web.Response(text=json.dumps(details), status=200 if ok else 503, content_type="application/json")

    async def _serve(self, name: str, port: int, path: str, handler, ssl_context=None) -> None:
        app = web.Application(client_max_size=1024)
        app.router.add_get(path, handler)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0, **SERVER_LIMITS)
        await runner.setup()
        await web.TCPSite(runner, self.host, port, ssl_context=ssl_context).start()
        self._runners.append(runner)
        self.ports[name] = int(runner.addresses[0][1])

    async def start(self) -> Endpoints:
        if self.metrics_port:
            await self._serve("metrics", self.metrics_port, "/metrics", self._metrics, self.metrics_tls)
        if self.health_port:
            await self._serve("healthz", self.health_port, "/healthz", self._healthz)
        return self

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()
        self._runners.clear()


def port_of(url: str | None) -> int | None:
    """The port of a liveness URL such as ``http://0.0.0.0:8081/healthz`` (None: no health endpoint)."""
    if not url:
        return None

    return urlparse(url).port


def secure_metrics(config) -> dict:
    """``Endpoints`` keyword arguments for the configured /metrics: authentication, authorization and TLS when
    ``config.metrics_secure``, nothing (plain HTTP) otherwise."""
    if not config.metrics_secure or not config.metrics_port:
        return {}

    import kubernetes

    from .kube_client import kube_configuration
    from .metrics_auth import MetricsAuth, server_context

    api = kubernetes.client.ApiClient(kube_configuration(config))
    names = [socket.gethostname(), "localhost", "127.0.0.1"]
    return {"metrics_auth": MetricsAuth(api), "metrics_tls": server_context(config.metrics_cert_dir, names)}
