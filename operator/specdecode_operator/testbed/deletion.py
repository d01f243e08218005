"""DELETE with preconditions and finalizers, and owner-reference garbage collection of dependents.

Garbage collection, as kube-controller-manager's collector does it (background propagation): an object all of whose
ownerReferences name an owner that does not exist is deleted. The collector checks each owner by kind, name and uid,
so a same-named owner created later (a new uid) does not adopt the object. Two ways an object ends up so:

- its owner is deleted: the owner's dependents go with it (``_remove``);
- it is written (created, applied, updated) with an ownerReference to an owner already gone, e.g. by a controller
  whose pass was in flight when the owner was deleted. The real API server accepts such a write (2xx, the object
  as stored) and the collector deletes the object shortly after; here a task queued by the write deletes it once
  the write has been answered (the same watch events: ADDED or MODIFIED, then DELETED).
"""

from __future__ import annotations

import asyncio
import copy

import aiohttp.web
import kmock

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

    async def _commit(self, key, body: dict, event: str) -> None:
        await super()._commit(key, body, event)
        md = body.get("metadata") or {}
        if md.get("ownerReferences") and not md.get("deletionTimestamp") and self._orphaned(key, body):
            task = asyncio.get_running_loop().create_task(self._collect_orphan(key, md.get("uid")))
            self._gc_tasks.add(task)
            task.add_done_callback(self._gc_tasks.discard)

    def _orphaned(self, key, obj: dict) -> bool:
        """Whether every ownerReference of ``obj`` names an owner that does not exist: no live object of that kind
        and name in the object's namespace (cluster-wide for a cluster-scoped kind), or one with another uid. A
        reference to a kind the server does not serve keeps the object (the real collector cannot resolve it and
        retries instead of deleting)."""
        for ref in obj["metadata"].get("ownerReferences") or []:
            group = str(ref.get("apiVersion", "")).rpartition("/")[0]
            meta = next((m for m in self.metas.values() if m.group == group and m.kind == ref.get("kind")), None)
            if meta is None:
                return False
            owner_key = (kmock.resource(meta.group, meta.version, meta.plural), key[1] if meta.namespaced else None)
            owner = self._live((*owner_key, ref.get("name")))
            if owner is not None and owner["metadata"].get("uid") == ref.get("uid"):
                return False
        return True

    async def _collect_orphan(self, key, uid: str | None) -> None:
        async with self._lock:
            current = self._live(key)
            if current is None or current["metadata"].get("uid") != uid or current["metadata"].get("deletionTimestamp"):
                return  # already deleted, replaced or deleting
            if self._orphaned(key, current):
                await self._collect(key)

    async def _collect(self, key) -> None:
        """Delete a dependent as the collector does: at once, or by marking it deleting while finalizers hold it."""
        dep = self._objects[key]
        if dep.raw["metadata"].get("finalizers"):
            new = copy.deepcopy(dep.raw)
            new["metadata"].setdefault("deletionTimestamp", now())
            new["metadata"]["resourceVersion"] = str(next(self._rv))
            await self._commit(key, new, "MODIFIED")
        else:
            await self._remove(key)

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
                await self._collect(dep_key)
