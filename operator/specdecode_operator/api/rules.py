"""Every cross-field rule of the API as CEL, written once.

The same strings go into the CRD's ``x-kubernetes-validations`` (the API server enforces them at admission) and
are evaluated in Python by ``specdecode validate`` and by the operator for objects that bypassed admission, so all
three report the same message for the same mistake.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdecode_runtime.contract import model_source as ms
from specdecode_runtime.contract.server_args import extra_args_pattern

# Flags the runtime sets from typed fields (one list, in the contract): extraArgs may not set them again.
MANAGED_FLAGS_REGEX = extra_args_pattern()
NAME_MAX = 47  # children append up to 16 characters ("-control-token") and must stay valid DNS-1035 labels


@dataclass(frozen=True)
class Rule:
    rule: str
    message: str
    field_path: str | None = None
    reason: str | None = None
    # a CEL expression giving the message from the value (a hint naming what was written); ``message`` stands when
    # it cannot be evaluated, as on the API server
    message_expression: str | None = None

    def to_crd(self) -> dict:
        out: dict = {"rule": self.rule, "message": self.message}
        if self.message_expression:
            out["messageExpression"] = self.message_expression
        if self.field_path:
            out["fieldPath"] = self.field_path
        if self.reason:
            out["reason"] = self.reason
        return out


# On metadata.name itself (``self`` is the name), so the API server names that field when one fails; the CRD
# declares metadata.name for them (the only part of metadata a CRD schema may restrict).
NAME_RULES = (
    Rule(
        f"size(self) <= {NAME_MAX}",
        f"metadata.name must be at most {NAME_MAX} characters: child objects append suffixes and must stay DNS labels",
    ),
    Rule(
        "self.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",
        "metadata.name must be a DNS-1035 label (lowercase letters, digits, '-', starting with a letter): "
        "it names Services",
    ),
)
NAME_MAX_LENGTH = 253  # the API server's own limit for object names; bounds the rules' cost estimate


SPEC_RULES = (
    Rule(
        "self.draft.tensorParallelSize <= self.target.tensorParallelSize",
        "draft tensorParallelSize must be at most target tensorParallelSize",
        ".draft.tensorParallelSize",
    ),
    Rule(
        "self.draft.tensorParallelSize > 0 && self.target.tensorParallelSize % self.draft.tensorParallelSize == 0",
        "draft tensorParallelSize must divide target tensorParallelSize",
        ".draft.tensorParallelSize",
    ),
    Rule(
        "!has(self.draft.ranks) || size(self.draft.ranks) == self.draft.tensorParallelSize",
        "draft.ranks must list exactly draft.tensorParallelSize ranks",
        ".draft.ranks",
    ),
    Rule(
        "!has(self.draft.ranks) || self.draft.ranks.all(r, r < self.target.tensorParallelSize)",
        "every draft rank must be a target TP rank: 0 <= rank < target.tensorParallelSize",
        ".draft.ranks",
    ),
    Rule(
        "self.target.tensorParallelSize <= self.placement.gpusPerNode || "
        "self.target.tensorParallelSize % self.placement.gpusPerNode == 0",
        "target tensorParallelSize must be at most placement.gpusPerNode or a multiple of it",
        ".target.tensorParallelSize",
    ),
    Rule(
        "self.runtime.launcher != 'sglang' || self.draft.tensorParallelSize == self.target.tensorParallelSize",
        "runtime.launcher sglang (a stock SGLang image) runs the draft on the whole target TP group: "
        "draft.tensorParallelSize must equal target.tensorParallelSize; use launcher specdecode for a split draft",
        ".draft.tensorParallelSize",
    ),
    Rule(
        "self.runtime.launcher != 'sglang' || self.speculative.autotune.mode == 'Off'",
        "runtime.launcher sglang (a stock SGLang image) needs speculative.autotune.mode Off: the tuner decides from "
        "the specdecode runtime's per-position acceptance and cycle-timing metrics (specdecode_*), which stock "
        "SGLang does not export, and Live mode also needs the runtime's step-control endpoint; use launcher "
        "specdecode to autotune",
        ".speculative.autotune.mode",
    ),
)


def _int_or_percent(field: str) -> Rule:
    return Rule(
        f"type(self.{field}) == int ? self.{field} >= 0 : self.{field}.matches('^(100|[1-9]?[0-9])%$')",
        f"rollout.{field} must be a non-negative integer or a percentage from 0% to 100% (e.g. 1 or 25%)",
        f".{field}",
    )


def _is_zero(field: str) -> str:
    return f"(type(self.{field}) == int ? self.{field} == 0 : self.{field} == '0%')"


ROLLOUT_RULES = (
    _int_or_percent("maxSurge"),
    _int_or_percent("maxUnavailable"),
    Rule(
        f"!({_is_zero('maxSurge')} && {_is_zero('maxUnavailable')})",
        "rollout.maxSurge and rollout.maxUnavailable may not both be 0: no pod could ever be replaced "
        "(on nodes without a spare GPU set, use maxSurge 0 and maxUnavailable 1)",
        ".maxUnavailable",
    ),
)

DRAFT_RULES = (
    Rule(
        "!has(self.ranks) || self.ranks.all(r, self.ranks.exists_one(x, x == r))",
        "draft.ranks must not repeat a rank",
        ".ranks",
    ),
)

SPECULATIVE_RULES = (
    Rule(
        "!has(self.numDraftTokens) || self.eagleTopK != 1 || self.numDraftTokens == self.numSteps + 1",
        "numDraftTokens must equal numSteps + 1 when eagleTopK is 1 (a chain verifies each step plus the bonus token)",
        ".numDraftTokens",
    ),
    Rule(
        "self.autotune.mode == 'Off' || "
        "(self.autotune.minSteps <= self.numSteps && self.numSteps <= self.autotune.maxSteps)",
        "numSteps must lie within autotune minSteps..maxSteps when autotune is on",
        ".numSteps",
    ),
)

AUTOTUNE_RULES = (
    Rule("self.minSteps <= self.maxSteps", "autotune minSteps must be at most maxSteps", ".minSteps"),
    Rule(
        "self.objective != 'Latency' || has(self.maxInterTokenLatencyMs)",
        "objective Latency needs maxInterTokenLatencyMs (the inter-token latency SLO to meet)",
        ".maxInterTokenLatencyMs",
    ),
)

NCCL_RULES = (
    Rule(
        "self.env.all(k, k.matches('^NCCL_[A-Z0-9_]+$'))",
        "nccl.env keys must match ^NCCL_[A-Z0-9_]+$ (other variables go to runtime.env)",
        ".env",
    ),
    Rule(
        "!('NCCL_NVLS_ENABLE' in self.env) || self.env['NCCL_NVLS_ENABLE'] == '0'",
        "NVLink multicast stays off: nccl.env may set NCCL_NVLS_ENABLE only to '0'",
        ".env",
    ),
)

RUNTIME_RULES = (
    Rule(
        f"self.extraArgs.all(a, !a.matches('{MANAGED_FLAGS_REGEX}'))",
        "runtime.extraArgs may not set flags the operator manages (--model-path, --tp-size, --port, --host, "
        "--nnodes, --node-rank, --dist-init-addr, --quantization, --context-length, --enable-metrics, "
        "--speculative-*): use the typed fields",
        ".extraArgs",
    ),
    Rule("self.port != self.controlPort", "runtime.port and runtime.controlPort must differ", ".controlPort"),
    Rule(
        "!has(self.servedCalibration) || self.launcher == 'specdecode'",
        "runtime.servedCalibration needs runtime.launcher specdecode: a stock SGLang image has no served calibration",
        ".servedCalibration",
    ),
)


MODEL_FORMS = "an absolute path, pvc://CLAIM/PATH or hf://ORG/NAME[@REVISION]"
# A string that reads as a Hugging Face Hub repository id (ORG/NAME[@REVISION]) without its scheme.
HUB_ID_PATTERN = f"^{ms.REPO_PART}/{ms.REPO_PART}(@{ms.REVISION})?$"
WINDOWS_PATH_PATTERN = "^[A-Za-z]:"
SCHEME_LIKE_PATTERN = "^[A-Za-z][-A-Za-z0-9+.]*:"


def _model_hint(field: str) -> str:
    """A CEL message naming what was written and the spelling that was probably meant."""
    head = f"'{field}: ' + self.model + ' is not {MODEL_FORMS}: '"
    return (
        f"self.model.matches('{WINDOWS_PATH_PATTERN}') ? {head} + 'give the Linux path inside the pod, "
        "e.g. /models/NAME' : "
        f"self.model.matches('{SCHEME_LIKE_PATTERN}') ? {head} + 'a scheme is written SCHEME:// and only pvc:// "
        "and hf:// are supported' : "
        f"self.model.matches('{HUB_ID_PATTERN}') ? {head} + 'for a Hugging Face Hub repository use hf://' + "
        "self.model + ', for a directory in the pod its absolute path' : "
        f"{head} + 'a path must be absolute, e.g. /models/' + self.model"
    )


def model_rules(owner: str) -> tuple[Rule, ...]:
    """``<owner>.model`` is an absolute path, ``pvc://CLAIM/PATH`` or ``hf://ORG/NAME[@REVISION]`` (the scheme
    patterns are the runtime contract's, so admission and the pod accept the same strings). A relative path is
    refused with a hint: ``meta-llama/Llama-3-8B`` is most likely a hub repository meant as ``hf://...``, and a
    path that the pod resolves against its working directory is never what was meant."""
    field = f"{owner}.model"
    return (
        Rule(
            f"!self.model.matches('{ms.SCHEME_PATTERN}') || self.model.startsWith('{ms.PVC_SCHEME}') || "
            f"self.model.startsWith('{ms.HF_SCHEME}')",
            f"{field} must be {MODEL_FORMS}; other schemes (s3://, gs://, ...) are not supported",
            ".model",
        ),
        Rule(
            f"!self.model.startsWith('{ms.PVC_SCHEME}') || self.model.matches('{ms.PVC_PATTERN}')",
            f"{field}: pvc:// takes pvc://CLAIM/PATH: CLAIM a PersistentVolumeClaim name in the object's namespace "
            "(lowercase DNS subdomain), PATH segments of letters, digits, '-', '_' and '.', none starting with '.'",
            ".model",
        ),
        Rule(
            f"!self.model.startsWith('{ms.HF_SCHEME}') || self.model.matches('{ms.HF_PATTERN}')",
            f"{field}: hf:// takes hf://ORG/NAME[@REVISION]: a Hugging Face Hub repository id, optionally a branch, "
            "tag or commit after '@'",
            ".model",
        ),
        Rule(
            f"self.model.startsWith('/') || self.model.matches('{ms.SCHEME_PATTERN}')",
            f"{field} must be {MODEL_FORMS}: a path must be absolute, and a Hugging Face Hub repository ORG/NAME is "
            "written hf://ORG/NAME",
            ".model",
            message_expression=_model_hint(field),
        ),
    )


TARGET_RULES = model_rules("target")
DRAFT_MODEL_RULES = model_rules("draft")

MODEL_CACHE_RULES = (
    Rule(
        "!(has(self.claimName) && has(self.sizeLimit))",
        "modelCache takes claimName (a PersistentVolumeClaim) or sizeLimit (an emptyDir), not both",
        ".sizeLimit",
    ),
)

HUB_SPEC_RULES = (
    Rule(
        "self.runtime.launcher != 'sglang' || "
        f"(!self.target.model.startsWith('{ms.HF_SCHEME}') && !self.draft.model.startsWith('{ms.HF_SCHEME}'))",
        "hf:// models need runtime.launcher specdecode (its launcher resolves the fetched snapshot offline); with "
        "launcher sglang use a path or pvc://CLAIM/PATH",
        ".runtime.launcher",
    ),
)
