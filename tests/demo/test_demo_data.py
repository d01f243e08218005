"""The demo's embedded defaults stay the documented ones: the seed example and the seed scenario's costs."""

from importlib import resources
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def data(name):
    return yaml.safe_load((resources.files("specdecode_operator.demo.data") / name).read_text())


def test_embedded_sdd_is_the_pcie_example():
    embedded, example = data("sdd.yaml"), yaml.safe_load((ROOT / "examples/pcie8-glm5-eagle3.yaml").read_text())
    assert embedded["metadata"]["namespace"] == "default"
    embedded["metadata"]["namespace"] = example["metadata"]["namespace"]
    assert embedded == example


def test_embedded_scenario_uses_the_calibrated_seed_costs():
    embedded, seed = (
        data("pcie8-seed-shift.yaml"),
        yaml.safe_load((ROOT / "bench/scenarios/pcie8-seed.yaml").read_text()),
    )
    assert embedded["cost"] == seed["cost"] and embedded["draftTp"] == seed["draftTp"]
    assert [p["name"] for p in embedded["phases"]] == ["chat", "code", "chat-again"]
    assert embedded["phases"][0]["acceptance"] == seed["phases"][0]["acceptance"]
