"""The ``cluster`` the e2e tests talk to: the API emulator with the operator in a thread, or a real cluster.

Tests use only this class's methods (ordinary API calls through the kubernetes client), so the same tests run
against a real API server when SPECDECODE_E2E_KUBECONFIG points at one. Emulator-only powers (fault injection,
the request log, playing the Deployment controller) are behind ``cluster.emulator``; tests that need them are
skipped on a real cluster.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, Callable

import kubernetes

from specdecode_operator.api.models import API_VERSION, PLURAL
from specdecode_operator.kube_client import resource_path


class ApiFailure(Exception):
    def __init__(self, status: int, body: dict):
        super().__init__(f"{status}: {body.get('message')}")
        self.status, self.body = status, body


def raw_call(
    api: kubernetes.client.ApiClient,
    method: str,
    path: str,
    body: Any = None,
    query: list | None = None,
    content_type: str | None = None,
    *,
    timeout: float = 10,
    failure: type[ApiFailure] = ApiFailure,
) -> Any:
    """One request on a path the typed clients do not cover; the decoded JSON answer, or ``failure`` on non-2xx."""
    headers = {"Accept": "application/json"}
    if content_type:
        headers["Content-Type"] = content_type
    m, url, headers, body, _ = api.param_serialize(
        method, path, query_params=query or [], header_params=headers, body=body, auth_settings=["BearerToken"]
    )
    response = api.call_api(m, url, headers, body, _request_timeout=timeout)
    response.read()
    data = json.loads(response.data or b"{}")
    if not 200 <= response.status < 300:
        raise failure(response.status, data)
    return data


WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "apply"}


class Cluster:
    def __init__(self, configuration: kubernetes.client.Configuration, namespace: str, emulator=None, operator=None):
        self.api = kubernetes.client.ApiClient(configuration)
        self.namespace = namespace
        self.emulator = emulator
        self.operator = operator
        self.bed = None  # the real API server's ApiServerBed (audit log, operator identity), when there is one
        self.operator_factory: Callable[[], Any] | None = None  # starts an operator like the first one
        self.operator_overrides: dict[str, Any] = {}  # the operator's settings; a restart after a change uses them

    def stop_operator(self) -> None:
        if self.operator is not None:
            self.operator.__exit__(None, None, None)
            self.operator = None

    def start_operator(self) -> None:
        """A new operator with the same configuration (a restart: a new pod after the old one went away), handed
        to the test once it watches SpecDecodeDeployments."""
        since = self._log_position()
        self.operator = self.operator_factory()
        self.wait_watching(since)

    def wait_watching(self, since: int | None, timeout: float = 30.0) -> None:
        """Until the operator has listed or watched SpecDecodeDeployments after log position ``since``.

        kopf starts its watches only after its initial API discovery, whose requests run as tasks that outlive a
        cancelled caller: an operator stopped before discovery ends leaves them failing on the closed session and
        waiting for a re-login that never comes, and kopf's shutdown waits 5 s for them. A test that ended quickly
        (an admission check) then had a 5 s teardown, on whichever test finished before the operator's discovery
        did. Without a request log (an external cluster) there is nothing to wait on."""
        if since is None:
            return
        if self.emulator is not None:

            def watching():
                return any(
                    r.resource == PLURAL and r.verb in ("list", "watch") and r.user_agent.startswith("kopf")
                    for r in self.emulator.log[since:]
                )
        else:

            def watching():
                return any(
                    (e.get("objectRef") or {}).get("resource") == PLURAL and e["verb"] in ("list", "watch")
                    for e in self.bed.env.audit_events(since, user=self.bed.operator_user)
                )

        wait_for(watching, timeout=timeout, interval=0.05, what="the operator's watch on SpecDecodeDeployments")

    def _log_position(self) -> int | None:
        if self.emulator is not None:
            return len(self.emulator.log)
        return self.bed.env.audit_offset() if self.bed is not None else None

    # ------------------------------------------------------------------ what the operator did
    def log_mark(self) -> int:
        """A position in the request log (the emulator's) or the audit log (the real API server's)."""
        if self.emulator is not None:
            return len(self.emulator.log)
        if self.bed is not None:
            return self.bed.env.audit_offset()
        import pytest

        pytest.skip(
            "needs a request log (the emulator's, or the local API server's audit log), which an external "
            "cluster does not give the tests"
        )

    def operator_writes(self, since: int = 0, received_after: float | None = None) -> list[tuple[str, str, str]]:
        """(verb, resource, name) of each write the operator made after ``since``; Events excluded.

        ``received_after`` (epoch seconds; the real API server only): only requests the server received from then
        on. An audit event is logged when the server completes a request, so a request an operator process sent
        just before it was stopped (a write the client's timeout made it send again) can be logged after a mark
        taken once that process has exited; started after the new process, such a request is the old one's."""
        if self.emulator is not None:
            return [
                (r.verb, r.resource, r.name)
                for r in self.emulator.writes(since=since)
                if r.resource != "events"
                and r.field_manager != "e2e-user"
                and r.field_manager != "kube-controller-manager"
            ]
        if self.bed is None:
            raise RuntimeError("no request log on an external cluster")
        out = []
        for e in self.bed.env.audit_events(since, user=self.bed.operator_user):
            ref = e.get("objectRef") or {}
            if e["verb"] not in WRITE_VERBS or ref.get("resource") == "events":
                continue
            if received_after is not None and _epoch(e["requestReceivedTimestamp"]) < received_after:
                continue
            out.append(
                (
                    e["verb"],
                    ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else ""),
                    ref.get("name", ""),
                )
            )
        return out

    def reconcile_passes(self) -> float:
        """Reconciliation passes the current operator has completed (its specdecode_operator_reconciles_total)."""
        if hasattr(self.operator, "reconcile_passes"):  # an operator process: read from its /metrics
            return self.operator.reconcile_passes()
        registry = self.operator.context.metrics.registry  # the operator in a thread of this process
        return sum(
            s.value
            for family in registry.collect()
            for s in family.samples
            if s.name == "specdecode_operator_reconciles_total"
        )

    def wait_passes(self, n: int = 3, timeout: float = 30.0) -> None:
        """Return once the operator has completed ``n`` more reconciliation passes (one per resync, each object).

        What a test waits for before asserting that nothing was written: the passes that could have written have
        demonstrably run, however slow the machine, where a fixed sleep may end before a single pass did."""
        start = self.reconcile_passes()
        wait_for(
            lambda: self.reconcile_passes() >= start + n,
            timeout=timeout,
            interval=0.05,
            what=f"{n} reconciliation passes",
        )

    # ------------------------------------------------------------------ raw calls
    def call(
        self, method: str, path: str, body: Any = None, query: list | None = None, content_type: str | None = None
    ) -> Any:
        return raw_call(self.api, method, path, body, query, content_type)

    def watch_events(self, path: str, query: list, seconds: float = 3.0) -> list[dict]:
        """The events of one watch request, read until the server ends it or ``seconds`` pass without data."""
        import urllib3

        _, url, headers, _, _ = self.api.param_serialize(
            "GET", path, query_params=query, header_params={"Accept": "application/json"}, auth_settings=["BearerToken"]
        )
        response = self.api.rest_client.pool_manager.request(
            "GET", url, headers=headers, preload_content=False, timeout=urllib3.Timeout(connect=5, read=seconds)
        )
        data = b""
        try:
            for chunk in response.stream(4096):
                data += chunk
        except (urllib3.exceptions.ReadTimeoutError, urllib3.exceptions.ProtocolError):
            pass
        finally:
            response.release_conn()
        return [json.loads(line) for line in data.splitlines() if line.strip()]

    def sdd_path(self, name: str | None = None, sub: str | None = None) -> str:
        return resource_path(API_VERSION, PLURAL, self.namespace, name, sub)

    def create_sdd(self, body: dict) -> dict:
        body = dict(body, metadata={**body["metadata"], "namespace": self.namespace})
        return self.call("POST", self.sdd_path(), body)

    def patch_sdd(self, name: str, patch: dict) -> dict:
        return self.call(
            "PATCH",
            self.sdd_path(name),
            patch,
            content_type="application/merge-patch+json",
            query=[("fieldManager", "e2e-user")],
        )

    def get_sdd(self, name: str) -> dict | None:
        return self.get(API_VERSION, PLURAL, name)

    def delete_sdd(self, name: str) -> None:
        self.call("DELETE", self.sdd_path(name))

    def get(self, api_version: str, plural: str, name: str) -> dict | None:
        try:
            return self.call("GET", resource_path(api_version, plural, self.namespace, name))
        except ApiFailure as e:
            if e.status == 404:
                return None
            raise

    def list(self, api_version: str, plural: str, selector: str | None = None) -> list[dict]:
        query = [("labelSelector", selector)] if selector else []
        return self.call("GET", resource_path(api_version, plural, self.namespace), query=query)["items"]

    def create(self, api_version: str, plural: str, body: dict) -> dict:
        return self.call("POST", resource_path(api_version, plural, self.namespace), body)

    def delete(self, api_version: str, plural: str, name: str) -> None:
        self.call("DELETE", resource_path(api_version, plural, self.namespace, name))

    def scale(self, name: str, replicas: int) -> dict:
        return self.call(
            "PATCH",
            self.sdd_path(name, "scale"),
            {"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )

    def get_scale(self, name: str) -> dict:
        return self.call("GET", self.sdd_path(name, "scale"))

    # ------------------------------------------------------------------ emulator-only: play the controllers
    def make_ready(self, api_version: str, plural: str, name: str) -> None:
        """Act as the Deployment/LWS controller: every desired replica rolled out and ready."""
        obj = self.get(api_version, plural, name)
        n = obj["spec"].get("replicas", 1)
        status = {
            "observedGeneration": obj["metadata"]["generation"],
            "replicas": n,
            "readyReplicas": n,
            "updatedReplicas": n,
            "availableReplicas": n,
        }
        self.call(
            "PATCH",
            resource_path(api_version, plural, self.namespace, name, "status"),
            {"status": status},
            content_type="application/merge-patch+json",
            query=[("fieldManager", "kube-controller-manager")],
        )

    def close(self) -> None:
        self.api.close()


def _epoch(timestamp: str) -> float:
    """An audit event's RFC 3339 timestamp (UTC, microseconds) as epoch seconds."""
    import datetime

    return datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def condition(obj: dict | None, ctype: str) -> dict:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == ctype:
            return c
    return {}


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
        except (KeyError, TypeError, IndexError, AttributeError):
            last = None
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what or predicate}: last={last!r}")


def unique_namespace() -> str:
    return f"e2e-{uuid.uuid4().hex[:8]}"


def minimal_sdd(name: str, *, tp: int = 8, draft_tp: int = 1) -> dict:
    """The smallest valid SpecDecodeDeployment: everything else defaulted by the CRD."""
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name},
        "spec": {
            "target": {"model": "/models/target", "tensorParallelSize": tp},
            "draft": {"model": "/models/draft-eagle3", "tensorParallelSize": draft_tp},
        },
    }
