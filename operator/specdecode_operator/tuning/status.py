"""The tuner's part of status: ``status.speculative`` and ``status.history``, by server-side apply on the status
subresource under its own field manager ``specdecode-tuner``.

Why a second manager: the reconciler (manager ``specdecode-operator``) applies observedGeneration, replicas,
selector and conditions and omits these two fields; with one manager, each apply would remove the other's fields
(SSA deletes what a manager stops sending). Lists are applied whole (history is bounded to 50 entries), and
``status.conditions`` is left to the reconciler, which reports the tuner's MetricsAvailable condition for it.
"""

from __future__ import annotations

from ..api.models import API_VERSION, KIND, PLURAL
from ..kube_client import resource_path

TUNER_MANAGER = "specdecode-tuner"
HISTORY_LIMIT = 50


def patch(name: str, namespace: str, speculative: dict, history: list[dict]) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "status": {"speculative": speculative, "history": history[-HISTORY_LIMIT:]},
    }


async def write(client, name: str, namespace: str, speculative: dict, history: list[dict]) -> dict:
    """Apply (force: these fields are the tuner's alone); ApiError after the client's retries propagates."""
    body = patch(name, namespace, speculative, history)
    path = resource_path(API_VERSION, PLURAL, namespace, name, "status")
    return await client.request(
        "PATCH",
        path,
        query=[("fieldManager", TUNER_MANAGER), ("force", "true")],
        body=body,
        content_type="application/apply-patch+yaml",
        verb="apply",
    )
