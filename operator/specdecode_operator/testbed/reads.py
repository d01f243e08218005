"""GET, list and watch with label selectors, and the Scale view of GET /scale."""

from __future__ import annotations

import asyncio
import json

import aiohttp.web

from .errors import Reject
from .resources import ResourceMeta
from .selectors import compile_selector
from .store import ObjectStore
from .subresources import scale_of


class ReadHandlers(ObjectStore):
    """A mixin of ``ApiServerEmulator``; ``_serve_list`` and ``_serve_watch`` override kmock's."""

    __slots__ = ()

    async def _get(self, request, meta: ResourceMeta):
        obj = self._live(self._key(request, meta))
        if obj is None:
            raise Reject(
                404,
                f'{meta.plural}.{meta.group} "{request.name}" not found',
                "NotFound",
                {"name": request.name, "group": meta.group, "kind": meta.plural},
            )
        if request.subresource == "scale":
            return aiohttp.web.json_response(scale_of(obj, meta))
        return aiohttp.web.json_response(obj)

    async def _serve_list(self, request):
        meta = self.metas.get((request.resource.group, request.resource.plural))
        return json.loads((await self._list(request, meta)).text) if meta else {"items": []}

    async def _list(self, request, meta: ResourceMeta):
        try:
            match = compile_selector(request.params.get("labelSelector"))
        except ValueError as e:
            raise Reject(400, str(e), "BadRequest") from None
        items = []
        async with self._lock:
            for (res, ns, _name), obj in self._objects.items():
                if res != request.resource or obj.deleted:
                    continue
                if request.namespace and ns != request.namespace:
                    continue
                raw = obj.raw
                if match(raw.get("metadata", {}).get("labels") or {}):
                    # the real server drops each built-in item's apiVersion/kind (the list has them); it keeps
                    # them on custom resources
                    items.append(
                        {k: v for k, v in raw.items() if k not in ("apiVersion", "kind")} if meta.builtin else raw
                    )
        return aiohttp.web.json_response(
            {
                "apiVersion": meta.api_version,
                "kind": f"{meta.kind}List",
                "metadata": {"resourceVersion": str(self._last_rv())},
                "items": items,
            }
        )

    async def _serve_watch(self, request):
        """Without a resourceVersion (or "0"): every object as ADDED, then changes. From a resourceVersion (what
        a client that listed first sends): each object changed since, once, as ADDED if it was created since and
        MODIFIED otherwise (deletions in between are not replayed: no event history is kept). The stream ends
        after timeoutSeconds, as the real server's does."""
        match = compile_selector(request.params.get("labelSelector"))
        since = request.params.get("resourceVersion") or "0"
        since = int(since) if since.isdigit() else 0
        timeout = request.params.get("timeoutSeconds")
        yield b""
        bus = self._buses[request.resource]
        mark = await bus.mark()  # before the snapshot: a change made while the snapshot is sent is streamed after it
        async with self._lock:
            events = [
                {"type": "MODIFIED" if since and self._born.get(key, 0) <= since else "ADDED", "object": obj.raw}
                for key, obj in self._objects.items()
                for (res, ns, _n) in [key]
                if res == request.resource
                and not obj.deleted
                and (request.namespace is None or ns == request.namespace)
                and int(obj.raw.get("metadata", {}).get("resourceVersion") or 0) > since
                and match(obj.raw.get("metadata", {}).get("labels") or {})
            ]
        try:
            for event in events:
                yield event
            async with asyncio.timeout(float(timeout) if timeout and timeout.isdigit() else None):
                async for event in bus.stream(since=mark):
                    md = event.get("object", {}).get("metadata", {})
                    if request.namespace is not None and md.get("namespace") != request.namespace:
                        continue
                    if request.name is not None and md.get("name") != request.name:
                        continue
                    if match(md.get("labels") or {}):
                        yield event
        except TimeoutError:
            return
        finally:
            await bus.unmark(mark)
