"""A corpus of SpecDecodeDeployments for admission parity: the examples, each CEL rule's accepting and refusing
case, schema mistakes (types, bounds, enums, unknown and missing fields) and the property tests' generator.

Every entry is (id, document); what to expect is not stated here: the real API server is the judge, and
``specdecode validate`` must agree with it.
"""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def base(name: str = "parity") -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name},
        "spec": {
            "target": {"model": "/models/t", "tensorParallelSize": 8},
            "draft": {"model": "/models/d", "tensorParallelSize": 1},
        },
    }


def with_(path: str, value, obj: dict | None = None) -> dict:
    obj = copy.deepcopy(obj or base())
    node = obj
    keys = path.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return obj


def without(path: str) -> dict:
    obj = base()
    node = obj
    keys = path.split(".")
    for key in keys[:-1]:
        node = node[key]
    del node[keys[-1]]
    return obj


def examples() -> list[tuple[str, dict]]:
    out = []
    for f in sorted((ROOT / "examples").glob("*.yaml")):
        for i, doc in enumerate(d for d in yaml.safe_load_all(f.read_text()) if d):
            out.append((f"example:{f.stem}:{i}", doc))
    return out


def rule_cases() -> list[tuple[str, dict]]:
    """Both sides of every CEL rule (tests/api/test_cel_rules.py's table, plus the rules it tests on their own)."""
    from test_cel_rules import CASES

    out = []
    for field, good, bad, _path, _fragment in CASES:
        out.append((f"rule-ok:{field}={good!r}"[:90], with_(field, good)))
        out.append((f"rule-bad:{field}={bad!r}"[:90], with_(field, bad)))
    two = with_("spec.draft", {"model": "/d", "tensorParallelSize": 2, "ranks": [3, 3]})
    out.append(("rule-bad:draft.ranks repeated", two))
    out.append(("rule-ok:draft.ranks distinct", with_("spec.draft.ranks", [3, 5], two)))
    sglang = with_("spec.runtime", {"launcher": "sglang"})
    out.append(("rule-bad:launcher sglang with split draft", sglang))
    full = with_("spec.draft", {"model": "/d", "tensorParallelSize": 8}, sglang)
    out.append(("rule-ok:launcher sglang with full draft", full))
    out.append(("rule-bad:launcher sglang with Live", with_("spec.speculative", {"autotune": {"mode": "Live"}}, full)))
    out.append(
        ("rule-bad:launcher sglang with Rollout", with_("spec.speculative", {"autotune": {"mode": "Rollout"}}, full))
    )
    out.append(("rule-bad:launcher sglang with an hf:// model", with_("spec.target.model", "hf://org/t", full)))
    out.append(("rule-ok:launcher sglang with a pvc:// model", with_("spec.target.model", "pvc://models/t", full)))
    out.append(
        ("rule-ok:launcher sglang with autotune Off", with_("spec.speculative", {"autotune": {"mode": "Off"}}, full))
    )
    out.append(("rule-bad:draft tp 0 (division)", with_("spec.draft.tensorParallelSize", 0)))
    out.append(("rule-bad:nccl key lowercase", with_("spec.nccl.env", {"NCCL_algo": "Ring"})))
    out.append(
        (
            "rule-bad:tp 24 over 16 gpus per node",
            with_("spec.placement", {"gpusPerNode": 16}, with_("spec.target.tensorParallelSize", 24)),
        )
    )
    out.append(
        (
            "rule-ok:tp 32 over 16 gpus per node",
            with_("spec.placement", {"gpusPerNode": 16}, with_("spec.target.tensorParallelSize", 32)),
        )
    )
    out.append(
        (
            "rule-bad:two rules at once",
            with_("spec.runtime", {"port": 8000, "controlPort": 8000}, with_("spec.draft.tensorParallelSize", 3)),
        )
    )
    return out


def schema_cases() -> list[tuple[str, dict]]:
    """Mistakes the OpenAPI schema catches before any CEL rule runs."""
    return [
        ("schema:enum algorithm", with_("spec.draft.algorithm", "MEDUSA")),
        ("schema:enum autotune mode", with_("spec.speculative.autotune.mode", "Sometimes")),
        ("schema:minimum tp", with_("spec.target.tensorParallelSize", 0)),
        ("schema:maximum tp", with_("spec.target.tensorParallelSize", 65)),
        ("schema:maximum port", with_("spec.runtime.port", 70000)),
        ("schema:minimum replicas", with_("spec.replicas", -1)),
        ("schema:type tp string", with_("spec.target.tensorParallelSize", "8")),
        ("schema:type replicas bool", with_("spec.replicas", True)),
        (
            "schema:exclusive minimum itl",
            with_("spec.speculative.autotune", {"objective": "Latency", "maxInterTokenLatencyMs": 0}),
        ),
        ("schema:maxLength model", with_("spec.target.model", "m" * 1025)),
        ("schema:minLength model", with_("spec.target.model", "")),
        ("schema:pattern shmSize", with_("spec.runtime.shmSize", "lots")),
        ("schema:maxItems extraArgs", with_("spec.runtime.extraArgs", ["--x"] * 129)),
        ("schema:maxLength extraArgs item", with_("spec.runtime.extraArgs", ["--x=" + "a" * 1100])),
        ("schema:maxProperties nccl env", with_("spec.nccl.env", {f"NCCL_K{i}": "1" for i in range(65)})),
        ("schema:maxLength nccl env value", with_("spec.nccl.env", {"NCCL_ALGO": "r" * 4097})),
        ("schema:draft rank above 63", with_("spec.draft.ranks", [64])),
        ("schema:missing draft model", without("spec.draft.model")),
        ("schema:missing target", without("spec.target")),
        ("schema:missing spec", {k: v for k, v in base().items() if k != "spec"}),
        ("schema:unknown field", with_("spec.target.tensorParalelSize", 4)),
        ("schema:unknown field at spec", with_("spec.replica", 2)),
        ("schema:preserved tolerations", with_("spec.placement.tolerations", [{"key": "k", "operator": "Exists"}])),
        ("schema:preserved resources", with_("spec.runtime.resources", {"limits": {"memory": "1Gi"}})),
        ("schema:pattern modelCache claimName", with_("spec.modelCache.claimName", "Bad_Name")),
        ("schema:pattern modelCache sizeLimit", with_("spec.modelCache.sizeLimit", "lots")),
        ("schema:modelCache token without a Secret name", with_("spec.modelCache.tokenSecretRef", {"key": "t"})),
        ("name:uppercase", with_("metadata.name", "Parity")),
        ("name:48 characters", with_("metadata.name", "p" * 48)),
        ("name:47 characters", with_("metadata.name", "p" * 47)),
        ("name:leading digit", with_("metadata.name", "1parity")),
        ("name:dot", with_("metadata.name", "par.ity")),
    ]


def corpus() -> list[tuple[str, dict]]:
    from cel_boundaries import boundary_cases
    from test_pod_template import corpus_documents

    return examples() + rule_cases() + schema_cases() + boundary_cases() + corpus_documents()
