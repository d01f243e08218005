import math

import pytest

from specdecode_runtime.goodput import CycleCost
from specdecode_operator.tuner.estimator import Acceptance
from specdecode_operator.tuner.policy import BucketState, PolicyConfig, choose

COST = CycleCost(10, 0.0, 0.5, 0, 0.5, 0, 0.5)


def acc(alphas, observed=None):
    n = len(alphas)
    return Acceptance(list(alphas), [a - 0.02 for a in alphas], [min(1, a + 0.02) for a in alphas], [1e4] * n,
                      n if observed is None else observed)


HIGH = acc([0.95] * 8)


def test_respects_bounds_and_captured_candidates():
    cfg = PolicyConfig(min_steps=2, max_steps=4, candidates=(0, 1, 2, 3, 4, 7))
    ch = choose(cfg, BucketState(steps=3), HIGH, COST, 1, 1e4, 100.0)
    assert ch.steps == 4  # 7 would be better but is out of bounds; 1 is below minSteps
    assert cfg.allowed() == [0, 2, 3, 4]


def test_minimum_samples_blocks_decisions():
    ch = choose(PolicyConfig(min_samples=100), BucketState(steps=1), HIGH, COST, 1, 10, 100.0)
    assert ch.kind == "wait" and ch.steps == 1


def test_hysteresis_holds_small_predicted_gains():
    a = acc([0.6] * 8)
    g2 = choose(PolicyConfig(hysteresis=0.0), BucketState(steps=2), a, COST, 1, 1e4, 100.0)
    best = g2.steps
    assert best != 2
    gain = g2.predicted_gain
    ch = choose(PolicyConfig(hysteresis=gain + 0.01), BucketState(steps=2), a, COST, 1, 1e4, 100.0)
    assert ch.steps == 2 and ch.kind == "hold" and "hysteresis" in ch.reason


def test_cooldown_blocks_a_second_change():
    cfg = PolicyConfig(cooldown_s=60)
    st = BucketState(steps=1)
    assert choose(cfg, st, HIGH, COST, 1, 1e4, 100.0).kind == "switch"
    st.steps = 2  # pretend we moved (one step past the observed depth at most)
    st.pending_rollback = None
    ch = choose(cfg, st, HIGH, COST, 1, 1e4, 130.0)
    assert ch.kind == "hold" and "cooldown" in ch.reason
    assert choose(cfg, st, HIGH, COST, 1, 1e4, 161.0).kind == "switch"


def test_censoring_moves_at_most_one_past_observed_depth():
    a = acc([0.95] * 8, observed=3)
    ch = choose(PolicyConfig(), BucketState(steps=3), a, COST, 1, 1e4, 100.0)
    assert ch.steps == 4


def test_rollback_when_measured_goodput_drops_beyond_noise():
    cfg = PolicyConfig(cooldown_s=0, rollback_margin=0.03)
    st = BucketState(steps=3)
    ch = choose(cfg, st, HIGH, COST, 1, 1e4, 100.0, measured_goodput=200.0)
    assert ch.kind == "switch"
    st.steps = ch.steps
    back = choose(cfg, st, HIGH, COST, 1, 1e4, 110.0, measured_goodput=150.0)
    assert back.kind == "rollback" and back.steps == 3
    assert ch.steps in st.blocked  # the failed k is not retried at once
    st.steps = 3
    again = choose(cfg, st, HIGH, COST, 1, 1e4, 120.0, measured_goodput=150.0)
    assert again.steps != ch.steps


def test_no_rollback_within_noise_or_when_the_workload_changed():
    cfg = PolicyConfig(cooldown_s=1e9, rollback_margin=0.03)
    for measured, changed in ((198.0, False), (100.0, True)):
        st = BucketState(steps=4, pending_rollback=(3, 200.0, 0.9), last_change=100.0)
        ch = choose(cfg, st, HIGH, COST, 1, 1e4, 110.0, measured_goodput=measured, workload_changed=changed)
        assert ch.kind != "rollback"


def test_latency_objective_switches_on_slo_violation_even_within_hysteresis():
    """At a fixed batch size ITL = batch/goodput, so both objectives rank k alike; what Latency adds is that an SLO
    violation is acted on even when the throughput gain is inside the hysteresis band."""
    from specdecode_runtime.goodput import inter_token_latency_ms

    cost = CycleCost(10, 0.5, 1.0, 0, 1.0, 0, 0.5)
    a = acc([0.8] * 8)
    itl = {k: inter_token_latency_ms(a.alphas, cost, k, 8) for k in range(8)}
    best = min(itl, key=itl.get)
    cur = next(k for k in range(8) if k != best and itl[k] / itl[best] - 1 < 0.05)  # a near-optimal neighbour
    slo = (itl[best] + itl[cur]) / 2
    tp = choose(PolicyConfig(hysteresis=0.05), BucketState(steps=cur), a, cost, 8, 1e4, 100.0)
    lat = choose(PolicyConfig(hysteresis=0.05, objective="Latency", max_itl_ms=slo), BucketState(steps=cur), a, cost,
                 8, 1e4, 100.0)
    assert tp.steps == cur and tp.kind == "hold"
    assert lat.steps == best and itl[lat.steps] <= slo


def test_latency_objective_needs_an_slo():
    with pytest.raises(ValueError, match="maxInterTokenLatencyMs"):
        PolicyConfig(objective="Latency")
