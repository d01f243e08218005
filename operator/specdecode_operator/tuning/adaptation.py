"""A draft that learns from its own traffic: capture -> train -> gate -> canary -> promote, one step per tuning
interval (tuning/loop.py), for a deployment with ``spec.draft.adaptation.training``.

Why here: the loop already runs per object on a clock and holds the draft rollout (tuning/draft_rollout.py), which
is the canary this hands its candidate to. The phases (status.draft.adaptation.phase):

* Capturing: the pods capture traffic; once ``intervalSeconds`` have passed since the capture's start or the last
  attempt's end, attempt N+1 starts: its Job (render/training_job.py) is server-side applied, owned by the object;
* Training: the Job trains from the serving draft, then gates the candidate offline against it. Each interval reads
  the Job and its pods (one GET, one LIST by the Job's label): still running, or the gate's exit code and summary
  from the pod's termination message (tuner/adaptation.py). A failure, the deadline or a worse candidate: Failed or
  Refused, with a Warning Event and the DraftAdaptation condition; the serving draft serves on and the next
  attempt waits for the interval;
* Canary: a better candidate is recorded as ``candidate`` {source, base}; ``draft_source.wanted_model`` then names
  it, and the draft rollout canaries it in place on one replica exactly as a new spec.draft.model. Its verdict
  decides: Promoted (status.draft.serving is the candidate; ``promoted`` records it, so new and restarted pods
  load it from the capture claim) or Refused (rolled back or refused by a pod; the old draft serves on).

Spec is never written: the adapted draft lives in status.draft.adaptation, written under its own field manager
``specdecode-adapt``. A Job is never deleted by the operator: ``ttlSecondsAfterFinished`` removes it an hour after it
finished (its result is in status by then), and the object's deletion removes it through its owner reference.
"""

from __future__ import annotations

import datetime
import logging
import time
from typing import Any, Awaitable, Callable

from specdecode_runtime.contract import adaptation as contract
from specdecode_runtime.contract.config import CAPTURE_MOUNT_DIR

from ..api.models import API_VERSION, KIND, PLURAL
from ..kube_client import ApiError, resource_path
from ..object_state import ObjectState
from ..render import draft_source, training_job
from ..tuner import adaptation as decide
from .hooks import newest_draft_status

log = logging.getLogger("specdecode.adaptation")

ADAPT_MANAGER = "specdecode-adapt"
CONDITION = "DraftAdaptation"
JOB_LABEL = "batch.kubernetes.io/job-name"  # the Job controller's label on its pods


def _iso(t: float) -> str:
    return datetime.datetime.fromtimestamp(t, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC).timestamp()
    except ValueError:
        return None


def newest(body: dict, state: ObjectState) -> dict:
    """status.draft.adaptation: our last write until the watch delivers it, else the body's."""
    if state.adaptation_status is not None:
        return dict(state.adaptation_status)
    return dict((((body.get("status") or {}).get("draft") or {}).get("adaptation")) or {})


class Adaptations:
    """One object's adaptation loop; ``step`` runs once per tuning interval, after the draft rollout's step.

    ``write(adaptation)`` applies status.draft.adaptation; ``event(type, reason, message)`` posts an Event;
    ``changed()`` is awaited when the reconciler must run (the condition, or the draft it renders, changed)."""

    def __init__(
        self,
        state: ObjectState,
        client: Any,
        write: Callable[[dict], Awaitable[None]],
        event: Callable[[str, str, str], None],
        changed: Callable[[], Awaitable[None]],
        default_image: str,
        clock: Callable[[], float] = time.time,
        capture_dir: str = CAPTURE_MOUNT_DIR,
    ):
        """``capture_dir``: where the pods mount the capture claim, which names the candidates' paths (the
        contract's directory; a test bed whose pods run on one machine keeps the claim elsewhere)."""
        self.state, self.client, self._write, self.event, self.changed = state, client, write, event, changed
        self.default_image, self.clock, self.capture_dir = default_image, clock, capture_dir

    async def _set(
        self,
        current: dict,
        update: dict,
        *,
        reason: str | None = None,
        warning: bool = False,
        condition: dict | None | bool = False,
    ) -> None:
        out = {k: v for k, v in {**current, **update}.items() if v is not None}
        out["message"] = str(out.get("message", ""))[:1024]
        if out != current:
            wanted_before = (current.get("candidate"), current.get("promoted"))
            self.state.adaptation_status = out
            await self._write(out)
            if reason:
                self.event("Warning" if warning else "Normal", reason, out["message"])
            if (out.get("candidate"), out.get("promoted")) != wanted_before:  # the draft the pods are to serve
                await self.changed()
        if condition is not False and condition != self.state.adaptation_condition:
            self.state.adaptation_condition = condition if isinstance(condition, dict) else None
            await self.changed()

    def _refusal(self, reason: str, message: str) -> dict:
        return {"type": CONDITION, "status": "False", "reason": reason, "message": message[:1024]}

    # ------------------------------------------------------------------ one interval
    async def step(self, sdd: Any, body: dict) -> None:
        training = training_job.settings(sdd)
        if training is None:
            return  # capture only (or off): nothing trains; an adapted draft is no longer wanted (draft_source)
        now = self.clock()
        current = newest(body, self.state)
        draft = newest_draft_status(body, self.state)["draft"] or {}
        serving = (draft.get("serving") or {}).get("source")
        phase = current.get("phase")
        if phase is None:
            await self._set(
                current,
                {"phase": "Capturing", "message": "capturing served traffic for the first attempt", "since": _iso(now)},
            )
            return
        if phase == "Training":
            await self._follow(sdd, body, current, training.minRatio, now)
            return
        if phase == "Canary":
            await self._canary(sdd, current, draft, now)
            return
        if not serving or draft.get("phase") in ("Canary", "Promoting"):
            return  # the draft rollout first: an attempt trains from the draft every replica serves
        if decide.due(now, _epoch(current.get("since")), training.intervalSeconds):
            await self._start(sdd, body, current, serving, now)

    async def _start(self, sdd: Any, body: dict, current: dict, serving: str, now: float) -> None:
        attempt = int(current.get("attempt") or 0) + 1
        recorded = ((body.get("status") or {}).get("runtimeImage") or {}).get("image")
        image = training_job.image_of(sdd, recorded if isinstance(recorded, str) else None, self.default_image)
        job = training_job.training_job(sdd, serving, attempt, image)
        name = job["metadata"]["name"]
        try:
            await self.client.apply(job, "jobs")
        except ApiError as e:
            log.warning("adaptation %s: Job %s not applied: %s", sdd.metadata.name, name, e)
            msg = f"attempt {attempt}: Job {name} not created: {e}"
            await self._set(
                current,
                {"phase": "Failed", "attempt": attempt, "job": name, "message": msg, "since": _iso(now)},
                reason="DraftTrainingFailed",
                warning=True,
                condition=self._refusal("TrainingFailed", msg),
            )
            return
        await self._set(
            current,
            {
                "phase": "Training",
                "attempt": attempt,
                "job": name,
                "message": f"attempt {attempt}: Job {name} trains from {serving}, then gates the candidate offline",
            },
            reason="DraftTrainingStarted",
        )

    async def _follow(self, sdd: Any, body: dict, current: dict, min_ratio: float, now: float) -> None:
        ns, name = body["metadata"]["namespace"], current.get("job")
        attempt = int(current.get("attempt") or 0)
        job = await self.client.get("batch/v1", "jobs", ns, name) if name else None
        if job is None:
            outcome = decide.Outcome("failed", f"Job {name} is gone before its result was read")
        else:
            pods = await self.client.request(
                "GET",
                resource_path("v1", "pods", ns, None),
                query=[("labelSelector", f"{JOB_LABEL}={name}"), ("limit", "5")],
                verb="list",
            )
            outcome = decide.job_outcome(job, list((pods or {}).get("items") or []), min_ratio)
        if outcome.kind == "running":
            return
        done: dict[str, Any] = {"since": _iso(now), "lastResult": outcome.result or None}
        prefix = f"attempt {attempt}: "
        if outcome.kind == "failed":
            await self._set(
                current,
                {**done, "phase": "Failed", "message": prefix + outcome.message},
                reason="DraftTrainingFailed",
                warning=True,
                condition=self._refusal("TrainingFailed", prefix + outcome.message),
            )
            return
        if outcome.kind == "not_better":
            await self._set(
                current,
                {**done, "phase": "Refused", "message": prefix + outcome.message},
                reason="DraftCandidateRefused",
                warning=True,
                condition=self._refusal("CandidateRefused", prefix + outcome.message),
            )
            return
        candidate = contract.attempt_dir(sdd.metadata.name, attempt, self.capture_dir)
        serving = (newest_draft_status(body, self.state)["draft"] or {}).get("serving") or {}
        problem = draft_source.in_place_problem(sdd.spec, serving.get("source") or sdd.spec.draft.model, candidate)
        if problem is not None:
            msg = f"{prefix}{outcome.message}; not canaried: {problem}"
            await self._set(
                current,
                {**done, "phase": "Refused", "message": msg},
                reason="DraftCandidateRefused",
                warning=True,
                condition=self._refusal("CandidateRefused", msg),
            )
            return
        await self._set(
            current,
            {
                **done,
                "phase": "Canary",
                "message": f"{prefix}{outcome.message}; canaried in place",
                "candidate": {"source": candidate, "base": sdd.spec.draft.model, "attempt": attempt},
            },
            reason="DraftCandidateGated",
            condition=None,
        )

    async def _canary(self, sdd: Any, current: dict, draft: dict, now: float) -> None:
        cand = current.get("candidate") or {}
        source = cand.get("source")
        attempt = cand.get("attempt") or current.get("attempt")
        prefix = f"attempt {attempt}: "
        if not source or cand.get("base") != sdd.spec.draft.model:
            await self._set(
                current,
                {
                    "phase": "Refused",
                    "candidate": None,
                    "since": _iso(now),
                    "message": f"{prefix}dropped: spec.draft.model changed to {sdd.spec.draft.model}",
                },
                reason="DraftCandidateRefused",
            )
            return
        if (draft.get("serving") or {}).get("source") == source:
            await self._set(
                current,
                {
                    "phase": "Promoted",
                    "candidate": None,
                    "promoted": dict(cand),
                    "since": _iso(now),
                    "message": f"{prefix}{source} promoted by the canary: {draft.get('message', '')}",
                },
                reason="DraftAdapted",
                condition=None,
            )
            return
        if (draft.get("candidate") or {}).get("source") == source and draft.get("phase") in ("RolledBack", "Failed"):
            msg = f"{prefix}{source} refused by the canary: {draft.get('message', '')}"
            await self._set(
                current,
                {"phase": "Refused", "candidate": None, "since": _iso(now), "message": msg},
                reason="DraftCandidateRefused",
                warning=True,
                condition=self._refusal("CandidateRefused", msg),
            )


def patch(name: str, namespace: str, adaptation: dict) -> dict:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": name, "namespace": namespace},
        "status": {"draft": {"adaptation": adaptation}},
    }


async def write(client: Any, name: str, namespace: str, adaptation: dict) -> dict:
    """Apply status.draft.adaptation (force: the field is this manager's alone)."""
    path = resource_path(API_VERSION, PLURAL, namespace, name, "status")
    return await client.request(
        "PATCH",
        path,
        query=[("fieldManager", ADAPT_MANAGER), ("force", "true")],
        body=patch(name, namespace, adaptation),
        content_type="application/apply-patch+yaml",
        verb="apply",
    )
