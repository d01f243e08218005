"""Ready, Progressing and the replica counts for both serving workload kinds: a Deployment (one node per replica)
and a LeaderWorkerSet (one group of pods per replica, multi-node). Each row is a live workload as the API server
reports it; the SpecDecodeDeployment is Ready only when every desired replica is ready at the current spec."""

from __future__ import annotations

import pytest

from specdecode_operator.status.conditions import Observation, compute, workload_state

GENERATION = 3


def deployment(replicas=2, updated=2, ready=2, observed=GENERATION, spec=2) -> dict:
    status = {"replicas": replicas, "updatedReplicas": updated, "readyReplicas": ready}
    if observed is not None:
        status["observedGeneration"] = observed
    return {"kind": "Deployment", "metadata": {"generation": GENERATION}, "spec": {"replicas": spec}, "status": status}


def lws(replicas=2, updated=2, ready=2, spec=2, observed=None, omit=()) -> dict:
    """A LeaderWorkerSet: its status counts groups (replicas, readyReplicas, updatedReplicas) and has no
    observedGeneration of its own."""
    status = {"replicas": replicas, "updatedReplicas": updated, "readyReplicas": ready}
    if observed is not None:
        status["observedGeneration"] = observed
    for key in omit:
        status.pop(key)
    return {
        "kind": "LeaderWorkerSet",
        "metadata": {"generation": GENERATION},
        "spec": {"replicas": spec},
        "status": status,
    }


# (id, workload, desired replicas, Ready expected)
ROWS = [
    ("deployment all ready", deployment(), 2, True),
    ("deployment 0 ready", deployment(ready=0), 2, False),
    ("deployment ready one short", deployment(ready=1), 2, False),
    ("deployment not yet updated", deployment(updated=1), 2, False),
    ("deployment surplus old pod", deployment(replicas=3, ready=3), 2, False),
    ("deployment status of an older generation", deployment(observed=GENERATION - 1), 2, False),
    ("deployment status of a newer generation", deployment(observed=GENERATION + 1), 2, True),
    ("deployment status never observed", deployment(observed=None), 2, False),
    (
        "deployment no status yet",
        {"kind": "Deployment", "metadata": {"generation": 1}, "spec": {"replicas": 2}},
        2,
        False,
    ),
    ("lws all groups ready", lws(), 2, True),
    ("lws 0 groups ready", lws(ready=0), 2, False),
    ("lws 0 groups ready, readyReplicas absent", lws(omit=("readyReplicas",)), 2, False),
    ("lws ready one short", lws(ready=1), 2, False),
    ("lws ready but not yet updated", lws(updated=1), 2, False),
    ("lws updatedReplicas absent, all ready", lws(omit=("updatedReplicas",)), 2, True),
    ("lws updatedReplicas absent, one short", lws(ready=1, omit=("updatedReplicas",)), 2, False),
    ("lws status of an older generation", lws(observed=GENERATION - 1), 2, False),
    (
        "lws no status yet",
        {"kind": "LeaderWorkerSet", "metadata": {"generation": 1}, "spec": {"replicas": 2}},
        2,
        False,
    ),
    ("lws one group, ready", lws(replicas=1, updated=1, ready=1, spec=1), 1, True),
    ("lws one group, not ready", lws(replicas=1, updated=1, ready=0, spec=1), 1, False),
    ("no workload, none wanted", None, 0, True),
    ("no workload, two wanted", None, 2, False),
]


def ready_of(workload, desired) -> dict:
    status = compute(Observation(generation=7, workload=workload, desired_replicas=desired))
    return {c["type"]: c for c in status["conditions"]}


@pytest.mark.parametrize("workload,desired,expected", [r[1:] for r in ROWS], ids=[r[0] for r in ROWS])
def test_ready_only_when_every_replica_is_ready_at_the_current_spec(workload, desired, expected):
    conditions = ready_of(workload, desired)
    assert conditions["Ready"]["status"] == ("True" if expected else "False"), conditions["Ready"]
    # Progressing is the complement while healthy: a rollout under way, or complete
    assert conditions["Progressing"]["status"] == ("False" if expected else "True"), conditions["Progressing"]
    assert conditions["Progressing"]["reason"] == ("RolloutComplete" if expected else "RollingOut")
    assert conditions["Degraded"]["status"] == "False"


@pytest.mark.parametrize("make", [deployment, lws], ids=["Deployment", "LeaderWorkerSet"])
def test_replica_counts_are_the_workloads(make):
    status = compute(
        Observation(generation=7, workload=make(replicas=3, updated=1, ready=1, spec=3), desired_replicas=3)
    )
    assert (status["replicas"], status["readyReplicas"]) == (3, 1)
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["message"] == "1/3 replicas ready"


@pytest.mark.parametrize("make", [deployment, lws], ids=["Deployment", "LeaderWorkerSet"])
def test_the_workloads_own_replica_count_is_the_bar(make):
    """While the workload still asks for its old replica count, reaching the old count is rolled out for that
    workload; desired only stands in when the workload names no count."""
    assert workload_state(make(replicas=1, updated=1, ready=1, spec=1), 3)[2] is True
    unnamed = make(replicas=2, updated=2, ready=2)
    del unnamed["spec"]["replicas"]
    assert workload_state(unnamed, 2)[2] is True
    assert workload_state(unnamed, 3)[2] is False


@pytest.mark.parametrize("make", [deployment, lws], ids=["Deployment", "LeaderWorkerSet"])
def test_a_workload_with_no_counts_is_not_ready(make):
    """A status stanza with only nulls (as a freshly created workload can report) counts as zero ready."""
    w = make()
    w["status"] = {"replicas": None, "readyReplicas": None, "updatedReplicas": None, "observedGeneration": GENERATION}
    assert workload_state(w, 2) == (0, 0, False)
