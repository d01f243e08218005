"""Each CEL rule with an accepting and a rejecting case, evaluated from the CRD's own strings."""

import copy

import pytest

from specdecode_operator.api.validate import InvalidSpec, apply_defaults, parse, validate_object


def base():
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": "demo"},
        "spec": {
            "target": {"model": "/models/t", "tensorParallelSize": 8},
            "draft": {"model": "/models/d", "tensorParallelSize": 1},
        },
    }


def with_(path: str, value):
    obj = base()
    node = obj
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return obj


CASES = [
    # (field to set, good value, bad value, expected path, message fragment)
    ("spec.draft.tensorParallelSize", 2, 16, "spec.draft.tensorParallelSize", "at most target"),
    ("spec.draft.tensorParallelSize", 4, 3, "spec.draft.tensorParallelSize", "divide target"),
    ("spec.draft.ranks", [0], [0, 1], "spec.draft.ranks", "exactly draft.tensorParallelSize"),
    ("spec.draft.ranks", [7], [8], "spec.draft.ranks", "target TP rank"),
    ("spec.target.tensorParallelSize", 16, 12, "spec.target.tensorParallelSize", "multiple of it"),
    (
        "spec.speculative",
        {"numSteps": 3, "numDraftTokens": 4},
        {"numSteps": 3, "numDraftTokens": 5},
        "spec.speculative.numDraftTokens",
        "numSteps + 1",
    ),
    (
        "spec.speculative",
        {"numSteps": 5, "autotune": {"mode": "Live", "maxSteps": 6}},
        {"numSteps": 9, "autotune": {"mode": "Live", "maxSteps": 6}},
        "spec.speculative.numSteps",
        "minSteps..maxSteps",
    ),
    (
        "spec.speculative.autotune",
        {"minSteps": 2, "maxSteps": 4},
        {"minSteps": 5, "maxSteps": 4},
        "spec.speculative.autotune.minSteps",
        "at most maxSteps",
    ),
    (
        "spec.speculative.autotune",
        {"objective": "Latency", "maxInterTokenLatencyMs": 40},
        {"objective": "Latency"},
        "spec.speculative.autotune.maxInterTokenLatencyMs",
        "SLO",
    ),
    ("spec.nccl.env", {"NCCL_MIN_NCHANNELS": "8"}, {"CUDA_VISIBLE_DEVICES": "0"}, "spec.nccl.env", "^NCCL_"),
    ("spec.nccl.env", {"NCCL_NVLS_ENABLE": "0"}, {"NCCL_NVLS_ENABLE": "1"}, "spec.nccl.env", "multicast"),
    (
        "spec.runtime.extraArgs",
        ["--mem-fraction-static", "0.8"],
        ["--speculative-num-steps=9"],
        "spec.runtime.extraArgs",
        "may not set flags",
    ),
    (
        "spec.runtime.extraArgs",
        ["--chunked-prefill-size=4096"],
        ["--tp-size", "4"],
        "spec.runtime.extraArgs",
        "typed fields",
    ),
    (
        "spec.runtime",
        {"port": 8000, "controlPort": 8001},
        {"port": 8000, "controlPort": 8000},
        "spec.runtime.controlPort",
        "must differ",
    ),
    ("spec.target.model", "pvc://models/llama/8b", "s3://bucket/llama", "spec.target.model", "or hf://ORG/NAME"),
    (
        "spec.target.model",
        "pvc://model-store.team/a_b/v-1.0/",
        "pvc://Models/x",
        "spec.target.model",
        "pvc:// takes pvc://CLAIM/PATH",
    ),
    ("spec.target.model", "pvc://models", "pvc://models/../etc", "spec.target.model", "none starting with '.'"),
    (
        "spec.draft.model",
        "hf://org/name@refs/pr/1",
        "hf://just-a-name",
        "spec.draft.model",
        "hf:// takes hf://ORG/NAME[@REVISION]",
    ),
    ("spec.draft.model", "hf://Org-1/name.v2", "gs://b/x", "spec.draft.model", "other schemes"),
    (
        "spec.modelCache",
        {"claimName": "hf-cache"},
        {"claimName": "hf-cache", "sizeLimit": "100Gi"},
        "spec.modelCache.sizeLimit",
        "not both",
    ),
    (
        "spec.rollout",
        {"maxSurge": "25%", "maxUnavailable": 0},
        {"maxSurge": "25", "maxUnavailable": 0},
        "spec.rollout.maxSurge",
        "percentage",
    ),
    (
        "spec.rollout",
        {"maxSurge": 0, "maxUnavailable": "100%"},
        {"maxSurge": 0, "maxUnavailable": "101%"},
        "spec.rollout.maxUnavailable",
        "percentage",
    ),
    (
        "spec.rollout",
        {"maxSurge": 2, "maxUnavailable": 1},
        {"maxSurge": -1, "maxUnavailable": 1},
        "spec.rollout.maxSurge",
        "non-negative",
    ),
    (
        "spec.rollout",
        {"maxSurge": 0, "maxUnavailable": 1},
        {"maxSurge": "0%", "maxUnavailable": 0},
        "spec.rollout.maxUnavailable",
        "may not both be 0",
    ),
    ("metadata.name", "glm5-pcie", "GLM5", "metadata.name", "DNS-1035"),
    ("metadata.name", "a" * 47, "a" * 48, "metadata.name", "at most 47"),
]


@pytest.mark.parametrize("field,good,bad,path,fragment", CASES, ids=[f"{c[0]}={c[2]!r}"[:60] for c in CASES])
def test_rule_accepts_and_rejects(field, good, bad, path, fragment):
    assert validate_object(with_(field, good)) == []
    problems = validate_object(with_(field, bad))
    assert any(p.path == path and fragment in p.message for p in problems), problems


def test_hub_models_need_the_specdecode_launcher():
    stock = with_("spec.runtime", {"launcher": "sglang"})
    stock["spec"]["draft"]["tensorParallelSize"] = 8
    assert validate_object(stock) == []
    stock["spec"]["draft"]["model"] = "hf://org/draft"
    problems = validate_object(stock)
    assert [(p.path, "hf:// models need runtime.launcher specdecode" in p.message) for p in problems] == [
        ("spec.runtime.launcher", True)
    ], problems
    stock["spec"]["draft"]["model"] = "pvc://models/draft"  # a claim is mounted for the stock launcher too
    assert validate_object(stock) == []


def test_draft_ranks_must_be_unique():
    obj = base()
    obj["spec"]["draft"].update(tensorParallelSize=2, ranks=[3, 3])
    assert any(p.path == "spec.draft.ranks" and "repeat" in p.message for p in validate_object(obj))


def test_stock_sglang_launcher_requires_full_tp_draft_and_autotune_off():
    obj = with_("spec.runtime", {"launcher": "sglang"})
    assert any("launcher sglang" in p.message for p in validate_object(obj))
    obj["spec"]["draft"] = {"model": "/d", "tensorParallelSize": 8}
    assert validate_object(obj) == []
    for mode in ("Live", "Rollout"):
        obj["spec"]["speculative"] = {"autotune": {"mode": mode}}
        problems = validate_object(obj)
        assert [p.path for p in problems] == ["spec.speculative.autotune.mode"]
        assert "stock SGLang does not export" in problems[0].message
    obj["spec"]["speculative"] = {"autotune": {"mode": "Off"}}
    assert validate_object(obj) == []


def test_schema_errors_name_the_field_and_what_is_allowed():
    problems = {str(p) for p in validate_object(with_("spec.draft.algorithm", "MEDUSA"))}
    assert (
        "spec.draft.algorithm: Unsupported value: 'MEDUSA': supported values: 'EAGLE', 'EAGLE3', 'NEXTN', 'STANDALONE'"
        in problems
    )
    problems = {str(p) for p in validate_object(with_("spec.target.tensorParallelSize", 0))}
    assert "spec.target.tensorParallelSize: Invalid value: 0: should be greater than or equal to 1" in problems
    problems = {str(p) for p in validate_object(with_("spec.target.tensorParalelSize", 4))}
    assert any(p.startswith("spec.target.tensorParalelSize: unknown field") for p in problems)
    obj = base()
    del obj["spec"]["draft"]["model"]
    assert "spec.draft.model: Required value" in {str(p) for p in validate_object(obj)}


def test_cel_runs_only_after_the_schema_holds():
    # a string TP would make the CEL rules error; the API server reports the schema problem only
    problems = validate_object(with_("spec.target.tensorParallelSize", "8"))
    assert [p.path for p in problems] == ["spec.target.tensorParallelSize"]


def test_defaults_are_applied_like_the_api_server():
    obj = apply_defaults(base())
    assert obj["spec"]["speculative"] == {
        "numSteps": 3,
        "eagleTopK": 1,
        "autotune": {"mode": "Off", "minSteps": 1, "maxSteps": 7, "intervalSeconds": 10, "objective": "Throughput"},
    }
    assert obj["spec"]["placement"]["gpusPerNode"] == 8
    assert obj["spec"]["nccl"] == {"profile": "Auto", "env": {}}


def test_parse_raises_with_every_problem():
    obj = copy.deepcopy(base())
    obj["spec"]["draft"]["tensorParallelSize"] = 3
    obj["spec"]["nccl"] = {"env": {"FOO": "1"}}
    with pytest.raises(InvalidSpec) as err:
        parse(obj)
    assert {p.path for p in err.value.problems} >= {"spec.draft.tensorParallelSize", "spec.nccl.env"}
