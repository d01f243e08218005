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
    steps = state.tuned_steps if state.tuner_started else resumed_steps(sdd, body)
    return held_while_blocked(state, steps)


def held_while_blocked(state: ObjectState, steps: int | None) -> int | None:
    """While a rollout of the object is blocked (a pod the scheduler keeps refusing, ``RolloutBlocked``), a new
    step count would start one more restart that cannot finish: the step count already rendered is kept until
    the rollout completes, then the tuner's latest one rolls out."""
    rendered = state.rendered
    if state.rollout_blocked is not None and rendered is not None and rendered[0][2] != steps:
        return rendered[0][2]
    return steps


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
    return {
        "type": CONDITION_TYPE,
        "status": "Unknown",
        "reason": "WarmingUp",
        "message": f"no decision this interval: {FIRST_SCRAPE}",
    }


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


def newest_draft_status(body: dict, state: ObjectState) -> dict:
    """``{"draft": ...}``: the draft rollout's last status.draft write until the watch delivers it, else the body's
    (tuning/draft_rollout.py writes it; the reconciler renders the serving draft from it), with
    ``adaptation`` likewise from the adaptation loop's last write (tuning/adaptation.py, its own field manager)."""
    in_body = (body.get("status") or {}).get("draft")
    draft = state.draft_status if state.draft_status is not None else in_body
    adaptation = state.adaptation_status
    if adaptation is None:
        adaptation = (in_body or {}).get("adaptation")
    if adaptation is not None:
        draft = {**{k: v for k, v in (draft or {}).items() if k != "adaptation"}, "adaptation": adaptation}
    return {"draft": draft}


def draft_conditions(state: ObjectState) -> list[dict]:
    """The DraftRollout condition (only while a candidate was refused) and the DraftAdaptation condition (while the
    latest adapted candidate was refused or its training failed) for the reconciler's status write."""
    return [dict(c) for c in (state.draft_condition, state.adaptation_condition) if c]
