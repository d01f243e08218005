"""What the reconciler reads from the step-count tuner (the loop itself is tuning/loop.py).

``tuned_steps`` feeds Rollout mode's decision into RenderOptions; ``conditions`` hands the tuner's
MetricsAvailable condition to the reconciler, the single writer of ``status.conditions`` (and its expected first
value, before the loop has run). Both read spec and never write it; the loop leaves its answers in the object's
``ObjectState`` (``tuned_steps``, ``tuner_condition``).
"""

from __future__ import annotations

from ..object_state import ObjectState
from ..tuner.tuner import CONDITION_TYPE, FIRST_SCRAPE, NO_PODS


def mode_of(sdd) -> str:
    return sdd.spec.speculative.autotune.mode


def tuned_steps(state: ObjectState, sdd, body=None) -> int | None:
    """The step count Rollout mode decided for this object, if any (spec.speculative.numSteps otherwise).

    Until the tuning loop has started after an operator restart, it has decided nothing: the value the tuner last wrote
    to ``status.speculative.numSteps`` is used then, so a restarted operator does not roll the pods back to the
    spec's starting value and forward again."""
    if sdd is None or mode_of(sdd) != "Rollout":
        return None
    if state.tuner_started:
        return state.tuned_steps
    return resumed_steps(sdd, body)


def resumed_steps(sdd, body) -> int | None:
    at = sdd.spec.speculative.autotune
    steps = (((body or {}).get("status") or {}).get("speculative") or {}).get("numSteps")
    if isinstance(steps, int) and at.minSteps <= steps <= at.maxSteps and steps != sdd.spec.speculative.numSteps:
        return steps
    return None


def condition_dict(c) -> dict:
    """A tuner ``Condition`` as the reconciler reports it (no timestamps; ``writer`` stamps them)."""
    return {"type": c.type, "status": c.status, "reason": c.reason, "message": (c.message or "")[:1024]}


def initial_condition(body=None) -> dict:
    """What the tuner's first interval will report, before it has run: without ready replicas there is no endpoint
    to list (``NoPods``), with some the first scrape cannot decide yet (``WarmingUp``). Reporting it in the
    reconciler's first pass means a new object's first status write already carries the condition, instead of a
    second write when the tuner's first interval adds it (the tuner's own answer, when the same, changes nothing)."""
    if not (((body or {}).get("status") or {}).get("readyReplicas")):
        return condition_dict(NO_PODS)
    return {"type": CONDITION_TYPE, "status": "Unknown", "reason": "WarmingUp",
            "message": f"no decision this interval: {FIRST_SCRAPE}"}


def conditions(state: ObjectState, body=None, tuned: bool = False) -> list[dict]:
    """The tuner's condition. Before its loop's first interval: the one already in status (operator restart: a
    restart does not drop and re-add it, two needless writes), else, for an object the tuner will step
    (``tuned``: a valid spec), ``initial_condition``."""
    if state.tuner_condition is not None:
        return [state.tuner_condition]
    for c in ((body or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == CONDITION_TYPE:
            return [{k: c.get(k, "") for k in ("type", "status", "reason", "message")}]
    return [initial_condition(body)] if tuned else []
