"""Children whose API comes from an add-on the cluster may not have: the prometheus-operator's ServiceMonitor and
the LeaderWorkerSet controller's LeaderWorkerSet.

Why: writing such a child where its API is not served fails with a bare ``404 page not found``, and retrying the
write every pass only repeats it. Before a pass applies its children, the operator asks API discovery
(``GET /apis/<group>/<version>``, allowed to every authenticated client) whether the child's kind is served; one
that is not is left out of the pass and reported (a condition and one Event naming the API and what to install),
every other child still applies, and discovery is asked again after ``recheck_seconds`` (``--api-recheck-seconds``,
default 60; installing the CRDs then needs no restart and no spec change).
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass

from .kube_client import ApiError

CONDITION_TYPE = "ApisAvailable"
REASON = "ApiNotServed"


@dataclass(frozen=True)
class Optional_:
    api_version: str
    kind: str
    plural: str
    install: str  # what to install, or what to change in the spec instead
    serving: bool  # the serving workload: nothing serves without it


OPTIONAL = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"): Optional_(
        "monitoring.coreos.com/v1",
        "ServiceMonitor",
        "servicemonitors",
        "install the prometheus-operator CRDs (kube-prometheus-stack or prometheus-operator), or set "
        "spec.monitoring.serviceMonitor: false",
        serving=False,
    ),
    ("leaderworkerset.x-k8s.io/v1", "LeaderWorkerSet"): Optional_(
        "leaderworkerset.x-k8s.io/v1",
        "LeaderWorkerSet",
        "leaderworkersets",
        "install LeaderWorkerSet (https://lws.sigs.k8s.io, v0.6 or later); a target tensorParallelSize above "
        "placement.gpusPerNode spans nodes and needs it",
        serving=True,
    ),
}


class Discovery:
    """Served kinds per group-version, asked again after ``recheck_seconds`` (one GET per group-version then)."""

    def __init__(self, client, recheck_seconds: float = 60.0, clock=time.monotonic):
        self.client = client
        self.recheck_seconds = recheck_seconds
        self.clock = clock
        self._seen: dict[str, tuple[float, frozenset[str]]] = {}  # group-version -> (when asked, kinds)

    async def kinds(self, api_version: str) -> frozenset[str]:
        seen = self._seen.get(api_version)
        if seen is not None and self.clock() - seen[0] < self.recheck_seconds:
            return seen[1]
        try:
            data = await self.client.request("GET", f"/apis/{api_version}", verb="get")
            kinds = frozenset(
                r.get("kind") for r in (data or {}).get("resources") or [] if "/" not in (r.get("name") or "")
            )
        except ApiError as e:
            if e.status != 404:
                raise
            kinds = frozenset()
        self._seen[api_version] = (self.clock(), kinds)
        return kinds

    async def served(self, api_version: str, kind: str) -> bool:
        return kind in await self.kinds(api_version)


_DISCOVERIES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def discovery_for(client, recheck_seconds: float = 60.0) -> Discovery:
    """One Discovery per API client: every object's pass shares what discovery said."""
    found = _DISCOVERIES.get(client)
    if found is None:
        found = _DISCOVERIES[client] = Discovery(client, recheck_seconds)
    return found


def _key(child: dict) -> tuple[str, str]:
    return child.get("apiVersion") or "", child.get("kind") or ""


async def unserved(discovery: Discovery, desired: list[dict]) -> list[Optional_]:
    """The optional kinds among ``desired`` that the cluster does not serve."""
    out = []
    for key in sorted({_key(c) for c in desired if _key(c) in OPTIONAL}):
        if not await discovery.served(*key):
            out.append(OPTIONAL[key])
    return out


def message(missing: list[Optional_]) -> str:
    return "; ".join(
        f"{m.kind} ({m.api_version}) is not served by this cluster, so it was not created: {m.install}" for m in missing
    )


def condition(missing: list[Optional_]) -> dict:
    """Reported only while something is missing: objects on complete clusters keep their condition set."""
    return {"type": CONDITION_TYPE, "status": "False", "reason": REASON, "message": message(missing)[:1024]}


async def served_children(
    client, body: dict, state, obs, desired: list[dict], recheck_seconds: float = 60.0
) -> list[dict]:
    """The pass's hook: ``desired`` without the children whose API is not served; reports those (condition in
    ``obs.extra``, Degraded when the serving workload is among them, one Event per distinct message)."""
    from .reconcile import events

    missing = await unserved(discovery_for(client, recheck_seconds), desired)
    obs.extra = [c for c in obs.extra if c.get("type") != CONDITION_TYPE]
    if not missing:
        events.forget(state, REASON)
        return desired
    obs.extra.append(condition(missing))
    events.once(state, body, REASON, message(missing))
    if any(m.serving for m in missing):
        obs.error = message([m for m in missing if m.serving])[:512]
    skip = {(m.api_version, m.kind) for m in missing}
    return [c for c in desired if _key(c) not in skip]
