import pytest
from helpers import FakePod

from specdecode_operator.tuner.estimator import Estimator, decay_extrapolate, wilson
from specdecode_runtime.contract.goodput import CycleCost

ALPHAS = [0.85, 0.7, 0.6, 0.5]


def test_recovers_known_per_position_acceptance_from_counters():
    pod, est = FakePod(seed=1), Estimator(min_attempts=100)
    est.observe([pod.snapshot(0.0)])
    pod.run(2000, batch=2, steps=4, alphas=ALPHAS)
    rep = est.observe([pod.snapshot(10.0)])
    assert rep.pods_used == ["pod-0"] and rep.tokens_per_s > 0
    acc = est.acceptance("2-7", 4)
    assert acc.observed == 4
    for j, true in enumerate(ALPHAS):
        assert acc.alphas[j] == pytest.approx(true, abs=0.04)
        assert acc.lower[j] <= true <= acc.upper[j]
    assert est.batch_mean("2-7") == pytest.approx(2.0)


def test_rates_are_windowed_not_lifetime():
    pod, est = FakePod(seed=2), Estimator(min_attempts=100, window_intervals=2)
    est.observe([pod.snapshot(0.0)])
    pod.run(1500, 1, 3, [0.9])
    est.observe([pod.snapshot(10.0)])
    pod.run(1500, 1, 3, [0.4])  # a phase change: the window restarts instead of averaging both worlds
    rep = est.observe([pod.snapshot(20.0)])
    assert rep.changed_buckets == ["1"]
    assert est.acceptance("1", 3).alphas[0] == pytest.approx(0.4, abs=0.05)


def test_censored_positions_are_extrapolated_not_invented():
    pod, est = FakePod(seed=3), Estimator(min_attempts=100)
    est.observe([pod.snapshot(0.0)])
    pod.run(3000, 1, 3, [0.9, 0.8, 0.7])
    est.observe([pod.snapshot(10.0)])
    acc = est.acceptance("1", 7)
    assert acc.observed == 3
    assert all(a <= acc.alphas[2] + 1e-9 for a in acc.alphas[3:])  # fitted decay never rises
    assert acc.alphas[6] < acc.alphas[3]
    assert acc.attempts[3:] == [0.0] * 4


def test_counter_reset_skips_the_interval_and_rebases():
    pod, est = FakePod(seed=4), Estimator(min_attempts=10)
    est.observe([pod.snapshot(0.0)])
    pod.run(100, 1, 2, [0.7])
    est.observe([pod.snapshot(10.0)])
    fresh = FakePod(seed=5)  # the process restarted: counters start from zero again
    fresh.run(10, 1, 2, [0.7])
    rep = est.observe([fresh.snapshot(20.0)])
    assert rep.resets == ["pod-0"] and not rep.usable
    fresh.run(50, 1, 2, [0.7])
    rep = est.observe([fresh.snapshot(30.0)])
    assert rep.usable and est.last_interval["1"].cycles == 50


def test_cost_scales_profile_to_measured_phases():
    pod, est = FakePod(seed=6), Estimator(prior_weight_cycles=1.0)
    profile = CycleCost(10, 0.0, 1.0, 0, 1.0, 0, 0.5)
    est.observe([pod.snapshot(0.0)])
    pod.run(500, 1, 3, [0.7], phase_ms={"verify": 20.0, "draft": 3.0, "draft_extend": 1.0, "other": 0.5})
    est.observe([pod.snapshot(10.0)])
    cost, source = est.cost("1", profile)
    assert source == "profile-scaled"
    assert cost.verify_ms(3, 1) == pytest.approx(20.0, rel=0.01)  # measured twice the profile
    assert cost.draft_step_ms(1) == pytest.approx(1.0, rel=0.01)
    none_cost, src = est.cost("1", None)
    assert src == "measured" and none_cost.cycle_ms(3, 1) == pytest.approx(24.5, rel=0.01)


def test_wilson_and_decay_helpers():
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0.2 < hi < 0.35
    assert decay_extrapolate([0.9, 0.81], [100, 100], 4)[3] == pytest.approx(0.9**4, rel=1e-6)
    assert decay_extrapolate([0.5, 0.9], [100, 100], 3)[2] == pytest.approx(0.9)  # rising fits are capped at flat


def test_latest_alphas_are_the_last_interval_alone_with_the_window_where_it_attempted_too_little():
    from specdecode_operator.tuner.estimator import BucketDelta

    est = Estimator(min_attempts=50)
    fallback = [0.9, 0.8, 0.7]
    assert est.latest_alphas("1", fallback) == fallback  # no interval yet
    est.last_interval["1"] = BucketDelta(
        steps=2, cycles=100, requests=100, attempts={1: 100, 2: 60, 3: 10}, accepted={1: 50, 2: 30, 3: 10}
    )
    # positions 1 and 2 from the interval's own counts; position 3 (10 attempts < 50) from the window
    assert est.latest_alphas("1", fallback) == [0.5, 0.5, 0.7]
    assert fallback == [0.9, 0.8, 0.7]  # the caller's curve is not modified
