"""Which draft the pods' runtime config names: the one they serve, not necessarily spec.draft.model.

Why: a change of ``spec.draft.model`` alone is loaded into the running pods in place (the runtime's draft endpoint)
and canaried on acceptance (tuning/draft_rollout.py) instead of restarting every GPU pod. The runtime config (and
with it the pod template hash) therefore names the draft the pods serve, ``status.draft.serving``, and moves to
the new draft only once it is promoted, when rendering it changes nothing in the pods: a pod that restarts later
loads the promoted draft from its config. Pure: spec and status in, a model string out.

A change can be loaded in place only when every pod can already read the new checkpoint: an absolute path, or
``pvc://`` on a claim the pods mount. ``hf://`` needs the fetch init container, a new claim a new volume, and a
stock SGLang image has no draft endpoint; those changes are rendered at once (a rolling restart).
"""

from __future__ import annotations

from typing import Any

from specdecode_runtime.contract import model_source as ms


def mounted_claims(spec: Any, draft_model: str) -> list[str]:
    """The claims the pods mount when they serve ``draft_model`` (the target's and the draft's)."""
    return ms.pvc_claims(spec.target.model, draft_model)


def in_place_problem(spec: Any, serving: str, wanted: str) -> str | None:
    """Why pods serving ``serving`` cannot load ``wanted`` in place; None when they can."""
    if spec.runtime.launcher != "specdecode":
        return "the stock SGLang launcher cannot load a draft in place"
    try:
        old, new = ms.parse(serving), ms.parse(wanted)
    except ms.ModelSourceError as e:
        return str(e)
    if isinstance(new, ms.HubSource):
        return f"{wanted} must be fetched from the hub by the pods' init container first"
    if isinstance(old, ms.HubSource):
        return f"the pods serve {serving} from the hub cache, which only a restart replaces"
    if isinstance(new, ms.PvcSource) and new.claim not in mounted_claims(spec, serving):
        return f"claim {new.claim} is not mounted in the running pods"
    if isinstance(old, ms.PvcSource) and old.claim not in ms.pvc_claims(spec.target.model, wanted):
        return f"the pods would drop claim {old.claim}, which only a restart does"
    return None


def pod_path(model: str) -> str:
    """The path a pod reads ``model`` from (what the draft endpoint's POST takes)."""
    source = ms.parse(model)
    if isinstance(source, ms.HubSource):
        raise ValueError(f"{model}: hub sources have no path before the fetch")
    return source.local_path()


def served_model(sdd: Any, status: dict | None) -> str:
    """The draft the pods' runtime config names: ``status.draft.serving.source`` while a change of
    ``spec.draft.model`` is being (or was) rolled out in place, ``spec.draft.model`` otherwise: nothing recorded
    yet, no replica to protect (``spec.replicas`` 0), or a change the pods cannot load in place."""
    spec = sdd.spec
    wanted = spec.draft.model
    serving = (((status or {}).get("draft") or {}).get("serving") or {}).get("source")
    if not serving or serving == wanted or spec.replicas == 0:
        return wanted
    return serving if in_place_problem(spec, serving, wanted) is None else wanted


def with_draft(sdd: Any, model: str) -> Any:
    """``sdd`` with ``spec.draft.model`` replaced (a copy; the object itself is never changed)."""
    if sdd.spec.draft.model == model:
        return sdd
    draft = sdd.spec.draft.model_copy(update={"model": model})
    return sdd.model_copy(update={"spec": sdd.spec.model_copy(update={"draft": draft})})
