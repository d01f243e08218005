"""The operator's only path to the API server for children and status: the kubernetes client, generic by path.

Children are written by server-side apply (``application/apply-patch+yaml``, fieldManager specdecode-operator,
force only on objects we already control), so fields set by others (an HPA's replicas, a mesh's annotations)
survive and our writes are idempotent. Transient faults (409 on our own apply, 429, 5xx, timeouts) are retried
with capped exponential backoff and jitter; everything else surfaces as ApiError with the server's message.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import json
import random
from typing import Any

import kubernetes
import urllib3

from . import __version__

FIELD_MANAGER = "specdecode-operator"
USER_AGENT = f"specdecode-operator/{__version__}"
RETRYABLE = {409, 429, 500, 502, 503, 504, 0}


class ApiError(Exception):
    def __init__(self, status: int, reason: str, message: str, body: dict | None = None):
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message, self.body = status, reason, message, body or {}


def resource_path(api_version: str, plural: str, namespace: str | None, name: str | None = None,
                  subresource: str | None = None) -> str:
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


class KubeClient:
    def __init__(self, configuration: kubernetes.client.Configuration, *, metrics=None, timeout: float = 10.0,
                 retries: int = 6, backoff: float = 0.2, workers: int = 16, fence=None):
        configuration.connection_pool_maxsize = max(workers, configuration.connection_pool_maxsize or 0)
        # One attempt per call at the urllib3 level: ``request`` below retries with its own back-off; urllib3's
        # default three retries nested inside it would multiply a stalled connection's timeout.
        configuration.retries = False
        self.api = kubernetes.client.ApiClient(configuration)
        self.api.user_agent = USER_AGENT  # audit logs and the test bed's request log tell our calls apart
        self.metrics = metrics
        self.closed = False
        self.fence = fence  # None, or () -> bool: False refuses every write (this replica lost its Lease)
        self.timeout, self.retries, self.backoff = timeout, retries, backoff
        self._pool = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix="kube-api")
        self.calls = 0
        self.writes = 0
        self.write_counts: collections.Counter = collections.Counter()  # "verb plural[/subresource]" -> writes

    def close(self) -> None:
        self.closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.api.close()

    def _call(self, method: str, path: str, query: list, body: Any, content_type: str | None) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        if content_type:
            headers["Content-Type"] = content_type
        m, url, headers, body, _ = self.api.param_serialize(
            method, path, query_params=query, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        try:
            response = self.api.call_api(m, url, headers, body, _request_timeout=self.timeout)
            response.read()
        except urllib3.exceptions.ReadTimeoutError as e:
            # A connection that went silent (half-open after a network fault) is rarely alone: the idle ones opened
            # before the fault are as dead, and each would cost the next request a full timeout. Close them all;
            # the retry opens a fresh connection.
            self.api.rest_client.pool_manager.clear()
            return 0, {"reason": "Timeout", "message": str(e)}
        except (urllib3.exceptions.HTTPError, OSError) as e:
            return 0, {"reason": "Timeout", "message": str(e)}
        except kubernetes.client.ApiException as e:
            return e.status or 0, _json(e.body)
        return response.status, _json(response.data)

    async def request(self, method: str, path: str, *, query: list | None = None, body: Any = None,
                      content_type: str | None = None, verb: str | None = None, retry_conflict: bool = True) -> Any:
        verb = verb or method.lower()
        loop = asyncio.get_running_loop()
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
                self.write_counts[f"{verb} {_resource_of(path)}"
                                  + ("" if manager == FIELD_MANAGER else f" ({manager})")] += 1
            if self.metrics:
                self.metrics.api_requests.labels(verb).inc()
            call = functools.partial(self._call, method, path, query or [], body, content_type)
            status, data = await loop.run_in_executor(self._pool, call)
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
        return await self.request("PATCH", path, query=query, body=obj,
                                  content_type="application/apply-patch+yaml", verb="apply")

    async def delete(self, api_version: str, plural: str, namespace: str | None, name: str, uid: str) -> None:
        """Delete exactly the object we saw (uid precondition): never a same-named successor created by others."""
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid},
                "propagationPolicy": "Background"}
        try:
            await self.request("DELETE", resource_path(api_version, plural, namespace, name), body=body,
                               verb="delete", retry_conflict=False)
        except ApiError as e:
            if e.status not in (404, 409):  # gone already, or replaced by another object: nothing of ours to delete
                raise


def _resource_of(path: str) -> str:
    """"plural" or "plural/subresource" of a resource path (for the per-resource write counts)."""
    parts = path.strip("/").split("/")
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        parts = parts[parts.index("namespaces") + 2:]
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
