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
from specdecode_runtime.contract.config import CAPTURE_MOUNT_DIR


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
    capturing = spec.draft.adaptation is not None and spec.draft.adaptation.enabled
    for model in (serving, wanted):
        if on_capture_claim(model) and not capturing:
            return f"{model} is on the capture claim, which the pods mount only while draft.adaptation is enabled"
    if isinstance(old, ms.HubSource):
        return f"the pods serve {serving} from the hub cache, which only a restart replaces"
    if isinstance(new, ms.PvcSource) and new.claim not in mounted_claims(spec, serving):
        return f"claim {new.claim} is not mounted in the running pods"
    if isinstance(old, ms.PvcSource) and old.claim not in ms.pvc_claims(spec.target.model, wanted):
        return f"the pods would drop claim {old.claim}, which only a restart does"
    return None


def adapted_model(sdd: Any, status: dict | None) -> str | None:
    """The draft trained from the capture that the deployment is to serve (status.draft.adaptation, written by
    tuning/adaptation.py): the gated candidate while it is canaried, else the one promoted last. Only while
    spec.draft.adaptation.training is on and spec.draft.model is still the draft it was trained for: a new
    spec.draft.model (or training turned off) supersedes every adapted draft."""
    adaptation = sdd.spec.draft.adaptation
    if adaptation is None or not adaptation.enabled or adaptation.training is None:
        return None
    recorded = (((status or {}).get("draft") or {}).get("adaptation")) or {}
    for key in ("candidate", "promoted"):
        draft = recorded.get(key) or {}
        if draft.get("source") and draft.get("base") == sdd.spec.draft.model:
            return str(draft["source"])
    return None


def wanted_model(sdd: Any, status: dict | None) -> str:
    """The draft the deployment is to serve: an adapted one (``adapted_model``), else spec.draft.model."""
    return adapted_model(sdd, status) or sdd.spec.draft.model


def on_capture_claim(model: str) -> bool:
    """Whether ``model`` is an adapted draft on the capture claim (only pods that capture mount it)."""
    return model.startswith(CAPTURE_MOUNT_DIR.rstrip("/") + "/")


def pod_path(model: str) -> str:
    """The path a pod reads ``model`` from (what the draft endpoint's POST takes)."""
    source = ms.parse(model)
    if isinstance(source, ms.HubSource):
        raise ValueError(f"{model}: hub sources have no path before the fetch")
    return source.local_path()


def served_model(sdd: Any, status: dict | None) -> str:
    """The draft the pods' runtime config names: ``status.draft.serving.source`` while a change of the wanted draft
    (``wanted_model``: spec.draft.model or an adapted draft) is being (or was) rolled out in place, the wanted draft
    otherwise: nothing recorded yet, no replica to protect (``spec.replicas`` 0), or a change the pods cannot load
    in place. A promoted adapted draft is wanted, so new and restarted pods load it."""
    spec = sdd.spec
    wanted = wanted_model(sdd, status)
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
