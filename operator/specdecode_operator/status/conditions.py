"""kstatus-compatible conditions from what one reconciliation observed. Pure: no clock, no I/O.

kstatus reads ``observedGeneration`` and the abnormal-true conditions: ``Ready`` is True only when the serving
workload reports every replica ready for the generation we rendered *and* our observedGeneration equals the
object's generation; ``Progressing`` is True while a rollout is under way (False with reason ``RolloutBlocked`` when one of its pods
cannot be scheduled, see ``rollout``); ``Degraded`` is True when something
needs a human (invalid spec, a name taken by a foreign object, API errors past retries). ``SpecValid`` carries the
first field-level problem, so ``kubectl get sdd -o yaml`` names the field. ``Stalled`` (kstatus's own abnormal-true
condition: kstatus and Flux report the object Failed instead of waiting out a timeout) is True while nothing can
progress without a change: an invalid spec, a name held by a foreign object, a rollout pod the scheduler refuses;
False (``AsExpected``) as soon as progress is possible again. An API error is retried, so it never stalls.
"""

from __future__ import annotations

import dataclasses

TYPES = ("Ready", "Progressing", "Degraded", "SpecValid", "Paused", "Stalled")


@dataclasses.dataclass
class Observation:
    generation: int
    problems: list[str] = dataclasses.field(default_factory=list)  # "path: message"
    paused: bool = False
    collisions: list[str] = dataclasses.field(default_factory=list)  # "Kind/name"
    error: str | None = None
    workload: dict | None = None  # the live Deployment or LeaderWorkerSet
    desired_replicas: int = 0
    selector: str | None = None
    replaced: list[str] = dataclasses.field(default_factory=list)  # stale children removed in this pass
    rollout_blocked: str | None = None  # a rollout pod the scheduler keeps refusing (status/rollout.py)
    # Conditions observed elsewhere and reported here (the tuner's MetricsAvailable): the conditions list has one
    # writer, so a status apply never drops an entry another writer added.
    extra: list[dict] = dataclasses.field(default_factory=list)
    # status.runtimeImage: the default runtime image this deployment runs (reconcile/runtime_image.py), carried
    # unchanged through passes that render nothing (invalid spec, paused, API error) so that no write drops it.
    runtime_image: dict | None = None


def workload_state(workload: dict | None, desired: int) -> tuple[int, int, bool]:
    """(replicas, readyReplicas, rolled out) of a Deployment or LeaderWorkerSet."""
    if workload is None:
        return 0, 0, desired == 0
    status = workload.get("status") or {}
    spec_replicas = (workload.get("spec") or {}).get("replicas", desired)
    replicas = status.get("replicas", 0) or 0
    ready = status.get("readyReplicas", 0) or 0
    observed = status.get("observedGeneration")
    current = observed is None or observed >= workload["metadata"].get("generation", 1)
    if workload.get("kind") == "Deployment":
        updated = status.get("updatedReplicas", 0) or 0
        current = current and observed is not None
        done = current and updated >= spec_replicas and ready >= spec_replicas and replicas <= spec_replicas
    else:
        done = current and ready >= spec_replicas and (status.get("updatedReplicas", ready) or 0) >= spec_replicas
    return replicas, ready, done


def _cond(ctype: str, status: bool | None, reason: str, message: str = "") -> dict:
    text = "Unknown" if status is None else ("True" if status else "False")
    return {"type": ctype, "status": text, "reason": reason, "message": message}


def compute(obs: Observation) -> dict:
    """The status stanza this operator owns (conditions without timestamps; see ``stamp``)."""
    replicas, ready, rolled_out = workload_state(obs.workload, obs.desired_replicas)
    conditions = []
    if obs.problems:
        first = obs.problems[0] + (f" (and {len(obs.problems) - 1} more)" if len(obs.problems) > 1 else "")
        conditions.append(_cond("SpecValid", False, "InvalidSpec", first))
    else:
        conditions.append(_cond("SpecValid", True, "Valid"))
    if obs.paused:
        conditions.append(
            _cond(
                "Paused", True, "ReconcilePaused", "annotation specdecode.io/reconcile=paused: children are not written"
            )
        )
    if obs.problems:
        degraded = _cond("Degraded", True, "InvalidSpec", "the spec is invalid; children were left untouched")
    elif obs.collisions:
        degraded = _cond(
            "Degraded",
            True,
            "NameCollision",
            "objects not owned by this SpecDecodeDeployment hold our names: " + ", ".join(obs.collisions),
        )
    elif obs.error:
        degraded = _cond("Degraded", True, "ReconcileError", obs.error)
    else:
        degraded = _cond("Degraded", False, "AsExpected")
    conditions.append(degraded)
    healthy = degraded["status"] == "False"
    if obs.paused:
        progressing = _cond("Progressing", False, "ReconcilePaused", "reconciliation is paused")
    elif not healthy:
        progressing = _cond("Progressing", False, degraded["reason"], degraded["message"])
    elif rolled_out:
        progressing = _cond("Progressing", False, "RolloutComplete", f"{ready}/{obs.desired_replicas} replicas ready")
    elif obs.rollout_blocked:
        progressing = _cond(
            "Progressing",
            False,
            "RolloutBlocked",
            f"{obs.rollout_blocked}; {ready}/{obs.desired_replicas} replicas ready",
        )
    else:
        what = "replacing " + ", ".join(obs.replaced) + "; " if obs.replaced else ""
        progressing = _cond("Progressing", True, "RollingOut", f"{what}{ready}/{obs.desired_replicas} replicas ready")
    conditions.append(progressing)
    if obs.problems:
        stalled = _cond("Stalled", True, "InvalidSpec", first)  # the field, as SpecValid names it
    elif obs.collisions:
        stalled = _cond("Stalled", True, degraded["reason"], degraded["message"])
    elif progressing["reason"] == "RolloutBlocked":
        stalled = _cond("Stalled", True, "RolloutBlocked", progressing["message"])
    else:
        stalled = _cond("Stalled", False, "AsExpected")
    conditions.append(stalled)
    if healthy and rolled_out and not obs.paused:
        ready_c = _cond("Ready", True, "AllReplicasReady", f"{ready}/{obs.desired_replicas} replicas ready")
    elif obs.paused:
        ready_c = _cond("Ready", False, "ReconcilePaused", "reconciliation is paused")
    else:
        ready_c = _cond(
            "Ready",
            False,
            progressing["reason"] if healthy else degraded["reason"],
            progressing["message"] if healthy else degraded["message"],
        )
    conditions.insert(0, ready_c)
    conditions.extend(dict(c) for c in obs.extra if c.get("type") not in TYPES)
    for c in conditions:
        c["observedGeneration"] = obs.generation
    status = {
        "observedGeneration": obs.generation,
        "conditions": conditions,
        "replicas": replicas,
        "readyReplicas": ready,
    }
    if obs.selector:
        status["selector"] = obs.selector
    if obs.runtime_image:
        status["runtimeImage"] = dict(obs.runtime_image)
    return status


def stamp(conditions: list[dict], previous: list[dict] | None, now: str) -> list[dict]:
    """Set lastTransitionTime: kept while a condition's status is unchanged, ``now`` when it flips."""
    before = {c.get("type"): c for c in previous or []}
    out = []
    for c in conditions:
        old = before.get(c["type"])
        c = dict(c)
        c["lastTransitionTime"] = (
            old["lastTransitionTime"]
            if old and old.get("status") == c["status"] and old.get("lastTransitionTime")
            else now
        )
        out.append(c)
    return out
