"""The simulated pod's start-up cost probe: biased and noisy like a real probe, never the scenario's ground truth."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from specdecode_operator.tuner.snapshot import parse_metrics
from specdecode_runtime import cost_probe
from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.simulate.engine import SimEngine
from specdecode_runtime.simulate.probe import SimulatedStages, simulated_probe

SCEN = Path(__file__).resolve().parents[2] / "bench" / "scenarios"


def test_probe_is_biased_per_stage_within_bounds_and_differs_per_pod():
    sc = load_scenario(SCEN / "h200-nvlink.yaml")
    truth = sc.cycle_cost()
    a = simulated_probe(truth, range(8), sc.buckets, seed=1, bias=0.15, noise=0.0)
    b = simulated_probe(truth, range(8), sc.buckets, seed=2, bias=0.15, noise=0.0)
    ratios = {}
    for p in a:
        st = SimulatedStages(truth, np.random.default_rng(0), 0.0, 0.0)
        want = st.true_ms(p.stage, p.steps, p.batch)
        if want > 0:
            ratios.setdefault(p.stage, set()).add(round(1000 * p.seconds / want, 9))
    for stage, r in ratios.items():
        assert len(r) == 1, stage  # one systematic factor per stage, the same for all its points
        assert 0.85 <= r.pop() <= 1.15
    assert [p.seconds for p in a] != [p.seconds for p in b]  # another pod, another error
    fitted = cost_probe.fit_profile(a)["8-31"]
    assert fitted.verify_base != pytest.approx(truth.verify_base, rel=1e-3)  # not the ground truth


def test_noise_moves_samples_but_the_median_of_three_stays_close():
    sc = load_scenario(SCEN / "h200-nvlink.yaml")
    pts = simulated_probe(sc.cycle_cost(), [0, 3], sc.buckets, seed=5, bias=0.0, noise=0.05)
    truth = SimulatedStages(sc.cycle_cost(), np.random.default_rng(0), 0.0, 0.0)
    errs = [
        abs(1000 * p.seconds / truth.true_ms(p.stage, p.steps, p.batch) - 1)
        for p in pts
        if truth.true_ms(p.stage, p.steps, p.batch) > 0
    ]
    assert max(errs) < 0.2 and any(e > 1e-4 for e in errs)


def test_bad_probe_settings_are_refused():
    sc = load_scenario(SCEN / "h200-nvlink.yaml")
    with pytest.raises(ValueError, match="bias"):
        SimulatedStages(sc.cycle_cost(), np.random.default_rng(0), bias=1.5)
    with pytest.raises(ValueError, match="noise"):
        SimulatedStages(sc.cycle_cost(), np.random.default_rng(0), noise=-1)


def test_engine_serves_its_probe_and_remeasures_after_a_restart_without_shifting_the_workload():
    sc = load_scenario(SCEN / "h200-nvlink.yaml")
    eng = SimEngine(sc, seed=3)
    plain = SimEngine(sc, seed=3, probe_bias=None)
    for e in (eng, plain):
        e.set_candidates([0, 1, 3, 5])
        e.set_step_table([(1, 3)])
        e.advance(20)
    snap = parse_metrics(eng.metrics_text(), "p", 20)
    assert snap.costs and snap.simulated
    assert parse_metrics(plain.metrics_text(), "p", 20).costs == {}
    assert eng.tokens_total == plain.tokens_total  # the probe draws from its own stream
    before = dict(snap.costs)
    eng.restart(1.0)
    assert parse_metrics(eng.metrics_text(), "p", 21).costs.keys() == before.keys()
    assert parse_metrics(eng.metrics_text(), "p", 21).costs != before
