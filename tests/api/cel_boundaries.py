"""Boundary tables for every CEL rule of the API (``specdecode_operator.api.rules``): each bound at its value, just
inside and just outside, and each guard on both sides.

A rule whose comparison is off by one (``<=`` written ``<``), whose guard is inverted or whose pattern is loosened
gives a different verdict on one of these documents. Each entry is (id, document, expected) where expected lists
(field path, message fragment) of every problem; an empty list means the document is accepted. The same documents
join the real API server parity corpus (tests/api/cel_corpus.py), so the server confirms each verdict.
"""

from __future__ import annotations

from cel_corpus import base, with_

TP = "spec.draft.tensorParallelSize"
TARGET_TP = "spec.target.tensorParallelSize"
RANKS = "spec.draft.ranks"
SPEC = "spec.speculative"
TOKENS = "spec.speculative.numDraftTokens"
STEPS = "spec.speculative.numSteps"
MIN_STEPS = "spec.speculative.autotune.minSteps"
ITL = "spec.speculative.autotune.maxInterTokenLatencyMs"
MODE = "spec.speculative.autotune.mode"
ENV = "spec.nccl.env"
ARGS = "spec.runtime.extraArgs"
CONTROL_PORT = "spec.runtime.controlPort"
SERVED = "spec.runtime.servedCalibration"
TARGET_MODEL = "spec.target.model"
DRAFT_MODEL = "spec.draft.model"
NAME = "metadata.name"
POD_LABELS = "spec.podTemplate.metadata.labels"
POD_ANNOTATIONS = "spec.podTemplate.metadata.annotations"
POD_NODES = "spec.podTemplate.nodeSelector"
TOLERATIONS = "spec.podTemplate.tolerations"
MONITOR_LABELS = "spec.monitoring.labels"
ADAPTATION = "spec.draft.adaptation"
TRAINING = {"enabled": True, "capture": {"claimName": "traffic"}, "training": {"gpus": 1}}
OWN = "one of the operator's own labels"


def edits(*pairs) -> dict:
    """The base document with each (path, value) set in turn."""
    obj = base()
    for path, value in pairs:
        obj = with_(path, value, obj)
    return obj


def sglang(*pairs) -> dict:
    """launcher sglang with a full-TP draft (the only draft it runs), then ``pairs``."""
    return edits(("spec.runtime", {"launcher": "sglang"}), (TP, 8), *pairs)


def steps(num: int, lo: int, hi: int, mode: str = "Rollout") -> dict:
    return edits((SPEC, {"numSteps": num, "autotune": {"mode": mode, "minSteps": lo, "maxSteps": hi}}))


OK: list = []

# (id, document, [(path, fragment), ...]); base: target TP 8, draft TP 1, gpusPerNode 8 (default)
BOUNDARIES: list[tuple[str, dict, list[tuple[str, str]]]] = [
    # metadata.name: size(self) <= 47, DNS-1035 label
    ("name size 46 (inside)", edits((NAME, "n" * 46)), OK),
    ("name size 47 (at)", edits((NAME, "n" * 47)), OK),
    ("name size 48 (outside)", edits((NAME, "n" * 48)), [(NAME, "at most 47")]),
    ("name one letter", edits((NAME, "n")), OK),
    ("name ends in a digit", edits((NAME, "n-1")), OK),
    ("name starts with a digit", edits((NAME, "1n")), [(NAME, "DNS-1035")]),
    ("name ends with a dash", edits((NAME, "n-")), [(NAME, "DNS-1035")]),
    # draft TP <= target TP (8), and draft TP divides target TP
    ("draft tp 4 (inside)", edits((TP, 4)), OK),
    ("draft tp 8 = target (at)", edits((TP, 8)), OK),
    ("draft tp 16 > target (outside)", edits((TP, 16)), [(TP, "at most target"), (TP, "divide target")]),
    ("draft tp 2 divides 8", edits((TP, 2)), OK),
    ("draft tp 3 does not divide 8", edits((TP, 3)), [(TP, "divide target")]),
    ("draft tp 6 does not divide 8", edits((TP, 6)), [(TP, "divide target")]),
    # size(draft.ranks) == draft TP (2 here)
    ("ranks 1 of tp 2 (below)", edits((TP, 2), (RANKS, [0])), [(RANKS, "exactly draft.tensorParallelSize")]),
    ("ranks 2 of tp 2 (at)", edits((TP, 2), (RANKS, [0, 1])), OK),
    ("ranks 3 of tp 2 (above)", edits((TP, 2), (RANKS, [0, 1, 2])), [(RANKS, "exactly draft.tensorParallelSize")]),
    # every rank < target TP (8)
    ("rank 0 (lowest)", edits((RANKS, [0])), OK),
    ("rank 7 = target tp - 1 (inside)", edits((RANKS, [7])), OK),
    ("rank 8 = target tp (at, refused)", edits((RANKS, [8])), [(RANKS, "target TP rank")]),
    ("rank 8 with target tp 16 (accepted)", edits((TARGET_TP, 16), (RANKS, [8])), OK),
    ("one rank of two out of range", edits((TP, 2), (RANKS, [0, 8])), [(RANKS, "target TP rank")]),
    # ranks do not repeat
    ("ranks distinct", edits((TP, 2), (RANKS, [3, 5])), OK),
    ("ranks repeated", edits((TP, 2), (RANKS, [3, 3])), [(RANKS, "repeat")]),
    ("one rank repeated among distinct ones", edits((TP, 4), (RANKS, [3, 3, 5, 6])), [(RANKS, "repeat")]),
    # target TP <= gpusPerNode (8) or a multiple of it
    ("target tp 7 < gpus per node", edits((TARGET_TP, 7)), OK),
    ("target tp 9 just over gpus per node", edits((TARGET_TP, 9)), [(TARGET_TP, "multiple of it")]),
    ("target tp 16 = 2 nodes", edits((TARGET_TP, 16)), OK),
    ("target tp 15 just under 2 nodes", edits((TARGET_TP, 15)), [(TARGET_TP, "multiple of it")]),
    ("target tp 17 just over 2 nodes", edits((TARGET_TP, 17)), [(TARGET_TP, "multiple of it")]),
    ("target tp 4 with 4 gpus per node", edits((TARGET_TP, 4), ("spec.placement", {"gpusPerNode": 4})), OK),
    (
        "target tp 6 with 4 gpus per node",
        edits((TARGET_TP, 6), ("spec.placement", {"gpusPerNode": 4})),
        [(TARGET_TP, "multiple of it")],
    ),
    # launcher sglang: draft TP == target TP, autotune not Live, no hf:// model
    ("sglang full draft", sglang(), OK),
    ("sglang draft tp 4 of 8", sglang((TP, 4)), [(TP, "launcher sglang")]),
    ("specdecode draft tp 4 of 8", edits(("spec.runtime", {"launcher": "specdecode"}), (TP, 4)), OK),
    (
        "sglang autotune Rollout",
        sglang((SPEC, {"autotune": {"mode": "Rollout"}})),
        [(MODE, "needs speculative.autotune.mode Off")],
    ),
    ("sglang autotune Off", sglang((SPEC, {"autotune": {"mode": "Off"}})), OK),
    (
        "sglang autotune Live",
        sglang((SPEC, {"autotune": {"mode": "Live"}})),
        [(MODE, "needs speculative.autotune.mode Off")],
    ),
    ("specdecode autotune Live", edits((SPEC, {"autotune": {"mode": "Live"}})), OK),
    ("sglang pvc target", sglang((TARGET_MODEL, "pvc://models/t")), OK),
    # spec.rollout: int or percent within 0..100 %, never both 0
    ("rollout surge 100%", edits(("spec.rollout", {"maxSurge": "100%"})), OK),
    (
        "rollout surge 101%",
        edits(("spec.rollout", {"maxSurge": "101%"})),
        [("spec.rollout.maxSurge", "rollout.maxSurge must be a non-negative integer or a percentage")],
    ),
    (
        "rollout unavailable 101%",
        edits(("spec.rollout", {"maxUnavailable": "101%"})),
        [("spec.rollout.maxUnavailable", "rollout.maxUnavailable must be a non-negative integer or a percentage")],
    ),
    ("rollout surge 0 unavailable 1", edits(("spec.rollout", {"maxSurge": 0, "maxUnavailable": 1})), OK),
    (
        "rollout surge 0 unavailable 0",
        edits(("spec.rollout", {"maxSurge": 0, "maxUnavailable": 0})),
        [("spec.rollout.maxUnavailable", "may not both be 0")],
    ),
    (
        "rollout surge 0% unavailable 0%",
        edits(("spec.rollout", {"maxSurge": "0%", "maxUnavailable": "0%"})),
        [("spec.rollout.maxUnavailable", "may not both be 0")],
    ),
    ("sglang hf target", sglang((TARGET_MODEL, "hf://org/t")), [("spec.runtime.launcher", "hf:// models need")]),
    ("sglang hf draft", sglang((DRAFT_MODEL, "hf://org/d")), [("spec.runtime.launcher", "hf:// models need")]),
    ("specdecode hf target", edits((TARGET_MODEL, "hf://org/t")), OK),
    # numDraftTokens == numSteps + 1 when eagleTopK is 1
    ("tokens = steps + 1 (at)", edits((SPEC, {"numSteps": 3, "numDraftTokens": 4})), OK),
    ("tokens = steps (below)", edits((SPEC, {"numSteps": 3, "numDraftTokens": 3})), [(TOKENS, "numSteps + 1")]),
    ("tokens = steps + 2 (above)", edits((SPEC, {"numSteps": 3, "numDraftTokens": 5})), [(TOKENS, "numSteps + 1")]),
    ("tokens free with topk 2", edits((SPEC, {"numSteps": 3, "eagleTopK": 2, "numDraftTokens": 9})), OK),
    ("tokens unset", edits((SPEC, {"numSteps": 3})), OK),
    # minSteps <= numSteps <= maxSteps unless autotune is Off
    ("steps = min (at)", steps(2, 2, 5), OK),
    ("steps = min - 1 (outside)", steps(1, 2, 5), [(STEPS, "minSteps..maxSteps")]),
    ("steps = max (at)", steps(5, 2, 5), OK),
    ("steps = max + 1 (outside)", steps(6, 2, 5), [(STEPS, "minSteps..maxSteps")]),
    ("steps = max + 1 in Live", steps(6, 2, 5, "Live"), [(STEPS, "minSteps..maxSteps")]),
    ("steps = max + 1 with autotune Off", steps(6, 2, 5, "Off"), OK),
    ("steps = min - 1 with autotune Off", steps(1, 2, 5, "Off"), OK),
    # minSteps <= maxSteps
    ("min = max (at)", steps(4, 4, 4), OK),
    ("min = max + 1 (outside)", steps(3, 4, 3, "Off"), [(MIN_STEPS, "at most maxSteps")]),
    # objective Latency needs maxInterTokenLatencyMs
    ("latency with slo", edits((SPEC, {"autotune": {"objective": "Latency", "maxInterTokenLatencyMs": 40}})), OK),
    ("latency without slo", edits((SPEC, {"autotune": {"objective": "Latency"}})), [(ITL, "SLO")]),
    ("throughput without slo", edits((SPEC, {"autotune": {"objective": "Throughput"}})), OK),
    # nccl.env keys ^NCCL_[A-Z0-9_]+$, NCCL_NVLS_ENABLE only '0'
    ("nccl key with one character", edits((ENV, {"NCCL_A": "1"})), OK),
    ("nccl key with digits and underscores", edits((ENV, {"NCCL_P2P_LEVEL_2": "1"})), OK),
    ("nccl key prefix only", edits((ENV, {"NCCL_": "1"})), [(ENV, "^NCCL_")]),
    ("nccl key lowercase", edits((ENV, {"NCCL_a": "1"})), [(ENV, "^NCCL_")]),
    ("nccl key not at start", edits((ENV, {"XNCCL_A": "1"})), [(ENV, "^NCCL_")]),
    ("nccl key with a dash", edits((ENV, {"NCCL_A-B": "1"})), [(ENV, "^NCCL_")]),
    ("nvls off", edits((ENV, {"NCCL_NVLS_ENABLE": "0"})), OK),
    ("nvls on", edits((ENV, {"NCCL_NVLS_ENABLE": "1"})), [(ENV, "multicast")]),
    ("nvls empty", edits((ENV, {"NCCL_NVLS_ENABLE": ""})), [(ENV, "multicast")]),
    # runtime.extraArgs may not set managed flags (whole flag names, with or without =value)
    ("managed flag", edits((ARGS, ["--tp-size"])), [(ARGS, "may not set flags")]),
    ("managed flag with value", edits((ARGS, ["--tp-size=2"])), [(ARGS, "may not set flags")]),
    (
        "managed flag as a later argument",
        edits((ARGS, ["--log-level", "info", "--port"])),
        [(ARGS, "may not set flags")],
    ),
    ("longer flag sharing a managed prefix", edits((ARGS, ["--tp-sizes"])), OK),
    ("single-dash spelling", edits((ARGS, ["-tp-size"])), OK),
    ("managed flag as a value", edits((ARGS, ["--log-level", "tp-size"])), OK),
    (
        "any --speculative-* flag",
        edits((ARGS, ["--speculative-attention-mode=prefill"])),
        [(ARGS, "may not set flags")],
    ),
    ("bare --speculative", edits((ARGS, ["--speculative"])), OK),
    ("--enable-metrics", edits((ARGS, ["--enable-metrics"])), [(ARGS, "may not set flags")]),
    ("--enable-metrics-for-all-schedulers", edits((ARGS, ["--enable-metrics-for-all-schedulers"])), OK),
    # runtime.port != runtime.controlPort
    ("control port = port + 1", edits(("spec.runtime", {"port": 8000, "controlPort": 8001})), OK),
    (
        "control port = port",
        edits(("spec.runtime", {"port": 8000, "controlPort": 8000})),
        [(CONTROL_PORT, "must differ")],
    ),
    # draft.rollout only with the specdecode launcher (a stock SGLang image cannot load a draft in place), and its bounds
    ("draft rollout, specdecode", edits(("spec.draft.rollout", {"intervals": 3, "minAcceptRatio": 0.98})), OK),
    (
        "draft rollout, sglang",
        sglang(("spec.draft.rollout", {"intervals": 2})),
        [("spec.draft.rollout", "draft.rollout needs runtime.launcher specdecode")],
    ),
    # runtime.servedCalibration only with the specdecode launcher (a stock SGLang image has none), and its bounds
    ("served calibration, specdecode", edits((SERVED, {"batches": [1, 4096], "tokens": 8})), OK),
    ("served calibration, 8 batches, 4096 tokens", edits((SERVED, {"batches": list(range(1, 9)), "tokens": 4096})), OK),
    ("served calibration defaults", edits((SERVED, {})), OK),
    ("served calibration, sglang", sglang((SERVED, {"batches": [1]})), [(SERVED, "needs runtime.launcher specdecode")]),
    ("served calibration, no batches", edits((SERVED, {"batches": []})), [(f"{SERVED}.batches", "")]),
    ("served calibration, 9 batches", edits((SERVED, {"batches": list(range(1, 10))})), [(f"{SERVED}.batches", "")]),
    (
        "served calibration, batch 0",
        edits((SERVED, {"batches": [0]})),
        [(f"{SERVED}.batches[0]", "greater than or equal to 1")],
    ),
    (
        "served calibration, batch 4097",
        edits((SERVED, {"batches": [4097]})),
        [(f"{SERVED}.batches[0]", "less than or equal to 4096")],
    ),
    ("served calibration, 7 tokens", edits((SERVED, {"tokens": 7})), [(f"{SERVED}.tokens", "")]),
    ("served calibration, 4097 tokens", edits((SERVED, {"tokens": 4097})), [(f"{SERVED}.tokens", "")]),
    ("served calibration, 0 s", edits((SERVED, {"timeoutSeconds": 0})), [(f"{SERVED}.timeoutSeconds", "")]),
    ("served calibration, 3600 s", edits((SERVED, {"timeoutSeconds": 3600})), OK),
    ("served calibration, 3601 s", edits((SERVED, {"timeoutSeconds": 3601})), [(f"{SERVED}.timeoutSeconds", "")]),
    # model: an absolute path, pvc://CLAIM/PATH or hf://ORG/NAME[@REVISION], nothing else (a hint names the fix)
    ("model absolute path", edits((TARGET_MODEL, "/models/t")), OK),
    ("model root", edits((DRAFT_MODEL, "/")), OK),
    ("model relative path", edits((TARGET_MODEL, "models/t/x")), [(TARGET_MODEL, "a path must be absolute")]),
    ("model one word", edits((DRAFT_MODEL, "relative")), [(DRAFT_MODEL, "e.g. /models/relative")]),
    ("model dot path", edits((TARGET_MODEL, "./models/t")), [(TARGET_MODEL, "a path must be absolute")]),
    (
        "model bare hub id",
        edits((TARGET_MODEL, "meta-llama/Llama-3-8B")),
        [(TARGET_MODEL, "use hf://meta-llama/Llama-3-8B")],
    ),
    ("model bare hub id with revision", edits((DRAFT_MODEL, "org/name@v1")), [(DRAFT_MODEL, "use hf://org/name@v1")]),
    ("model one-slash scheme", edits((TARGET_MODEL, "gs:/bucket/x")), [(TARGET_MODEL, "written SCHEME://")]),
    ("model windows path", edits((TARGET_MODEL, "C:/models/x")), [(TARGET_MODEL, "Linux path inside the pod")]),
    ("model windows backslash", edits((DRAFT_MODEL, "D:\\models\\x")), [(DRAFT_MODEL, "Linux path inside the pod")]),
    ("model s3://", edits((TARGET_MODEL, "s3://b/t")), [(TARGET_MODEL, "other schemes")]),
    ("model file://", edits((DRAFT_MODEL, "file:///d")), [(DRAFT_MODEL, "other schemes")]),
    ("pvc claim only", edits((TARGET_MODEL, "pvc://models")), OK),
    ("pvc claim and path", edits((TARGET_MODEL, "pvc://models/llama/8b")), OK),
    ("pvc uppercase claim", edits((TARGET_MODEL, "pvc://Models/t")), [(TARGET_MODEL, "pvc:// takes")]),
    ("pvc hidden segment", edits((TARGET_MODEL, "pvc://models/.cache")), [(TARGET_MODEL, "pvc:// takes")]),
    ("pvc empty claim", edits((TARGET_MODEL, "pvc:///t")), [(TARGET_MODEL, "pvc:// takes")]),
    ("pvc draft with a hidden segment", edits((DRAFT_MODEL, "pvc://models/..")), [(DRAFT_MODEL, "pvc:// takes")]),
    ("hf target name only", edits((TARGET_MODEL, "hf://name")), [(TARGET_MODEL, "hf:// takes")]),
    ("hf org and name", edits((DRAFT_MODEL, "hf://org/name")), OK),
    ("hf with revision", edits((DRAFT_MODEL, "hf://org/name@v1.0")), OK),
    ("hf name only", edits((DRAFT_MODEL, "hf://name")), [(DRAFT_MODEL, "hf:// takes")]),
    ("hf empty revision", edits((DRAFT_MODEL, "hf://org/name@")), [(DRAFT_MODEL, "hf:// takes")]),
    # modelCache: claimName or sizeLimit, not both
    ("cache claim", edits(("spec.modelCache", {"claimName": "hf-cache"})), OK),
    ("cache size", edits(("spec.modelCache", {"sizeLimit": "10Gi"})), OK),
    (
        "cache both",
        edits(("spec.modelCache", {"claimName": "hf-cache", "sizeLimit": "10Gi"})),
        [("spec.modelCache.sizeLimit", "not both")],
    ),
    # podTemplate.metadata.labels: label keys (name <= 63, prefix <= 253) and values, none of the operator's own
    ("pod label name 63 (at)", edits((POD_LABELS, {"a" * 63: "v"})), OK),
    ("pod label name 64 (outside)", edits((POD_LABELS, {"a" * 64: "v"})), [(POD_LABELS, "is not a label key")]),
    ("pod label prefix 253 (at)", edits((POD_LABELS, {"a" * 253 + "/k": "v"})), OK),
    ("pod label prefix 254", edits((POD_LABELS, {"a" * 254 + "/k": "v"})), [(POD_LABELS, "is not a label key")]),
    ("pod label empty name", edits((POD_LABELS, {"example.com/": "v"})), [(POD_LABELS, "is not a label key")]),
    ("pod label value 63 (at)", edits((POD_LABELS, {"k": "v" * 63})), OK),
    ("pod label value 64 (outside)", edits((POD_LABELS, {"k": "v" * 64})), [(f"{POD_LABELS}.k", "too long")]),
    ("pod label value empty", edits((POD_LABELS, {"k": ""})), OK),
    ("pod label value ends with a dot", edits((POD_LABELS, {"k": "v."})), [(POD_LABELS, "is not a label value")]),
    ("pod label part-of", edits((POD_LABELS, {"app.kubernetes.io/part-of": "x"})), OK),
    ("pod label instance", edits((POD_LABELS, {"app.kubernetes.io/instance": "x"})), [(POD_LABELS, OWN)]),
    ("pod label under specdecode.io", edits((POD_LABELS, {"a.specdecode.io/x": "1"})), [(POD_LABELS, OWN)]),
    ("pod label ends like specdecode.io", edits((POD_LABELS, {"notspecdecode.io/x": "1"})), OK),
    ("pod label specdecode.io as a subdomain", edits((POD_LABELS, {"specdecode.io.example.com/x": "1"})), OK),
    ("pod label lws index", edits((POD_LABELS, {"leaderworkerset.sigs.k8s.io/group-index": "0"})), [(POD_LABELS, OWN)]),
    # podTemplate.metadata.annotations: annotation keys, none under the operator's domain (LWS keys are allowed)
    ("pod annotation any value", edits((POD_ANNOTATIONS, {"example.com/a": " any: text /"})), OK),
    ("pod annotation lws domain", edits((POD_ANNOTATIONS, {"leaderworkerset.sigs.k8s.io/x": "1"})), OK),
    (
        "pod annotation config hash",
        edits((POD_ANNOTATIONS, {"specdecode.io/config-hash": "x"})),
        [(POD_ANNOTATIONS, "operator's own annotations")],
    ),
    ("pod annotation bad key", edits((POD_ANNOTATIONS, {"a:b": "x"})), [(POD_ANNOTATIONS, "not an annotation key")]),
    # podTemplate.nodeSelector: label keys and values, and no key of placement.nodeSelector
    ("pod node selector", edits((POD_NODES, {"example.com/pool": "a"})), OK),
    ("pod node selector bad key", edits((POD_NODES, {"a b": "x"})), [(POD_NODES, "is not a label key")]),
    ("pod node selector bad value", edits((POD_NODES, {"k": "a b"})), [(POD_NODES, "is not a label value")]),
    (
        "pod node selector repeats placement",
        edits(("spec.placement", {"nodeSelector": {"pool": "a"}}), (POD_NODES, {"pool": "a"})),
        [(POD_NODES, "may not repeat pool")],
    ),
    (
        "pod node selector beside placement",
        edits(("spec.placement", {"nodeSelector": {"pool": "a"}}), (POD_NODES, {"zone": "b"})),
        OK,
    ),
    # podTemplate.tolerations: as core/v1 validates them
    ("toleration key prefix 253", edits((TOLERATIONS, [{"key": "a" * 253 + "/k", "operator": "Exists"}])), OK),
    (
        "toleration key prefix 254",
        edits((TOLERATIONS, [{"key": "a" * 254 + "/k", "operator": "Exists"}])),
        [(f"{TOLERATIONS}[0].key", "at most 253")],
    ),
    ("toleration of every taint", edits((TOLERATIONS, [{"operator": "Exists"}])), OK),
    (
        "toleration without a key, Equal",
        edits((TOLERATIONS, [{"operator": "Equal"}])),
        [(f"{TOLERATIONS}[0].operator", "needs operator Exists")],
    ),
    (
        "toleration without key or operator",
        edits((TOLERATIONS, [{"effect": "NoSchedule"}])),
        [(f"{TOLERATIONS}[0].operator", "needs operator Exists")],
    ),
    ("toleration Exists with empty value", edits((TOLERATIONS, [{"key": "k", "operator": "Exists", "value": ""}])), OK),
    (
        "toleration Exists with a value",
        edits((TOLERATIONS, [{"key": "k", "operator": "Exists", "value": "v"}])),
        [(f"{TOLERATIONS}[0].value", "takes no value")],
    ),
    (
        "toleration seconds NoExecute",
        edits((TOLERATIONS, [{"key": "k", "effect": "NoExecute", "tolerationSeconds": 0}])),
        OK,
    ),
    (
        "toleration seconds without effect",
        edits((TOLERATIONS, [{"key": "k", "tolerationSeconds": 0}])),
        [(f"{TOLERATIONS}[0].tolerationSeconds", "needs effect NoExecute")],
    ),
    # monitoring.labels: as pod labels
    ("monitor label release", edits((MONITOR_LABELS, {"release": "kps"})), OK),
    ("monitor label component", edits((MONITOR_LABELS, {"app.kubernetes.io/component": "x"})), [(MONITOR_LABELS, OWN)]),
    ("monitor label bad key", edits((MONITOR_LABELS, {"-release": "kps"})), [(MONITOR_LABELS, "is not a label key")]),
    (
        "monitor label bad value",
        edits((MONITOR_LABELS, {"release": "-kps"})),
        [(MONITOR_LABELS, "is not a label value")],
    ),
    # draft.adaptation: a claim when enabled; the specdecode launcher
    ("adaptation off without a claim", edits((ADAPTATION, {"enabled": False})), OK),
    ("adaptation on with a claim", edits((ADAPTATION, {"enabled": True, "capture": {"claimName": "traffic"}})), OK),
    (
        "adaptation on without a claim",
        edits((ADAPTATION, {"enabled": True})),
        [(f"{ADAPTATION}.capture.claimName", "claimName is required when draft.adaptation.enabled")],
    ),
    (
        "adaptation on with launcher sglang",
        sglang((ADAPTATION, {"enabled": True, "capture": {"claimName": "traffic"}})),
        [(f"{ADAPTATION}.enabled", "needs runtime.launcher specdecode")],
    ),
    ("adaptation off with launcher sglang", sglang((ADAPTATION, {"capture": {"claimName": "traffic"}})), OK),
    # draft.adaptation.training: only with the capture on; models the Job can mount (no hub fetch)
    ("training with the capture on", edits((ADAPTATION, TRAINING)), OK),
    (
        "training with the capture off",
        edits((ADAPTATION, {**TRAINING, "enabled": False})),
        [(f"{ADAPTATION}.training", "training needs draft.adaptation.enabled")],
    ),
    ("capture on without training", edits((ADAPTATION, {"enabled": True, "capture": {"claimName": "traffic"}})), OK),
    ("training with pvc:// models", edits((ADAPTATION, TRAINING), (DRAFT_MODEL, "pvc://drafts/eagle3")), OK),
    (
        "training with an hf:// draft",
        edits((ADAPTATION, TRAINING), (DRAFT_MODEL, "hf://org/eagle3")),
        [("spec.draft.adaptation.training", "as a path or pvc://CLAIM/PATH")],
    ),
    (
        "training with an hf:// target",
        edits((ADAPTATION, TRAINING), (TARGET_MODEL, "hf://org/target")),
        [("spec.draft.adaptation.training", "as a path or pvc://CLAIM/PATH")],
    ),
    ("an hf:// draft without training", edits((ADAPTATION, {"enabled": False}), (DRAFT_MODEL, "hf://org/e")), OK),
]


def boundary_cases() -> list[tuple[str, dict]]:
    """The table's documents for the parity corpus (the API server judges them there)."""
    return [(f"boundary:{i}", doc) for i, doc, _ in BOUNDARIES]
