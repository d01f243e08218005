"""What the tuner tells the world about one object: ``status.speculative``/``status.history`` (field manager
``specdecode-tuner``), the MetricsAvailable condition (through the reconciler), Events and the operator's
``specdecode_tuner_*`` metrics.

Why these rules: every write is an event for every watcher of the object, so status is written only when
steps, table, history or recommendation change, or at most every max(STATUS_REFRESH_S, interval) to refresh
measurements, and never when status already holds the values (operator restart). The condition goes into the
object's state and the reconciler writes it with its other conditions (one writer of the list; the emulator's SSA
lists are atomic). Events that repeat every interval (advice, a persisting problem) are posted once per distinct message
or rate-limited, so a stuck object does not flood the Event stream.
"""

from __future__ import annotations

import datetime
import json
import logging
import time

import kopf

from ..kube_client import ApiError
from ..object_state import ObjectState
from ..tuner import planner
from ..tuner.tuner import Decision
from . import hooks
from . import status as tuner_status

log = logging.getLogger("specdecode.tuner")

QUIET_REASONS = {"NoPods", "WarmingUp"}  # normal while pods start: no Warning Event
ADVISORY_REASONS = {"StepsRecommended", "RolloutSkipped"}  # repeat every interval: rate-limited
ADVISORY_EVERY_INTERVALS = 10
STATUS_REFRESH_S = 30.0  # tuner-clock seconds between writes that only refresh measurements


def _iso(ts: float) -> str:
    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Reporter:
    """One object's reporting state: what status holds (or we last wrote), and which Events were posted."""

    def __init__(self, body, state: ObjectState, client, metrics):
        self.body, self.state, self.client, self.metrics = body, state, client, metrics
        self.speculative: dict = {}
        self.history: list[dict] = []
        self.written: tuple | None = None  # (significant part, tuner time) of the last status write
        self.written_content: str | None = None  # all of what the last status write put there
        self.advisory_at: dict = {}
        self.warned: dict = {}

    def ref(self) -> str:
        md = self.body["metadata"]
        return f"{md.get('namespace')}/{md.get('name')}"

    def resume(self) -> None:
        """Start from what status holds (an operator restart keeps the history and the last measurements)."""
        status = self.body.get("status") or {}
        self.history = [dict(h) for h in status.get("history") or []][-tuner_status.HISTORY_LIMIT :]
        self.speculative = dict(status.get("speculative") or {})

    # ------------------------------------------------------------------ metrics and Events
    def count(self, d: Decision, mode: str) -> None:
        m = self.metrics
        if not d.buckets:
            m.tuner_decisions.labels("skipped").inc()
            return
        if mode == "Rollout":  # one global choice; per-bucket choices are only advice there
            m.tuner_decisions.labels("rollout" if d.restart else "hold").inc()
            return
        for rep in d.buckets.values():
            kind: str = rep.choice.kind
            if mode == "Off" and rep.choice.changed_from:
                kind = "recommend"
            m.tuner_decisions.labels(kind).inc()
            if kind == "rollback" and mode == "Live":
                m.tuner_rollbacks.inc()

    def events(self, d: Decision, now: float, interval: float, mode: str) -> None:
        for ev in d.events:
            if ev.type == "Warning" and ev.reason == d.condition.reason:
                if ev.reason not in QUIET_REASONS:
                    self.warn_once(ev.reason, ev.message, key="metrics")
                continue
            if ev.reason in ADVISORY_REASONS:
                if now - self.advisory_at.get(ev.reason, -1e18) < ADVISORY_EVERY_INTERVALS * interval:
                    continue
                self.advisory_at[ev.reason] = now
            reason = ev.reason
            if reason == "StepsChanged" and "(rollback:" in ev.message:
                reason = "StepsRolledBack"
            if reason == "RolloutStarted" and (mode != "Rollout" or not d.restart):
                continue
            self.event(ev.type, reason, ev.message)
        if d.condition.status == "True":
            self.warned.pop("metrics", None)

    def event(self, type_: str, reason: str, message: str) -> None:
        try:
            kopf.event(self.body, type=type_, reason=reason, message=message[:1024])
        except Exception as e:  # the event poster is best effort
            log.debug("tuner %s: event %s not posted: %s", self.ref(), reason, e)

    def warn_once(self, reason: str, message: str, key: str | None = None) -> None:
        key = key or reason
        if self.warned.get(key) != (reason, message):
            self.warned[key] = (reason, message)
            self.event("Warning", reason, message)

    def clear(self, key: str) -> None:
        self.warned.pop(key, None)

    # ------------------------------------------------------------------ condition and status
    def set_condition(self, d: Decision, listed: bool = True) -> bool:
        """Put MetricsAvailable into the object's state; True when it differs from what the reconciler reports now
        (the caller then reconciles). Compared with ``hooks.conditions``, so the tuner's first answer does not start a
        pass when it equals the reconciler's initial or carried-over condition."""
        cond = hooks.condition_dict(d.condition)
        if not listed:
            cond.update(
                status="Unknown",
                reason="EndpointsUnavailable",
                message="the headless Service's EndpointSlices could not be listed (API error)",
            )
        old = hooks.conditions(self.state, self.body, tuned=True)
        self.state.tuner_condition = cond
        return old != [cond]

    async def write_status(self, sdd, d: Decision, nccl: dict, now: float, mode: str, scenario, allowed) -> None:
        md = self.body["metadata"]
        fresh = d.status.model_dump(exclude_none=True)
        if "lastTuneTime" in fresh:
            fresh["lastTuneTime"] = _iso(time.time())
        spec = dict(self.speculative)
        spec.update(fresh)  # measurements missing this interval keep their last value
        if nccl:
            spec["ncclLatencyMicroseconds"] = nccl
        rec = self._recommendation(sdd, d, scenario, allowed)
        if rec is not None:
            spec["recommendation"] = rec
        for entry in d.history:
            h = entry.model_dump(exclude_none=True)
            h["time"] = _iso(time.time())
            if mode == "Off" and self._repeats(h):
                continue
            self.history.append(h)
        self.history = self.history[-tuner_status.HISTORY_LIMIT :]
        self.speculative = spec
        significant = json.dumps(
            [
                {
                    k: v
                    for k, v in spec.items()
                    if k in ("numSteps", "stepTable", "recommendation", "ncclLatencyMicroseconds")
                },
                self.history,
            ],
            sort_keys=True,
            default=str,
        )
        content = json.dumps([spec, self.history], sort_keys=True, default=str)
        if content == self.written_content:
            return  # exactly what the last write put there (e.g. nothing measured without pods): nothing to do
        live = self.body.get("status") or {}
        if live.get("speculative") == spec and (live.get("history") or []) == self.history:
            self.written = (significant, now)  # already there (e.g. after an operator restart): no write
            return
        if (
            self.written
            and self.written[0] == significant
            and now - self.written[1] < max(STATUS_REFRESH_S, float(sdd.spec.speculative.autotune.intervalSeconds))
        ):
            return
        try:
            self.state.remember_own_write(
                await tuner_status.write(self.client, md["name"], md["namespace"], spec, self.history)
            )
            self.written = (significant, now)
            self.written_content = content
        except ApiError as e:  # after the client's retries: the next interval tries again
            log.warning("tuner %s: status not written: %s", self.ref(), e)

    def _repeats(self, h: dict) -> bool:
        """Off mode recommends the same change every interval; history keeps the first of a run."""
        for old in reversed(self.history):
            if old.get("bucket") == h.get("bucket"):
                return (old.get("fromSteps"), old.get("toSteps")) == (h.get("fromSteps"), h.get("toSteps"))
        return False

    def _recommendation(self, sdd, d: Decision, scenario, allowed) -> dict | None:
        """The planner's draft-TP x steps advice, only from a calibrated profile with a draftTp block, fed with
        the acceptance measured in the busiest bucket."""
        if scenario is None or scenario.draft_tp is None or not d.buckets:
            return None
        busiest = max(d.buckets.values(), key=lambda r: r.samples)
        try:
            p = planner.plan(
                scenario,
                list(allowed),
                target_tp=sdd.spec.target.tensorParallelSize,
                current_tp=sdd.spec.draft.tensorParallelSize,
                alphas=busiest.alphas or None,
            )
        except (ValueError, ZeroDivisionError) as e:
            log.debug("tuner %s: no recommendation: %s", self.ref(), e)
            return None
        return p.recommendation.model_dump(exclude_none=True)
