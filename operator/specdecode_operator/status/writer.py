"""Write the operator's part of status by server-side apply on the status subresource, and only when it changed.

The operator applies observedGeneration, replicas, readyReplicas, selector, conditions and runtimeImage (the
default runtime image the deployment runs, see reconcile/runtime_image.py) as field manager
``specdecode-operator``; the tuner applies status.speculative and status.history under its own manager, so
neither erases the other's fields. A write whose content equals what is stored is skipped (steady state: none).
"""

from __future__ import annotations

import datetime

from ..api.models import API_VERSION, KIND, PLURAL
from . import conditions as cond


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def desired_status(computed: dict, current: dict | None) -> dict:
    out = dict(computed)
    out["conditions"] = cond.stamp(computed["conditions"], (current or {}).get("conditions"), _now())
    return out


def unchanged(desired: dict, current: dict | None, *, ours_only: bool = False) -> bool:
    """Whether ``current`` already holds ``desired`` (conditions compared without timestamps).

    ``ours_only``: ``desired`` is a status we wrote earlier (with its timestamps and the tuner's fields): compare
    only the operator's fields."""
    current = current or {}
    if ours_only:
        desired = {k: v for k, v in desired.items() if k in OPERATOR_FIELDS}
    for key, value in desired.items():
        if key == "conditions":
            have = {c.get("type"): c for c in current.get("conditions") or []}
            want = {c["type"]: c for c in value}
            if set(have) != set(want):
                return False
            for ctype, c in want.items():
                if any(have[ctype].get(k) != c.get(k) for k in ("status", "reason", "message", "observedGeneration")):
                    return False
        elif current.get(key) != value:
            return False
    return "selector" in desired or "selector" not in current


_BODY = object()
OPERATOR_FIELDS = ("observedGeneration", "conditions", "replicas", "readyReplicas", "selector", "runtimeImage")


async def write(client, body: dict, computed: dict, current: dict | None | object = _BODY) -> dict | None:
    """Apply the status if it differs; returns the server's object, or None when nothing had to be written.

    ``current``: the status to compare with and to carry lastTransitionTime from; ``body``'s unless the caller
    knows a newer one (our own last write, while the watch has not delivered it yet)."""
    basis = body.get("status") if current is _BODY else current
    assert basis is None or isinstance(basis, dict)
    if unchanged(computed, basis):
        return None
    md = body["metadata"]
    patch = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": md["name"], "namespace": md["namespace"]},
        "status": desired_status(computed, basis),
    }
    return await client.apply(patch, PLURAL, subresource="status")
