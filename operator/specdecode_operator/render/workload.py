"""The serving workload: a Deployment on one node, a LeaderWorkerSet when the target TP spans nodes."""

from __future__ import annotations

import copy
from typing import Any

from ..api.models import SpecDecodeDeployment
from . import names


def rolling_update(sdd: SpecDecodeDeployment) -> dict[str, Any]:
    """spec.rollout as Kubernetes spells it (both workloads use the same two fields). The default, surge one and
    never drop below the declared replicas, keeps capacity but needs a spare TP group of GPUs; maxSurge 0 replaces
    pods in place where no node has one."""
    return {"maxUnavailable": sdd.spec.rollout.maxUnavailable, "maxSurge": sdd.spec.rollout.maxSurge}


def deployment(sdd: SpecDecodeDeployment, template: dict[str, Any]) -> dict[str, Any]:
    name = sdd.metadata.name
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": names.workload(name), "labels": names.labels(name, "runtime")},
        "spec": {
            "replicas": sdd.spec.replicas,
            "selector": {"matchLabels": names.selector(name)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": rolling_update(sdd)},
            "progressDeadlineSeconds": 3600,
            "revisionHistoryLimit": 5,
            "template": template,
        },
    }


def _worker_template(leader: dict[str, Any]) -> dict[str, Any]:
    """Workers run the same launcher with the same config but serve no HTTP: no probes, no ports."""
    worker = copy.deepcopy(leader)
    container = worker["spec"]["containers"][0]
    for key in ("startupProbe", "readinessProbe", "livenessProbe", "ports", "lifecycle"):
        container.pop(key, None)
    return worker


def leader_worker_set(sdd: SpecDecodeDeployment, leader: dict[str, Any], nodes: int) -> dict[str, Any]:
    name = sdd.metadata.name
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": names.workload(name), "labels": names.labels(name, "runtime")},
        "spec": {
            "replicas": sdd.spec.replicas,
            "startupPolicy": "LeaderCreated",
            "rolloutStrategy": {
                "type": "RollingUpdate",
                "rollingUpdateConfiguration": rolling_update(sdd),
            },
            "leaderWorkerTemplate": {
                "size": nodes,
                # One TP group is one unit: a lost rank breaks every collective, so the group restarts together.
                "restartPolicy": "RecreateGroupOnPodRestart",
                "leaderTemplate": leader,
                "workerTemplate": _worker_template(leader),
            },
        },
    }
