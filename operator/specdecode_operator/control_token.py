"""The per-deployment control token: pods mount it, the tuner sends it. Generated once, never rotated by a render.

Its content is random, so it cannot come from the pure renderer; the operator creates it and afterwards only
keeps its labels and owner reference in place.
"""

from __future__ import annotations

import base64
import secrets
from typing import Any

from .render import content_hash, names


def control_secret(name: str, namespace: str, existing: dict | None) -> dict:
    token = None
    if existing is not None:
        token = (existing.get("data") or {}).get("token")
    if not token:
        token = base64.b64encode(secrets.token_urlsafe(32).encode()).decode()
    labels = names.labels(name, "control-token")
    manifest: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": names.control_secret(name), "namespace": namespace, "labels": labels},
    }
    manifest["metadata"]["annotations"] = {names.INPUT_HASH_ANNOTATION: content_hash(manifest)}
    manifest["data"] = {"token": token}
    return manifest


def token_of(secret: dict | None) -> str | None:
    data = (secret or {}).get("data") or {}
    return base64.b64decode(data["token"]).decode() if data.get("token") else None
