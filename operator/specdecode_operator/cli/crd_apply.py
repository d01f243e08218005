"""``specdecode crd apply``: server-side apply of this release's CustomResourceDefinition, then wait until it is served.

Helm installs a chart's ``crds/`` folder on first install only and never upgrades it, so the chart runs this
command in a pre-install/pre-upgrade hook Job (``crds.upgrade``): a ``helm upgrade`` to a release whose API gained
a field serves that field before the new operator starts. It applies as field manager ``specdecode-crds``, taking
over the fields another manager (``helm`` at first install, ``kubectl apply``) set, and fails within bounded
timeouts (exit 1) instead of leaving a hook hanging.
"""

from __future__ import annotations

import json
import time

import kubernetes
import urllib3

from specdecode_runtime.contract.cli_common import CommandFailed

from ..api.crd import crd
from ..config import OperatorConfig
from ..kube_client import kube_configuration

FIELD_MANAGER = "specdecode-crds"
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def apply(*, request_timeout: float = 10.0, wait_seconds: float = 60.0, client=None) -> str:
    """Apply the CRD and wait until it is Established with its names accepted; returns a line saying so.

    ``client``: a kubernetes ApiClient (tests); default: in-cluster credentials, else the kubeconfig."""
    body = crd()
    name = body["metadata"]["name"]
    api = client or kubernetes.client.ApiClient(kube_configuration(OperatorConfig()))

    def call(method: str, query: list, body=None, content_type: str | None = None) -> dict:
        headers = {"Accept": "application/json", **({"Content-Type": content_type} if content_type else {})}
        m, url, headers, body, _ = api.param_serialize(
            method,
            f"{CRD_PATH}/{name}",
            query_params=query,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = api.call_api(m, url, headers, body, _request_timeout=request_timeout)
        response.read()
        data = json.loads(response.data or b"{}")
        if not 200 <= response.status < 300:
            raise CommandFailed(
                f"applying {name}: {response.status} {data.get('reason', '')}: {str(data.get('message', data))[:500]}"
            )
        return data

    try:
        query = [("fieldManager", FIELD_MANAGER), ("force", "true"), ("fieldValidation", "Strict")]
        call("PATCH", query, body, "application/apply-patch+yaml")
        deadline = time.monotonic() + wait_seconds
        while True:
            live = call("GET", [])
            conditions = {c.get("type"): c for c in (live.get("status") or {}).get("conditions") or []}
            if all((conditions.get(t) or {}).get("status") == "True" for t in ("Established", "NamesAccepted")):
                return f"customresourcedefinition {name} applied (field manager {FIELD_MANAGER}), established"
            if time.monotonic() >= deadline:
                problems = "; ".join(f"{t}: {c.get('message') or c.get('reason')}" for t, c in conditions.items())
                raise CommandFailed(f"{name} applied but not established after {wait_seconds:g} s ({problems})")
            time.sleep(1.0)
    except (OSError, urllib3.exceptions.HTTPError) as e:  # unreachable API server, timeouts
        raise CommandFailed(f"applying {name}: {e}") from None
    finally:
        if client is None:
            api.close()
