"""One attempt of a draft trained from the capture: a batch/v1 Job owned by the SpecDecodeDeployment.

The pod mounts the capture claim (read-write: the candidate is written next to the records, in a directory per
attempt, where the serving pods, which mount the same claim, can load it in place) and the target and the serving
draft as the serving pods do (pvc:// claims and runtime.modelVolume read-only). Two containers, no shell:

* init container ``train``: ``specdecode-runtime adapt train`` from the serving draft, within two thirds of
  ``maxSeconds`` and ``maxSteps``; a failure ends the attempt (its log tail is the termination message);
* container ``gate``: ``specdecode-runtime adapt score`` of the serving draft against the candidate on the capture's
  held-out records, with ``--min-ratio``; it exits 0 when the candidate is better, 3 when not, and writes the
  verdict's summary (at most 4096 bytes, contract/adaptation.py) to its termination message, which the operator
  reads from the pod's status: it never reads the claim.

Bounds: ``activeDeadlineSeconds`` is ``maxSeconds``, ``backoffLimit`` 0 (a failed attempt is recorded and the next
one waits for ``intervalSeconds``), ``ttlSecondsAfterFinished`` one hour (the operator reads the result within a
tuning interval and records it in status.draft.adaptation). Restricted pod security, like the serving pods.

Pure: spec, the serving draft, the attempt number and the image in, a manifest out.
"""

from __future__ import annotations

import copy
from typing import Any

from specdecode_runtime.contract import adaptation as contract
from specdecode_runtime.contract import model_source as ms
from specdecode_runtime.contract.config import CAPTURE_MOUNT_DIR

from ..api.models import API_VERSION, KIND, AdaptationTraining, SpecDecodeDeployment
from ..images import RUNTIME_IMAGE
from . import model_volumes, names, pod

COMPONENT = "training"
ATTEMPT_LABEL = "specdecode.io/adaptation-attempt"
TRAIN_CONTAINER = "train"
GATE_CONTAINER = "gate"
FINISHED_TTL_SECONDS = 3600
TRAIN_SHARE = 2 / 3  # of maxSeconds; the gate and the start-up get the rest
SCRATCH_SIZE = "16Gi"
MAX_GATE_STEPS = 16  # adapt score --steps


def job_name(name: str, attempt: int) -> str:
    """At most 63 characters (metadata.name is at most 47, the attempt at most 9 digits)."""
    return f"{name}-adapt-{int(attempt)}"


def settings(sdd: SpecDecodeDeployment) -> AdaptationTraining | None:
    """The training settings, when the loop is on: adaptation enabled with a training block."""
    adaptation = sdd.spec.draft.adaptation
    if adaptation is None or not adaptation.enabled or adaptation.training is None:
        return None
    return adaptation.training


def image_of(sdd: SpecDecodeDeployment, recorded: str | None, default: str = RUNTIME_IMAGE) -> str:
    """The serving pods' runtime image: spec.runtime.image, else the default recorded in status.runtimeImage."""
    return sdd.spec.runtime.image or recorded or default


def local_path(model: str) -> str:
    """Where the pod reads ``model`` (a path as it is, pvc:// under its claim's mount)."""
    source = ms.parse(model)
    if isinstance(source, ms.HubSource):
        raise ValueError(f"{model}: the training Job does not fetch from the hub")
    return source.local_path()


def commands(
    sdd: SpecDecodeDeployment, serving: str, attempt: int, capture_dir: str = CAPTURE_MOUNT_DIR
) -> tuple[list[str], list[str]]:
    """The train and gate command lines (the pod's, or a test's with the claim at ``capture_dir``)."""
    training = settings(sdd)
    assert training is not None, "no spec.draft.adaptation.training"
    target, init = local_path(sdd.spec.target.model), local_path(serving)
    out = contract.attempt_dir(sdd.metadata.name, attempt, capture_dir)
    device = "cuda" if training.gpus > 0 else "cpu"
    minutes = round(training.maxSeconds * TRAIN_SHARE / 60.0, 2)
    train = ["specdecode-runtime", "adapt", "train", "--capture", capture_dir, "--target", target]
    train += ["--init-draft", init, "--out", out, "--minutes", f"{minutes:g}", "--device", device]
    if training.maxSteps is not None:
        train += ["--max-steps", str(training.maxSteps)]
    if training.maxMemoryGiB is not None:
        train += ["--max-memory-gb", str(training.maxMemoryGiB)]
    steps = min(MAX_GATE_STEPS, max(1, sdd.spec.speculative.numSteps))
    gate = ["specdecode-runtime", "adapt", "score", "--capture", capture_dir, "--target", target]
    gate += ["--drafts", init, out, "--steps", str(steps), "--min-ratio", f"{training.minRatio:g}"]
    gate += ["--device", device, "--out", f"{out}/score.json", "--summary", contract.TERMINATION_LOG]
    return train, gate


def _resources(sdd: SpecDecodeDeployment, training: AdaptationTraining) -> dict[str, Any]:
    limits = {k: str(v) for k, v in (training.resources.get("limits") or {}).items()}
    requests = {k: str(v) for k, v in (training.resources.get("requests") or {}).items()}
    if training.gpus > 0:
        gpu = sdd.spec.placement.gpuResourceName
        limits[gpu] = requests[gpu] = str(training.gpus)
    out = {}
    if limits:
        out["limits"] = dict(sorted(limits.items()))
    if requests:
        out["requests"] = dict(sorted(requests.items()))
    return out


def owner_reference(sdd: SpecDecodeDeployment) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": sdd.metadata.name,
        "uid": sdd.metadata.uid or "",
        "controller": True,
        "blockOwnerDeletion": True,
    }


def training_job(sdd: SpecDecodeDeployment, serving: str, attempt: int, image: str) -> dict[str, Any]:
    """The Job of attempt ``attempt``, training from the draft the pods serve (``serving``, spec.draft.model form
    or an adapted draft's path)."""
    training = settings(sdd)
    assert training is not None, "no spec.draft.adaptation.training"
    adaptation = sdd.spec.draft.adaptation
    assert adaptation is not None and adaptation.capture.claimName
    name = sdd.metadata.name
    train, gate = commands(sdd, serving, attempt)
    labels = {**names.labels(name, COMPONENT), ATTEMPT_LABEL: str(int(attempt))}
    mounts: list[dict[str, Any]] = [
        {"name": "scratch", "mountPath": pod.SCRATCH_DIR},
        {"name": pod.CAPTURE_VOLUME, "mountPath": CAPTURE_MOUNT_DIR},
    ]
    volumes: list[dict[str, Any]] = [
        {"name": "scratch", "emptyDir": {"sizeLimit": SCRATCH_SIZE}},
        {"name": pod.CAPTURE_VOLUME, "persistentVolumeClaim": {"claimName": adaptation.capture.claimName}},
    ]
    if sdd.spec.runtime.modelVolume:
        mounts.append({"name": "models", "mountPath": "/models", "readOnly": True})
        volumes.append({"name": "models", **sdd.spec.runtime.modelVolume})
    sources = model_volumes.for_spec(sdd.spec)  # the target's and the spec draft's claims (no hub: admission)
    mounts += sources.mounts
    volumes += sources.volumes
    security = {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "readOnlyRootFilesystem": True,
        "runAsNonRoot": True,
    }
    env = [{"name": k, "value": v} for k, v in pod.CACHE_ENV.items()]
    resources = _resources(sdd, training)

    def container(cname: str, command: list[str]) -> dict[str, Any]:
        c: dict[str, Any] = {
            "name": cname,
            "image": image,
            "imagePullPolicy": "IfNotPresent",
            "command": command,
            "env": copy.deepcopy(env),
            "volumeMounts": copy.deepcopy(mounts),
            # the gate writes its summary here; a failure without one reports its log tail
            "terminationMessagePath": contract.TERMINATION_LOG,
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "securityContext": copy.deepcopy(security),
        }
        if resources:
            c["resources"] = copy.deepcopy(resources)
        return c

    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "serviceAccountName": pod.service_account_name(sdd),
        "automountServiceAccountToken": False,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": pod.RUNTIME_UID,
            "runAsGroup": pod.RUNTIME_UID,
            "fsGroup": pod.RUNTIME_UID,
            "fsGroupChangePolicy": "OnRootMismatch",
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "initContainers": [container(TRAIN_CONTAINER, train)],
        "containers": [container(GATE_CONTAINER, gate)],
        "volumes": volumes,
    }
    node_selector = (
        dict(sorted(training.nodeSelector.items())) if training.nodeSelector is not None else pod._node_selector(sdd)
    )
    if node_selector:
        pod_spec["nodeSelector"] = node_selector
    tolerations = list(training.tolerations) if training.tolerations is not None else pod._tolerations(sdd)
    if tolerations:
        pod_spec["tolerations"] = copy.deepcopy(tolerations)
    pod._add_platform_fields(pod_spec, sdd)
    md: dict[str, Any] = {"name": job_name(name, attempt), "labels": labels, "ownerReferences": [owner_reference(sdd)]}
    if sdd.metadata.namespace:
        md["namespace"] = sdd.metadata.namespace
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": md,
        "spec": {
            "backoffLimit": 0,
            "activeDeadlineSeconds": training.maxSeconds,
            "ttlSecondsAfterFinished": FINISHED_TTL_SECONDS,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }
