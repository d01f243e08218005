"""Which condition wins when several things are true at once, what each says, and what the status stanza carries.

Precedence (status/conditions.py): an invalid spec over a name collision over an API error for Degraded; a pause
over everything for Progressing and Ready; a rollout is Ready only when healthy, rolled out and not paused; Stalled
(kstatus) only while nothing can progress without a change."""

from __future__ import annotations

import datetime
import time

import pytest

from specdecode_operator.status import writer
from specdecode_operator.status.conditions import TYPES, Observation, compute, workload_state


def ready_deployment(n: int = 2) -> dict:
    return {
        "kind": "Deployment",
        "metadata": {"generation": 1},
        "spec": {"replicas": n},
        "status": {"observedGeneration": 1, "replicas": n, "updatedReplicas": n, "readyReplicas": n},
    }


def by_type(status: dict) -> dict:
    return {c["type"]: (c["status"], c["reason"], c["message"]) for c in status["conditions"]}


def test_an_invalid_spec_names_its_first_problem_and_counts_the_rest():
    one = by_type(
        compute(Observation(generation=4, problems=["spec.a: bad"], workload=ready_deployment(), desired_replicas=2))
    )
    assert one["SpecValid"] == ("False", "InvalidSpec", "spec.a: bad")
    three = by_type(compute(Observation(generation=4, problems=["spec.a: bad", "spec.b: worse", "spec.c: x"])))
    assert three["SpecValid"] == ("False", "InvalidSpec", "spec.a: bad (and 2 more)")
    two = by_type(compute(Observation(generation=4, problems=["spec.a: bad", "spec.b: worse"])))
    assert two["SpecValid"][2] == "spec.a: bad (and 1 more)"
    degraded = ("True", "InvalidSpec", "the spec is invalid; children were left untouched")
    assert one["Degraded"] == three["Degraded"] == degraded
    # Ready and Progressing carry Degraded's reason and message, even over a workload that is all ready
    assert one["Progressing"] == ("False",) + degraded[1:]
    assert one["Ready"] == ("False",) + degraded[1:]


def test_a_valid_spec_is_said_so():
    c = by_type(compute(Observation(generation=1, workload=ready_deployment(), desired_replicas=2)))
    assert c["SpecValid"] == ("True", "Valid", "")
    assert c["Degraded"] == ("False", "AsExpected", "")
    assert c["Ready"] == ("True", "AllReplicasReady", "2/2 replicas ready")
    assert c["Progressing"] == ("False", "RolloutComplete", "2/2 replicas ready")
    assert "Paused" not in c


def test_a_pause_holds_ready_and_progressing_even_when_all_replicas_are_ready():
    c = by_type(compute(Observation(generation=1, paused=True, workload=ready_deployment(), desired_replicas=2)))
    assert c["Paused"] == (
        "True",
        "ReconcilePaused",
        "annotation specdecode.io/reconcile=paused: children are not written",
    )
    assert c["Progressing"] == ("False", "ReconcilePaused", "reconciliation is paused")
    assert c["Ready"] == ("False", "ReconcilePaused", "reconciliation is paused")
    assert c["Degraded"] == ("False", "AsExpected", "")


def test_a_pause_over_an_invalid_spec_still_reports_the_spec():
    c = by_type(compute(Observation(generation=1, paused=True, problems=["spec.a: bad"])))
    assert c["Degraded"][:2] == ("True", "InvalidSpec")
    assert c["Progressing"][1] == c["Ready"][1] == "ReconcilePaused"


@pytest.mark.parametrize(
    "obs,reason,message",
    [
        (
            Observation(
                generation=1,
                collisions=["Service/llama", "Deployment/llama"],
                workload=ready_deployment(),
                desired_replicas=2,
            ),
            "NameCollision",
            "objects not owned by this SpecDecodeDeployment hold our names: Service/llama, Deployment/llama",
        ),
        (
            Observation(generation=1, error="API error 500 boom", workload=ready_deployment(), desired_replicas=2),
            "ReconcileError",
            "API error 500 boom",
        ),
        (
            Observation(generation=1, problems=["spec.a: bad"], collisions=["Service/llama"], error="API error 500"),
            "InvalidSpec",
            "the spec is invalid; children were left untouched",
        ),
        (
            Observation(generation=1, collisions=["Service/llama"], error="API error 500"),
            "NameCollision",
            "objects not owned by this SpecDecodeDeployment hold our names: Service/llama",
        ),
    ],
    ids=["collision", "api-error", "invalid-over-collision-and-error", "collision-over-error"],
)
def test_degraded_names_the_first_of_invalid_collision_error(obs, reason, message):
    c = by_type(compute(obs))
    assert c["Degraded"] == ("True", reason, message)
    assert c["Progressing"] == ("False", reason, message)
    assert c["Ready"] == ("False", reason, message)


def test_a_rollout_names_what_it_replaces():
    rolling = dict(
        ready_deployment(), status={"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1}
    )
    c = by_type(
        compute(
            Observation(
                generation=1, workload=rolling, desired_replicas=2, replaced=["Deployment/llama", "Service/llama-old"]
            )
        )
    )
    msg = "replacing Deployment/llama, Service/llama-old; 1/2 replicas ready"
    assert c["Progressing"] == ("True", "RollingOut", msg)
    assert c["Ready"] == ("False", "RollingOut", msg)
    plain = by_type(compute(Observation(generation=1, workload=rolling, desired_replicas=2)))
    assert plain["Progressing"] == ("True", "RollingOut", "1/2 replicas ready")


def test_the_stanza_carries_generation_counts_selector_and_foreign_conditions_in_order():
    extra = [
        {"type": "MetricsAvailable", "status": "True", "reason": "Scraped", "message": "2 pods"},
        {"type": "Ready", "status": "True", "reason": "Forged", "message": ""},
    ]  # ours: never taken from extra
    status = compute(
        Observation(
            generation=9, workload=ready_deployment(3), desired_replicas=3, selector="app=x", extra=extra, paused=True
        )
    )
    assert [c["type"] for c in status["conditions"]] == [
        "Ready",
        "SpecValid",
        "Paused",
        "Degraded",
        "Progressing",
        "Stalled",
        "MetricsAvailable",
    ]
    assert all(c["observedGeneration"] == 9 for c in status["conditions"])
    assert (status["observedGeneration"], status["replicas"], status["readyReplicas"], status["selector"]) == (
        9,
        3,
        3,
        "app=x",
    )
    assert "observedGeneration" not in extra[0]  # reported as a copy, the caller's entry untouched
    assert "selector" not in compute(Observation(generation=1))
    assert set(TYPES) == {"Ready", "Progressing", "Degraded", "SpecValid", "Paused", "Stalled"}


def test_no_workload_reports_zero_replicas():
    status = compute(Observation(generation=1, desired_replicas=2))
    assert (status["replicas"], status["readyReplicas"]) == (0, 0)
    assert workload_state(None, 0) == (0, 0, True)
    assert workload_state(None, 1) == (0, 0, False)


@pytest.mark.parametrize("kind", ["Deployment", "LeaderWorkerSet"])
def test_absent_counts_are_zero(kind):
    w = {"kind": kind, "metadata": {"generation": 1}, "spec": {"replicas": 1}, "status": {"observedGeneration": 1}}
    assert workload_state(w, 1) == (0, 0, False)
    w["status"].update(readyReplicas=1, replicas=1, updatedReplicas=0)
    assert workload_state(w, 1) == (1, 1, False)  # ready but not yet updated
    w["status"]["updatedReplicas"] = None
    assert workload_state(w, 1)[2] is False
    del w["status"]["updatedReplicas"]  # absent: none updated yet (LeaderWorkerSet: counted as its ready groups)
    assert workload_state(w, 1)[2] is (kind == "LeaderWorkerSet")


def test_a_workload_without_a_generation_counts_as_generation_one():
    w = ready_deployment(1)
    del w["metadata"]["generation"]
    assert workload_state(w, 1)[2] is True
    w["status"]["observedGeneration"] = 0
    assert workload_state(w, 1)[2] is False


def test_transition_times_are_utc_rfc3339_seconds(monkeypatch):
    monkeypatch.setenv("TZ", "Asia/Kathmandu")  # UTC+05:45: a local-time stamp would be off by hours
    time.tzset()
    try:
        status = writer.desired_status(compute(Observation(generation=1)), None)
    finally:
        monkeypatch.undo()
        time.tzset()
    stamps = {c["lastTransitionTime"] for c in status["conditions"]}
    assert len(stamps) == 1
    (stamp,) = stamps
    parsed = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    assert abs((datetime.datetime.now(datetime.UTC) - parsed).total_seconds()) < 120


def blocked_rollout(**kw) -> Observation:
    rolling = dict(
        ready_deployment(), status={"observedGeneration": 1, "replicas": 3, "updatedReplicas": 1, "readyReplicas": 2}
    )
    return Observation(
        generation=1,
        workload=rolling,
        desired_replicas=2,
        rollout_blocked="pod llama-abc unschedulable: 0/4 nodes have 8 free nvidia.com/gpu",
        **kw,
    )


@pytest.mark.parametrize(
    "obs,stalled",
    [
        (
            Observation(generation=2, problems=["spec.target.model: bad", "spec.x: y"]),
            ("True", "InvalidSpec", "spec.target.model: bad (and 1 more)"),
        ),
        (
            Observation(generation=2, problems=["spec.a: bad"], paused=True),
            ("True", "InvalidSpec", "spec.a: bad"),
        ),
        (
            Observation(generation=2, collisions=["Service/llama"], workload=ready_deployment(), desired_replicas=2),
            (
                "True",
                "NameCollision",
                "objects not owned by this SpecDecodeDeployment hold our names: Service/llama",
            ),
        ),
        (
            blocked_rollout(),
            (
                "True",
                "RolloutBlocked",
                "pod llama-abc unschedulable: 0/4 nodes have 8 free nvidia.com/gpu; 2/2 replicas ready",
            ),
        ),
        # progress is possible (or under way): not stalled
        (blocked_rollout(paused=True), ("False", "AsExpected", "")),
        (blocked_rollout(error="API error 500"), ("False", "AsExpected", "")),
        (Observation(generation=2, error="API error 500"), ("False", "AsExpected", "")),
        (Observation(generation=1, workload=ready_deployment(), desired_replicas=2), ("False", "AsExpected", "")),
        (Observation(generation=1, desired_replicas=2), ("False", "AsExpected", "")),
        (Observation(generation=1, desired_replicas=2, replaced=["Service/llama-old"]), ("False", "AsExpected", "")),
    ],
    ids=[
        "invalid-spec",
        "invalid-spec-while-paused",
        "name-collision",
        "rollout-blocked",
        "blocked-but-paused",
        "blocked-but-api-error",
        "api-error",
        "ready",
        "rolling-out",
        "replacing-children",
    ],
)
def test_stalled_only_while_nothing_can_progress_without_a_change(obs, stalled):
    c = by_type(compute(obs))
    assert c["Stalled"] == stalled
    if stalled[0] == "True":
        assert c["Ready"][0] == "False"


def test_stalled_is_cleared_with_a_new_transition_time_when_progress_is_possible_again():
    """Blocked -> the pod schedules (the rollout goes on) -> done: Stalled True then False, its transition time
    moving only when it flips."""
    first = writer.desired_status(compute(blocked_rollout()), None)
    stalled = next(c for c in first["conditions"] if c["type"] == "Stalled")
    assert stalled["status"] == "True"
    stalled["lastTransitionTime"] = "2026-01-01T00:00:00Z"
    moving = dict(blocked_rollout().__dict__, rollout_blocked=None)
    second = writer.desired_status(compute(Observation(**moving)), first)
    cleared = next(c for c in second["conditions"] if c["type"] == "Stalled")
    assert (cleared["status"], cleared["reason"]) == ("False", "AsExpected")
    assert cleared["lastTransitionTime"] != "2026-01-01T00:00:00Z"
    assert by_type(compute(Observation(**moving)))["Progressing"][:2] == ("True", "RollingOut")
    third = writer.desired_status(
        compute(Observation(generation=1, workload=ready_deployment(), desired_replicas=2)), second
    )
    again = next(c for c in third["conditions"] if c["type"] == "Stalled")
    assert again == cleared  # unchanged: the same transition time
