"""`specdecode plan` says which inputs are measured and which are estimated; the PCIe draft-step derivation holds."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specdecode_operator import cli
from specdecode_runtime.contract.scenario import ScenarioError, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "bench/scenarios/pcie8-seed.yaml"
SDD = ROOT / "examples/pcie8-glm5-eagle3.yaml"


def test_plan_prints_the_provenance_of_every_input(capsys):
    assert cli.main(["plan", "-f", str(SDD), "--scenario", str(SEED)]) == 0
    out = capsys.readouterr().out
    assert "derived   draftTp.computeMs" in out and "fitted    draftTp.allReduceUs.8" in out
    assert out.index("inputs of scenario") < out.index("recommendation:")
    assert "draft TP 1 (current) is best" in out and "2 steps" in out


def test_the_derived_draft_step_is_the_bandwidth_scaled_h200_measurement():
    sc = load_scenario(SEED)
    measured_h200_ms, h200_gb, seed_gb = 0.5924, 1.79 * 2**30 / 1e9, 1.7
    derived = measured_h200_ms * (seed_gb / h200_gb) * (4.8 / 1.79)
    assert sc.draft_tp.compute_ms.base == pytest.approx(derived, abs=0.01)
    assert sc.provenance["draftTp.computeMs"].kind == "derived"
    # the TP8 cost block (what the seed measured) still agrees with the re-fitted collective
    assert sc.cost.draft_step.base == pytest.approx(derived / 8 + 4 * sc.draft_tp.all_reduce_us[8] / 1000, rel=0.001)


def test_a_bad_provenance_entry_names_the_field():
    data = load_scenario(SEED).model_dump(by_alias=True)
    data["provenance"] = {"cost.verify": {"kind": "guessed"}}
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data)
    assert "provenance.cost.verify.kind" in str(err.value)


def test_plan_json_carries_the_inputs(capsys):
    assert cli.main(["plan", "-f", str(SDD), "--scenario", str(SEED), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["inputs"]["draftTp.broadcastUs"]["kind"] == "assumed"
