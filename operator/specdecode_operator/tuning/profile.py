"""The tuner's optional calibrated profile: a scenario document in a ConfigMap named by an annotation.

Why a ConfigMap and not spec: the profile is measured (by profiling a deployment), may be large, and changes
without the serving spec changing; the object only points at it. The profile is input, so every problem with it
(missing ConfigMap or key, bad YAML, a draft TP it has no block for) becomes ``Profile.problem`` - reported as a
Warning Event by the loop - and the tuner falls back to measured phase costs, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdecode_runtime.contract.goodput import CycleCost
from specdecode_runtime.contract.input_files import parse_yaml_documents
from specdecode_runtime.contract.scenario import Scenario, cost_for_draft_tp, parse_scenario

from ..kube_client import ApiError

PROFILE_ANNOTATION = "specdecode.io/tuner-profile"  # name of a ConfigMap in the object's namespace
PROFILE_KEYS = ("scenario.yaml", "profile.yaml")


@dataclass
class Profile:
    scenario: Scenario | None = None
    cost: CycleCost | None = None
    problem: str | None = None


async def load(client, ns: str, ref: str | None, draft_tp: int) -> Profile:
    """The cost block (for ``draft_tp`` when the scenario has ``draftTp`` blocks) of ConfigMap ``ref``; no ref,
    no profile."""
    if not ref:
        return Profile()
    try:
        cm = await client.get("v1", "configmaps", ns, ref)
    except ApiError as e:
        return Profile(problem=f"profile ConfigMap {ref}: {e}")
    if cm is None:
        return Profile(problem=f"profile ConfigMap {ref} not found")
    data = cm.get("data") or {}
    text = next((data[k] for k in PROFILE_KEYS if k in data), None)
    if text is None:
        return Profile(problem=f"profile ConfigMap {ref} has none of the keys {', '.join(PROFILE_KEYS)}")
    try:
        docs = parse_yaml_documents(text, f"ConfigMap {ref}")  # bounded depth and size, duplicate keys refused
        sc = parse_scenario(docs[0] if len(docs) == 1 else docs, source=f"ConfigMap {ref}")
    except Exception as e:  # ScenarioError, YAML errors: the profile is input, never a crash
        return Profile(problem=f"profile ConfigMap {ref}: {e}"[:1000])
    cost = sc.cycle_cost()
    if sc.draft_tp is not None:
        try:
            cost = cost_for_draft_tp(sc, draft_tp)
        except ValueError as e:
            return Profile(scenario=sc, cost=cost, problem=f"profile ConfigMap {ref}: {e}; using its cost block")
    return Profile(scenario=sc, cost=cost)
