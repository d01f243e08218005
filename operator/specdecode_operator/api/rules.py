"""Every cross-field rule of the API as CEL, written once.

The same strings go into the CRD's ``x-kubernetes-validations`` (the API server enforces them at admission) and
are evaluated in Python by ``specdecode validate`` and by the operator for objects that bypassed admission, so all
three report the same message for the same mistake.
"""

from __future__ import annotations

from dataclasses import dataclass

from specdecode_runtime.contract import model_source as ms
from specdecode_runtime.contract.server_args import extra_args_pattern

from . import labels as lb

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
    Rule(
        "!has(self.draft.rollout) || self.runtime.launcher == 'specdecode'",
        "draft.rollout needs runtime.launcher specdecode: a stock SGLang image cannot load a draft in place, so a "
        "draft change restarts its pods; remove draft.rollout or use launcher specdecode",
        ".draft.rollout",
    ),
)

ADAPTATION_SPEC_RULES = (
    Rule(
        "!has(self.draft.adaptation) || !self.draft.adaptation.enabled || self.runtime.launcher == 'specdecode'",
        "draft.adaptation.enabled needs runtime.launcher specdecode: a stock SGLang image captures no traffic",
        ".draft.adaptation.enabled",
    ),
    Rule(
        "!has(self.draft.adaptation) || !has(self.draft.adaptation.training) || "
        f"(!self.target.model.startsWith('{ms.HF_SCHEME}') && !self.draft.model.startsWith('{ms.HF_SCHEME}'))",
        "draft.adaptation.training needs the target and the draft as a path or pvc://CLAIM/PATH: the training Job "
        "mounts them as the pods do and has no hub fetch",
        ".draft.adaptation.training",
    ),
)

ADAPTATION_RULES = (
    Rule(
        "!self.enabled || has(self.capture.claimName)",
        "draft.adaptation.capture.claimName is required when draft.adaptation.enabled is true: the "
        "PersistentVolumeClaim the runtime pods write captured requests to",
        ".capture.claimName",
    ),
    Rule(
        "!has(self.training) || self.enabled",
        "draft.adaptation.training needs draft.adaptation.enabled: it trains on the captured requests",
        ".training",
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


# ---------------------------------------------------------------- labels, annotations and the pod template


def _lit(text: str) -> str:
    """``text`` as a CEL string literal (double quotes: the messages hold apostrophes)."""
    assert '"' not in text and "\\" not in text, text
    return f'"{text}"'


def _first_bad(attr: str, good: str) -> str:
    """A CEL expression: the first key of ``self.<attr>`` for which ``good`` (over ``k``) does not hold."""
    return f"self.{attr}.filter(k, !({good}))[0]"


def _key_ok(var: str) -> str:
    return f"{var}.matches('{lb.KEY_PATTERN}') && (!{var}.contains('/') || {var}.matches('{lb.KEY_PREFIX_PATTERN}'))"


KEY_FORM = (
    "[PREFIX/]NAME, NAME at most 63 letters, digits, '-', '_' or '.' beginning and ending with a letter or digit, "
    "PREFIX a lowercase DNS subdomain of at most 253 characters"
)
VALUE_FORM = "at most 63 letters, digits, '-', '_' or '.' beginning and ending with a letter or digit, or empty"
RESERVED_KEYS = (
    f"{', '.join(lb.IDENTITY_LABEL_KEYS)} and keys under {lb.OPERATOR_DOMAIN}/ or {lb.LWS_DOMAIN}/, which identify "
    "and select the runtime pods and the operator's other objects"
)
OWN_LABEL = ", one of the operator's own labels: "
OPERATOR_ANNOTATIONS = (
    f"keys under {lb.OPERATOR_DOMAIN}/ are the operator's own annotations (the config hash that rolls the pods)"
)


def key_rule(field: str, attr: str, what: str = "a label") -> Rule:
    """Every key of the map ``self.<attr>`` is a Kubernetes qualified name (label and annotation keys)."""
    return Rule(
        f"self.{attr}.all(k, {_key_ok('k')})",
        f"{field} keys must be {what.split()[-1]} keys: {KEY_FORM}",
        f".{attr}",
        message_expression=f"{_lit(field + ': ')} + {_first_bad(attr, _key_ok('k'))} + "
        f"{_lit(f' is not {what} key: {KEY_FORM}')}",
    )


def value_rule(field: str, attr: str) -> Rule:
    """Every value of the map ``self.<attr>`` is a label value."""
    good = f"self.{attr}[k].matches('{lb.VALUE_PATTERN}')"
    return Rule(
        f"self.{attr}.all(k, {good})",
        f"{field} values must be label values: {VALUE_FORM}",
        f".{attr}",
        message_expression=f"{_lit(field + ': the value of ')} + {_first_bad(attr, good)} + "
        f"{_lit(f' is not a label value: {VALUE_FORM}')}",
    )


def not_reserved_rule(field: str, attr: str) -> Rule:
    """No key of ``self.<attr>`` is one of the operator's own labels (render/names.labels, the LeaderWorkerSet's)."""
    identity = ", ".join(f"'{k}'" for k in lb.IDENTITY_LABEL_KEYS)
    good = f"!(k in [{identity}]) && !k.matches('{lb.RESERVED_DOMAIN_PATTERN}')"
    return Rule(
        f"self.{attr}.all(k, {good})",
        f"{field} may not set the operator's own labels: {RESERVED_KEYS}",
        f".{attr}",
        message_expression=f"{_lit(field + ' may not set ')} + {_first_bad(attr, good)} + "
        f"{_lit(OWN_LABEL + RESERVED_KEYS)}",
    )


def label_map_rules(field: str, attr: str) -> tuple[Rule, ...]:
    """A map of labels the user adds next to the operator's: valid keys and values, none of the operator's own."""
    return (key_rule(field, attr), value_rule(field, attr), not_reserved_rule(field, attr))


_NOT_OPERATOR_ANNOTATION = f"!k.matches('{lb.OPERATOR_DOMAIN_PATTERN}')"

POD_METADATA_RULES = (
    *label_map_rules("podTemplate.metadata.labels", "labels"),
    key_rule("podTemplate.metadata.annotations", "annotations", "an annotation"),
    Rule(
        f"self.annotations.all(k, {_NOT_OPERATOR_ANNOTATION})",
        f"podTemplate.metadata.annotations may not set keys under {lb.OPERATOR_DOMAIN}/: {OPERATOR_ANNOTATIONS}",
        ".annotations",
        message_expression=f"{_lit('podTemplate.metadata.annotations may not set ')} + "
        f"{_first_bad('annotations', _NOT_OPERATOR_ANNOTATION)} + {_lit(': ' + OPERATOR_ANNOTATIONS)}",
    ),
)

POD_TEMPLATE_RULES = (
    key_rule("podTemplate.nodeSelector", "nodeSelector"),
    value_rule("podTemplate.nodeSelector", "nodeSelector"),
)

TOLERATION_RULES = (
    Rule(
        f"!has(self.key) || !self.key.contains('/') || self.key.matches('{lb.KEY_PREFIX_PATTERN}')",
        "podTemplate.tolerations: the prefix of a toleration key is at most 253 characters",
        ".key",
    ),
    Rule(
        "has(self.key) || (has(self.operator) && self.operator == 'Exists')",
        "podTemplate.tolerations: a toleration without a key needs operator Exists (it then tolerates every taint)",
        ".operator",
    ),
    Rule(
        "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
        "podTemplate.tolerations: a toleration with operator Exists takes no value",
        ".value",
    ),
    Rule(
        "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
        "podTemplate.tolerations: tolerationSeconds needs effect NoExecute",
        ".tolerationSeconds",
    ),
)

_REPEATED = "self.podTemplate.nodeSelector.filter(k, k in self.placement.nodeSelector)[0]"
_MERGED = ": the two are merged into one node selector, so set each node label in one of them"

POD_TEMPLATE_SPEC_RULES = (
    Rule(
        "!has(self.podTemplate) || !has(self.podTemplate.nodeSelector) || "
        "self.podTemplate.nodeSelector.all(k, !(k in self.placement.nodeSelector))",
        f"podTemplate.nodeSelector may not repeat a key of placement.nodeSelector{_MERGED}",
        ".podTemplate.nodeSelector",
        message_expression=f"{_lit('podTemplate.nodeSelector may not repeat ')} + {_REPEATED} + "
        f"{_lit(', a key of placement.nodeSelector' + _MERGED)}",
    ),
)

MONITORING_RULES = label_map_rules("monitoring.labels", "labels")
