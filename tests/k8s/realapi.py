"""The few calls the tests make against a real kube-apiserver, through the kubernetes client and a kubeconfig."""

from __future__ import annotations

import re
import time

import kubernetes

from specdecode_operator.api.models import GROUP, PLURAL, VERSION

from .cluster import ApiFailure, raw_call

_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')


class Refusal(ApiFailure):
    """The API server refused a request: its status code, message and the fields its causes name."""

    def __init__(self, status: int, body: dict):
        super().__init__(status, body)
        self.fields = self.fields_of(body)

    @staticmethod
    def fields_of(body: dict) -> set[str]:
        fields = set()
        for cause in (body.get("details") or {}).get("causes") or []:
            if "some validation rules were not checked" in (cause.get("message") or ""):
                continue  # a note that CEL waits for the schema errors reported beside it, not a problem
            field = cause.get("field") or ""
            found = _UNKNOWN_FIELD.search(cause.get("message") or "")
            if found and not field:
                field = found.group(1)
            # the scale subresource's check names its JSONPath (".spec.replicas"): the same field
            fields.add(field.lstrip(".") if field and field != "<nil>" else "<root>")
        if not fields:
            fields.update(_UNKNOWN_FIELD.findall(body.get("message") or "") or ["<root>"])
        return fields


class ApiServer:
    def __init__(self, kubeconfig: str):
        self.client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
        self.custom = kubernetes.client.CustomObjectsApi(self.client)
        self.core = kubernetes.client.CoreV1Api(self.client)
        self.ext = kubernetes.client.ApiextensionsV1Api(self.client)

    def close(self) -> None:
        self.client.close()

    def call(
        self, method: str, path: str, body=None, query: list | None = None, content_type: str | None = None
    ) -> dict:
        return raw_call(self.client, method, path, body, query, content_type, timeout=30, failure=Refusal)

    def apply_crd(self, crd: dict, timeout: float = 30.0) -> dict:
        """Server-side apply (as `kubectl apply --server-side` does), then wait until the CRD is Established."""
        name = crd["metadata"]["name"]
        self.call(
            "PATCH",
            f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}",
            crd,
            query=[("fieldManager", "specdecode-tests"), ("force", "true"), ("fieldValidation", "Strict")],
            content_type="application/apply-patch+yaml",
        )
        deadline = time.monotonic() + timeout
        while True:
            current = self.get_crd(name)
            conditions = {c["type"]: c["status"] for c in (current.get("status") or {}).get("conditions") or []}
            if conditions.get("Established") == "True":
                return current
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established: {conditions}")
            time.sleep(0.1)

    def get_crd(self, name: str) -> dict:
        return self.call("GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")

    def ensure_namespace(self, name: str) -> None:
        try:
            self.call(
                "POST", "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
            )
        except Refusal as e:
            if e.status != 409:
                raise

    def dry_run_create_sdd(self, namespace: str, doc: dict) -> dict:
        return self.call(
            "POST",
            f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}",
            doc,
            query=[("dryRun", "All"), ("fieldValidation", "Strict")],
        )


def started_environment(workdir):
    """A fresh envtest Environment, or a skip (a failure under SPECDECODE_REQUIRE_ENVTEST=1, as in `make test`)
    where kube-apiserver and etcd cannot be built."""
    import os

    import pytest

    from .envtest import Environment, EnvtestUnavailable

    try:
        return Environment(workdir=workdir).start()
    except EnvtestUnavailable as e:
        if os.environ.get("SPECDECODE_REQUIRE_ENVTEST") == "1":
            pytest.fail(f"the real API server is required (SPECDECODE_REQUIRE_ENVTEST=1): {e}")
        pytest.skip(f"no kube-apiserver/etcd binaries: {e}")


def require_binaries() -> None:
    """Skip (fail under SPECDECODE_REQUIRE_ENVTEST=1) where kube-apiserver and etcd cannot be built."""
    import os

    import pytest

    from .envtest import EnvtestUnavailable, binaries_dir

    try:
        binaries_dir()
    except EnvtestUnavailable as e:
        if os.environ.get("SPECDECODE_REQUIRE_ENVTEST") == "1":
            pytest.fail(f"the real API server is required (SPECDECODE_REQUIRE_ENVTEST=1): {e}")
        pytest.skip(f"no kube-apiserver/etcd binaries: {e}")
