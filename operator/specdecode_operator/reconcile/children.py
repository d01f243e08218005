"""Which children to write, keep or delete: pure decisions over desired manifests and what the cluster holds.

A child is ours only through a controller owner reference to this SpecDecodeDeployment's uid; a same-named object
without it is foreign and is never written or deleted (it is reported instead).
"""

from __future__ import annotations

import copy
import json
import sys
import zlib
from typing import Any, Iterable

from ..render import CHILD_KINDS
from ..render.names import INPUT_HASH_ANNOTATION, MANAGED_BY

MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
INSTANCE_LABEL = "app.kubernetes.io/instance"
SECRET_KIND = ("v1", "Secret", "secrets", True)
ALL_KINDS: list[tuple[str, str, str, bool]] = [*CHILD_KINDS, SECRET_KIND]
# Watched through kopf indexes: every child kind but Secrets (never granted cluster-wide; see reconciler.py)
INDEXED_KINDS: list[tuple[str, str, str, bool]] = list(CHILD_KINDS)
PLURALS = {(api_version, kind): plural for api_version, kind, plural, _ in ALL_KINDS}

ChildKey = tuple[str, str, str]  # (apiVersion, kind, name)

# The watch cache keeps a slim record per child (see ``cache_record``), not the whole object.
FIELDS = "x-specdecode-fields"  # key of the zlib-compressed JSON of the child's own fields (spec, data, ...)
_KEEP_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "labels",
    "annotations",
    "ownerReferences",
    "deletionTimestamp",
)
_KEEP_STATUS = ("replicas", "readyReplicas", "updatedReplicas", "availableReplicas", "observedGeneration")


def key_of(obj: dict) -> ChildKey:
    return obj["apiVersion"], obj["kind"], obj["metadata"]["name"]


def owner_reference(owner: dict) -> dict:
    md = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": md["name"],
        "uid": md["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


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


STUB = "x-specdecode-stub"  # marks a rendered child reduced to its key and input hash (see ``stub``)


def stub(manifest: dict) -> dict:
    """A rendered child reduced to what a steady-state pass compares: apiVersion, kind, name, input hash."""
    return stub_of(key_of(manifest), input_hash(manifest))


def stub_of(key: ChildKey, digest: str | None) -> dict:
    """The stub of the child ``key`` whose input hash is ``digest`` (what an object's state keeps between passes:
    the pair, a tenth of the stub's memory)."""
    return {
        "apiVersion": key[0],
        "kind": key[1],
        STUB: True,
        "metadata": {"name": key[2], "annotations": {INPUT_HASH_ANNOTATION: digest}},
    }


def cache_record(obj: dict, fields: bool = True) -> dict:
    """What the operator keeps of a child between passes (kopf index values, our last write's answer).

    Identity, ownership, labels and annotations (input hash) and the replica counts of ``status`` stay plain
    fields; everything else the drift check may need (``spec``, ``data``, ...) is kept as one compressed JSON string
    and parsed only when a check runs (``expand``). managedFields and the rest of status are dropped: a whole
    Deployment with its managedFields is ~10x the memory of this record.

    The kept metadata is copied with its strings interned (``slim``): every child of every object repeats the same
    keys and most values (label names, the owner's kind, apiVersion, name and uid), and each watch event decodes
    them afresh; the record then holds one shared copy instead of pinning pieces of every decoded event.

    ``fields=False``: a version the operator wrote itself (or already checked): its fields are what the render
    says, so they are not kept; compressing them was a sixth of the operator's CPU during a creation wave.
    """
    md = obj.get("metadata") or {}
    rec: dict[str, Any] = {
        "apiVersion": slim(obj.get("apiVersion")),
        "kind": slim(obj.get("kind")),
        "metadata": {k: (shared if k in _SHARED_METADATA else slim)(md[k]) for k in _KEEP_METADATA if k in md},
    }
    spec = obj.get("spec")
    if isinstance(spec, dict) and "replicas" in spec:
        rec["spec"] = {"replicas": spec["replicas"]}
    status = obj.get("status")
    if isinstance(status, dict):
        rec["status"] = {k: status[k] for k in _KEEP_STATUS if k in status}
    if not fields:
        return rec
    rec[FIELDS] = zlib.compress(
        json.dumps(
            {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "metadata", "status")},
            separators=(",", ":"),
        ).encode(),
        1,
    )
    return rec


_SHARED_METADATA = ("labels", "ownerReferences")  # the same for every child of an object, and for many objects
_SHARED: dict[str, Any] = {}
_SHARED_MAX = 8192  # distinct label sets and owner references kept; past it the table starts over


def shared(value: Any) -> Any:
    """One slim copy per distinct value, shared by every record that holds an equal one: the seven children of an
    object carry the same owner reference and label set, which otherwise cost a list and dicts per child (~2 MB at
    1000 objects). Records are never modified in place (a pass replaces a record whole), so sharing is safe."""
    try:
        key = json.dumps(value, sort_keys=True, separators=(",", ":"))
    except (TypeError, ValueError):
        return slim(value)
    hit = _SHARED.get(key)
    if hit is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        hit = _SHARED[key] = slim(value)
    return hit


def slim(value: Any) -> Any:
    """``value`` rebuilt from fresh containers, with every string interned (keys and values)."""
    if isinstance(value, str):
        return sys.intern(value)
    if isinstance(value, dict):
        return {sys.intern(k) if isinstance(k, str) else k: slim(v) for k, v in value.items()}
    if isinstance(value, list):
        return [slim(v) for v in value]
    return value


def expand(obj: dict | None) -> dict | None:
    """A cache record as an object again (without managedFields and most of status); full objects pass through."""
    if obj is None or FIELDS not in obj:
        return obj
    out = json.loads(zlib.decompress(obj[FIELDS]))
    out.update({k: obj[k] for k in ("apiVersion", "kind", "metadata", "status") if k in obj})
    return out


def input_hash(obj: dict | None) -> str | None:
    return ((obj or {}).get("metadata", {}).get("annotations") or {}).get(INPUT_HASH_ANNOTATION)


def needs_apply(desired: dict, live: dict | None) -> bool:
    """Write when missing, when the rendered input changed, or when someone drifted one of our fields."""
    if live is None:
        return True
    if input_hash(desired) != input_hash(live):
        return True
    return not contains(_comparable(desired), expand(live))


# Maps the operator owns whole: a key someone else adds there changes what they mean (a Service selector with one
# more key selects no pod), so added keys are drift too, removed by a patch (server-side apply leaves keys of other
# field managers in place). Labels and annotations are not here: others may add their own.
EXACT_MAPS: dict[str, list[tuple[str, ...]]] = {
    "Service": [("spec", "selector")],
    "PodDisruptionBudget": [("spec", "selector", "matchLabels")],
    "NetworkPolicy": [("spec", "podSelector", "matchLabels")],
}


def _at(obj: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def added_keys(desired: dict, live: dict | None) -> dict[tuple[str, ...], list[str]]:
    """Keys in ``live`` that the render does not set, in the maps of ``EXACT_MAPS`` (path -> sorted keys)."""
    out = {}
    live = expand(live)
    for path in EXACT_MAPS.get(desired.get("kind", ""), []):
        ours, theirs = _at(desired, path), _at(live, path)
        if isinstance(ours, dict) and isinstance(theirs, dict):
            extra = sorted(set(theirs) - set(ours))
            if extra:
                out[path] = extra
    return out


def removal_patch(added: dict[tuple[str, ...], list[str]]) -> dict:
    """A JSON merge patch that deletes the ``added`` keys (null deletes in a merge patch)."""
    patch: dict = {}
    for path, keys in added.items():
        node = patch
        for key in path:
            node = node.setdefault(key, {})
        node.update({k: None for k in keys})
    return patch


def replicas_overridden(desired: dict, live: dict | None) -> int | None:
    """The live spec.replicas of a workload when someone else changed it (an HPA aimed at the Deployment)."""
    want = (desired.get("spec") or {}).get("replicas")
    have = ((live or {}).get("spec") or {}).get("replicas")
    if want is not None and have is not None and want != have and input_hash(desired) == input_hash(live):
        return have
    return None


def _comparable(obj: dict) -> dict:
    out = {k: v for k, v in obj.items() if k not in ("apiVersion", "kind", "status")}
    md = obj["metadata"]
    out["metadata"] = {k: md[k] for k in ("labels", "annotations", "ownerReferences") if k in md}
    return out


def stale(owned: Iterable[dict], desired_keys: set[ChildKey], owner_uid: str) -> list[dict]:
    """Children we control that the current render no longer produces (e.g. the Deployment after TP > node)."""
    return [
        obj
        for obj in owned
        if is_ours(obj, owner_uid)
        and key_of(obj) not in desired_keys
        and (obj["metadata"].get("labels") or {}).get(MANAGED_BY_LABEL) == MANAGED_BY
    ]
