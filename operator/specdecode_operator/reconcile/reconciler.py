"""One level-based reconciliation of a SpecDecodeDeployment; every trigger (watch event, child event, resync
sweep, tuner, operator restart) queues the object and a worker calls the same idempotent ``Reconciler.reconcile``
on its newest body (reconcile/controller.py).

Steps: parse the spec (admission has validated it; invalid objects never touch children) -> render (pure) ->
per child: our last write until the watch shows it, else the watch cache, else one GET; skip foreign names; apply
only when the input hash changed or a field of ours drifted -> delete owned children the render dropped (after the
replacement is applied) -> compute conditions -> apply status if it changed. Nothing here writes ``spec``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .. import control_identity, control_token, optional_apis
from ..kube_client import FIELD_MANAGER, ApiError, KubeClient, resource_path
from ..object_state import (
    AppliedWrite,
    CheckedVersion,
    ObjectState,
    RenderedChildren,
    SecretCheck,
    StatusWrite,
    labels_key,
    not_older,
    validated,
)
from ..render import RenderOptions, draft_source, names, render
from ..status import conditions, rollout, writer
from ..tuning import hooks as tuning
from . import children, events, runtime_image

log = logging.getLogger("specdecode.operator")
WORKLOAD_KINDS = {"Deployment", "LeaderWorkerSet"}

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
        self.identity = control_identity.identity(client, config)  # None: control-token Secrets
        self.durations: list[float] = []  # seconds per reconcile, for benchmarks (bounded below)

    def options(self, tuned_steps: int | None, image: str | None = None, draft: str | None = None) -> RenderOptions:
        return RenderOptions(
            served_draft=draft,
            default_image=self.config.default_image,
            default_sglang_image=self.config.default_sglang_image,
            runtime_image=image,
            operator_namespace=self.config.operator_namespace,
            operator_labels=dict(self.config.operator_labels),
            tuned_steps=tuned_steps,
            control_auth=self.identity.cached_auth() if self.identity is not None else None,
            service_monitor_labels=dict(self.config.service_monitor_labels),
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
            # kept as recorded unless this pass renders (_runtime_image)
            runtime_image=runtime_image.recorded(_newest_status(body, state)),
        )
        result = "ok"
        live = {children.key_of(o): o for o in live_children(md["namespace"], md["uid"])}
        try:
            sdd, problems = validated(body, state, check_rules=self.config.check_spec_rules)
            # The tuner's MetricsAvailable (its expected first value before its loop has run, so a new object's
            # first status write already holds it); a valid spec is one the tuner steps.
            obs.extra = tuning.conditions(state, body, tuned=sdd is not None)
            obs.extra += tuning.draft_conditions(state)  # DraftRollout, while a draft was refused
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
            # The body may predate our last status write (the watch delivers it a moment later; under load many
            # seconds later). Until a body of that resourceVersion or a newer one arrives (or settle_seconds pass),
            # our write is the current status: compare with (and carry lastTransitionTime from) it. Comparing with
            # the older body would write again, with fresh timestamps, and start the next redundant pass.
            last = state.status_written
            if last is not None and (
                not_older(md.get("resourceVersion"), last[2])
                or writer.unchanged(last[1], body.get("status"), ours_only=True)
                or time.monotonic() - last[0] >= self.config.settle_seconds
            ):
                state.status_written = None
                last = None
            basis = last[1] if last is not None else body.get("status")
            written = await writer.write(self.client, body, computed, basis)
            if written is not None:
                state.status_written = StatusWrite(
                    time.monotonic(),
                    children.slim(written.get("status") or {}),
                    (written.get("metadata") or {}).get("resourceVersion"),
                )
                state.remember_own_write(written)
            if not state.deleted:  # the status holds ``computed`` now: so does the condition gauge
                self.metrics.set_conditions(md["uid"], md["namespace"], md["name"], computed["conditions"])
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
        """Our own write is the child's current state until the watch cache shows it or a newer version (the
        controller drops the entry when the watch event arrives), or settle_seconds pass: no re-read after an apply.

        Entries leave ``state.applied`` as soon as the watch catches up, so the state holds only the writes the
        watch has not delivered yet (as slim records, see ``children.cache_record``)."""
        applied = state.applied
        rec = applied.get(key)
        if rec is None:
            return indexed
        at, obj = rec
        if indexed is not None and not_older(
            indexed["metadata"].get("resourceVersion"), obj["metadata"].get("resourceVersion")
        ):
            del applied[key]
            return indexed
        if time.monotonic() - at < self.config.settle_seconds:
            return obj
        del applied[key]
        return indexed

    def _desired(self, body: dict, sdd, state, image: str | None = None) -> tuple[list[dict], Callable[[], dict]]:
        """(stubs, full) of the rendered children. Stubs (key + input hash, see ``children.stub``) are cached per
        (uid, generation, tuned steps, labels, default image): render is pure and reads only name, namespace, uid,
        labels (which the children inherit), spec and the recorded default image, and spec changes bump the
        generation. ``full()`` renders the manifests (once
        per pass) when an apply or a drift check needs them; a steady-state pass renders nothing and the state keeps
        (key, input hash) per child, not the manifests."""
        md = body["metadata"]
        steps = tuning.tuned_steps(state, sdd, body)
        draft = draft_source.served_model(sdd, tuning.newest_draft_status(body, state))  # status.draft.serving
        key = (md.get("uid"), md.get("generation"), steps, labels_key(md), image, draft)
        rendered: dict = {}

        def full() -> dict:
            if not rendered:
                for m in render(sdd, self.options(steps, image, draft)):
                    m = children.with_owner(m, body)
                    rendered[children.key_of(m)] = m
            return rendered

        cached = state.rendered
        if cached is not None and cached[0] == key and key[1] is not None:
            return [children.stub_of(k, digest) for k, digest in cached[1]], full
        stubs = [children.stub(m) for m in full().values()]
        state.rendered = RenderedChildren(key, tuple((k, children.input_hash(m)) for k, m in full().items()))
        return stubs, full

    def _unchanged_since_checked(self, state, key, desired: dict, current: dict | None) -> bool:
        """True when ``current`` is the very version (resourceVersion) we last found or made up to date for this
        input hash: nothing can have drifted, so the field-by-field check (and parsing the record) is skipped."""
        if current is None:
            return False
        checked = state.checked.get(key)
        return checked is not None and checked == (
            current["metadata"].get("resourceVersion"),
            children.input_hash(desired),
        )

    def _mark_checked(self, state, key, desired: dict, current: dict | None) -> None:
        if current is None:  # not reached: a missing child is always applied, and the apply answers with it
            return
        state.checked[key] = CheckedVersion(current["metadata"].get("resourceVersion"), children.input_hash(desired))

    async def _resolve(self, state, key, plural: str, namespace: str, live: dict) -> dict | None:
        found = self._fresh(state, key, live.get(key))
        if found is None:  # not in our cache: the name may still be taken by someone else's object
            found = await self.client.get(key[0], plural, namespace, key[2])
        return found

    async def _sync_children(self, body: dict, sdd, state, live: dict, obs: conditions.Observation) -> None:
        """Stages: the control-token Secret, every desired child (concurrently), the pass's Events, then the owned
        children the render dropped (after their replacements are applied)."""
        if self.identity is not None:
            await self.identity.auth()  # the issuer the pods are told, read once (ApiError: this pass fails)
        p = _Pass(body, state, live, obs)
        image = await self._runtime_image(p, sdd)
        rendered, full = self._desired(body, sdd, state, image)
        secret = await self._control_secret(p)
        desired = [*rendered, *secret]
        served = await optional_apis.served_children(
            self.client, body, state, obs, desired, self.config.api_recheck_seconds
        )
        await asyncio.gather(*(self._sync_child(p, child, full) for child in served))
        if secret:
            state.secret_checked = SecretCheck(time.monotonic(), "ok")
        self._report_pass(p)
        await self._delete_stale(p, {children.key_of(c) for c in desired})
        await rollout.observe(self.client, body, state, obs, self.config.rollout_blocked_seconds)

    async def _runtime_image(self, p: _Pass, sdd) -> str:
        """The default runtime image this pass renders with (reconcile/runtime_image.py); sets status.runtimeImage.

        Without a record, the image the live serving workload runs is kept (a deployment that predates the record:
        the operator upgrade that introduced it must not restart its pods). The watch cache keeps a workload's
        fields only when it was not our own write; a record without them is read once."""
        cfg = self.config
        current = runtime_image.default_image(sdd, cfg.default_image, cfg.default_sglang_image)
        before = p.obs.runtime_image
        running = None
        if before is None and not sdd.spec.runtime.image:
            workload = children.expand(_workload(p.live.values()))
            running = runtime_image.running_image(workload)
            if running is None and workload is not None:
                kind, name = workload["kind"], workload["metadata"]["name"]
                plural = children.PLURALS[(workload["apiVersion"], kind)]
                running = runtime_image.running_image(await self.client.get(workload["apiVersion"], plural, p.ns, name))
        annotations = p.body["metadata"].get("annotations") or {}
        record = runtime_image.choose(
            sdd, current, before, annotations=annotations, policy=cfg.runtime_image_policy, running=running
        )
        p.obs.runtime_image = record
        if before is not None and runtime_image.adopted(before, record):
            events.emit(
                p.body, "DefaultImageAdopted", f"runtime image {before['image']} -> {record['image']}: pods roll"
            )
        if "available" in record:
            events.once(
                p.state,
                p.body,
                "DefaultImageAvailable",
                f"the operator's default runtime image is {record['available']}; this deployment keeps "
                f"{record['image']} until annotated {names.ADOPT_DEFAULT_IMAGE_ANNOTATION}=<new value> "
                "(adopting it restarts its pods)",
            )
        else:
            events.forget(p.state, "DefaultImageAvailable")
        return record["image"]

    async def _control_secret(self, p: _Pass) -> list[dict]:
        """The control-token Secret to apply this pass: [] unless it was read now and is ours or missing.

        It is not watched (Secret access is per namespace), so it is read at most every SECRET_RECHECK_SECONDS; a
        refusal (403) becomes one ControlTokenUnavailable Event, a foreign Secret of that name a collision, and both
        are looked at again at the next read."""
        if self.identity is not None:
            return []  # the operator's ServiceAccount tokens authenticate step control: no Secret
        key = ("v1", "Secret", names.control_secret(p.name))
        checked = p.state.secret_checked
        if checked is not None and time.monotonic() - checked[0] < SECRET_RECHECK_SECONDS:
            if checked[1] == "collision":
                p.obs.collisions.append(f"Secret/{key[2]}")
            return []
        try:
            secret_live = await self._resolve(p.state, key, "secrets", p.ns, p.live)
        except ApiError as e:
            if e.status != 403:
                raise
            p.state.secret_checked = SecretCheck(time.monotonic(), "forbidden")
            events.once(
                p.state,
                p.body,
                "ControlTokenUnavailable",
                f"Secret {key[2]} cannot be managed in namespace {p.ns} ({e.message}); Live step control "
                "needs the operator's control-token Role here (chart value rbac.controlTokenNamespaces)",
            )
            return []
        events.forget(p.state, "ControlTokenUnavailable")
        if secret_live is not None and not children.is_ours(secret_live, p.uid):
            p.state.secret_checked = SecretCheck(time.monotonic(), "collision")
            p.obs.collisions.append(f"Secret/{key[2]}")
            return []
        p.known[key] = secret_live  # read now, found or not: the child stage does not read it again
        return [children.with_owner(control_token.control_secret(p.name, p.ns, children.expand(secret_live)), p.body)]

    async def _sync_child(self, p: _Pass, child: dict, full: Callable[[], dict]) -> None:
        """One desired child: skip a foreign name, repair keys another client added, apply when it differs."""
        key = children.key_of(child)
        kind = key[1]
        plural = children.PLURALS[(key[0], kind)]
        current = p.known[key] if key in p.known else await self._resolve(p.state, key, plural, p.ns, p.live)
        if current is not None and not children.is_ours(current, p.uid):
            p.obs.collisions.append(f"{kind}/{key[2]}")
            return
        if not self._unchanged_since_checked(p.state, key, child, current):
            if children.STUB in child:
                child = full()[key]
            if kind in WORKLOAD_KINDS:
                self._report_replicas_override(p, child, current)
            if current is not None:
                current = await self._remove_added_keys(p, key, plural, child, current)
            if children.needs_apply(child, current):
                if p.state.deleted:
                    return  # the owner was deleted during this pass (seen by the controller): nothing to own it
                current = await self._apply_child(p, key, plural, child, current)
            self._mark_checked(p.state, key, child, current)
        if kind in WORKLOAD_KINDS:
            p.obs.workload = current

    def _report_replicas_override(self, p: _Pass, child: dict, current: dict | None) -> None:
        overridden = children.replicas_overridden(child, current)
        if overridden is None:
            return
        kind, name = child["kind"], child["metadata"]["name"]
        events.once(
            p.state,
            p.body,
            "ReplicasOverridden",
            f"spec.replicas of {kind} {name} was set to {overridden} by another client (an "
            "HorizontalPodAutoscaler aimed at it?) and is put back to the SpecDecodeDeployment's "
            f"{child['spec']['replicas']}: scale the SpecDecodeDeployment instead (its scale "
            "subresource: kubectl scale sdd, or an HPA with scaleTargetRef kind SpecDecodeDeployment)",
        )

    async def _remove_added_keys(self, p: _Pass, key: tuple, plural: str, child: dict, current: dict) -> dict:
        """Server-side apply leaves keys another client added to a map we own; remove them (one merge patch)."""
        added = children.added_keys(child, current)
        if not added:
            return current
        current = children.cache_record(
            await self.client.request(
                "PATCH",
                resource_path(key[0], plural, p.ns, key[2]),
                body=children.removal_patch(added),
                query=[("fieldManager", FIELD_MANAGER)],
                content_type="application/merge-patch+json",
                verb="patch",
            )
        )
        p.state.applied[key] = AppliedWrite(time.monotonic(), current)
        self.metrics.child_writes.labels(key[1], "repair").inc()
        events.emit(
            p.body,
            "DriftRepaired",
            f"removed keys added by another client to {key[1]} {key[2]}: "
            + "; ".join(f"{'.'.join(path)}: {', '.join(k)}" for path, k in sorted(added.items())),
        )
        return current

    async def _apply_child(self, p: _Pass, key: tuple, plural: str, child: dict, current: dict | None) -> dict:
        # What the server answered is what we sent plus defaults: keep identity, replica counts and the input hash,
        # not a compressed copy of the fields (the pass marks this version checked; a later drift has a newer one).
        written = children.cache_record(await self.client.apply(child, plural), fields=False)
        p.state.applied[key] = AppliedWrite(time.monotonic(), written)
        kind = key[1]
        self.metrics.child_writes.labels(kind, "create" if current is None else "update").inc()
        if current is None:
            p.created.append(f"{kind} {key[2]}")
        elif kind in WORKLOAD_KINDS:
            events.emit(p.body, "RolloutStarted", f"updated {kind} {key[2]}: pods roll to the new template")
        return written

    def _report_pass(self, p: _Pass) -> None:
        if p.created:  # one Event per pass, not one per child: 7 POSTs per new object would double its API calls
            events.emit(p.body, "Created", "created " + ", ".join(sorted(p.created)))
        if p.obs.collisions:
            p.obs.collisions.sort()
            events.once(
                p.state,
                p.body,
                "NameCollision",
                "not owned by this SpecDecodeDeployment, left untouched: " + ", ".join(p.obs.collisions),
            )
        else:
            events.forget(p.state, "NameCollision")

    async def _delete_stale(self, p: _Pass, desired_keys: set) -> None:
        for old in children.stale(p.live.values(), desired_keys, p.uid):
            key = children.key_of(old)
            await self.client.delete(key[0], children.PLURALS[(key[0], key[1])], p.ns, key[2], old["metadata"]["uid"])
            p.state.applied.pop(key, None)
            p.state.checked.pop(key, None)
            self.metrics.child_writes.labels(key[1], "delete").inc()
            p.obs.replaced.append(f"{key[1]}/{key[2]}")
            events.emit(
                p.body,
                "Replaced" if key[1] in WORKLOAD_KINDS else "Deleted",
                f"deleted {key[1]} {key[2]}: the current spec no longer renders it",
            )


@dataclass
class _Pass:
    """One pass over an object's children: its inputs, and what the stages collect for the pass's Events."""

    body: dict
    state: ObjectState
    live: dict
    obs: conditions.Observation
    known: dict = field(default_factory=dict)  # children read this pass outside the watch cache (the Secret)
    created: list[str] = field(default_factory=list)

    @property
    def ns(self) -> str:
        return self.body["metadata"]["namespace"]

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]

    @property
    def uid(self) -> str:
        return self.body["metadata"]["uid"]


def _newest_status(body: dict, state: ObjectState) -> dict | None:
    """Our last status write until the watch delivers it (it holds the newest runtimeImage record), else the body's."""
    written = state.status_written
    return written[1] if written is not None else body.get("status")


def _workload(objs: Iterable[dict]) -> dict | None:
    for obj in objs:
        if obj.get("kind") in WORKLOAD_KINDS:
            return obj
    return None
