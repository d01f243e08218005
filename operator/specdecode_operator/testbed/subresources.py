"""The status and scale subresources: which part of an object each endpoint may change, and the Scale view."""

from __future__ import annotations

import copy

from . import fieldsets
from .errors import Reject
from .resources import ResourceMeta


def separate_status(current: dict, new: dict, sub, meta: ResourceMeta) -> dict:
    """The status subresource: the main resource cannot change status; /status changes only status."""
    if sub == "status":
        out = copy.deepcopy(current)
        if "status" in new:
            out["status"] = new["status"]
        else:
            out.pop("status", None)
        return out
    if meta.status:
        new = copy.deepcopy(new)
        if "status" in current:
            new["status"] = copy.deepcopy(current["status"])
        else:
            new.pop("status", None)
    return new


def _path(dotted: str) -> tuple[str, ...]:
    return tuple(dotted.strip(".").split("."))


def scale_of(obj: dict, meta: ResourceMeta) -> dict:
    """The autoscaling/v1 Scale of an object, read through the kind's replica and selector paths."""
    paths = meta.scale or {}

    def read(p):
        try:
            return fieldsets.get_path(obj, _path(p))
        except KeyError:
            return None

    md = obj["metadata"]
    status = {"replicas": read(paths.get("statusReplicasPath", ".status.replicas")) or 0}
    selector = read(paths.get("labelSelectorPath", ".status.selector")) if paths.get("labelSelectorPath") else None
    if selector:
        status["selector"] = selector
    return {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": md["name"],
            "namespace": md.get("namespace"),
            "uid": md["uid"],
            "resourceVersion": md["resourceVersion"],
            "creationTimestamp": md["creationTimestamp"],
        },
        "spec": {"replicas": read(paths["specReplicasPath"]) or 0},
        "status": status,
    }


def scaled(current: dict, meta: ResourceMeta, new_scale, name: str | None) -> dict:
    """The object with the written Scale's replicas; only spec.replicas of a Scale is writable."""
    replicas = (new_scale or {}).get("spec", {}).get("replicas")
    if not isinstance(replicas, int):
        raise Reject(422, f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value', "Invalid")
    new = copy.deepcopy(current)
    fieldsets.set_path(new, _path((meta.scale or {})["specReplicasPath"]), replicas)
    return new
