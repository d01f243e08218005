"""Typed models of ``specdecode.io/v1alpha1`` SpecDecodeDeployment.

These classes are the one source of truth: the CRD in ``crds/`` is generated from them (``specdecode crd``), the
renderer consumes them, and their descriptions are what ``kubectl explain`` prints.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict

from specdecode_runtime.contract import config as runtime_config
from specdecode_runtime.contract.capabilities import DEFAULT_ALGORITHM, Algorithm

from . import labels, rules

GROUP = "specdecode.io"
VERSION = "v1alpha1"
KIND: Final = "SpecDecodeDeployment"
PLURAL = "specdecodedeployments"
SINGULAR = "specdecodedeployment"
SHORT_NAME = "sdd"
API_VERSION: Final = "specdecode.io/v1alpha1"
assert API_VERSION == f"{GROUP}/{VERSION}"  # spelled out so that type checkers see the literal

PRESERVE: JsonDict = {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
QUANTITY: JsonDict = {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]}
# core/v1 ResourceRequirements: typed where the renderer reads it (limits and requests are merged with the GPU
# count), so a wrong type is refused at admission instead of failing every reconcile.
RESOURCES: JsonDict = {
    "type": "object",
    "properties": {
        "limits": {
            "type": "object",
            "additionalProperties": QUANTITY,
            "description": "Resource name -> quantity (e.g. cpu: 16, memory: 200Gi).",
        },
        "requests": {
            "type": "object",
            "additionalProperties": QUANTITY,
            "description": "Resource name -> quantity (e.g. cpu: 16, memory: 200Gi).",
        },
        "claims": {"type": "array", "items": PRESERVE, "description": "core/v1 ResourceClaim list."},
    },
}
# core/v1 Affinity: typed along the path the renderer extends with the gpuProduct term; the rest is kept as given.
_TERMS: JsonDict = {
    "type": "array",
    "description": "core/v1 NodeSelectorTerm list (ORed).",
    "items": {
        **PRESERVE,
        "properties": {
            "matchExpressions": {
                "type": "array",
                "items": PRESERVE,
                "description": "core/v1 NodeSelectorRequirement list.",
            }
        },
    },
}
AFFINITY: JsonDict = {
    **PRESERVE,
    "properties": {
        "nodeAffinity": {
            **PRESERVE,
            "description": "core/v1 NodeAffinity.",
            "properties": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    **PRESERVE,
                    "description": "core/v1 NodeSelector.",
                    "properties": {"nodeSelectorTerms": _TERMS},
                }
            },
        }
    },
}


MODEL_DESCRIPTION = (
    "Where the {what} weights come from: an absolute path inside the image or under /models "
    "(runtime.modelVolume), pvc://CLAIM/PATH (the claim mounted read-only in every runtime pod) or "
    "hf://ORG/NAME[@REVISION] (fetched once into modelCache by an init container; the runtime then runs offline). "
    "Nothing else: a relative path, a bare hub id (meta-llama/Llama-3-8B: write hf://meta-llama/Llama-3-8B) or "
    "another scheme is refused."
)


def _cel(*group: rules.Rule) -> JsonDict:
    return {"x-kubernetes-validations": [r.to_crd() for r in group]}


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class Target(_Model):
    """The model being served: its weights, tensor parallelism and optional quantization."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.TARGET_RULES))

    model: str = Field(min_length=1, max_length=1024, description=MODEL_DESCRIPTION.format(what="target"))
    tensorParallelSize: int = Field(
        ge=1, le=64, description="Tensor-parallel ranks of the target; beyond placement.gpusPerNode it spans nodes."
    )
    quantization: str | None = Field(
        default=None, max_length=64, description="SGLang --quantization value, e.g. modelopt_fp4 or fp8."
    )
    contextLength: int | None = Field(default=None, ge=1, le=4194304, description="Maximum context length in tokens.")


class DraftRollout(_Model):
    """How a change of draft.model alone reaches running pods: loaded in place on one replica first (a canary),
    compared with the old draft on acceptance, then loaded on every replica or taken back. No pod restarts."""

    intervals: int = Field(
        default=2,
        ge=1,
        le=20,
        description="Tuning intervals (speculative.autotune.intervalSeconds each, counting only intervals with "
        "drafted tokens) the new draft is measured for before the decision; with one replica the replica "
        "alternates between the new and the old draft, one interval each, so the canary takes twice as long.",
    )
    minAcceptRatio: float = Field(
        default=0.97,
        ge=0.5,
        le=1.5,
        description="Promote when the new draft's acceptance (per draft position, weighted by drafted tokens) is at "
        "least this fraction of the old draft's over those intervals; below it the old draft is loaded back.",
    )


USER_DATA = (
    "The capture holds user data: every captured request's prompt and output, as token ids, readable by whoever "
    "can read the claim."
)


class AdaptationCapture(_Model):
    """Where and how much served traffic the pods capture: TP rank 0 of every replica appends a sampled share of
    finished requests (prompt and output token ids, the time, the served draft) to JSON-lines files on the claim,
    one file per pod per hour, within maxBytes per pod and retentionSeconds."""

    claimName: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=f"^{rules.ms.CLAIM}$",
        description="PersistentVolumeClaim the runtime pods mount read-write at "
        f"{runtime_config.CAPTURE_MOUNT_DIR} for the captured requests (required when enabled; ReadWriteMany when "
        f"replicas or nodes share it). {USER_DATA}",
    )
    maxBytes: int = Field(
        default=runtime_config.CAPTURE_DEFAULT_BYTES,
        ge=runtime_config.CAPTURE_MIN_BYTES,
        le=runtime_config.CAPTURE_MAX_BYTES,
        description="Byte budget of each pod's capture files, 1048576 (1Mi) to 1099511627776 (1Ti); default "
        "1073741824 (1Gi). The oldest files go first, and a record larger than the whole budget is dropped. Size the "
        "claim for replicas x maxBytes, plus the files of replaced pods until their retention ends.",
    )
    retentionSeconds: int = Field(
        default=runtime_config.CAPTURE_DEFAULT_RETENTION_SECONDS,
        ge=runtime_config.CAPTURE_MIN_RETENTION_SECONDS,
        le=runtime_config.CAPTURE_MAX_RETENTION_SECONDS,
        description="How long a capture file is kept after its last record, 60 to 7776000 (90 days); default 86400 "
        "(24h). Files are per hour, so a record is removed at most an hour after this.",
    )
    sampleRatio: float = Field(
        default=1.0,
        ge=0.0,
        le=1.0,
        description="Share of finished requests captured, 0 to 1 (each request drawn at random; 0 captures nothing).",
    )


class AdaptationTraining(_Model):
    """A draft trained from the capture by the operator: every intervalSeconds a batch/v1 Job (owned by this
    deployment, restricted pod security) runs `specdecode-runtime adapt train` from the serving draft, then `adapt
    score` against it on the capture's held-out records; only a candidate better by minRatio is loaded in place on
    one replica (the canary of spec.draft.rollout) and promoted on measured acceptance. The adapted draft is
    recorded in status.draft (spec is never written); a worse or broken one is recorded and dropped."""

    intervalSeconds: int = Field(
        default=86400,
        ge=600,
        le=31536000,
        description="Seconds between attempts, from the capture's start or the end of the last attempt, 600 to "
        "31536000 (a year); default 86400 (a day).",
    )
    maxSeconds: int = Field(
        default=3600,
        ge=300,
        le=86400,
        description="Wall-time bound of one attempt (the Job's activeDeadlineSeconds), 300 to 86400; default 3600. "
        "Training gets two thirds of it, the offline gate the rest; past it the attempt fails and the serving "
        "draft keeps serving.",
    )
    maxSteps: int | None = Field(
        default=None, ge=1, le=1000000000, description="Training steps of one attempt at most (unset: the time bound)."
    )
    maxMemoryGiB: int | None = Field(
        default=None,
        ge=1,
        le=4096,
        description="adapt train --max-memory-gb: with GPUs the process's GPU memory cap, on a CPU a refusal before "
        "loading when the target and the training state exceed it.",
    )
    gpus: int = Field(
        default=1,
        ge=0,
        le=8,
        description="GPUs of the training pod (placement.gpuResourceName), 0 to 8; 0 trains on the CPU (small models "
        "only). Default 1.",
    )
    resources: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra=RESOURCES,
        description="core/v1 ResourceRequirements of the training container for cpu/memory; the GPU count is gpus.",
    )
    nodeSelector: dict[str, str] | None = Field(
        default=None, description="Node selector of the training pod (unset: placement.nodeSelector)."
    )
    tolerations: list[dict[str, Any]] | None = Field(
        default=None,
        max_length=32,
        json_schema_extra={"items": PRESERVE},
        description="core/v1 Tolerations of the training pod (unset: placement.tolerations).",
    )
    minRatio: float = Field(
        default=1.02,
        ge=1.0,
        le=2.0,
        description="The offline gate (adapt score --min-ratio): the candidate's tokens per verify over the serving "
        "draft's on the held-out records must reach this, 1.0 to 2.0; default 1.02.",
    )


class Adaptation(_Model):
    """A draft that learns from the traffic it serves: opt-in capture, bounded in bytes, time and share of requests,
    and with training set, a draft trained on it, gated offline and canaried in place. Needs runtime.launcher
    specdecode."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.ADAPTATION_RULES))

    enabled: bool = Field(
        default=False,
        description="Capture served requests to capture.claimName. Off (the default): nothing is captured, mounted "
        f"or hooked. {USER_DATA}",
    )
    capture: AdaptationCapture = Field(
        default_factory=AdaptationCapture, description="Where captured requests go and how much is kept."
    )
    training: AdaptationTraining | None = Field(
        default=None,
        description="Train a new draft from the capture on the cluster, gate it offline and canary it (needs enabled; "
        "the target and draft as a path or pvc://). Unset: capture only. The training Job reads the captured user "
        "data.",
    )


class Draft(_Model):
    """The speculative draft model and where it runs inside the target's TP ranks."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.DRAFT_RULES, *rules.DRAFT_MODEL_RULES))

    model: str = Field(min_length=1, max_length=1024, description=MODEL_DESCRIPTION.format(what="draft"))
    algorithm: Algorithm = Field(
        default=DEFAULT_ALGORITHM, description="Speculative algorithm (SGLang --speculative-algorithm)."
    )
    tensorParallelSize: int = Field(
        ge=1,
        le=64,
        description="Ranks the draft is sharded over. Less than the target TP runs the draft on its own process "
        "group inside the target ranks and broadcasts its proposals; it must divide the target TP.",
    )
    ranks: list[int] | None = Field(
        default=None,
        max_length=64,
        json_schema_extra={"items": {"type": "integer", "minimum": 0, "maximum": 63}},
        description="Target TP ranks that host the draft (length = draft TP, unique, < target TP). "
        "Unset: chosen by topology, rank 0's PCIe switch or NVLink island first.",
    )
    rollout: DraftRollout | None = Field(
        default=None,
        description="A change of model alone whose new path the running pods can already read (an absolute path, "
        "or pvc:// on a claim they mount) is loaded in place and canaried on acceptance (status.draft); other "
        "changes restart the pods. Unset: intervals 2, minAcceptRatio 0.97. Needs runtime.launcher specdecode.",
    )
    adaptation: Adaptation | None = Field(
        default=None,
        description="Capture of served traffic and a draft trained from it (off unless enabled). The capture holds "
        "user data (prompts and outputs as token ids).",
    )


class Autotune(_Model):
    """Automatic choice of the number of speculative steps from live metrics."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.AUTOTUNE_RULES))

    mode: Literal["Off", "Live", "Rollout"] = Field(
        default="Off",
        description="Off: report only. Live: push step tables to running pods (specdecode runtime). "
        "Rollout: change the rendered step count and roll pods when the predicted gain exceeds the restart cost.",
    )
    minSteps: int = Field(default=1, ge=1, le=16, description="Lowest step count the tuner may choose.")
    maxSteps: int = Field(default=7, ge=1, le=16, description="Highest step count the tuner may choose.")
    intervalSeconds: int = Field(
        default=10, ge=5, le=3600, description="How often metrics are read and a decision is made."
    )
    objective: Literal["Throughput", "Latency"] = Field(
        default="Throughput",
        description="Throughput maximises tokens/s; Latency picks the best tokens/s that meets maxInterTokenLatencyMs.",
    )
    maxInterTokenLatencyMs: float | None = Field(
        default=None, gt=0, le=10000, description="Inter-token latency SLO in milliseconds (objective Latency)."
    )


class Speculative(_Model):
    """Speculative decoding settings (SGLang --speculative-*)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.SPECULATIVE_RULES))

    numSteps: int = Field(
        default=3, ge=1, le=16, description="Draft steps per cycle (the starting value when autotuned)."
    )
    eagleTopK: int = Field(default=1, ge=1, le=10, description="Candidates per draft step; 1 is a chain.")
    numDraftTokens: int | None = Field(
        default=None, ge=2, le=256, description="Tokens verified per cycle; must be numSteps+1 when eagleTopK is 1."
    )
    autotune: Autotune = Field(default_factory=Autotune, description="Step-count autotuning.")


class Nccl(_Model):
    """NCCL environment for the target and draft collectives."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.NCCL_RULES))

    profile: Literal["Auto", "PCIe", "NVLink", "None"] = Field(
        default="Auto",
        description="Profile of NCCL settings; Auto follows placement.interconnect. None: NCCL defaults.",
    )
    env: dict[str, str] = Field(
        default_factory=dict,
        max_length=64,
        json_schema_extra={"additionalProperties": {"type": "string", "maxLength": 4096}},
        description="Extra NCCL_* variables; they win over the profile's values.",
    )


class Placement(_Model):
    """Where the pods run and what the GPUs are joined by."""

    interconnect: Literal["PCIe", "NVLink"] = Field(default="PCIe", description="GPU interconnect inside a node.")
    gpusPerNode: int = Field(default=8, ge=1, le=16, description="GPUs per node; a target TP beyond it spans nodes.")
    gpuResourceName: str = Field(
        default="nvidia.com/gpu", min_length=1, max_length=253, description="Extended resource name of the GPUs."
    )
    gpuProduct: str | None = Field(
        default=None, max_length=63, description="Required value of the nvidia.com/gpu.product node label."
    )
    nodeSelector: dict[str, str] = Field(default_factory=dict, description="Node selector for the pods.")
    tolerations: list[dict[str, Any]] = Field(
        default_factory=list,
        json_schema_extra={"items": PRESERVE},
        description="core/v1 Tolerations for the pods.",
    )
    affinity: dict[str, Any] = Field(
        default_factory=dict, json_schema_extra=AFFINITY, description="core/v1 Affinity, merged with gpuProduct."
    )


class ServedCalibration(_Model):
    """Served calibration at start-up: before a pod reports healthy, every captured step tier decodes ``tokens``
    tokens per request at each of ``batches`` through the pod's own server, and the cycle it served joins the
    start-up cost profile (stage cycle). The stage replays of the cost probe cannot see the scheduler's host work per
    cycle, which on a target with a short decode is as large as the GPU work; without it the tuner starts from a
    profile that under-prices speculation there and corrects it online."""

    batches: list[Annotated[int, Field(ge=1, le=4096)]] = Field(
        default_factory=lambda: [1],
        min_length=1,
        max_length=8,
        description="Batch sizes to serve each tier at (1-8 of them, 1..4096).",
    )
    tokens: int = Field(default=64, ge=8, le=4096, description="Decode tokens per request of each measurement.")
    timeoutSeconds: int = Field(
        default=300,
        ge=1,
        le=3600,
        description="Limit of the whole calibration; past it the pod serves with what was measured.",
    )


class Runtime(_Model):
    """The serving container."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.RUNTIME_RULES))

    image: str = Field(default="", max_length=512, description="Runtime image; empty uses the operator's default.")
    launcher: Literal["specdecode", "sglang"] = Field(
        default="specdecode",
        description="specdecode: the patched runtime (split draft, live step control, metrics). "
        "sglang: a stock SGLang image started with python -m sglang.launch_server.",
    )
    port: int = Field(default=30000, ge=1, le=65535, description="HTTP port of the OpenAI-compatible server.")
    controlPort: int = Field(
        default=30001, ge=1, le=65535, description="Port of the step-control endpoint (operator only)."
    )
    extraArgs: list[str] = Field(
        default_factory=list,
        max_length=128,
        # bounded items keep the CEL rule over them cheap in the API server's cost estimate
        json_schema_extra={"items": {"type": "string", "maxLength": 1024}},
        description="Extra SGLang arguments; managed flags are refused.",
    )
    env: list[dict[str, Any]] = Field(
        default_factory=list, json_schema_extra={"items": PRESERVE}, description="core/v1 EnvVar list."
    )
    resources: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra=RESOURCES,
        description="core/v1 ResourceRequirements for cpu/memory; the GPU count is managed.",
    )
    shmSize: str = Field(
        default="32Gi",
        pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$",
        description="Size of the /dev/shm memory volume.",
    )
    modelVolume: dict[str, Any] = Field(
        default_factory=dict,
        json_schema_extra=PRESERVE,
        description="core/v1 volume source (persistentVolumeClaim, hostPath, ...) mounted read-only at /models.",
    )
    servedCalibration: ServedCalibration | None = Field(
        default=None,
        description="Time every step tier as served before the pod reports healthy (specdecode launcher only; "
        "adds seconds to the start); unset: the cost probe's stage replays alone.",
    )


class SecretKeyRef(_Model):
    """A key of a Secret in the object's namespace."""

    name: str = Field(min_length=1, max_length=253, description="Name of the Secret.")
    key: str = Field(default="token", min_length=1, max_length=253, description="Key inside the Secret.")


class ModelCache(_Model):
    """The volume hf:// models are fetched into: a PersistentVolumeClaim (kept across restarts, shared by the pods
    that mount it) or an emptyDir of at most sizeLimit (fetched again whenever a pod starts on a new node)."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.MODEL_CACHE_RULES))

    claimName: str | None = Field(
        default=None,
        min_length=1,
        max_length=253,
        pattern=f"^{rules.ms.CLAIM}$",
        description="PersistentVolumeClaim holding the cache (an HF_HOME: the snapshots live under hub/). "
        "ReadWriteMany when replicas or nodes share it.",
    )
    sizeLimit: str | None = Field(
        default=None,
        pattern=r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|K|M|G|T)?$",
        description="Size limit of the emptyDir cache when no claimName is set; unset: the node's ephemeral storage.",
    )
    tokenSecretRef: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding a Hugging Face token (HF_TOKEN) for gated or private "
        "repositories; only the fetching init container sees it.",
    )


INT_OR_PERCENT: JsonDict = {"x-kubernetes-int-or-string": True}


class Rollout(_Model):
    """How a template change (a spec edit, an image bump, a Rollout-mode step change) replaces the serving pods.

    Applied to the Deployment's ``strategy.rollingUpdate`` and the LeaderWorkerSet's ``rollingUpdateConfiguration``.
    The default (surge one, never drop below the declared replicas) keeps capacity but needs room for one more
    replica; on nodes whose GPUs are all in use that pod never schedules (``RolloutBlocked``): set maxSurge 0 and
    maxUnavailable 1 to replace pods in place.
    """

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.ROLLOUT_RULES))

    maxSurge: int | str = Field(
        default=1,
        json_schema_extra=INT_OR_PERCENT,
        description="Replicas created above spec.replicas during a rollout: an integer or a percentage (25%). "
        "Each needs a full TP group of free GPUs.",
    )
    maxUnavailable: int | str = Field(
        default=0,
        json_schema_extra=INT_OR_PERCENT,
        description="Replicas that may be unavailable during a rollout: an integer or a percentage (25%). Not both 0.",
    )


def _label_map(max_items: int, description: str) -> Any:
    """A map of labels: bounded in size (which keeps the CEL rules over it inside the API server's cost budget);
    keys and values are checked by the rules (``rules.label_map_rules``)."""
    return Field(
        default_factory=dict,
        max_length=max_items,
        json_schema_extra={"additionalProperties": {"type": "string", "maxLength": labels.VALUE_MAX}},
        description=description,
    )


def _object_name(what: str) -> Any:
    return Field(
        default=None,
        min_length=1,
        max_length=labels.NAME_MAX,
        pattern=labels.NAME_PATTERN,
        description=f"{what} (a lowercase DNS-1123 subdomain, at most {labels.NAME_MAX} characters).",
    )


class Monitoring(_Model):
    """Prometheus integration."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.MONITORING_RULES))

    serviceMonitor: bool = Field(default=False, description="Create a monitoring.coreos.com/v1 ServiceMonitor.")
    labels: dict[str, str] = _label_map(
        32,
        "Labels of the ServiceMonitor, e.g. the release label a kube-prometheus-stack Prometheus selects "
        "ServiceMonitors by. They win over the operator's default (chart value runtime.serviceMonitor.labels); the "
        "operator's own labels cannot be set.",
    )


class PodMetadata(_Model):
    """Labels and annotations added to every runtime pod."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.POD_METADATA_RULES))

    labels: dict[str, str] = _label_map(
        32,
        "Labels of every runtime pod, next to the operator's own, which cannot be set here "
        "(app.kubernetes.io/name, /instance, /component, /managed-by, keys under specdecode.io/ and "
        "leaderworkerset.sigs.k8s.io/): they select the pods. Never part of a selector.",
    )
    annotations: dict[str, str] = Field(
        default_factory=dict,
        max_length=64,
        json_schema_extra={"additionalProperties": {"type": "string", "maxLength": 4096}},
        description="Annotations of every runtime pod (keys under specdecode.io/ are the operator's).",
    )


class Toleration(_Model):
    """core/v1 Toleration."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.TOLERATION_RULES))

    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=317,
        pattern=labels.KEY_PATTERN,
        description="Taint key to tolerate; unset with operator Exists: every taint.",
    )
    operator: Literal["Exists", "Equal"] | None = Field(default=None, description="Exists or Equal (unset: Equal).")
    value: str | None = Field(
        default=None,
        max_length=labels.VALUE_MAX,
        pattern=labels.VALUE_PATTERN,
        description="Taint value (operator Equal).",
    )
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        default=None, description="Taint effect to tolerate; unset: every effect."
    )
    tolerationSeconds: int | None = Field(
        default=None, description="With effect NoExecute: how long the pod stays bound after the taint appears."
    )


class LocalObjectReference(_Model):
    """A Secret in the object's namespace."""

    name: str = Field(
        min_length=1,
        max_length=labels.NAME_MAX,
        pattern=labels.NAME_PATTERN,
        description="Name of the Secret (a lowercase DNS-1123 subdomain).",
    )


class PodTemplate(_Model):
    """What a platform adds to every runtime pod (Deployment and LeaderWorkerSet, leader and workers alike): an
    allow-list of pod fields, merged with what the operator renders. Nothing here can change the pods' selectors,
    security context, volumes or containers."""

    model_config = ConfigDict(extra="forbid", json_schema_extra=_cel(*rules.POD_TEMPLATE_RULES))

    metadata: PodMetadata = Field(default_factory=PodMetadata, description="Pod labels and annotations.")
    serviceAccountName: str | None = _object_name(
        "ServiceAccount of the runtime pods, in the object's namespace, instead of the <name>-runtime one the "
        "operator creates (which then stays unused). The pods still mount no automatic token; in ServiceAccount "
        "step-control mode they get a projected token of this account, so give it no rights the runtime image "
        "should not hold"
    )
    imagePullSecrets: list[LocalObjectReference] = Field(
        default_factory=list, max_length=16, description="Secrets to pull the runtime image with."
    )
    priorityClassName: str | None = _object_name("PriorityClass of the runtime pods")
    schedulerName: str | None = _object_name("Scheduler of the runtime pods (unset: the default scheduler)")
    runtimeClassName: str | None = _object_name("RuntimeClass of the runtime pods (e.g. nvidia)")
    tolerations: list[Toleration] = Field(
        default_factory=list,
        max_length=32,
        description="Tolerations added after placement.tolerations.",
    )
    nodeSelector: dict[str, str] = _label_map(
        32,
        "Node labels added to placement.nodeSelector; a key of placement.nodeSelector may not be repeated here.",
    )


class SpecDecodeDeploymentSpec(_Model):
    """Desired state of a speculative-decoding deployment."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=_cel(
            *rules.SPEC_RULES, *rules.HUB_SPEC_RULES, *rules.POD_TEMPLATE_SPEC_RULES, *rules.ADAPTATION_SPEC_RULES
        ),
    )

    replicas: int = Field(default=1, ge=0, le=1024, description="Serving replicas (each one TP group).")
    target: Target
    draft: Draft
    speculative: Speculative = Field(default_factory=Speculative, description="Speculative decoding settings.")
    nccl: Nccl = Field(default_factory=Nccl, description="NCCL profile and overrides.")
    placement: Placement = Field(default_factory=Placement, description="GPU placement.")
    runtime: Runtime = Field(default_factory=Runtime, description="Serving container.")
    monitoring: Monitoring = Field(default_factory=Monitoring, description="Prometheus integration.")
    modelCache: ModelCache | None = Field(
        default=None, description="Cache volume for hf:// models; unset: an emptyDir per pod."
    )
    rollout: Rollout = Field(default_factory=Rollout, description="How template changes replace the serving pods.")
    podTemplate: PodTemplate | None = Field(
        default=None,
        description="Labels, annotations and platform fields (ServiceAccount, image pull Secrets, priority, "
        "scheduler, RuntimeClass, tolerations, node selector) added to every runtime pod.",
    )


class Condition(_Model):
    """A kstatus-style condition."""

    type: str = Field(description="Ready, Progressing, Degraded, SpecValid, Stalled, Paused or MetricsAvailable.")
    status: Literal["True", "False", "Unknown"] = Field(description="Whether the condition holds.")
    reason: str = Field(default="", description="One CamelCase word for machines (e.g. AllReplicasReady).")
    message: str = Field(default="", description="What a human should know, e.g. which field is invalid.")
    lastTransitionTime: str | None = Field(default=None, description="When status last changed (RFC 3339).")
    observedGeneration: int | None = Field(
        default=None, description="metadata.generation the condition was computed for."
    )


class Recommendation(_Model):
    """The planner's advice on where the draft should run, from measured costs."""

    draftTensorParallelSize: int | None = Field(default=None, description="Recommended draft TP size.")
    numSteps: int | None = Field(default=None, description="Recommended speculative steps at that draft TP.")
    predictedTokensPerSecond: float | None = Field(
        default=None, description="Predicted tokens/s per replica with the recommendation."
    )
    currentPredictedTokensPerSecond: float | None = Field(
        default=None, description="Predicted tokens/s per replica with the current spec, for comparison."
    )
    reason: str = Field(default="", description="Why, in words (the figures it rests on).")


class CostProfileEntry(_Model):
    """The cycle-cost model the tuner uses for one batch-size bucket, evaluated at the bucket's live mean batch."""

    bucket: str = Field(description="Batch-size bucket label, e.g. 8-31.")
    source: Literal["MeasuredAtStart", "RefinedOnline", "Override", "PhaseAverages"] = Field(
        description="MeasuredAtStart: the pods' start-up cost probe; RefinedOnline: that probe corrected by live cycle "
        "timings; Override: the profile ConfigMap (also checked against live timings); PhaseAverages: no profile, "
        "per-cycle averages of the step count that ran."
    )
    batch: float | None = Field(default=None, description="Mean batch size the figures are evaluated at.")
    plainCycleMs: float | None = Field(
        default=None, description="Predicted milliseconds of a decode step without speculation."
    )
    cycleMs: float | None = Field(
        default=None, description="Predicted milliseconds of a cycle at the bucket's current step count."
    )
    stepMs: float | None = Field(default=None, description="Predicted milliseconds one more draft step adds.")
    observedSteps: list[int] | None = Field(default=None, description="Step counts whose live timings refined it.")


class SpeculativeStatus(_Model):
    """What the tuner measured and decided; spec is never written."""

    numSteps: int | None = Field(
        default=None,
        description="Speculative steps in use: the busiest batch bucket's (Live) or the restarted pods' (Rollout).",
    )
    stepTable: list[dict[str, int]] | None = Field(
        default=None,
        json_schema_extra={"items": {"type": "object", "additionalProperties": {"type": "integer"}}},
        description="Steps per batch size pushed to the pods (Live): entries {minBatch, steps}, ascending minBatch.",
    )
    acceptLength: float | None = Field(
        default=None, description="Tokens emitted per verify pass over the last interval (accepted draft tokens + 1)."
    )
    acceptRate: float | None = Field(
        default=None, description="Accepted draft tokens / drafted tokens over the last interval (0..1)."
    )
    tokensPerSecond: float | None = Field(
        default=None, description="Measured output tokens/s per replica over the last interval."
    )
    stepSwitches: dict[str, int] | None = Field(
        default=None,
        json_schema_extra={"additionalProperties": {"type": "integer", "minimum": 0}},
        description="Served tier changes summed over the pods scraped last (since each started): off (to steps 0, "
        "plain decoding), on (from 0 back to speculation, each paying a draft catch-up), change (between step "
        "counts > 0).",
    )
    lastTuneTime: str | None = Field(default=None, description="When the tuner last had usable metrics (RFC 3339).")
    recommendation: Recommendation | None = Field(
        default=None, description="The planner's draft-placement advice; never applied automatically."
    )
    ncclLatencyMicroseconds: dict[str, float] | None = Field(
        default=None, description="The pods' start-up NCCL preflight: microseconds per collective, by operation."
    )
    costSource: Literal["MeasuredAtStart", "RefinedOnline", "Override", "PhaseAverages"] | None = Field(
        default=None, description="Where the cost model of the busiest bucket comes from (see costProfile)."
    )
    costProfile: list[CostProfileEntry] | None = Field(
        default=None, max_length=16, description="The cost model in use, per batch-size bucket."
    )


class HistoryEntry(_Model):
    """One tuning decision."""

    time: str = Field(description="When the decision was made (RFC 3339).")
    bucket: str = Field(default="", description="Batch-size bucket it applies to, e.g. 8-31.")
    fromSteps: int | None = Field(default=None, description="Steps before.")
    toSteps: int | None = Field(default=None, description="Steps after.")
    reason: str = Field(default="", description="Why, in words (measured acceptance and predicted tokens/s).")
    predictedGain: float | None = Field(
        default=None, description="Predicted relative tokens/s gain of the change (0.05 = 5 %)."
    )


class RuntimeImageStatus(_Model):
    """The default runtime image a deployment that leaves spec.runtime.image empty runs, recorded when it is first
    rendered and kept when the operator's default changes (an operator upgrade restarts no runtime pod)."""

    model_config = ConfigDict(extra="allow")

    image: str = Field(default="", description="The default image this deployment's runtime pods run.")
    launcher: str = Field(default="", description="The launcher (spec.runtime.launcher) whose default it is.")
    available: str | None = Field(
        default=None,
        description="The operator's current default, when it differs from image: adopted when the annotation "
        "specdecode.io/adopt-default-image takes a new value (the pods restart), or by an operator whose "
        "runtime image policy is Follow.",
    )
    adoptedToken: str | None = Field(
        default=None, description="The last value of the annotation specdecode.io/adopt-default-image acted on."
    )


class DraftRevision(_Model):
    """One draft: the model as spec.draft.model names it and the digest its pods report."""

    source: str = Field(default="", description="The draft model (spec.draft.model form).")
    digest: str | None = Field(
        default=None, description="sha256 over the draft's tensors, as the pods report it (GET /specdecode/v1/draft)."
    )


DraftPhase = Literal["Serving", "Canary", "Promoting", "RolledBack", "Failed"]


class DraftHistoryEntry(_Model):
    """One draft rollout decision."""

    time: str = Field(description="When (RFC 3339).")
    phase: DraftPhase = Field(description="The phase entered.")
    source: str = Field(default="", description="The candidate draft it concerns.")
    message: str = Field(default="", description="Why, in words (measured acceptance, the pod's refusal).")


AdaptationPhase = Literal["Capturing", "Training", "Canary", "Promoted", "Refused", "Failed"]


class AdaptationResult(_Model):
    """The offline gate's verdict on one candidate (adapt score on the capture's held-out records)."""

    better: bool | None = Field(default=None, description="The candidate passed the gate (ratio >= minRatio).")
    ratio: float | None = Field(
        default=None, description="The candidate's tokens per verify over the serving draft's on the held-out records."
    )
    servingAcceptLength: float | None = Field(
        default=None, description="The serving draft's accepted drafts per verify."
    )
    candidateAcceptLength: float | None = Field(default=None, description="The candidate's accepted drafts per verify.")
    servingAcceptance: list[float] | None = Field(
        default=None,
        max_length=16,
        description="The serving draft's acceptance per draft position (accepted given the previous accepted).",
    )
    candidateAcceptance: list[float] | None = Field(
        default=None, max_length=16, description="The candidate's acceptance per draft position."
    )
    heldoutRecords: int | None = Field(default=None, description="Held-out captured records the gate read.")
    digest: str | None = Field(
        default=None, max_length=128, description="sha256 over the candidate's tensors, as the pods will report it."
    )


class AdaptedDraft(_Model):
    """A draft trained from the capture: where the pods read it and the draft it was trained for."""

    source: str = Field(default="", description="The checkpoint's path in the pods (on the capture claim).")
    base: str = Field(
        default="",
        description="spec.draft.model when it was trained; a new spec.draft.model drops the adapted draft.",
    )
    attempt: int | None = Field(default=None, description="The attempt that trained it.")


class AdaptationStatus(_Model):
    """The capture -> train -> gate -> canary -> promote loop (spec.draft.adaptation.training)."""

    phase: AdaptationPhase | None = Field(
        default=None,
        description="Capturing (waiting for the next attempt), Training (the Job runs: training, then the offline "
        "gate), Canary (the gated candidate is canaried, status.draft.phase), Promoted (it serves), Refused (the "
        "gate or the canary found it not better) or Failed (the Job failed or ran past maxSeconds).",
    )
    message: str = Field(default="", description="The phase's cause, in words.")
    attempt: int | None = Field(default=None, description="The latest attempt's number (1, 2, ...).")
    job: str | None = Field(default=None, description="The latest attempt's Job.")
    since: str | None = Field(
        default=None,
        description="When the wait for the next attempt began (RFC 3339): the capture's start or the "
        "latest attempt's end.",
    )
    lastResult: AdaptationResult | None = Field(default=None, description="The latest offline gate's verdict.")
    candidate: AdaptedDraft | None = Field(
        default=None, description="The gated candidate handed to the in-place canary (status.draft.candidate)."
    )
    promoted: AdaptedDraft | None = Field(
        default=None, description="The adapted draft promoted last: new and restarted pods load it."
    )


class DraftStatus(_Model):
    """Which draft the pods serve and the in-place rollout of a new one (spec.draft.rollout)."""

    serving: DraftRevision | None = Field(
        default=None, description="The draft every replica serves; the pods' runtime config names it."
    )
    candidate: DraftRevision | None = Field(
        default=None, description="The draft being canaried, or the last one rolled back or refused."
    )
    phase: DraftPhase | None = Field(
        default=None,
        description="Serving (no rollout), Canary (one replica serves the candidate, acceptance compared), "
        "Promoting (loading it on every replica), RolledBack (worse acceptance: the old draft is back) or Failed "
        "(a pod refused the candidate: the old draft serves on).",
    )
    message: str = Field(default="", description="The phase's cause, in words.")
    history: list[DraftHistoryEntry] = Field(
        default_factory=list, max_length=5, description="The latest phase changes, oldest first (at most 5)."
    )
    adaptation: AdaptationStatus | None = Field(
        default=None, description="The draft trained from captured traffic (spec.draft.adaptation.training)."
    )


class SpecDecodeDeploymentStatus(_Model):
    """Observed state, written by the operator through the status subresource."""

    model_config = ConfigDict(extra="allow")

    observedGeneration: int | None = Field(
        default=None, description="metadata.generation the operator last reconciled; behind it, status is stale."
    )
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="kstatus conditions: Ready, Progressing, Degraded, SpecValid, Stalled (True while nothing can "
        "progress without a change: invalid spec, name collision, blocked rollout), Paused and the tuner's "
        "MetricsAvailable.",
    )
    replicas: int | None = Field(default=None, description="Serving replicas that exist (scale subresource).")
    readyReplicas: int | None = Field(default=None, description="Serving replicas that are ready.")
    selector: str | None = Field(default=None, description="Label selector of the runtime pods (scale subresource).")
    runtimeImage: RuntimeImageStatus | None = Field(
        default=None,
        description="The operator's default runtime image as this deployment runs it (unused while "
        "spec.runtime.image is set), and a newer default not adopted yet.",
    )
    draft: DraftStatus | None = Field(
        default=None, description="The draft served and the in-place rollout of a new one (spec.draft.rollout)."
    )
    speculative: SpeculativeStatus | None = Field(default=None, description="What the tuner measured and decided.")
    history: list[HistoryEntry] = Field(
        default_factory=list, max_length=50, description="The latest tuning decisions, oldest first (at most 50)."
    )


class ObjectMeta(_Model):
    model_config = ConfigDict(extra="allow")

    name: str = ""
    namespace: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    uid: str | None = None
    generation: int | None = None


class SpecDecodeDeployment(_Model):
    """A speculative-decoding deployment: target, draft, speculative settings, NCCL profile and GPU placement."""

    apiVersion: Literal["specdecode.io/v1alpha1"] = API_VERSION
    kind: Literal["SpecDecodeDeployment"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: SpecDecodeDeploymentSpec
    status: SpecDecodeDeploymentStatus | None = None
