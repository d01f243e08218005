"""Field ownership: server-side apply with conflicts, ownership taken by ordinary writes, and ``managedFields``.

``owners`` is one object's ownership table, ``{path: {manager: operation}}``; the emulator keeps one per object.
"""

from __future__ import annotations

import copy
from typing import Any

from . import fieldsets
from .errors import Reject
from .resources import ResourceMeta, now

_MISSING = object()


def server_side_apply(
    owners: dict, current: dict, applied: Any, manager: str, force: bool, sub, meta: ResourceMeta
) -> dict:
    """Server-side apply: the manager's applied configuration becomes the set of fields it owns."""
    if not isinstance(applied, dict):
        raise Reject(400, "apply body must be an object", "BadRequest")
    if sub == "status":
        applied = {"status": applied.get("status", {})}
    elif meta.status:
        applied = {k: v for k, v in applied.items() if k != "status"}
    new_leaves = dict(fieldsets.leaves(applied))
    conflicts = []
    for path, value in new_leaves.items():
        try:
            live = fieldsets.get_path(current, path)
        except KeyError:
            continue
        others = [m for m in owners.get(path, {}) if m != manager]
        if live != value and others:
            conflicts.append((path, others))
    if conflicts and not force:
        text = "; ".join(f'conflict with "{o[0]}": .{".".join(p)}' for p, o in conflicts)
        raise Reject(
            409,
            f"Apply failed with {len(conflicts)} conflict(s): {text}",
            "Conflict",
            {
                "causes": [
                    {"reason": "FieldManagerConflict", "field": "." + ".".join(p), "message": f'conflict with "{o[0]}"'}
                    for p, o in conflicts
                ]
            },
        )
    new = copy.deepcopy(current)
    scope = ("status",) if sub == "status" else None
    for path, mgrs in list(owners.items()):
        if manager in mgrs and path not in new_leaves and (scope is None or path[: len(scope)] == scope):
            if sub is None and meta.status and path[:1] == ("status",):
                continue
            del mgrs[manager]
            if not mgrs:
                del owners[path]
                fieldsets.del_path(new, path)
    for path, value in new_leaves.items():
        try:
            live = fieldsets.get_path(current, path)
        except KeyError:
            live = _MISSING
        if live != value:
            owners[path] = {manager: "Apply"}  # forced or uncontested: the applier takes the field
        else:
            owners.setdefault(path, {})[manager] = "Apply"
        fieldsets.set_path(new, path, value)
    return new


def take_ownership(
    owners: dict, old: dict | None, new: dict, manager: str, operation: str, only: tuple[str, ...] | None = None
) -> None:
    """A create, update or patch: the writer owns every field it changed; removed fields lose their owners."""
    old_leaves = dict(fieldsets.leaves(old)) if old else {}
    new_leaves = dict(fieldsets.leaves(new))
    for path, value in new_leaves.items():
        if only and path[: len(only)] != only:
            continue
        if old_leaves.get(path, _MISSING) != value:
            owners[path] = {manager: operation}
    for path in set(old_leaves) - set(new_leaves):
        owners.pop(path, None)


def owned_by_applier(obj: dict, manager: str) -> dict:
    """The table of an object created by server-side apply: the applier owns all of it."""
    return {p: {manager: "Apply"} for p, _ in fieldsets.leaves(obj)}


def render_managed_fields(owners: dict, obj: dict) -> None:
    per_manager: dict[tuple[str, str], set] = {}
    for path, mgrs in owners.items():
        for manager, op in mgrs.items():
            per_manager.setdefault((manager, op), set()).add(path)
    obj["metadata"]["managedFields"] = [
        {
            "manager": m,
            "operation": op,
            "apiVersion": obj.get("apiVersion", ""),
            "time": now(),
            "fieldsType": "FieldsV1",
            "fieldsV1": fieldsets.fields_v1(paths),
            **({"subresource": "status"} if all(p[:1] == ("status",) for p in paths) else {}),
        }
        for (m, op), paths in sorted(per_manager.items())
    ]
