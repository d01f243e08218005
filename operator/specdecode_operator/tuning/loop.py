"""The tuner's per-object loop: every ``spec.speculative.autotune.intervalSeconds`` discover the runtime pods,
read their counters, step the pure ``Tuner`` and act on its decision.

Why one ``TuningLoop`` object per SpecDecodeDeployment, run by one scheduler for all of them
(tuning/scheduler.py): the loop has state that must survive between intervals (the estimator's windows, the
policy's cooldowns, which pods already run the table) and its period comes from the object; the scheduler starts
it once the object's pods are ready, runs one interval of an object at a time, and drops it with the object.
Everything an interval does is caught: bad metrics, unreachable pods, API errors end as a MetricsAvailable
condition, an Event or a log line, never as a crash.

Per interval (this module orders the steps; each lives where its reason is documented):
1. pods: the EndpointSlices of the headless Service (``pods``), listed only while status.readyReplicas > 0,
   so objects without running pods cost no API call;
2. counters: GET ``http://IP:http/metrics`` per pod, or the same series from ``--prometheus-url``
   (``pod_client``, over the operator's one shared HTTP session);
3. ``Tuner.step(now, snapshots)``;
4. act by mode - Live: PUT the step table to every pod whose published table differs (``actuate``);
   Rollout: put the new step count into the object's state (``tuned_steps``) and reconcile, which re-renders the
   ConfigMap and pod template (a rolling update); Off (and any mode while ``specdecode.io/reconcile: paused``): report only;
4b. a change of spec.draft.model alone: one step of its in-place canary (``draft_rollout``); then one step of the
    draft trained from the capture (``adaptation``: its training Job, the offline gate, the canary above);
5. report (``report``): status.speculative/history, MetricsAvailable through the reconciler, Events,
   metrics.

The spec is the reconciler's per-generation validation (``object_state.validated``, shared through the object's
state): an object is validated once per generation, whichever of the two gets to it first. Nothing here writes ``spec``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from ..kube_client import ApiError
from ..object_state import ObjectState, validated
from ..render import names
from ..tuner.tuner import Mode, Tuner, TunerConfig
from . import adaptation, draft_rollout, hooks, pods, profile
from .actuate import TablePusher
from .pod_client import read_counters
from .profile import PROFILE_ANNOTATION, Profile
from .report import Reporter

log = logging.getLogger("specdecode.tuner")


@dataclass
class LoopState:
    fingerprint: Any = None
    tuner: Tuner | None = None
    mode: str = "Off"
    profile: Profile = field(default_factory=Profile)


class TuningLoop:
    """One object's loop; ``tick`` runs one interval and returns the wall seconds until the next."""

    def __init__(
        self,
        context,
        body,
        state: ObjectState,
        reconcile: Callable[[], Awaitable[None]],
        clock: Callable[[], float] | None = None,
    ):
        self.client = context.client
        self.config = context.config
        self.body = body
        self.object_state = state
        self.reconcile = reconcile
        self.scale = self.config.tune_interval_scale
        self._t0_wall, self._t0_mono = time.time(), time.monotonic()
        self.clock = clock or self._clock
        self.loop_state = LoopState()
        self.report = Reporter(body, state, context.client, context.metrics)
        self.pusher = TablePusher(
            context.http,
            context.client,
            self.config,
            context.metrics,
            log,
            warn=self.report.warn_once,
            clear=self.report.clear,
        )

        self.adaptations = adaptation.Adaptations(
            state, context.client, self._write_adaptation, self.report.event, reconcile, self.config.default_image
        )
        self.drafts = draft_rollout.DraftRollouts(
            state,
            draft_rollout.PodsApi(context.http, self._control_token, self.config.scrape_timeout),
            self._write_draft,
            self.report.event,
            reconcile,
        )

    async def _control_token(self) -> str | None:
        md = self.body["metadata"]
        return await self.pusher.token_for(md["namespace"], md["name"], md.get("uid"))

    async def _write_draft(self, draft: dict) -> None:
        md = self.body["metadata"]
        await draft_rollout.write(self.client, md["name"], md["namespace"], draft)

    async def _write_adaptation(self, status: dict) -> None:
        md = self.body["metadata"]
        await adaptation.write(self.client, md["name"], md["namespace"], status)

    def see(self, body) -> None:
        """The newest body of the object (the scheduler hands it over before each interval)."""
        self.body = body
        self.report.body = body

    def _clock(self) -> float:
        """The tuner's clock: wall time, running 1/tune_interval_scale as fast (scale 1 on a real cluster)."""
        return self._t0_wall + (time.monotonic() - self._t0_mono) / self.scale

    async def tick(self) -> float:
        interval = 30.0
        try:
            sdd, _ = validated(self.body, self.object_state, check_rules=self.config.check_spec_rules)
            if sdd is None:
                return interval * self.scale  # invalid spec: the reconciler reports it; nothing to tune
            interval = float(sdd.spec.speculative.autotune.intervalSeconds)
            await self._interval(sdd, interval)
        except asyncio.CancelledError:
            raise
        except Exception:  # a bug must cost one interval, not the loop
            log.exception("tuner %s: interval failed", self.report.ref())
        return interval * self.scale

    async def _interval(self, sdd, interval: float) -> None:
        md = self.body["metadata"]
        ns, name = md["namespace"], md["name"]
        paused = (md.get("annotations") or {}).get(names.PAUSE_ANNOTATION) == "paused"
        await self._ensure_tuner(sdd, paused)
        st, report = self.loop_state, self.report
        tuner = st.tuner
        assert tuner is not None  # _ensure_tuner built it
        now = self.clock()
        targets: list[pods.Target] | None = []
        if (self.body.get("status") or {}).get("readyReplicas"):  # no ready replica: no endpoint, no LIST
            try:
                targets = await pods.list_targets(self.client, ns, name)
            except ApiError as e:
                log.warning("tuner %s: EndpointSlices not listed: %s", report.ref(), e)
                targets = None
        snaps, nccl = (
            ([], {})
            if targets is None
            else await read_counters(self.pusher.session, self.config, ns, targets, now, tuner.wants_costs)
        )
        d = tuner.step(now, snaps)
        acting = not paused
        if acting and targets is not None and sdd.spec.runtime.launcher == "specdecode":
            try:  # a change of spec.draft.model alone: canaried in place (draft_rollout)
                await self.drafts.step(sdd, self.body, targets, snaps)
            except ApiError as e:
                log.warning("tuner %s: status.draft not written: %s", report.ref(), e)
            try:  # a draft trained from the capture: its Job, the offline gate, then the canary above
                await self.adaptations.step(sdd, self.body)
            except ApiError as e:
                log.warning("tuner %s: draft adaptation not stepped: %s", report.ref(), e)
        if st.mode == "Live" and acting:
            await self.pusher.push(
                ns, name, tuner, d, targets or [], snaps, uid=(self.body.get("metadata") or {}).get("uid")
            )
        restarted = st.mode == "Rollout" and acting and d.restart
        if restarted:
            self.object_state.tuned_steps = d.rollout_steps
        report.count(d, st.mode)
        report.events(d, now, interval, st.mode)
        condition_changed = report.set_condition(d, listed=targets is not None)
        await report.write_status(sdd, d, nccl, now, st.mode, st.profile.scenario, tuner.config.policy.allowed())
        if restarted or condition_changed:
            await self.reconcile()  # Rollout: re-render now; MetricsAvailable: reported by the reconciler

    async def _ensure_tuner(self, sdd, paused: bool) -> None:
        """(Re)build the tuner when what it was built from changes: autotune settings, the starting step count,
        the profile annotation, or pause (a paused object is tuned in report-only mode). A rebuild forgets the
        estimator's windows; Rollout restarts from spec.speculative.numSteps unless the loop is resuming."""
        spec = sdd.spec
        at = spec.speculative.autotune
        profile_ref = (self.body["metadata"].get("annotations") or {}).get(PROFILE_ANNOTATION)
        mode: Mode = "Off" if paused else at.mode
        fingerprint = (
            at.model_dump_json(),
            spec.speculative.numSteps,
            spec.draft.tensorParallelSize,
            profile_ref,
            mode,
        )
        st = self.loop_state
        if st.fingerprint == fingerprint and st.tuner is not None:
            return
        first = st.tuner is None
        st.profile = await profile.load(
            self.client, self.body["metadata"]["namespace"], profile_ref, spec.draft.tensorParallelSize
        )
        restart_s = st.profile.scenario.restart_seconds if st.profile.scenario else self.config.tune_restart_seconds
        initial = spec.speculative.numSteps
        if at.mode == "Rollout":
            resumed = hooks.resumed_steps(sdd, self.body) if first else None
            if resumed is not None:
                initial = resumed
            self.object_state.tuned_steps = resumed
        else:
            self.object_state.tuned_steps = None
        self.object_state.tuner_started = True
        cfg = TunerConfig.from_autotune(at, initial, restart_s=restart_s)
        cfg.mode = mode
        st.tuner = Tuner(cfg, profile=st.profile.cost)
        st.mode = mode
        st.fingerprint = fingerprint
        if first:
            self.report.resume()
        if st.profile.problem:
            self.report.warn_once("InvalidTunerProfile", st.profile.problem)
        log.info(
            "tuner %s: mode %s, %s steps, interval %ss, costs %s",
            self.report.ref(),
            mode,
            initial,
            at.intervalSeconds,
            f"from profile ConfigMap {profile_ref} (override)"
            if st.profile.cost
            else "from the pods' start-up probe, refined online",
        )
