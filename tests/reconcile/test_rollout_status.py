"""RolloutBlocked from pod conditions (status/rollout.py), its conditions, and Rollout-mode tuning holding its step
count while a rollout cannot finish (tuning/hooks.py)."""

from __future__ import annotations

import datetime

from specdecode_operator.object_state import ObjectState
from specdecode_operator.status import conditions, rollout
from specdecode_operator.tuning import hooks

NOW = datetime.datetime(2026, 1, 1, 12, 0, 0, tzinfo=datetime.UTC)


def pod(name: str, seconds_ago: float, *, status="False", reason="Unschedulable", deleting=False) -> dict:
    at = (NOW - datetime.timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    md = {"name": name, "creationTimestamp": at}
    if deleting:
        md["deletionTimestamp"] = at
    return {
        "metadata": md,
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": status,
                    "reason": reason,
                    "lastTransitionTime": at,
                    "message": "no gpu",
                }
            ]
        },
    }


def deployment(replicas: int, updated: int, spec_replicas: int = 1) -> dict:
    return {
        "kind": "Deployment",
        "metadata": {"name": "llama", "generation": 2},
        "spec": {"replicas": spec_replicas},
        "status": {"observedGeneration": 2, "replicas": replicas, "updatedReplicas": updated, "readyReplicas": 1},
    }


def test_only_a_pod_refused_for_the_whole_bound_counts():
    assert rollout.unschedulable_pod([pod("a", 299)], NOW, 300) is None
    assert rollout.unschedulable_pod([pod("a", 301), pod("b", 400)], NOW, 300) == ("b", 400.0, "no gpu")
    # scheduled, pending for another reason, or on its way out: not a blocked rollout
    assert rollout.unschedulable_pod([pod("a", 900, status="True")], NOW, 300) is None
    assert rollout.unschedulable_pod([pod("a", 900, reason="SchedulerError")], NOW, 300) is None
    assert rollout.unschedulable_pod([pod("a", 900, deleting=True)], NOW, 300) is None


def test_mid_rollout_means_old_pods_beside_new_or_new_ones_missing():
    assert rollout.mid_rollout(deployment(replicas=2, updated=1))  # surge pod beside the old one
    assert rollout.mid_rollout(deployment(replicas=1, updated=0))  # maxSurge 0: old one still there
    assert not rollout.mid_rollout(deployment(replicas=1, updated=1))
    assert not rollout.mid_rollout(None)
    assert not rollout.mid_rollout(deployment(replicas=0, updated=0))  # nothing ran yet: not a rollout


def test_blocked_rollout_is_progressing_false_and_not_ready_but_not_degraded():
    obs = conditions.Observation(
        generation=3,
        desired_replicas=1,
        workload=deployment(2, 1),
        rollout_blocked="the rollout of Deployment llama cannot finish: pod x ...",
    )
    by_type = {c["type"]: c for c in conditions.compute(obs)["conditions"]}
    assert (by_type["Progressing"]["status"], by_type["Progressing"]["reason"]) == ("False", "RolloutBlocked")
    assert "Deployment llama" in by_type["Progressing"]["message"]
    assert (by_type["Ready"]["status"], by_type["Ready"]["reason"]) == ("False", "RolloutBlocked")
    assert by_type["Degraded"]["status"] == "False"
    obs.rollout_blocked = None
    by_type = {c["type"]: c for c in conditions.compute(obs)["conditions"]}
    assert (by_type["Progressing"]["status"], by_type["Progressing"]["reason"]) == ("True", "RollingOut")


def test_advice_names_the_fields_to_change():
    blocked = rollout.Blocked("Deployment", "llama", "llama-x", 301, "0/1 nodes are available")
    text = rollout.advice(blocked, {"maxSurge": 1, "maxUnavailable": 0}, 8, "nvidia.com/gpu")
    assert "spec.rollout.maxSurge: 0" in text and "maxUnavailable: 1" in text and "8 free nvidia.com/gpu" in text
    text = rollout.advice(blocked, {"maxSurge": 0, "maxUnavailable": 1}, 8, "nvidia.com/gpu")
    assert "maxSurge: 0" not in text and "add a node" in text


def test_rollout_tuning_holds_its_step_count_while_a_rollout_is_blocked():
    state = ObjectState()
    state.rendered = (("uid", 2, 4), [])  # the blocked rollout rendered 4 steps
    assert hooks.held_while_blocked(state, 6) == 6
    state.rollout_blocked = rollout.Blocked("Deployment", "llama", "llama-x", 301, "")
    assert hooks.held_while_blocked(state, 6) == 4  # no second restart behind one that cannot finish
    state.rollout_blocked = None
    assert hooks.held_while_blocked(state, 6) == 6  # unblocked: the latest decision rolls out
