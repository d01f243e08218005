"""Flux (and kubectl wait, cli-utils) read readiness through kstatus. A small checker that follows kstatus's
documented rules for custom resources (sigs.k8s.io/cli-utils/pkg/kstatus, README "Conditions"):

1. metadata.deletionTimestamp set -> Terminating.
2. status.observedGeneration present and != metadata.generation -> InProgress.
3. Condition Reconciling True -> InProgress; Stalled True -> Failed.
4. Condition Ready present with status False -> InProgress (the generic rule for a "Ready" condition).
5. Otherwise -> Current.
Our objects must be Current exactly when the operator says they are ready at the current generation."""

import pytest

from tests.chart.sdd_samples import CASES, READY, cond, sdd


def kstatus(obj) -> str:
    md, status = obj["metadata"], obj.get("status") or {}
    if md.get("deletionTimestamp"):
        return "Terminating"
    if "observedGeneration" in status and status["observedGeneration"] != md.get("generation"):
        return "InProgress"
    conditions = {c["type"]: c for c in status.get("conditions", [])}
    if conditions.get("Reconciling", {}).get("status") == "True":
        return "InProgress"
    if conditions.get("Stalled", {}).get("status") == "True":
        return "Failed"
    if "Ready" in conditions and conditions["Ready"]["status"] != "True":
        return "InProgress"
    if not status:  # kstatus: a CR that has a status subresource but no status yet is not Current
        return "InProgress"
    return "Current"


@pytest.mark.parametrize("case", sorted(CASES))
def test_kstatus_of_each_state(case):
    obj, _, expected = CASES[case]
    assert kstatus(obj) == expected


def test_current_only_when_ready_true_at_the_current_generation():
    for obj, _, state in CASES.values():
        ready = next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == "Ready"), None)
        fresh = obj.get("status", {}).get("observedGeneration") == obj["metadata"]["generation"]
        if state == "Current":
            assert ready and ready["status"] == "True" and fresh


def test_checker_itself_distinguishes_states():
    assert kstatus(sdd(conditions=[cond("Stalled", "True")])) == "Failed"
    assert kstatus(sdd(conditions=READY + [cond("Reconciling", "True")])) == "InProgress"


def test_condition_types_are_the_operators():
    """The samples use the condition types the operator sets, so the mapping tests mean something."""
    from specdecode_operator.status import conditions

    used = {c["type"] for obj, _, _ in CASES.values() for c in obj.get("status", {}).get("conditions", [])}
    assert used == set(conditions.TYPES)


def test_the_operators_own_status_is_failed_exactly_while_stalled():
    """kstatus over what the operator computes (not samples): an invalid spec and a blocked rollout are Failed (Flux
    stops waiting at once), an API error is retried (InProgress), and a rollout that can go on again is InProgress
    until it is done (Current)."""
    from specdecode_operator.status.conditions import Observation, compute

    def deployment(ready: int, updated: int) -> dict:
        return {
            "kind": "Deployment",
            "metadata": {"generation": 1},
            "spec": {"replicas": 2},
            "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": updated, "readyReplicas": ready},
        }

    def state(**kw) -> str:
        obj = sdd(generation=3, observed=3)
        obj["status"] = compute(Observation(generation=3, desired_replicas=2, **kw))
        return kstatus(obj)

    assert state(problems=["spec.target.model: bad"]) == "Failed"
    assert state(workload=deployment(2, 1), rollout_blocked="pod x unschedulable") == "Failed"
    assert state(workload=deployment(2, 1)) == "InProgress"
    assert state(workload=deployment(2, 2), error="API error 500") == "InProgress"
    assert state(workload=deployment(2, 2)) == "Current"
