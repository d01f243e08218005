"""Field paths and merges the emulator needs to behave like the API server's server-side apply.

Lists are atomic here (the real server merges some lists by key); every test and the operator treat the lists they
own as whole values, so atomic lists are the faithful subset for our traffic.
"""

from __future__ import annotations

import copy
from typing import Any, Iterator

Path = tuple[str, ...]

# Server-owned metadata: never a client's field, never part of a diff.
SERVER_FIELDS: frozenset[Path] = frozenset(
    {
        ("metadata", "uid"),
        ("metadata", "resourceVersion"),
        ("metadata", "generation"),
        ("metadata", "creationTimestamp"),
        ("metadata", "managedFields"),
        ("metadata", "deletionTimestamp"),
        ("metadata", "name"),
        ("metadata", "namespace"),
        ("apiVersion",),
        ("kind",),
    }
)


def leaves(obj: Any, prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Yield (path, value) for every scalar or list in a nested dict; empty dicts count as leaves too."""
    if isinstance(obj, dict) and (obj or not prefix):
        for key, value in obj.items():
            yield from leaves(value, prefix + (key,))
    elif prefix not in SERVER_FIELDS:
        yield prefix, obj


def get_path(obj: Any, path: Path) -> Any:
    for key in path:
        if not isinstance(obj, dict) or key not in obj:
            raise KeyError(path)
        obj = obj[key]
    return obj


def set_path(obj: dict, path: Path, value: Any) -> None:
    for key in path[:-1]:
        nxt = obj.get(key)
        if not isinstance(nxt, dict):
            nxt = obj[key] = {}
        obj = nxt
    obj[path[-1]] = copy.deepcopy(value)


def del_path(obj: dict, path: Path) -> None:
    """Remove a leaf and the dicts it leaves empty behind (the server prunes them too)."""
    parents = []
    cur: Any = obj
    for key in path[:-1]:
        if not isinstance(cur, dict) or key not in cur:
            return
        parents.append((cur, key))
        cur = cur[key]
    if isinstance(cur, dict):
        cur.pop(path[-1], None)
    for parent, key in reversed(parents):
        if parent[key] == {}:
            del parent[key]
        else:
            break


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, null deletes, everything else replaces."""
    return _merge(target, patch, named_lists=False)


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Merge patch that merges lists of named items by ``name`` (containers, ports, env), as the server does."""
    return _merge(target, patch, named_lists=True)


def _merge(target: Any, patch: Any, *, named_lists: bool) -> Any:
    if named_lists and isinstance(patch, list) and isinstance(target, list) and _named(patch) and _named(target):
        by_name = {item["name"]: item for item in target}
        order = [item["name"] for item in target]
        for item in patch:
            if item["name"] in by_name:
                by_name[item["name"]] = _merge(by_name[item["name"]], item, named_lists=True)
            else:
                by_name[item["name"]] = copy.deepcopy(item)
                order.append(item["name"])
        return [by_name[n] for n in order]
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = _merge(out.get(key), value, named_lists=named_lists)
    return out


def _named(items: list) -> bool:
    return bool(items) and all(isinstance(i, dict) and "name" in i for i in items)


def fields_v1(paths: set[Path]) -> dict:
    """Render a set of owned paths in the server's FieldsV1 format ({"f:spec": {"f:replicas": {}}})."""
    out: dict = {}
    for path in sorted(paths):
        cur = out
        for key in path:
            cur = cur.setdefault(f"f:{key}", {})
    return out


def strip_server_fields(obj: dict) -> dict:
    out = copy.deepcopy(obj)
    for path in SERVER_FIELDS:
        if path[0] == "metadata" and path[1] in ("name", "namespace"):
            continue
        del_path(out, path)
    return out
