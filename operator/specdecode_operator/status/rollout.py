"""Whether a rollout of the serving workload can finish, from its pods' scheduling conditions.

Why: with the default ``spec.rollout`` (surge one replica, never drop below the declared ones) every template change
creates one extra pod that needs a whole TP group of free GPUs. On nodes whose GPUs are all in use that pod stays
Pending forever and neither the Deployment nor the LeaderWorkerSet says why (the Deployment only gives up after its
progress deadline, an hour). A pod the scheduler has refused (``PodScheduled=False``, reason ``Unschedulable``) for
longer than a bound, while pods of the old revision still hold their GPUs, is reported as ``RolloutBlocked``: the
workload and the pod named, and what to change.

The pods are listed (one labelled, bounded LIST) only while the workload is mid-rollout, so a settled object costs
nothing here.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from ..render import names

REASON = "RolloutBlocked"
UNSCHEDULABLE = "Unschedulable"
POD_LIST_LIMIT = 100  # one replica is one pod (Deployment) or one group (LeaderWorkerSet); a rollout adds a few


@dataclass(frozen=True)
class Blocked:
    kind: str  # Deployment | LeaderWorkerSet
    workload: str
    pod: str
    seconds: float  # how long the scheduler has refused it
    scheduler_message: str

    def condition_message(self) -> str:
        why = f": {self.scheduler_message}" if self.scheduler_message else ""
        return (
            f"the rollout of {self.kind} {self.workload} cannot finish: pod {self.pod} has been unschedulable "
            f"for {self.seconds:.0f} s{why}"
        )


def mid_rollout(workload: dict | None) -> bool:
    """Pods of an older revision still run beside the new one, or the new revision is not complete yet."""
    if not workload:
        return False
    status = workload.get("status") or {}
    spec_replicas = (workload.get("spec") or {}).get("replicas", 1) or 0
    replicas = status.get("replicas", 0) or 0
    updated = status.get("updatedReplicas", 0) or 0
    return replicas > 0 and (replicas > updated or updated < spec_replicas)


def _parse_time(text: str | None) -> datetime.datetime | None:
    if not text:
        return None
    try:
        return datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def unschedulable_pod(pods: list[dict], now: datetime.datetime, bound_seconds: float) -> tuple[str, float, str] | None:
    """(pod, seconds refused, the scheduler's message) of the longest-refused pod past ``bound_seconds``."""
    worst = None
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        for c in (pod.get("status") or {}).get("conditions") or []:
            if c.get("type") != "PodScheduled" or c.get("status") != "False" or c.get("reason") != UNSCHEDULABLE:
                continue
            since = _parse_time(c.get("lastTransitionTime")) or _parse_time(pod["metadata"].get("creationTimestamp"))
            if since is None:
                continue
            seconds = (now - since).total_seconds()
            if seconds >= bound_seconds and (worst is None or seconds > worst[1]):
                worst = (pod["metadata"]["name"], seconds, (c.get("message") or "")[:300])
    return worst


async def check(
    client, namespace: str, name: str, workload: dict | None, bound_seconds: float, now: datetime.datetime | None = None
) -> Blocked | None:
    """The blocked rollout of ``workload``, or None. ApiError propagates (the pass reports it as any other)."""
    if workload is None or not mid_rollout(workload):
        return None
    data = await client.request(
        "GET",
        f"/api/v1/namespaces/{namespace}/pods",
        query=[("labelSelector", names.selector_string(name)), ("limit", str(POD_LIST_LIMIT))],
        verb="list",
    )
    found = unschedulable_pod(
        (data or {}).get("items") or [], now or datetime.datetime.now(datetime.UTC), bound_seconds
    )
    if found is None:
        return None
    return Blocked(workload["kind"], workload["metadata"]["name"], *found)


def advice(blocked: Blocked, rollout: dict, tp: int, gpu_resource: str) -> str:
    """The Event's text: what to change so that the rollout can finish."""
    surge = rollout.get("maxSurge", 1)
    if surge not in (0, "0%"):
        return (
            f"{blocked.condition_message()}. A surge pod needs {tp} free {gpu_resource} beyond those the "
            f"running replicas hold (spec.rollout.maxSurge is {surge}); on nodes without a spare GPU set, set "
            "spec.rollout.maxSurge: 0 and spec.rollout.maxUnavailable: 1 to replace pods in place (one replica "
            "serves nothing while it restarts), or free GPUs or add a node"
        )
    return (
        f"{blocked.condition_message()}. Pods are replaced in place (spec.rollout.maxSurge is 0), so the "
        f"cluster lacks {tp} {gpu_resource} even for a replacement: free GPUs or add a node"
    )


async def observe(client, body: dict, state, obs, bound_seconds: float) -> None:
    """One pass's look at the rollout: sets ``obs.rollout_blocked`` (Progressing=False/RolloutBlocked) and
    ``state.rollout_blocked`` (Rollout-mode tuning holds its step count while it is set), and posts one Event per
    new blocked pod saying what to change."""
    from ..reconcile import events

    md = body["metadata"]
    blocked = await check(client, md["namespace"], md["name"], obs.workload, bound_seconds)
    state.rollout_blocked = blocked
    if blocked is None:
        obs.rollout_blocked = None
        events.forget(state, REASON)
        return
    obs.rollout_blocked = blocked.condition_message()
    spec = body.get("spec") or {}
    placement = spec.get("placement") or {}
    tp = min((spec.get("target") or {}).get("tensorParallelSize", 1), placement.get("gpusPerNode", 8))
    # once per pod: the text carries the growing number of seconds, which would post a new Event every pass
    if (state.reported.get(REASON) or "").split("\n")[0] != blocked.pod:
        events.emit(
            body,
            REASON,
            advice(blocked, spec.get("rollout") or {}, tp, placement.get("gpuResourceName", "nvidia.com/gpu")),
        )
        state.reported[REASON] = blocked.pod
