"""The object store under the handlers: kmock's objects plus resourceVersions, server metadata and watch events.

A mixin of ``ApiServerEmulator``; it uses the attributes kmock's emulator has (``_objects``, ``_buses``) and those
``ApiServerEmulator`` adds (``_rv``, ``keep_history``).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from typing import TYPE_CHECKING, Any

from .resources import ResourceMeta, now


class ObjectStore:
    if TYPE_CHECKING:  # the emulator's attributes the mixins work on, for the type checker (see the docstring)
        _objects: Any
        _buses: Any
        _lock: asyncio.Lock
        _owners: dict
        _rv: Any
        _born: dict
        _gc_tasks: set
        metas: dict
        keep_history: bool
    else:
        __slots__ = ()

    def _key(self, request, meta: ResourceMeta, name: str | None = None):
        ns = request.namespace if meta.namespaced else None
        return (request.resource, ns, name or request.name)

    def _live(self, key) -> dict | None:
        if key not in self._objects or self._objects[key].deleted:
            return None
        return self._objects[key].raw

    def _last_rv(self) -> int:
        """The newest resourceVersion handed out: what a list is consistent with, and where a watch from that
        list's resourceVersion starts (an object written right after the list has a greater one)."""
        value = next(self._rv)
        self._rv = itertools.count(value)  # put it back: peeking must not consume a version
        return value - 1

    def _stamp_new(self, body: dict, namespace: str | None) -> None:
        md = body.setdefault("metadata", {})
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = now()
        md["generation"] = 1
        md["resourceVersion"] = str(next(self._rv))
        if namespace:
            md["namespace"] = namespace

    async def _commit(self, key, body: dict, event: str) -> None:
        if event == "ADDED":
            self._born[key] = int(body["metadata"]["resourceVersion"])
        if key in self._objects and not self.keep_history and not self._objects[key].deleted:
            self._objects[key].history[:] = [body]
        elif key in self._objects:
            self._objects[key].create(body)
        else:
            self._objects[key] = body
        await self._buses[key[0]].put({"type": event, "object": copy.deepcopy(body)})
