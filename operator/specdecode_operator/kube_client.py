"""The operator's only path to the API server for children and status: one aiohttp session on kopf's event loop,
generic by path; the kubernetes package resolves the credentials (in-cluster, kubeconfig, a fixed test server).

Children are written by server-side apply (``application/apply-patch+yaml``, fieldManager specdecode-operator,
force only on objects we already control), so fields set by others (an HPA's replicas, a mesh's annotations)
survive and our writes are idempotent. Transient faults (409 on our own apply, 429, 5xx, timeouts) are retried
with capped exponential backoff and jitter; everything else surfaces as ApiError with the server's message.

Why aiohttp on the loop and not the kubernetes package's client: the operator is one process held to one core by
the GIL, and the package's client runs each call in a thread (urllib3, its own request serialization), so every
request also paid thread hand-offs and GIL contention with the event loop: 0.63 ms of operator CPU per GET and
1.0 ms per apply against 0.27 and 0.41 ms here (``bench/operator/kube_client_cost.py``), and at most one request in flight
per thread. kopf already talks to the API server through aiohttp on the same loop.
"""

from __future__ import annotations

import asyncio
import collections
import json
import random
import ssl
from typing import Any

import aiohttp
import kubernetes

from . import __version__

FIELD_MANAGER = "specdecode-operator"
USER_AGENT = f"specdecode-operator/{__version__}"
RETRYABLE = {409, 429, 500, 502, 503, 504, 0}


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str, body: dict | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message, self.body = status, reason, message, body or {}


def resource_path(
    api_version: str, plural: str, namespace: str | None, name: str | None = None, subresource: str | None = None
) -> str:
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    path = base + (f"/namespaces/{namespace}" if namespace else "") + f"/{plural}"
    if name:
        path += f"/{name}"
    if subresource:
        path += f"/{subresource}"
    return path


def kube_configuration(config) -> kubernetes.client.Configuration:
    """The kubernetes client's configuration: a fixed server (tests, demo), in-cluster, or kubeconfig."""
    if config.server:
        cfg = kubernetes.client.Configuration()
        cfg.host = config.server
        cfg.verify_ssl = False
        if config.token:
            cfg.api_key = {"BearerToken": config.token}
            cfg.api_key_prefix = {"BearerToken": "Bearer"}
        return cfg
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    return kubernetes.client.Configuration.get_default_copy()


def ssl_context(cfg: kubernetes.client.Configuration) -> ssl.SSLContext | bool | None:
    """TLS as the configuration describes it: its CA (else the system's), a client certificate, or no verification."""
    if not cfg.host.startswith("https"):
        return None
    if not cfg.verify_ssl:
        return False
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    if cfg.assert_hostname is False:
        ctx.check_hostname = False
    return ctx


class KubeClient:
    """Made on the event loop that uses it; ``workers`` bounds the requests in flight (one connection each)."""

    def __init__(
        self,
        configuration: kubernetes.client.Configuration,
        *,
        metrics=None,
        timeout: float = 10.0,
        retries: int = 6,
        backoff: float = 0.2,
        workers: int = 16,
        fence=None,
    ):
        self.configuration = configuration
        self.host = configuration.host.rstrip("/")
        self.metrics = metrics
        self.closed = False
        self.fence = fence  # None, or () -> bool: False refuses every write (this replica lost its Lease)
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self.workers = workers
        self._ssl = ssl_context(configuration)
        self._session: aiohttp.ClientSession | None = None
        self._retired: list[aiohttp.ClientSession] = []
        self.calls = 0
        self.writes = 0
        self.write_counts: collections.Counter = collections.Counter()  # "verb plural[/subresource]" -> writes

    def _open(self) -> aiohttp.ClientSession:
        # Accept-Encoding identity: the API server would gzip large answers, and our answers are read once, on
        # the one core the operator has; uncompressed they cost the loopback or cluster network nothing worth it.
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=self.workers, ssl=self._ssl if self._ssl is not None else True),
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=self.timeout),
            auto_decompress=False,
            json_serialize=json.dumps,
        )

    def _fresh_session(self) -> None:
        """A connection that went silent (half-open after a network fault) is rarely alone: the idle ones opened
        before the fault are as dead, and each would cost the next request a full timeout. Later requests get a
        new session (fresh connections); the old one is closed once the requests still on it have had their
        timeout."""
        old, self._session = self._session, None
        if old is not None:
            self._retired.append(old)
            asyncio.get_running_loop().call_later(self.timeout + 1.0, self._close_retired, old)

    def _close_retired(self, session: aiohttp.ClientSession) -> None:
        if session in self._retired:
            self._retired.remove(session)
            asyncio.ensure_future(session.close())

    async def close(self) -> None:
        self.closed = True
        sessions, self._session = [self._session, *self._retired], None
        self._retired = []
        for session in sessions:
            if session is not None:
                await session.close()

    def _auth_headers(self) -> dict:
        """The bearer token, through the configuration (which re-reads a rotated in-cluster token when due)."""
        auth = self.configuration.auth_settings().get("BearerToken")
        return {auth["key"]: auth["value"]} if auth and auth.get("value") else {}

    async def _call(self, method: str, path: str, query: list, body: Any, content_type: str | None) -> tuple[int, Any]:
        if self._session is None or self._session.closed:
            self._session = self._open()
        headers = self._auth_headers()
        data = None
        if body is not None:
            headers["Content-Type"] = content_type or "application/json"
            data = json.dumps(body, separators=(",", ":"))
        try:
            async with self._session.request(
                method,
                self.host + path,
                params=query or None,
                data=data,
                headers=headers,
                proxy=self.configuration.proxy,
            ) as response:
                raw = await response.read()
                return response.status, _json(raw)
        except TimeoutError as e:  # aiohttp raises it (ServerTimeoutError included) past ClientTimeout
            self._fresh_session()
            return 0, {"reason": "Timeout", "message": f"no answer within {self.timeout:g} s {e}".strip()}
        except (aiohttp.ClientError, OSError) as e:
            return 0, {"reason": "Timeout", "message": str(e) or type(e).__name__}

    async def request(
        self,
        method: str,
        path: str,
        *,
        query: list | None = None,
        body: Any = None,
        content_type: str | None = None,
        verb: str | None = None,
        retry_conflict: bool = True,
    ) -> Any:
        verb = verb or method.lower()
        delay = self.backoff
        for attempt in range(self.retries + 1):
            if self.closed:  # the operator is stopping; a handler kopf left running gets an error, not a crash
                raise ApiError(0, "ShuttingDown", "the operator is stopping")
            if method != "GET" and self.fence is not None and not self.fence():
                raise ApiError(0, "NotLeader", "this replica does not hold the operator Lease: no writes")
            self.calls += 1
            if method in ("POST", "PUT", "PATCH", "DELETE"):
                self.writes += 1
                manager = dict(query or []).get("fieldManager", FIELD_MANAGER)
                self.write_counts[
                    f"{verb} {_resource_of(path)}" + ("" if manager == FIELD_MANAGER else f" ({manager})")
                ] += 1
            if self.metrics:
                self.metrics.api_requests.labels(verb).inc()
            status, data = await self._call(method, path, query or [], body, content_type)
            if 200 <= status < 300:
                return data
            if self.metrics:
                self.metrics.api_errors.labels(str(status), verb).inc()
            data = data if isinstance(data, dict) else {}
            retryable = status in RETRYABLE and (status != 409 or retry_conflict)
            if not retryable or attempt == self.retries:
                raise ApiError(status, data.get("reason", ""), data.get("message", ""), data)
            await asyncio.sleep(min(delay, 2.0) * (0.5 + random.random()))
            delay *= 2
        raise AssertionError("unreachable")

    # ------------------------------------------------------------------ verbs used by the reconciler
    async def get(self, api_version: str, plural: str, namespace: str | None, name: str) -> dict | None:
        try:
            return await self.request("GET", resource_path(api_version, plural, namespace, name), verb="get")
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    async def apply(self, obj: dict, plural: str, *, force: bool = True, subresource: str | None = None) -> dict:
        md = obj["metadata"]
        path = resource_path(obj["apiVersion"], plural, md.get("namespace"), md["name"], subresource)
        query = [("fieldManager", FIELD_MANAGER)] + ([("force", "true")] if force else [])
        return await self.request(
            "PATCH", path, query=query, body=obj, content_type="application/apply-patch+yaml", verb="apply"
        )

    async def delete(self, api_version: str, plural: str, namespace: str | None, name: str, uid: str) -> None:
        """Delete exactly the object we saw (uid precondition): never a same-named successor created by others."""
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "preconditions": {"uid": uid},
            "propagationPolicy": "Background",
        }
        try:
            await self.request(
                "DELETE",
                resource_path(api_version, plural, namespace, name),
                body=body,
                verb="delete",
                retry_conflict=False,
            )
        except ApiError as e:
            if e.status not in (404, 409):  # gone already, or replaced by another object: nothing of ours to delete
                raise


def _resource_of(path: str) -> str:
    """ "plural" or "plural/subresource" of a resource path (for the per-resource write counts)."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        parts = parts[parts.index("namespaces") + 2 :]
    else:
        parts = parts[2:] if parts[0] == "api" else parts[3:]
    return parts[0] + (f"/{parts[2]}" if len(parts) > 2 else "")


def _json(data: Any) -> Any:
    if isinstance(data, (bytes, bytearray)):
        data = data.decode("utf-8", "replace")
    if isinstance(data, str):
        try:
            return json.loads(data) if data else {}
        except ValueError:
            return {"message": data}
    return data
