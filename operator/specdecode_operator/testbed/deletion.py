"""DELETE with preconditions and finalizers, and owner-reference garbage collection of dependents."""

from __future__ import annotations

import copy

import aiohttp.web

from .bodies import body_of
from .errors import Reject
from .resources import ResourceMeta, now
from .store import ObjectStore


class Deletion(ObjectStore):
    """A mixin of ``ApiServerEmulator``."""

    __slots__ = ()

    async def _delete(self, request, meta: ResourceMeta):
        if request.subresource:
            raise Reject(405, "cannot delete a subresource", "MethodNotAllowed")
        async with self._lock:
            key = self._key(request, meta)
            current = self._live(key)
            if current is None:
                raise Reject(
                    404,
                    f'{meta.plural}.{meta.group} "{request.name}" not found',
                    "NotFound",
                    {"name": request.name, "kind": meta.plural},
                )
            options = body_of(request) if request.body else None
            pre_uid = ((options or {}).get("preconditions") or {}).get("uid")
            if pre_uid and pre_uid != current["metadata"]["uid"]:
                raise Reject(409, "Precondition failed: UID in precondition does not match the object", "Conflict")
            if current["metadata"].get("finalizers"):
                if not current["metadata"].get("deletionTimestamp"):
                    new = copy.deepcopy(current)
                    new["metadata"]["deletionTimestamp"] = now()
                    new["metadata"]["resourceVersion"] = str(next(self._rv))
                    await self._commit(key, new, "MODIFIED")
                    current = new
                return aiohttp.web.json_response(current)
            await self._remove(key)
        return aiohttp.web.json_response(current)

    async def _remove(self, key) -> None:
        """Delete an object and, like the garbage collector (background propagation), its dependents."""
        raw = self._objects[key].raw
        self._objects[key].delete()
        self._owners.pop(key, None)
        self._born.pop(key, None)
        await self._buses[key[0]].put({"type": "DELETED", "object": raw})
        uid = raw["metadata"]["uid"]
        live_uids = {o.raw["metadata"].get("uid") for o in self._objects.values() if not o.deleted}
        for dep_key, dep in list(self._objects.items()):
            if dep.deleted:
                continue
            refs = dep.raw.get("metadata", {}).get("ownerReferences") or []
            if any(r.get("uid") == uid for r in refs) and not any(r.get("uid") in live_uids for r in refs):
                if dep.raw["metadata"].get("finalizers"):
                    new = copy.deepcopy(dep.raw)
                    new["metadata"].setdefault("deletionTimestamp", now())
                    new["metadata"]["resourceVersion"] = str(next(self._rv))
                    await self._commit(dep_key, new, "MODIFIED")
                else:
                    await self._remove(dep_key)
