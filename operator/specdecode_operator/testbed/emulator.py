"""An in-memory Kubernetes API server for tests, benchmarks and the demo, built on kmock's KubernetesEmulator.

kmock serves discovery, list and watch; this subclass adds what the operator relies on and kmock lacks (see
docs/operator.md): server metadata (uid, resourceVersion, generation, creationTimestamp), 201 on create, 409 on
stale writes, 422 on failed JSON-patch tests and on admission, server-side apply with field ownership and
conflicts, status and scale subresources, PUT, label selectors, owner-reference garbage collection, the CRD's
schema and CEL rules at admission, fault injection and a request log.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import datetime
import itertools
import json
import time
import uuid
from typing import Any, Callable

import aiohttp.web
import attrs
import jsonpatch
import kmock
import yaml

from . import fieldsets
from .selectors import compile_selector

Validator = Callable[[dict, "dict | None"], list[str]]
Defaulter = Callable[[dict], dict]


@dataclasses.dataclass
class ResourceMeta:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status: bool = False
    scale: dict | None = None  # {specReplicasPath, statusReplicasPath, labelSelectorPath}
    validate: Validator | None = None
    default: Defaulter | None = None

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


@dataclasses.dataclass
class Fault:
    """Answer matching requests with ``status`` (after ``delay`` seconds) or only delay them (a slow server)."""

    verb: str | None = None  # get, list, watch, create, update, patch, apply, delete
    resource: str | None = None  # plural
    name: str | None = None
    subresource: str | None = "*"  # "*" matches any, None only the main resource
    status: int | None = 500
    delay: float = 0.0
    times: int | None = None  # None: until removed
    every: int = 1  # hit every n-th matching request
    seen: int = 0
    hits: int = 0

    def matches(self, rec: "RequestRecord") -> bool:
        if self.verb and self.verb != rec.verb and not (self.verb == "patch" and rec.verb == "apply"):
            return False
        if self.resource and self.resource != rec.resource:
            return False
        if self.name and self.name != rec.name:
            return False
        if self.subresource != "*" and self.subresource != rec.subresource:
            return False
        if self.times is not None and self.hits >= self.times:
            return False
        self.seen += 1
        if (self.seen - 1) % self.every:
            return False
        self.hits += 1
        return True


@dataclasses.dataclass
class RequestRecord:
    verb: str
    group: str
    version: str
    resource: str
    subresource: str | None
    namespace: str | None
    name: str | None
    field_manager: str | None
    user_agent: str = ""
    status: int = 0
    time: float = 0.0

    @property
    def is_write(self) -> bool:
        return self.verb in ("create", "update", "patch", "apply", "delete")


_REASONS = {400: "BadRequest", 404: "NotFound", 409: "Conflict", 422: "Invalid", 500: "InternalError",
            503: "ServiceUnavailable", 429: "TooManyRequests", 504: "Timeout"}


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def status_response(code: int, message: str, reason: str | None = None, details: dict | None = None):
    return aiohttp.web.json_response(
        {"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure", "code": code,
         "reason": reason or _REASONS.get(code, "Unknown"), "message": message, "details": details or {}},
        status=code,
    )


class _Reject(Exception):
    def __init__(self, code: int, message: str, reason: str | None = None, details: dict | None = None):
        super().__init__(message)
        self.code, self.message, self.reason, self.details = code, message, reason, details


@attrs.define(kw_only=True)
class ApiServerEmulator(kmock.KubernetesEmulator):
    """kmock's emulator with the API-server behaviour our operator depends on (see the module docstring)."""

    keep_history: bool = True
    metas: dict = attrs.field(factory=dict, init=False)  # (group, plural) -> ResourceMeta
    faults: list[Fault] = attrs.field(factory=list, init=False)
    log: list[RequestRecord] = attrs.field(factory=list, init=False)
    _owners: dict = attrs.field(factory=dict, init=False)  # object key -> {path: {manager: operation}}
    _rv: Any = attrs.field(factory=lambda: itertools.count(1), init=False)

    # ----------------------------------------------------------------------------------------- declaration
    def declare(self, meta: ResourceMeta, *, verbs: set[str] | None = None) -> ResourceMeta:
        subresources = set()
        if meta.status:
            subresources.add("status")
        if meta.scale:
            subresources.add("scale")
        self.resources[f"{meta.api_version}/{meta.plural}"] = kmock.ResourceInfo(
            kind=meta.kind, singular=meta.kind.lower(), namespaced=meta.namespaced,
            verbs=verbs or {"create", "delete", "get", "list", "patch", "update", "watch"},
            subresources=subresources,
        )
        self.metas[(meta.group, meta.plural)] = meta
        return meta

    def declare_builtins(self) -> None:
        """The built-in kinds the operator reads or writes, with the subresources the real server has."""
        self.resources.load_bundled()
        for group, version, plural, kind, status, scale in [
            ("apps", "v1", "deployments", "Deployment", True,
             {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas",
              "labelSelectorPath": ".status.selector"}),
            ("", "v1", "configmaps", "ConfigMap", False, None),
            ("", "v1", "secrets", "Secret", False, None),
            ("", "v1", "services", "Service", True, None),
            ("", "v1", "pods", "Pod", True, None),
            ("", "v1", "events", "Event", False, None),
            ("events.k8s.io", "v1", "events", "Event", False, None),
            ("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, None),
            ("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy", False, None),
            ("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", False, None),
            ("coordination.k8s.io", "v1", "leases", "Lease", False, None),
        ]:
            self.declare(ResourceMeta(group, version, plural, kind, status=status, scale=scale))
        self.declare(ResourceMeta("apiextensions.k8s.io", "v1", "customresourcedefinitions",
                                  "CustomResourceDefinition", namespaced=False, status=True))

    def declare_third_party(self) -> None:
        """CRDs of other projects that our children use: LeaderWorkerSet, ServiceMonitor, kopf peering."""
        self.declare(ResourceMeta("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet",
                                  status=True, scale={"specReplicasPath": ".spec.replicas",
                                                      "statusReplicasPath": ".status.replicas",
                                                      "labelSelectorPath": ".status.hpaPodSelector"}))
        self.declare(ResourceMeta("monitoring.coreos.com", "v1", "servicemonitors", "ServiceMonitor"))
        self.declare(ResourceMeta("kopf.dev", "v1", "kopfpeerings", "KopfPeering"))
        self.declare(ResourceMeta("kopf.dev", "v1", "clusterkopfpeerings", "ClusterKopfPeering", namespaced=False))

    def install_crd(self, crd: dict, *, admission: bool = True,
                    validator: Validator | None = None, defaulter: Defaulter | None = None) -> ResourceMeta:
        """Serve a CustomResourceDefinition: its names, subresources and (with ``admission``) its validation.

        ``admission=False`` models a CRD applied without its schema rules (an older CRD, or CEL disabled), so
        invalid objects reach the operator, which must cope.
        """
        spec = crd["spec"]
        version = next(v for v in spec["versions"] if v.get("storage", True))
        sub = version.get("subresources", {})
        meta = ResourceMeta(
            spec["group"], version["name"], spec["names"]["plural"], spec["names"]["kind"],
            namespaced=spec.get("scope", "Namespaced") == "Namespaced",
            status="status" in sub, scale=sub.get("scale"),
        )
        if admission:
            meta.validate = validator or _crd_validator(crd)
            meta.default = defaulter or _crd_defaulter(crd)
        self.declare(meta)
        key = (kmock.resource("apiextensions.k8s.io", "v1", "customresourcedefinitions"), None,
               crd["metadata"]["name"])
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
    async def _handle(self, request):  # type: ignore[override]
        res = request.resource
        if res is None or res.plural is None:
            return await super()._handle(request)
        meta = self.metas.get((res.group, res.plural))
        method = str(request.method.value if hasattr(request.method, "value") else request.method).upper()
        verb = self._verb(request, method)
        rec = RequestRecord(
            verb=verb, group=res.group or "", version=res.version or "", resource=res.plural,
            subresource=request.subresource, namespace=request.namespace, name=request.name,
            field_manager=request.params.get("fieldManager"), user_agent=request.headers.get("User-Agent", ""),
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
                raise _Reject(404, f"the server could not find the requested resource ({res.plural})", "NotFound")
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
                raise _Reject(405, f"method {method} not allowed", "MethodNotAllowed")
        except _Reject as e:
            response = status_response(e.code, e.message, e.reason, e.details)
        rec.status = response.status
        return response

    @staticmethod
    def _verb(request, method: str) -> str:
        if method == "GET":
            if request.params.get("watch") in ("true", "1"):
                return "watch"
            return "get" if request.name else "list"
        if method == "POST":
            return "create"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            ctype = request.headers.get("Content-Type", "")
            return "apply" if ctype.startswith("application/apply-patch") else "patch"
        if method == "DELETE":
            return "delete"
        return method.lower()

    # ----------------------------------------------------------------------------------------- reads
    def _key(self, request, meta: ResourceMeta, name: str | None = None):
        ns = request.namespace if meta.namespaced else None
        return (request.resource, ns, name or request.name)

    def _live(self, key) -> dict | None:
        if key not in self._objects or self._objects[key].deleted:
            return None
        return self._objects[key].raw

    async def _get(self, request, meta: ResourceMeta):
        obj = self._live(self._key(request, meta))
        if obj is None:
            raise _Reject(404, f'{meta.plural}.{meta.group} "{request.name}" not found', "NotFound",
                          {"name": request.name, "group": meta.group, "kind": meta.plural})
        if request.subresource == "scale":
            return aiohttp.web.json_response(self._scale_of(obj, meta))
        return aiohttp.web.json_response(obj)

    async def _serve_list(self, request):  # type: ignore[override]
        meta = self.metas.get((request.resource.group, request.resource.plural))
        return json.loads((await self._list(request, meta)).text) if meta else {"items": []}

    async def _list(self, request, meta: ResourceMeta):
        try:
            match = compile_selector(request.params.get("labelSelector"))
        except ValueError as e:
            raise _Reject(400, str(e), "BadRequest")
        items = []
        async with self._lock:
            for (res, ns, _name), obj in self._objects.items():
                if res != request.resource or obj.deleted:
                    continue
                if request.namespace and ns != request.namespace:
                    continue
                raw = obj.raw
                if match(raw.get("metadata", {}).get("labels") or {}):
                    items.append(raw)
        return aiohttp.web.json_response({
            "apiVersion": meta.api_version, "kind": f"{meta.kind}List",
            "metadata": {"resourceVersion": str(self._peek_rv())}, "items": items,
        })

    async def _serve_watch(self, request):  # type: ignore[override]
        match = compile_selector(request.params.get("labelSelector"))
        yield b""
        async with self._lock:
            events = [
                {"type": "ADDED", "object": obj.raw}
                for (res, ns, _n), obj in self._objects.items()
                if res == request.resource and not obj.deleted
                and (request.namespace is None or ns == request.namespace)
                and match(obj.raw.get("metadata", {}).get("labels") or {})
            ]
        for event in events:
            yield event
        async for event in self._buses[request.resource]:
            md = event.get("object", {}).get("metadata", {})
            if request.namespace is not None and md.get("namespace") != request.namespace:
                continue
            if request.name is not None and md.get("name") != request.name:
                continue
            if match(md.get("labels") or {}):
                yield event

    # ----------------------------------------------------------------------------------------- writes
    def _peek_rv(self) -> int:
        value = next(self._rv)
        self._rv = itertools.count(value)  # put it back: peeking must not consume a version
        return value

    def _stamp_new(self, body: dict, namespace: str | None) -> None:
        md = body.setdefault("metadata", {})
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = _now()
        md["generation"] = 1
        md["resourceVersion"] = str(next(self._rv))
        if namespace:
            md["namespace"] = namespace

    def _body(self, request) -> Any:
        data = request.data
        if data is None and request.text:
            try:
                data = yaml.safe_load(request.text)
            except yaml.YAMLError as e:
                raise _Reject(400, f"malformed body: {e}", "BadRequest")
        return data

    async def _create(self, request, meta: ResourceMeta):
        body = self._body(request)
        if not isinstance(body, dict):
            raise _Reject(400, "the body of a create must be an object", "BadRequest")
        body = copy.deepcopy(body)
        md = body.setdefault("metadata", {})
        if not md.get("name") and md.get("generateName"):
            md["name"] = md["generateName"] + uuid.uuid4().hex[:10]
        if not md.get("name"):
            raise _Reject(422, f"{meta.kind} is invalid: metadata.name: Required value: name is required", "Invalid")
        if meta.namespaced and request.namespace and md.get("namespace", request.namespace) != request.namespace:
            raise _Reject(400, "the namespace of the object does not match the namespace of the request", "BadRequest")
        body.setdefault("apiVersion", meta.api_version)
        body.setdefault("kind", meta.kind)
        if meta.status:
            body.pop("status", None)  # the status subresource: status is not writable through the main resource
        manager = request.params.get("fieldManager") or _manager_from_agent(request)
        async with self._lock:
            key = self._key(request, meta, md["name"])
            if self._live(key) is not None:
                raise _Reject(409, f'{meta.plural}.{meta.group} "{md["name"]}" already exists', "AlreadyExists")
            body = self._admit(meta, body, None)
            self._stamp_new(body, request.namespace if meta.namespaced else None)
            self._take_ownership(key, None, body, manager, "Update")
            self._render_managed_fields(key, body)
            await self._commit(key, body, "ADDED")
        return aiohttp.web.json_response(body, status=201)

    async def _write(self, request, meta: ResourceMeta, verb: str):
        body = self._body(request)
        sub = request.subresource
        if sub not in (None, "status", "scale") or (sub == "status" and not meta.status) or (
                sub == "scale" and not meta.scale):
            raise _Reject(404, f"{meta.plural} has no subresource {sub}", "NotFound")
        manager = request.params.get("fieldManager") or _manager_from_agent(request)
        force = request.params.get("force") in ("true", "1")
        async with self._lock:
            key = self._key(request, meta)
            current = self._live(key)
            if current is None:
                if verb == "apply" and sub is None:
                    return await self._apply_create(request, meta, key, body, manager)
                raise _Reject(404, f'{meta.plural}.{meta.group} "{request.name}" not found', "NotFound",
                              {"name": request.name, "kind": meta.plural})
            if sub == "scale":
                new = self._patched_scale(current, meta, body, verb, request)
            elif verb == "apply":
                if not request.params.get("fieldManager"):
                    raise _Reject(400, "PATCH /apply requires fieldManager", "BadRequest")
                new = self._ssa(key, current, body, manager, force, sub, meta)
            elif verb == "update":
                rv = (body or {}).get("metadata", {}).get("resourceVersion")
                if rv and rv != current["metadata"]["resourceVersion"]:
                    raise self._conflict(meta, request.name)
                new = copy.deepcopy(body)
                for k in ("uid", "creationTimestamp", "generation", "resourceVersion", "deletionTimestamp"):
                    if k in current["metadata"]:
                        new.setdefault("metadata", {})[k] = current["metadata"][k]
            else:
                new = self._patched(current, body, request, meta)
            new = self._separate(current, new, sub, meta)
            if sub is None and verb != "apply":
                self._take_ownership(key, current, new, manager, "Update")
            if sub in ("status",) and verb != "apply":
                self._take_ownership(key, current, new, manager, "Update", only=("status",))
            if sub is None or sub == "scale":
                new = self._admit(meta, new, current)
            return await self._finish(key, current, new, meta)

    async def _apply_create(self, request, meta, key, body, manager):
        if not isinstance(body, dict):
            raise _Reject(400, "apply body must be an object", "BadRequest")
        body = copy.deepcopy(body)
        body.setdefault("metadata", {})["name"] = request.name
        if meta.status:
            body.pop("status", None)
        body = self._admit(meta, body, None)
        self._stamp_new(body, request.namespace if meta.namespaced else None)
        self._owners[key] = {p: {manager: "Apply"} for p, _ in fieldsets.leaves(body)}
        self._render_managed_fields(key, body)
        await self._commit(key, body, "ADDED")
        return aiohttp.web.json_response(body, status=201)

    def _patched(self, current: dict, body: Any, request, meta: ResourceMeta) -> dict:
        ctype = request.headers.get("Content-Type", "")
        if ctype.startswith("application/json-patch"):
            if not isinstance(body, list):
                raise _Reject(400, "a JSON patch must be a list of operations", "BadRequest")
            try:
                return jsonpatch.apply_patch(copy.deepcopy(current), body)
            except (jsonpatch.JsonPatchTestFailed, jsonpatch.JsonPatchConflict, jsonpatch.JsonPointerException) as e:
                raise _Reject(422, f"the server rejected our request due to an error in our request: {e}", "Invalid")
        if not isinstance(body, dict):
            raise _Reject(400, "a merge patch must be an object", "BadRequest")
        rv = body.get("metadata", {}).get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise self._conflict(meta, request.name)
        if ctype.startswith("application/strategic-merge-patch") and meta.group in ("", "apps", "policy"):
            return fieldsets.strategic_merge_patch(current, body)
        return fieldsets.merge_patch(current, body)

    def _conflict(self, meta: ResourceMeta, name: str) -> _Reject:
        return _Reject(409, f'Operation cannot be fulfilled on {meta.plural}.{meta.group} "{name}": the object has '
                            "been modified; please apply your changes to the latest version and try again",
                       "Conflict")

    def _ssa(self, key, current: dict, applied: Any, manager: str, force: bool, sub, meta) -> dict:
        """Server-side apply: the manager's applied configuration becomes the set of fields it owns."""
        if not isinstance(applied, dict):
            raise _Reject(400, "apply body must be an object", "BadRequest")
        if sub == "status":
            applied = {"status": applied.get("status", {})}
        elif meta.status:
            applied = {k: v for k, v in applied.items() if k != "status"}
        new_leaves = dict(fieldsets.leaves(applied))
        owners = self._owners.setdefault(key, {})
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
            raise _Reject(409, f"Apply failed with {len(conflicts)} conflict(s): {text}", "Conflict",
                          {"causes": [{"reason": "FieldManagerConflict", "field": "." + ".".join(p),
                                       "message": f'conflict with "{o[0]}"'} for p, o in conflicts]})
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

    def _take_ownership(self, key, old: dict | None, new: dict, manager: str, operation: str,
                        only: tuple[str, ...] | None = None) -> None:
        owners = self._owners.setdefault(key, {})
        old_leaves = dict(fieldsets.leaves(old)) if old else {}
        new_leaves = dict(fieldsets.leaves(new))
        for path, value in new_leaves.items():
            if only and path[: len(only)] != only:
                continue
            if old_leaves.get(path, _MISSING) != value:
                owners[path] = {manager: operation}
        for path in set(old_leaves) - set(new_leaves):
            owners.pop(path, None)

    def _separate(self, current: dict, new: dict, sub, meta: ResourceMeta) -> dict:
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

    def _scale_of(self, obj: dict, meta: ResourceMeta) -> dict:
        paths = meta.scale or {}

        def read(p):
            try:
                return fieldsets.get_path(obj, tuple(p.strip(".").split(".")))
            except KeyError:
                return None

        md = obj["metadata"]
        status = {"replicas": read(paths.get("statusReplicasPath", ".status.replicas")) or 0}
        selector = read(paths.get("labelSelectorPath", ".status.selector")) if paths.get("labelSelectorPath") else None
        if selector:
            status["selector"] = selector
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": md["name"], "namespace": md.get("namespace"), "uid": md["uid"],
                             "resourceVersion": md["resourceVersion"], "creationTimestamp": md["creationTimestamp"]},
                "spec": {"replicas": read(paths["specReplicasPath"]) or 0}, "status": status}

    def _patched_scale(self, current: dict, meta: ResourceMeta, body: Any, verb: str, request) -> dict:
        scale = self._scale_of(current, meta)
        if verb == "update" or verb == "apply":
            new_scale = body
        else:
            new_scale = self._patched(scale, body, request, meta)
        replicas = (new_scale or {}).get("spec", {}).get("replicas")
        if not isinstance(replicas, int):
            raise _Reject(422, f"Scale.autoscaling \"{request.name}\" is invalid: spec.replicas: Invalid value",
                          "Invalid")
        new = copy.deepcopy(current)
        fieldsets.set_path(new, tuple(meta.scale["specReplicasPath"].strip(".").split(".")), replicas)
        return new

    def _admit(self, meta: ResourceMeta, obj: dict, old: dict | None) -> dict:
        if meta.default:
            obj = meta.default(obj)
        if meta.validate:
            problems = meta.validate(obj, old)
            if problems:
                name = obj.get("metadata", {}).get("name", "")
                causes = [{"reason": "FieldValueInvalid", "message": p,
                           "field": p.split(":", 1)[0] if ":" in p else ""} for p in problems]
                raise _Reject(422, f'{meta.kind}.{meta.group} "{name}" is invalid: ' + "; ".join(problems),
                              "Invalid", {"name": name, "group": meta.group, "kind": meta.kind, "causes": causes})
        return obj

    async def _finish(self, key, current: dict, new: dict, meta: ResourceMeta):
        md = new.setdefault("metadata", {})
        if fieldsets.strip_server_fields(new) == fieldsets.strip_server_fields(current):
            return aiohttp.web.json_response(current)  # a no-op write changes nothing, not even resourceVersion
        for k in ("uid", "creationTimestamp", "name", "namespace"):
            if k in current["metadata"]:
                md[k] = current["metadata"][k]
        md["generation"] = current["metadata"].get("generation", 1) + (
            1 if _spec_of(new) != _spec_of(current) else 0)
        md["resourceVersion"] = str(next(self._rv))
        self._render_managed_fields(key, new)
        if md.get("deletionTimestamp") and not md.get("finalizers"):
            await self._commit(key, new, "MODIFIED")
            await self._remove(key)
            return aiohttp.web.json_response(new)
        await self._commit(key, new, "MODIFIED")
        return aiohttp.web.json_response(new)

    def _render_managed_fields(self, key, obj: dict) -> None:
        per_manager: dict[tuple[str, str], set] = {}
        for path, mgrs in self._owners.get(key, {}).items():
            for manager, op in mgrs.items():
                per_manager.setdefault((manager, op), set()).add(path)
        obj["metadata"]["managedFields"] = [
            {"manager": m, "operation": op, "apiVersion": obj.get("apiVersion", ""), "time": _now(),
             "fieldsType": "FieldsV1", "fieldsV1": fieldsets.fields_v1(paths),
             **({"subresource": "status"} if all(p[:1] == ("status",) for p in paths) else {})}
            for (m, op), paths in sorted(per_manager.items())
        ]

    async def _commit(self, key, body: dict, event: str) -> None:
        if key in self._objects and not self.keep_history and not self._objects[key].deleted:
            self._objects[key].history[:] = [body]
        elif key in self._objects:
            self._objects[key].create(body)
        else:
            self._objects[key] = body
        await self._buses[key[0]].put({"type": event, "object": copy.deepcopy(body)})

    async def _delete(self, request, meta: ResourceMeta):
        if request.subresource:
            raise _Reject(405, "cannot delete a subresource", "MethodNotAllowed")
        async with self._lock:
            key = self._key(request, meta)
            current = self._live(key)
            if current is None:
                raise _Reject(404, f'{meta.plural}.{meta.group} "{request.name}" not found', "NotFound",
                              {"name": request.name, "kind": meta.plural})
            options = self._body(request) if request.body else None
            pre_uid = ((options or {}).get("preconditions") or {}).get("uid")
            if pre_uid and pre_uid != current["metadata"]["uid"]:
                raise _Reject(409, "Precondition failed: UID in precondition does not match the object", "Conflict")
            if current["metadata"].get("finalizers"):
                if not current["metadata"].get("deletionTimestamp"):
                    new = copy.deepcopy(current)
                    new["metadata"]["deletionTimestamp"] = _now()
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
                    new["metadata"].setdefault("deletionTimestamp", _now())
                    new["metadata"]["resourceVersion"] = str(next(self._rv))
                    await self._commit(dep_key, new, "MODIFIED")
                else:
                    await self._remove(dep_key)

    # ----------------------------------------------------------------------------------------- test helpers
    def get(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> dict | None:
        key = (kmock.resource(group, version, plural), namespace, name)
        return copy.deepcopy(self._live(key))

    def items(self, group: str, version: str, plural: str, namespace: str | None = None) -> list[dict]:
        res = kmock.resource(group, version, plural)
        return [copy.deepcopy(o.raw) for (r, ns, _n), o in self._objects.items()
                if r == res and not o.deleted and (namespace is None or ns == namespace)]

    def versions(self, group: str, version: str, plural: str, namespace: str | None, name: str) -> list[dict]:
        key = (kmock.resource(group, version, plural), namespace, name)
        if key not in self._objects:
            return []
        return [v.raw for v in self._objects[key].history if v is not None]


_MISSING = object()


def _spec_of(obj: dict) -> dict:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status")}


def _manager_from_agent(request) -> str:
    agent = request.headers.get("User-Agent", "unknown")
    return agent.split("/", 1)[0] or "unknown"


def _crd_validator(crd: dict) -> Validator:
    """The committed CRD's openAPIV3Schema and x-kubernetes-validations, through the API package's validator."""
    from specdecode_operator.api.validate import validate_object

    def validate(obj: dict, old: dict | None) -> list[str]:
        return [str(p) for p in validate_object(obj, crd=crd, old=old)]

    return validate


def _crd_defaulter(crd: dict) -> Defaulter:
    from specdecode_operator.api.validate import apply_defaults

    def default(obj: dict) -> dict:
        return apply_defaults(obj, crd=crd)

    return default
