"""Which children to write, keep or delete: pure decisions over desired manifests and what the cluster holds.

A child is ours only through a controller owner reference to this SpecDecodeDeployment's uid; a same-named object
without it is foreign and is never written or deleted (it is reported instead).
"""

from __future__ import annotations

import copy
from typing import Any, Iterable

from ..render import CHILD_KINDS
from ..render.names import INPUT_HASH_ANNOTATION, MANAGED_BY

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
INSTANCE_LABEL = "app.kubernetes.io/instance"
SECRET_KIND = ("v1", "Secret", "secrets", True)
ALL_KINDS: list[tuple[str, str, str, bool]] = [*CHILD_KINDS, SECRET_KIND]
PLURALS = {(api_version, kind): plural for api_version, kind, plural, _ in ALL_KINDS}

ChildKey = tuple[str, str, str]  # (apiVersion, kind, name)


def key_of(obj: dict) -> ChildKey:
    return obj["apiVersion"], obj["kind"], obj["metadata"]["name"]


def owner_reference(owner: dict) -> dict:
    md = owner["metadata"]
    return {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": md["name"], "uid": md["uid"],
            "controller": True, "blockOwnerDeletion": True}


def with_owner(manifest: dict, owner: dict) -> dict:
    out = copy.deepcopy(manifest)
    out["metadata"]["ownerReferences"] = [owner_reference(owner)]
    return out


def controller_uid(obj: dict) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return ref.get("uid")
    return None


def is_ours(obj: dict, owner_uid: str) -> bool:
    return controller_uid(obj) == owner_uid


def contains(desired: Any, live: Any) -> bool:
    """Whether every field we set is present with our value (the server may add defaults; that is not drift)."""
    if isinstance(desired, dict):
        return isinstance(live, dict) and all(k in live and contains(v, live[k]) for k, v in desired.items())
    if isinstance(desired, list):
        return isinstance(live, list) and len(desired) == len(live) and all(map(contains, desired, live))
    return desired == live


def needs_apply(desired: dict, live: dict | None) -> bool:
    """Write when missing, when the rendered input changed, or when someone drifted one of our fields."""
    if live is None:
        return True
    want = desired["metadata"].get("annotations", {}).get(INPUT_HASH_ANNOTATION)
    have = (live["metadata"].get("annotations") or {}).get(INPUT_HASH_ANNOTATION)
    if want != have:
        return True
    return not contains(_comparable(desired), live)


def _comparable(obj: dict) -> dict:
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
    md = obj["metadata"]
    out["metadata"] = {k: md[k] for k in ("labels", "annotations", "ownerReferences") if k in md}
    return out


def stale(owned: Iterable[dict], desired_keys: set[ChildKey], owner_uid: str) -> list[dict]:
    """Children we control that the current render no longer produces (e.g. the Deployment after TP > node)."""
    return [
        obj for obj in owned
        if is_ours(obj, owner_uid) and key_of(obj) not in desired_keys
        and (obj["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
    ]
