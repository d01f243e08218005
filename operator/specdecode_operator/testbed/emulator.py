"""An in-memory Kubernetes API server for tests, benchmarks and the demo, built on kmock's KubernetesEmulator.

kmock serves discovery, list and watch; this subclass adds what the operator relies on and kmock lacks (see
docs/operator.md): server metadata (uid, resourceVersion, generation, creationTimestamp), 201 on create, 409 on
stale writes, 422 on failed JSON-patch tests and on admission, server-side apply with field ownership and
conflicts, status and scale subresources, PUT, label selectors, owner-reference garbage collection, the CRD's
schema and CEL rules at admission, fault injection and a request log.

This module declares kinds and dispatches requests; the behaviour lives in one module per responsibility:
``resources`` (kinds), ``faults`` (fault injection, request log), ``reads`` (get, list, watch), ``writes``
(create, PUT, patch, apply, /status, /scale), ``ownership`` (managed fields), ``subresources``, ``admission``,
``deletion`` (finalizers, garbage collection), ``store`` (resourceVersions, events) and ``errors`` (Status).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import time
from typing import Any

import attrs
import kmock

from .admission import crd_defaulter, crd_validator
from .errors import Reject, status_response
from .faults import Fault, RequestRecord, verb_of
from .reads import ReadHandlers
from .resources import Defaulter, ResourceMeta, Validator, builtin_kinds, meta_of_crd, third_party_kinds
from .writes import WriteHandlers

__all__ = ["ApiServerEmulator", "Defaulter", "Fault", "RequestRecord", "ResourceMeta", "Validator", "status_response"]


@attrs.define(kw_only=True)
class ApiServerEmulator(ReadHandlers, WriteHandlers, kmock.KubernetesEmulator):
    """kmock's emulator with the API-server behaviour our operator depends on (see the module docstring)."""

    keep_history: bool = True
    metas: dict = attrs.field(factory=dict, init=False)  # (group, plural) -> ResourceMeta
    faults: list[Fault] = attrs.field(factory=list, init=False)
    log: list[RequestRecord] = attrs.field(factory=list, init=False)
    _owners: dict = attrs.field(factory=dict, init=False)  # object key -> {path: {manager: operation}}
    _rv: Any = attrs.field(factory=lambda: itertools.count(1), init=False)
    _born: dict = attrs.field(factory=dict, init=False)  # object key -> the resourceVersion that created it
    _gc_tasks: set = attrs.field(factory=set, init=False)  # deletions of orphans, queued by writes (deletion.py)

    # ----------------------------------------------------------------------------------------- declaration
    def declare(self, meta: ResourceMeta, *, verbs: set[str] | None = None) -> ResourceMeta:
        subresources = set()
        if meta.status:
            subresources.add("status")
        if meta.scale:
            subresources.add("scale")
        self.resources[f"{meta.api_version}/{meta.plural}"] = kmock.ResourceInfo(
            kind=meta.kind,
            singular=meta.kind.lower(),
            namespaced=meta.namespaced,
            verbs=verbs or {"create", "delete", "get", "list", "patch", "update", "watch"},
            subresources=subresources,
        )
        self.metas[(meta.group, meta.plural)] = meta
        return meta

    def declare_builtins(self) -> None:
        """The built-in kinds the operator reads or writes, with the subresources the real server has."""
        self.resources.load_bundled()
        for meta in builtin_kinds():
            self.declare(meta)

    def declare_third_party(self) -> None:
        """CRDs of other projects that our children use: LeaderWorkerSet, ServiceMonitor, kopf peering."""
        for meta in third_party_kinds():
            self.declare(meta)

    def install_crd(
        self,
        crd: dict,
        *,
        admission: bool = True,
        validator: Validator | None = None,
        defaulter: Defaulter | None = None,
    ) -> ResourceMeta:
        """Serve a CustomResourceDefinition: its names, subresources and (with ``admission``) its validation.

        ``admission=False`` models a CRD applied without its schema rules (an older CRD, or CEL disabled), so
        invalid objects reach the operator, which must cope.
        """
        meta = meta_of_crd(crd)
        if admission:
            meta.validate = validator or crd_validator(crd)
            meta.default = defaulter or crd_defaulter(crd)
        self.declare(meta)
        key = (kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions"), None, crd["metadata"]["name"])
        body = copy.deepcopy(crd)
        self._stamp_new(body, None)
        self._objects[key] = body
        return meta

    # ----------------------------------------------------------------------------------------- faults/log
    def inject(self, **kwargs: Any) -> Fault:
        fault = Fault(**kwargs)
        self.faults.append(fault)
        return fault

    def clear_faults(self) -> None:
        self.faults.clear()

    def writes(self, *, resource: str | None = None, since: int = 0) -> list[RequestRecord]:
        return [r for r in self.log[since:] if r.is_write and (resource is None or r.resource == resource)]

    # ----------------------------------------------------------------------------------------- dispatch
    async def _handle(self, request):
        res = request.resource
        if res is None or res.plural is None:
            return await super()._handle(request)
        meta = self.metas.get((res.group, res.plural))
        method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
        verb = verb_of(request, method)
        rec = RequestRecord(
            verb=verb,
            group=res.group or "",
            version=res.version or "",
            resource=res.plural,
            subresource=request.subresource,
            namespace=request.namespace,
            name=request.name,
            field_manager=request.params.get("fieldManager"),
            user_agent=request.headers.get("User-Agent", ""),
            time=time.monotonic(),
        )
        self.log.append(rec)
        for fault in list(self.faults):
            if fault.matches(rec):
                if fault.delay:
                    await asyncio.sleep(fault.delay)
                if fault.status:
                    rec.status = fault.status
                    return status_response(fault.status, f"injected fault: {fault.status}")
                break
        try:
            if meta is None:
                if verb in ("get", "list", "watch"):
                    response = await super()._handle(request)
                    rec.status = response.status
                    return response
                raise Reject(404, f"the server could not find the requested resource ({res.plural})", "NotFound")
            if verb == "watch":
                rec.status = 200
                return await super()._handle(request)
            if verb == "list":
                response = await self._list(request, meta)
            elif verb == "get":
                response = await self._get(request, meta)
            elif verb == "create":
                response = await self._create(request, meta)
            elif verb in ("patch", "apply", "update"):
                response = await self._write(request, meta, verb)
            elif verb == "delete":
                response = await self._delete(request, meta)
            else:
                raise Reject(405, f"method {method} not allowed", "MethodNotAllowed")
        except Reject as e:
            response = status_response(e.code, e.message, e.reason, e.details)
        rec.status = response.status
        return response

    # ----------------------------------------------------------------------------------------- test helpers
    # Shadows kmock's HTTP-client ``get`` (a client call against the served app, unused here): tests read the store.
    def get(  # type: ignore[override]
        self, group: str, version: str, plural: str, namespace: str | None, name: str
    ) -> dict | None:
        key = (kmock.resource(group, version, plural), namespace, name)
        return copy.deepcopy(self._live(key))

    def items(self, group: str, version: str, plural: str, namespace: str | None = None) -> list[dict]:
        res = kmock.resource(group, version, plural)
        return [
            copy.deepcopy(o.raw)
            for (r, ns, _n), o in self._objects.items()
            if r == res and not o.deleted and (namespace is None or ns == namespace)
        ]

    def versions(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> list[dict]:
        key = (kmock.resource(group, version, plural), namespace, name)
        if key not in self._objects:
            return []
        return [v.raw for v in self._objects[key].history if v is not None]
