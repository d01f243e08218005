"""SpecDecodeDeployment objects in the states the operator reports (condition contract: Ready, Progressing,
Degraded, SpecValid, Paused, Stalled; status.observedGeneration), shared by the Argo CD and kstatus tests."""


def cond(type_, status, reason="Test", message=""):
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-29T12:00:00Z",
    }


def sdd(generation=2, observed=2, conditions=(), deleting=False, status=True):
    obj = {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": "llama", "namespace": "ml", "generation": generation},
        "spec": {},
    }
    if deleting:
        obj["metadata"]["deletionTimestamp"] = "2026-11-29T12:05:00Z"
    if status:
        obj["status"] = {"observedGeneration": observed, "conditions": [dict(c) for c in conditions]}
    return obj


READY = [
    cond("SpecValid", "True"),
    cond("Ready", "True", "AllReady", "4/4 pods ready"),
    cond("Progressing", "False"),
    cond("Degraded", "False"),
    cond("Paused", "False"),
    cond("Stalled", "False", "AsExpected"),
]
ROLLING = [
    cond("SpecValid", "True"),
    cond("Ready", "False", "PodsNotReady", "2/4 pods ready"),
    cond("Progressing", "True", "RollingOut", "rolling out revision 3"),
    cond("Degraded", "False"),
    cond("Stalled", "False", "AsExpected"),
]
ROLLOUT_BLOCKED = [
    cond("SpecValid", "True"),
    cond("Ready", "False", "RolloutBlocked", "pod llama-abc unschedulable; 4/4 replicas ready"),
    cond("Progressing", "False", "RolloutBlocked", "pod llama-abc unschedulable; 4/4 replicas ready"),
    cond("Degraded", "False"),
    cond("Stalled", "True", "RolloutBlocked", "pod llama-abc unschedulable; 4/4 replicas ready"),
]
DEGRADED = [
    cond("SpecValid", "True"),
    cond("Ready", "False", "PodsNotReady"),
    cond("Degraded", "True", "CrashLoop", "target pod restarts: CrashLoopBackOff"),
]
INVALID = [
    cond("SpecValid", "False", "DraftTPMismatch", "draft TP 3 does not divide target TP 4"),
    cond("Ready", "False", "SpecInvalid"),
    cond("Stalled", "True", "InvalidSpec", "draft TP 3 does not divide target TP 4"),
]
PAUSED = [cond("SpecValid", "True"), cond("Ready", "True"), cond("Paused", "True", "Paused", "spec.paused is true")]

# name -> (object, Argo CD health, kstatus status)
CASES = {
    "no-status-yet": (sdd(status=False), "Progressing", "InProgress"),
    "ready": (sdd(conditions=READY), "Healthy", "Current"),
    "ready-but-stale-generation": (sdd(generation=3, observed=2, conditions=READY), "Progressing", "InProgress"),
    "rolling-out": (sdd(conditions=ROLLING), "Progressing", "InProgress"),
    "rollout-blocked": (sdd(conditions=ROLLOUT_BLOCKED), "Progressing", "Failed"),
    "degraded": (sdd(conditions=DEGRADED), "Degraded", "InProgress"),
    "invalid-spec": (sdd(conditions=INVALID), "Degraded", "Failed"),
    "paused": (sdd(conditions=PAUSED), "Suspended", "Current"),
    "deleting": (sdd(conditions=READY, deleting=True), "Healthy", "Terminating"),
}
