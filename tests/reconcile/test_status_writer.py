"""status/writer.py writes the operator's part of status only when it changed, and keeps lastTransitionTime of a
condition whose status did not flip. The status is computed from real observations by status/conditions.py; the
API client is a recorder of what would be sent."""

from __future__ import annotations

import copy

import pytest

from specdecode_operator.api.models import API_VERSION, KIND, PLURAL
from specdecode_operator.status import conditions, writer

BODY = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": "glm5", "namespace": "team-a", "generation": 3}}
EARLIER = "2026-01-01T00:00:00Z"


def deployment(ready: int, replicas: int = 2) -> dict:
    return {
        "kind": "Deployment",
        "metadata": {"generation": 5},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": 5, "replicas": replicas, "readyReplicas": ready, "updatedReplicas": replicas},
    }


def computed(ready: int = 2, **observation) -> dict:
    return conditions.compute(
        conditions.Observation(
            generation=3,
            workload=deployment(ready),
            desired_replicas=2,
            selector="app.kubernetes.io/instance=glm5",
            **observation,
        )
    )


def stored(status: dict, when: str = EARLIER) -> dict:
    """``status`` as a previous write left it: every condition stamped at ``when``."""
    out = copy.deepcopy(status)
    for c in out["conditions"]:
        c["lastTransitionTime"] = when
    return out


class RecordingClient:
    def __init__(self):
        self.applied: list[tuple[dict, str, str | None]] = []

    async def apply(self, patch: dict, plural: str, subresource: str | None = None) -> dict:
        self.applied.append((patch, plural, subresource))
        return {**patch, "metadata": {**patch["metadata"], "resourceVersion": "7"}}


def test_the_same_status_with_other_timestamps_is_unchanged():
    assert writer.unchanged(computed(), stored(computed()))


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.update(readyReplicas=1),
        lambda s: s.update(observedGeneration=2),
        lambda s: s["conditions"][0].update(status="False"),
        lambda s: s["conditions"][0].update(reason="Other"),
        lambda s: s["conditions"][0].update(message="1/2 replicas ready"),
        lambda s: s["conditions"][0].update(observedGeneration=2),
        lambda s: s["conditions"].pop(),
        lambda s: s["conditions"].append({"type": "Extra", "status": "True", "reason": "X", "message": ""}),
        lambda s: s.pop("selector"),
    ],
)
def test_any_field_the_operator_owns_that_differs_is_a_change(change):
    current = stored(computed())
    change(current)
    assert not writer.unchanged(computed(), current)


def test_a_selector_the_status_no_longer_has_is_a_change():
    """A stored selector must be dropped when the workload has none (e.g. a paused object): that needs a write."""
    without = computed()
    without.pop("selector")
    assert not writer.unchanged(without, stored(computed()))
    assert writer.unchanged(without, stored(without))


def test_the_tuners_fields_do_not_count_when_comparing_our_own_earlier_write():
    ours = stored(computed())
    ours["speculative"] = {"steps": 3}
    ours["history"] = [{"bucket": "1", "toSteps": 3}]
    current = stored(computed())  # the tuner's part not yet in the body kopf handed over
    assert writer.unchanged(ours, current, ours_only=True)
    assert not writer.unchanged(ours, current)


def test_last_transition_time_is_kept_until_a_condition_flips():
    before = stored(computed(ready=1))  # Ready False, Progressing True
    after = writer.desired_status(computed(ready=2), before)
    by_type = {c["type"]: c for c in after["conditions"]}
    assert by_type["SpecValid"]["lastTransitionTime"] == EARLIER  # True both times
    assert by_type["Degraded"]["lastTransitionTime"] == EARLIER  # False both times
    assert by_type["Ready"]["status"] == "True" and by_type["Ready"]["lastTransitionTime"] > EARLIER
    assert by_type["Progressing"]["status"] == "False" and by_type["Progressing"]["lastTransitionTime"] > EARLIER
    assert all("lastTransitionTime" not in c for c in computed()["conditions"])  # the input is not modified


def test_a_first_status_stamps_every_condition_now():
    first = writer.desired_status(computed(), None)
    times = {c["lastTransitionTime"] for c in first["conditions"]}
    assert len(times) == 1 and times.pop() > EARLIER


async def test_no_write_when_the_stored_status_already_holds_it():
    client = RecordingClient()
    body = {**BODY, "status": stored(computed())}
    assert await writer.write(client, body, computed()) is None
    assert client.applied == []


async def test_a_change_is_applied_to_the_status_subresource_with_the_times_carried():
    client = RecordingClient()
    body = {**BODY, "status": stored(computed(ready=1))}
    answer = await writer.write(client, body, computed(ready=2))
    ((patch, plural, subresource),) = client.applied
    assert (plural, subresource) == (PLURAL, "status")
    assert patch["apiVersion"] == API_VERSION and patch["kind"] == KIND
    assert patch["metadata"] == {"name": "glm5", "namespace": "team-a"}  # no resourceVersion: apply, not update
    assert patch["status"]["readyReplicas"] == 2
    stamps = {c["type"]: c["lastTransitionTime"] for c in patch["status"]["conditions"]}
    assert stamps["SpecValid"] == EARLIER and stamps["Ready"] > EARLIER
    assert answer["metadata"]["resourceVersion"] == "7"


async def test_a_newer_status_given_by_the_caller_is_compared_instead_of_the_body():
    """The body may predate our last write: comparing with it would write again with fresh timestamps."""
    client = RecordingClient()
    body = {**BODY, "status": stored(computed(ready=1))}  # stale: before our last write
    ours = stored(computed(ready=2), when="2026-01-02T00:00:00Z")
    assert await writer.write(client, body, computed(ready=2), ours) is None
    assert client.applied == []
    await writer.write(client, body, computed(ready=2, paused=True), ours)
    stamps = {c["type"]: c["lastTransitionTime"] for c in client.applied[0][0]["status"]["conditions"]}
    assert stamps["SpecValid"] == "2026-01-02T00:00:00Z"  # carried from the status the caller gave
