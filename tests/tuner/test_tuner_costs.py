"""Where the tuner's cost model comes from: the pods' start-up probe, refined online; an override; or nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FakePod

from specdecode_operator import cli
from specdecode_operator.bench import tuner_benchmark
from specdecode_operator.tuner.estimator import Estimator
from specdecode_operator.tuner.policy import BucketState, PolicyConfig, choose
from specdecode_operator.tuner.snapshot import parse_metrics
from specdecode_operator.tuner.tuner import Tuner
from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.simulate.engine import SimEngine

SCEN = Path(__file__).resolve().parents[2] / "bench" / "scenarios"


def drive(tuner: Tuner, eng: SimEngine, intervals: int, every: float = 10.0):
    d = None
    for _ in range(intervals):
        snaps = [parse_metrics(eng.metrics_text(), "sim-0", eng.now, costs=tuner.wants_costs("sim-0"))]
        d = tuner.step(eng.now, snaps)
        if d.changed:
            eng.set_step_table(d.table)
        eng.advance(every)
    return d


def setup(profile=None, probe_bias=0.15):
    sc = load_scenario(SCEN / "h200-nvlink.yaml")
    cfg = tuner_benchmark.our_config(sc, "Live", 10.0, 1, 7, 3)
    eng = SimEngine(sc, seed=4, probe_bias=probe_bias)
    eng.set_candidates(cfg.policy.candidates)
    eng.set_step_table([(1, 3)])
    return sc, eng, Tuner(cfg, profile=profile)


def test_measured_profile_is_refined_online_and_shown_in_status():
    sc, eng, tuner = setup()
    drive(tuner, eng, 1)
    assert tuner.measured and set(tuner.measured) >= {"1", "2-7", "8-31"}
    raw = dict(tuner.measured)
    d = drive(tuner, eng, 8)
    st = d.status
    assert st.costSource == "RefinedOnline"
    entries = {e.bucket: e for e in st.costProfile}
    assert set(entries) == {"1", "2-7", "8-31"}
    truth = sc.cycle_cost()
    for label, e in entries.items():
        k = tuner.states[label].steps
        assert e.source == "RefinedOnline" and k in e.observedSteps
        # where the bucket runs, the refined cost is closer to the truth than the probe alone
        want = truth.cycle_ms(k, e.batch)
        assert abs(e.cycleMs - want) <= abs(raw[label].cycle_ms(k, e.batch) - want) + 1e-6
        assert e.cycleMs == pytest.approx(want, rel=0.03)
    dumped = st.model_dump(exclude_none=True)
    assert dumped["costSource"] == "RefinedOnline" and dumped["costProfile"][0]["bucket"]


def test_override_and_no_profile_sources():
    sc, eng, tuner = setup(profile=None, probe_bias=None)
    d = drive(tuner, eng, 4)
    assert d.status.costSource == "PhaseAverages" and not tuner.measured
    sc, eng, tuner = setup(profile=load_scenario(SCEN / "h200-nvlink.yaml").cycle_cost())
    d = drive(tuner, eng, 4)
    assert d.status.costSource == "Override"
    assert {e.source for e in d.status.costProfile} == {"Override"}


def test_costs_are_parsed_once_per_pod_and_again_after_a_restart():
    _, eng, tuner = setup()
    assert tuner.wants_costs("sim-0")
    drive(tuner, eng, 2)
    assert not tuner.wants_costs("sim-0")
    first = dict(tuner._pod_costs["sim-0"])
    eng.restart(1.0)
    drive(tuner, eng, 1)  # the reset is seen: the next scrape reads the new probe
    assert tuner.wants_costs("sim-0")
    drive(tuner, eng, 1)
    assert tuner._pod_costs["sim-0"] != first and not tuner.wants_costs("sim-0")


def test_benchmark_hands_ours_only_what_the_pod_serves():
    sc = load_scenario(SCEN / "pcie8-seed.yaml")
    _, tuner = tuner_benchmark.run_ours(sc, 1, "Live", 10.0, 1, 7, 3)
    assert tuner.profile is None and tuner.measured  # the pod's probe, not sc.cycle_cost()
    _, exact = tuner_benchmark.run_ours(sc, 1, "Live", 10.0, 1, 7, 3, profile="exact")
    assert exact.profile == sc.cycle_cost()
    with pytest.raises(ValueError, match="profile"):
        tuner_benchmark.run_ours(sc, 1, "Live", 10.0, 1, 7, 3, profile="oracle")


def test_workload_flipping_every_interval_is_averaged_not_chased():
    est = Estimator()
    pod = FakePod(seed=1)
    hi, lo = [0.95] * 7, [0.35] * 7
    est.observe([pod.snapshot(0)])
    changed = []
    for i in range(1, 9):
        pod.run(400, 1, 5, hi if i % 2 else lo)
        changed.append(bool(est.observe([pod.snapshot(i * 10.0)]).changed_buckets))
    # the first flip is a new phase; flips every interval after that are one mixed workload
    assert changed[1] is True and not any(changed[2:])
    assert est.samples("1") >= 4 * 400


def test_a_detected_workload_change_may_climb_two_positions():
    from specdecode_operator.tuner.estimator import Acceptance
    from specdecode_runtime.contract.goodput import CycleCost

    cost = CycleCost(8.0, 0.04, 0.2, 0.0, 0.2, 0.0, 0.3)
    acc = Acceptance(alphas=[0.95] * 8, lower=[0.93] * 8, upper=[0.97] * 8, attempts=[1e4] * 3 + [0] * 5, observed=3)
    cfg = PolicyConfig(cooldown_s=0)
    calm = choose(cfg, BucketState(steps=3), acc, cost, 1, 1000, now=100)
    new_world = choose(cfg, BucketState(steps=3), acc, cost, 1, 1000, now=100, workload_changed=True)
    assert (calm.steps, new_world.steps) == (4, 5)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--probe-bias", "1.5"], "--probe-bias"),
        (["--probe-noise", "-0.1"], "--probe-noise"),
        (["--interval", "2"], "--interval"),
    ],
)
def test_bench_refuses_bad_settings_with_exit_2(args, needle, capsys):
    assert cli.main(["bench", "tuner", "--scenarios", str(SCEN / "pcie8-seed.yaml"), *args]) == 2
    assert needle in capsys.readouterr().err
