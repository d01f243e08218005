"""The committed CRD is exactly what the models generate, and it is a valid CustomResourceDefinition."""

from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from specdecode_operator.api import rules
from specdecode_operator.api.crd import crd, crd_yaml

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "crds" / "specdecode.io_specdecodedeployments.yaml"


def test_committed_crd_matches_fresh_generation():
    assert COMMITTED.read_text() == crd_yaml(), (
        "crds/ is stale: run `specdecode crd > crds/specdecode.io_specdecodedeployments.yaml`"
    )


@pytest.mark.parametrize("version", ["1.30", "1.33"])
def test_crd_is_a_valid_customresourcedefinition(version):
    kubernetes_validate.validate(yaml.safe_load(COMMITTED.read_text()), version, strict=True)


def _walk(node, path=""):
    yield path, node
    for key, sub in (node.get("properties") or {}).items():
        yield from _walk(sub, f"{path}.{key}")
    if isinstance(node.get("items"), dict):
        yield from _walk(node["items"], f"{path}[]")


def test_schema_is_structural_and_described():
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in _walk(schema):
        assert not {"$ref", "anyOf", "allOf", "oneOf", "$defs", "title"} & set(node), path
        assert (
            "type" in node or node.get("x-kubernetes-preserve-unknown-fields") or node.get("x-kubernetes-int-or-string")
        ), path
        if path.startswith(".spec") and path.count(".") >= 2 and not path.endswith("[]"):
            assert node.get("description"), f"{path} has no description for kubectl explain"


def test_every_rule_in_rules_module_is_in_the_crd():
    text = yaml.safe_dump(crd())
    all_rules = [
        *rules.NAME_RULES,
        *rules.SPEC_RULES,
        *rules.DRAFT_RULES,
        *rules.SPECULATIVE_RULES,
        *rules.AUTOTUNE_RULES,
        *rules.NCCL_RULES,
        *rules.RUNTIME_RULES,
        *rules.ROLLOUT_RULES,
        *rules.TARGET_RULES,
        *rules.DRAFT_MODEL_RULES,
        *rules.MODEL_CACHE_RULES,
        *rules.HUB_SPEC_RULES,
        *rules.POD_METADATA_RULES,
        *rules.POD_TEMPLATE_RULES,
        *rules.TOLERATION_RULES,
        *rules.POD_TEMPLATE_SPEC_RULES,
        *rules.MONITORING_RULES,
        *rules.ADAPTATION_RULES,
        *rules.ADAPTATION_SPEC_RULES,
    ]
    schema = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    found = [v["rule"] for _, node in _walk(schema) for v in node.get("x-kubernetes-validations", [])]
    assert sorted(found) == sorted(r.rule for r in all_rules)
    assert "x-kubernetes-validations" in text


def test_names_subresources_and_printer_columns():
    version = crd()["spec"]["versions"][0]
    names = crd()["spec"]["names"]
    assert (names["kind"], names["plural"], names["shortNames"]) == (
        "SpecDecodeDeployment",
        "specdecodedeployments",
        ["sdd"],
    )
    assert crd()["spec"]["scope"] == "Namespaced"
    assert version["subresources"]["scale"]["specReplicasPath"] == ".spec.replicas"
    assert [c["name"] for c in version["additionalPrinterColumns"]] == [
        "Ready",
        "Target TP",
        "Draft TP",
        "Mode",
        "Steps",
        "Accept",
        "Tok/s",
        "Draft",
        "Age",
        "Image Available",
    ]
    # kubectl get -o wide: a newer default runtime image the deployment has not adopted
    image = version["additionalPrinterColumns"][-1]
    assert (image["jsonPath"], image["priority"]) == (".status.runtimeImage.available", 1)
    mode = next(c for c in version["additionalPrinterColumns"] if c["name"] == "Mode")
    assert mode["jsonPath"] == ".spec.speculative.autotune.mode"


def test_every_status_field_has_a_description():
    """`kubectl explain sdd.status --recursive` explains every field the operator writes."""
    status = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    missing = []

    def walk(node, path):
        for key, sub in node.get("properties", {}).items():
            if not sub.get("description"):
                missing.append(f"{path}.{key}")
            walk(sub, f"{path}.{key}")
            if isinstance(sub.get("items"), dict):
                walk(sub["items"], f"{path}.{key}[]")

    walk(status, "status")
    assert not missing, missing


def test_defaults_reach_nested_fields():
    spec = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["replicas"]["default"] == 1
    # complete defaults: the API server checks a default against the CEL rules without defaulting inside it
    from specdecode_operator.api.models import Autotune

    autotune = Autotune().model_dump(exclude_none=True)
    assert autotune["mode"] == "Off" and autotune["maxSteps"] == 7
    assert spec["speculative"]["default"] == {"numSteps": 3, "eagleTopK": 1, "autotune": autotune}
    assert spec["speculative"]["properties"]["autotune"]["default"] == autotune
    assert spec["nccl"]["default"] == {"profile": "Auto", "env": {}}
    assert spec["speculative"]["properties"]["numSteps"]["default"] == 3
    assert spec["nccl"]["properties"]["profile"]["enum"] == ["Auto", "PCIe", "NVLink", "None"]
