"""One level-based reconciliation of a SpecDecodeDeployment; every kopf trigger (watch event, resync timer,
operator restart) calls the same idempotent ``Reconciler.reconcile``.

Steps: validate (the same schema and CEL as admission; invalid objects never touch children) -> render (pure) ->
per child: read from the watch cache, else our last write, else one GET; skip foreign names; apply only when
the input hash changed or a field of ours drifted -> delete owned children the render dropped (after the
replacement is applied) -> compute conditions -> apply status if it changed. Nothing here writes ``spec``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Callable, Iterable

from .. import control_token
from ..kube_client import FIELD_MANAGER, ApiError, KubeClient, resource_path
from ..object_state import ObjectState, validated
from ..render import RenderOptions, names, render
from ..status import conditions, writer
from ..tuning import hooks as tuning
from . import children, events

log = logging.getLogger("specdecode.operator")
WORKLOAD_KINDS = {"Deployment", "LeaderWorkerSet"}

STATUS_TRUST_SECONDS = 60.0  # at most this long our last status write is trusted over an older-looking body
# The control-token Secret is not watched (Secret access is granted per namespace, never cluster-wide, so there is
# no cluster-wide watch to index it): it is read (one GET) at most this often per object, and re-created or repaired
# then. A missing grant (403) is reported once as ControlTokenUnavailable and re-tried at the same period.
SECRET_RECHECK_SECONDS = 120.0

LiveChildren = Callable[[str, str], Iterable[dict]]  # (namespace, owner uid) -> children from the watch cache


class Reconciler:
    """Reconciles objects through ``client``, the operator's API client (made at kopf startup)."""

    def __init__(self, config, metrics, client: KubeClient):
        self.config = config
        self.metrics = metrics
        self.client = client
        self.durations: list[float] = []  # seconds per reconcile, for benchmarks (bounded below)

    def options(self, tuned_steps: int | None) -> RenderOptions:
        return RenderOptions(
            default_image=self.config.default_image,
            default_sglang_image=self.config.default_sglang_image,
            operator_namespace=self.config.operator_namespace,
            operator_labels=dict(self.config.operator_labels),
            tuned_steps=tuned_steps,
        )

    async def reconcile(self, body: dict, state: ObjectState, live_children: LiveChildren) -> str:
        started = time.perf_counter()
        md = body["metadata"]
        spec = body.get("spec") or {}
        obs = conditions.Observation(
            generation=md.get("generation", 1),
            desired_replicas=spec.get("replicas", 1) if isinstance(spec.get("replicas", 1), int) else 0,
            selector=names.selector_string(md["name"]),
            paused=(md.get("annotations") or {}).get(names.PAUSE_ANNOTATION) == "paused",
        )
        result = "ok"
        live = {children.key_of(o): o for o in live_children(md["namespace"], md["uid"])}
        try:
            sdd, problems = validated(body, state)
            # The tuner's MetricsAvailable (its expected first value before its loop has run, so a new object's
            # first status write already holds it); a valid spec is one the tuner steps.
            obs.extra = tuning.conditions(state, body, tuned=sdd is not None)
            if problems:
                obs.problems = problems
                result = "invalid"
                events.once(state, body, "InvalidSpec", "; ".join(problems))
                obs.workload = _workload(live.values())
            else:
                events.forget(state, "InvalidSpec")
                if obs.paused:
                    result = "paused"
                    obs.workload = _workload(live.values())
                else:
                    await self._sync_children(body, sdd, state, live, obs)
                    if obs.collisions:
                        result = "collision"
        except ApiError as e:
            obs.error = f"API error {e.status} {e.reason}: {e.message}"[:512]
            result = "error"
            log.warning("reconcile %s/%s: %s", md["namespace"], md["name"], obs.error)
        try:
            computed = conditions.compute(obs)
            # The body kopf hands us may predate our last status write (kopf works through an object's events
            # one after the other; under load that is many seconds behind). Until a body shows what we wrote, or
            # STATUS_TRUST_SECONDS pass, compare with (and carry lastTransitionTime from) our write: comparing
            # with the stale body would write again, with fresh timestamps, and that write's watch event would
            # start the next redundant pass.
            last = state.status_written
            if last is not None and (md.get("resourceVersion") == last[2]
                                     or writer.unchanged(last[1], body.get("status"), ours_only=True)
                                     or time.monotonic() - last[0] >= max(self.config.settle_seconds,
                                                                          STATUS_TRUST_SECONDS)):
                state.status_written = None
                last = None
            basis = last[1] if last is not None else body.get("status")
            written = await writer.write(self.client, body, computed, basis)
            if written is not None:
                state.status_written = (time.monotonic(), written.get("status") or {},
                                          (written.get("metadata") or {}).get("resourceVersion"))
                state.remember_own_write(written)
        except ApiError as e:
            result = "error"
            log.warning("status of %s/%s not written: %s", md["namespace"], md["name"], e)
        self.metrics.reconciles.labels(result).inc()
        elapsed = time.perf_counter() - started
        self.metrics.reconcile_seconds.observe(elapsed)
        if len(self.durations) < 200_000:
            self.durations.append(elapsed)
        return result

    def _fresh(self, state, key, indexed: dict | None) -> dict | None:
        """The watch cache may lag our own write by a moment; within settle_seconds our write's answer wins.

        Entries leave ``state.applied`` once the cache shows our write or the window has passed, so the memo
        holds only the writes of the last few seconds (and as slim records, see ``children.cache_record``)."""
        applied = state.applied
        rec = applied.get(key)
        if rec is None:
            return indexed
        at, obj = rec
        if indexed is not None and indexed["metadata"].get("resourceVersion") == obj["metadata"].get("resourceVersion"):
            del applied[key]
            return indexed
        if time.monotonic() - at < self.config.settle_seconds:
            return obj
        del applied[key]
        return indexed

    def _desired(self, body: dict, sdd, state) -> tuple[list[dict], Callable[[], dict]]:
        """(stubs, full) of the rendered children. Stubs (key + input hash, see ``children.stub``) are cached per
        (uid, generation, tuned steps): render is pure and reads only name, namespace and spec, and spec changes
        bump the generation. ``full()`` renders the manifests (once per pass) when an apply or a drift check
        needs them; a steady-state pass renders nothing and the memo keeps ~0.3 kB per object, not the manifests."""
        md = body["metadata"]
        steps = tuning.tuned_steps(state, sdd, body)
        key = (md.get("uid"), md.get("generation"), steps)
        rendered: dict = {}

        def full() -> dict:
            if not rendered:
                for m in render(sdd, self.options(steps)):
                    m = children.with_owner(m, body)
                    rendered[children.key_of(m)] = m
            return rendered

        cached = state.rendered
        if cached is not None and cached[0] == key and key[1] is not None:
            return cached[1], full
        stubs = [children.stub(m) for m in full().values()]
        state.rendered = (key, stubs)
        return stubs, full

    def _unchanged_since_checked(self, state, key, desired: dict, current: dict | None) -> bool:
        """True when ``current`` is the very version (resourceVersion) we last found or made up to date for this
        input hash: nothing can have drifted, so the field-by-field check (and parsing the record) is skipped."""
        if current is None:
            return False
        checked = state.checked.get(key)
        return checked is not None and checked == (current["metadata"].get("resourceVersion"),
                                                    children.input_hash(desired))

    def _mark_checked(self, state, key, desired: dict, current: dict) -> None:
        state.checked[key] = (current["metadata"].get("resourceVersion"), children.input_hash(desired))

    async def _resolve(self, state, key, plural: str, namespace: str, live: dict) -> dict | None:
        found = self._fresh(state, key, live.get(key))
        if found is None:  # not in our cache: the name may still be taken by someone else's object
            found = await self.client.get(key[0], plural, namespace, key[2])
        return found

    async def _sync_children(self, body: dict, sdd, state, live: dict, obs: conditions.Observation) -> None:
        md = body["metadata"]
        ns, name, uid = md["namespace"], md["name"], md["uid"]
        rendered, full = self._desired(body, sdd, state)
        secret_key = ("v1", "Secret", names.control_secret(name))
        rendered_secret: list[dict] = []
        known: dict = {}
        checked = state.secret_checked
        if checked is None or time.monotonic() - checked[0] >= SECRET_RECHECK_SECONDS:
            try:
                secret_live = await self._resolve(state, secret_key, "secrets", ns, live)
            except ApiError as e:
                if e.status != 403:
                    raise
                state.secret_checked = (time.monotonic(), "forbidden")
                events.once(state, body, "ControlTokenUnavailable",
                            f"Secret {secret_key[2]} cannot be managed in namespace {ns} ({e.message}); Live step "
                            "control needs the operator's control-token Role here (chart value "
                            "rbac.controlTokenNamespaces)")
            else:
                events.forget(state, "ControlTokenUnavailable")
                if secret_live is not None and not children.is_ours(secret_live, uid):
                    obs.collisions.append(f"Secret/{secret_key[2]}")
                else:
                    rendered_secret = [children.with_owner(
                        control_token.control_secret(name, ns, children.expand(secret_live)), body)]
                    if secret_live is not None:
                        known[secret_key] = secret_live
        elif checked[1] == "collision":
            obs.collisions.append(f"Secret/{secret_key[2]}")
        desired = [*rendered, *rendered_secret]
        created: list[str] = []

        async def sync(child: dict):
            key = children.key_of(child)
            kind = key[1]
            plural = children.PLURALS[(key[0], kind)]
            current = known[key] if key in known else await self._resolve(state, key, plural, ns, live)
            if current is not None and not children.is_ours(current, uid):
                obs.collisions.append(f"{kind}/{key[2]}")
                return
            if self._unchanged_since_checked(state, key, child, current):
                if kind in WORKLOAD_KINDS:
                    obs.workload = current
                return
            if children.STUB in child:
                child = full()[key]
            if kind in WORKLOAD_KINDS and (overridden := children.replicas_overridden(child, current)) is not None:
                events.once(state, body, "ReplicasOverridden",
                            f"spec.replicas of {kind} {key[2]} was set to {overridden} by another client (an "
                            "HorizontalPodAutoscaler aimed at it?) and is put back to the SpecDecodeDeployment's "
                            f"{child['spec']['replicas']}: scale the SpecDecodeDeployment instead (its scale "
                            "subresource: kubectl scale sdd, or an HPA with scaleTargetRef kind SpecDecodeDeployment)")
            added = children.added_keys(child, current) if current is not None else {}
            if added:
                current = children.cache_record(await self.client.request(
                    "PATCH", resource_path(key[0], plural, ns, key[2]), body=children.removal_patch(added),
                    query=[("fieldManager", FIELD_MANAGER)], content_type="application/merge-patch+json",
                    verb="patch"))
                state.applied[key] = (time.monotonic(), current)
                self.metrics.child_writes.labels(kind, "repair").inc()
                events.emit(body, "DriftRepaired", f"removed keys added by another client to {kind} {key[2]}: "
                            + "; ".join(f"{'.'.join(p)}: {', '.join(k)}" for p, k in sorted(added.items())))
            if children.needs_apply(child, current):
                written = children.cache_record(await self.client.apply(child, plural))
                state.applied[key] = (time.monotonic(), written)
                self.metrics.child_writes.labels(kind, "create" if current is None else "update").inc()
                if current is None:
                    created.append(f"{kind} {key[2]}")
                elif kind in WORKLOAD_KINDS:
                    events.emit(body, "RolloutStarted", f"updated {kind} {key[2]}: pods roll to the new template")
                current = written
                self._mark_checked(state, key, child, current)
            else:
                self._mark_checked(state, key, child, current)
            if kind in WORKLOAD_KINDS:
                obs.workload = current

        await asyncio.gather(*(sync(c) for c in desired))
        if rendered_secret:
            state.secret_checked = (time.monotonic(), "ok")
        elif f"Secret/{secret_key[2]}" in obs.collisions:
            state.secret_checked = (time.monotonic(), "collision")
        if created:  # one Event per pass, not one per child: 7 POSTs per new object would double its API calls
            events.emit(body, "Created", "created " + ", ".join(sorted(created)))
        if obs.collisions:
            obs.collisions.sort()
            events.once(state, body, "NameCollision",
                        "not owned by this SpecDecodeDeployment, left untouched: " + ", ".join(obs.collisions))
        else:
            events.forget(state, "NameCollision")
        desired_keys = {children.key_of(c) for c in desired}
        for old in children.stale(live.values(), desired_keys, uid):
            key = children.key_of(old)
            await self.client.delete(key[0], children.PLURALS[(key[0], key[1])], ns, key[2], old["metadata"]["uid"])
            state.applied.pop(key, None)
            state.checked.pop(key, None)
            self.metrics.child_writes.labels(key[1], "delete").inc()
            obs.replaced.append(f"{key[1]}/{key[2]}")
            events.emit(body, "Replaced" if key[1] in WORKLOAD_KINDS else "Deleted",
                        f"deleted {key[1]} {key[2]}: the current spec no longer renders it")


def _workload(objs: Iterable[dict]) -> dict | None:
    for obj in objs:
        if obj.get("kind") in WORKLOAD_KINDS:
            return obj
    return None
