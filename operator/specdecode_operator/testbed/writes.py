"""Create, PUT, patch (JSON, merge, strategic) and server-side apply, on the main resource and /status and /scale.

Every write goes through admission and records field ownership; a write that changes nothing keeps its
resourceVersion, and a write that empties the finalizers of a deleting object removes it.
"""

from __future__ import annotations

import copy
import uuid
from typing import Any

import aiohttp.web
import jsonpatch

from . import fieldsets
from .admission import admit
from .bodies import body_of, manager_of
from .deletion import Deletion
from .errors import Reject, conflict
from .ownership import owned_by_applier, render_managed_fields, server_side_apply, take_ownership
from .resources import ResourceMeta
from .subresources import scale_of, scaled, separate_status


class WriteHandlers(Deletion):
    """A mixin of ``ApiServerEmulator``; it keeps ownership in ``_owners`` (object key -> ownership table)."""

    __slots__ = ()

    async def _create(self, request, meta: ResourceMeta):
        body = body_of(request)
        if not isinstance(body, dict):
            raise Reject(400, "the body of a create must be an object", "BadRequest")
        body = copy.deepcopy(body)
        md = body.setdefault("metadata", {})
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + uuid.uuid4().hex[:10]
        if not md.get("name"):
            raise Reject(422, f"{meta.kind} is invalid: metadata.name: Required value: name is required", "Invalid")
        if meta.namespaced and request.namespace and md.get("namespace", request.namespace) != request.namespace:
            raise Reject(400, "the namespace of the object does not match the namespace of the request", "BadRequest")
        body.setdefault("apiVersion", meta.api_version)
        body.setdefault("kind", meta.kind)
        if meta.status:
            body.pop("status", None)  # the status subresource: status is not writable through the main resource
        manager = manager_of(request)
        async with self._lock:
            key = self._key(request, meta, md["name"])
            if self._live(key) is not None:
                raise Reject(409, f'{meta.plural}.{meta.group} "{md["name"]}" already exists', "AlreadyExists")
            body = admit(meta, body, None)
            self._stamp_new(body, request.namespace if meta.namespaced else None)
            take_ownership(self._owners.setdefault(key, {}), None, body, manager, "Update")
            render_managed_fields(self._owners.get(key, {}), body)
            await self._commit(key, body, "ADDED")
        return aiohttp.web.json_response(body, status=201)

    async def _write(self, request, meta: ResourceMeta, verb: str):
        body = body_of(request)
        sub = request.subresource
        if (
            sub not in (None, "status", "scale")
            or (sub == "status" and not meta.status)
            or (sub == "scale" and not meta.scale)
        ):
            raise Reject(404, f"{meta.plural} has no subresource {sub}", "NotFound")
        manager = manager_of(request)
        force = request.params.get("force") in ("true", "1")
        async with self._lock:
            key = self._key(request, meta)
            current = self._live(key)
            if current is None:
                if verb == "apply" and sub is None:
                    return await self._apply_create(request, meta, key, body, manager)
                raise Reject(
                    404,
                    f'{meta.plural}.{meta.group} "{request.name}" not found',
                    "NotFound",
                    {"name": request.name, "kind": meta.plural},
                )
            if sub == "scale":
                if verb == "update" or verb == "apply":
                    new_scale = body
                else:
                    new_scale = patched(scale_of(current, meta), body, request, meta)
                new = scaled(current, meta, new_scale, request.name)
            elif verb == "apply":
                if not request.params.get("fieldManager"):
                    raise Reject(400, "PATCH /apply requires fieldManager", "BadRequest")
                new = server_side_apply(self._owners.setdefault(key, {}), current, body, manager, force, sub, meta)
            elif verb == "update":
                rv = (body or {}).get("metadata", {}).get("resourceVersion")
                if rv and rv != current["metadata"]["resourceVersion"]:
                    raise conflict(meta, request.name)
                new = copy.deepcopy(body)
                for k in ("uid", "creationTimestamp", "generation", "resourceVersion", "deletionTimestamp"):
                    if k in current["metadata"]:
                        new.setdefault("metadata", {})[k] = current["metadata"][k]
            else:
                new = patched(current, body, request, meta)
            new = separate_status(current, new, sub, meta)
            if sub is None and verb != "apply":
                take_ownership(self._owners.setdefault(key, {}), current, new, manager, "Update")
            if sub in ("status",) and verb != "apply":
                take_ownership(self._owners.setdefault(key, {}), current, new, manager, "Update", only=("status",))
            if sub is None or sub == "scale":
                new = admit(meta, new, current)
            return await self._finish(key, current, new, meta)

    async def _apply_create(self, request, meta, key, body, manager):
        if not isinstance(body, dict):
            raise Reject(400, "apply body must be an object", "BadRequest")
        body = copy.deepcopy(body)
        body.setdefault("metadata", {})["name"] = request.name
        if meta.status:
            body.pop("status", None)
        body = admit(meta, body, None)
        self._stamp_new(body, request.namespace if meta.namespaced else None)
        self._owners[key] = owned_by_applier(body, manager)
        render_managed_fields(self._owners.get(key, {}), body)
        await self._commit(key, body, "ADDED")
        return aiohttp.web.json_response(body, status=201)

    async def _finish(self, key, current: dict, new: dict, meta: ResourceMeta):
        md = new.setdefault("metadata", {})
        if fieldsets.strip_server_fields(new) == fieldsets.strip_server_fields(current):
            return aiohttp.web.json_response(current)  # a no-op write changes nothing, not even resourceVersion
        for k in ("uid", "creationTimestamp", "name", "namespace"):
            if k in current["metadata"]:
                md[k] = current["metadata"][k]
        md["generation"] = current["metadata"].get("generation", 1) + (1 if _spec_of(new) != _spec_of(current) else 0)
        md["resourceVersion"] = str(next(self._rv))
        render_managed_fields(self._owners.get(key, {}), new)
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            await self._commit(key, new, "MODIFIED")
            await self._remove(key)
            return aiohttp.web.json_response(new)
        await self._commit(key, new, "MODIFIED")
        return aiohttp.web.json_response(new)


def patched(current: dict, body: Any, request, meta: ResourceMeta) -> dict:
    """A PATCH by its content type; strategic merge only for built-in kinds, as the real server allows."""
    ctype = request.headers.get("Content-Type", "")
    if ctype.startswith("application/json-patch"):
        if not isinstance(body, list):
            raise Reject(400, "a JSON patch must be a list of operations", "BadRequest")
        try:
            return jsonpatch.apply_patch(copy.deepcopy(current), body)
        except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict, jsonpatch.JsonPointerException) as e:
            raise Reject(
                422, f"the server rejected our request due to an error in our request: {e}", "Invalid"
            ) from None
    if not isinstance(body, dict):
        raise Reject(400, "a merge patch must be an object", "BadRequest")
    rv = body.get("metadata", {}).get("resourceVersion")
    if rv and rv != current["metadata"]["resourceVersion"]:
        raise conflict(meta, request.name)
    if ctype.startswith("application/strategic-merge-patch") and meta.group in ("", "apps", "policy"):
        return fieldsets.strategic_merge_patch(current, body)
    return fieldsets.merge_patch(current, body)


def _spec_of(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
