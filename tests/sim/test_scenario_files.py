"""Scenario validation (field-path errors) and the draft-TP cost derivation."""

from pathlib import Path

import pytest
import yaml

from specdecode_runtime.contract.goodput import goodput
from specdecode_runtime.contract.scenario import ScenarioError, cost_for_draft_tp, load_scenario, parse_scenario

SCEN = Path(__file__).resolve().parents[2] / "bench" / "scenarios"
SEED = SCEN / "pcie8-seed.yaml"


def seed_data():
    return yaml.safe_load(SEED.read_text())


@pytest.mark.parametrize("path", sorted(SCEN.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_scenarios_load(path):
    s = load_scenario(path)
    assert s.duration > 0 and s.phases


def errors_for(data):
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, "t.yaml")
    return exc.value.errors


def test_acceptance_out_of_range_names_the_path():
    d = seed_data()
    d["phases"][0]["acceptance"][2] = 1.3
    errs = errors_for(d)
    assert any(e.startswith("phases[0].acceptance:") and "acceptance[2]" in e and "0..1" in e for e in errs), errs


def test_unknown_field_and_missing_field():
    d = seed_data()
    d["cost"]["verify"]["perTokn"] = 0.1
    del d["phases"][0]["seconds"]
    errs = errors_for(d)
    assert "cost.verify.perTokn: unknown field" in errs
    assert any(e.startswith("phases[0].seconds:") and "required" in e.lower() for e in errs), errs


def test_batch_distribution_must_sum_to_one():
    d = seed_data()
    d["phases"][0]["batchSize"] = {1: 0.5, 8: 0.4}
    errs = errors_for(d)
    assert any(e.startswith("phases[0].batchSize") and "sum to 1" in e for e in errs), errs


def test_negative_cost_and_bad_type():
    d = seed_data()
    d["cost"]["overhead"] = -1
    d["replicas"] = "two"
    errs = errors_for(d)
    assert any(e.startswith("cost.overhead:") and "greater than or equal to 0" in e for e in errs), errs
    assert any(e.startswith("replicas:") for e in errs), errs


def test_cost_block_must_agree_with_draft_tp():
    d = seed_data()
    d["cost"]["draftStep"]["base"] = 1.0
    errs = errors_for(d)
    assert any("cost.draftStep.base" in e and "draftTp" in e for e in errs), errs


def test_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        load_scenario(bad)
    with pytest.raises(ScenarioError, match="cannot read"):
        load_scenario(tmp_path / "missing.yaml")
    bad.write_text("- a list")
    with pytest.raises(ScenarioError, match="expected a mapping"):
        load_scenario(bad)


def test_seed_calibration_in_the_goodput_model():
    """The calibration docs/scenarios.md explains, checked with the analytic model (no sampling)."""
    s = load_scenario(SEED)
    alphas = s.phases[0].acceptance
    tp8, tp1 = cost_for_draft_tp(s, 8), cost_for_draft_tp(s, 1)
    assert goodput(alphas, s.cycle_cost(), 0, 1) == pytest.approx(90.0, abs=0.5)
    assert goodput(alphas, tp8, 5, 1) == pytest.approx(71.0, abs=1.0)
    best_tp8 = max(goodput(alphas, tp8, k, 1) for k in range(1, 8))
    best_tp1 = max(goodput(alphas, tp1, k, 1) for k in range(1, 8))
    assert 88 < best_tp8 < 94  # a better k alone barely beats baseline on TP8
    assert best_tp1 > 100  # the draft on rank 0 clearly beats baseline
    assert tp1.broadcast > 0 and tp8.broadcast == 0


def test_draft_tp_outside_the_model_is_refused():
    s = load_scenario(SEED)
    with pytest.raises(ValueError, match=r"allowed: \[1, 2, 4, 8\]"):
        cost_for_draft_tp(s, 3)
    d = seed_data()
    del d["draftTp"]
    with pytest.raises(ValueError, match="no draftTp block"):
        cost_for_draft_tp(parse_scenario(d), 1)
