import math

import pytest

from specdecode_operator.tuner.estimator import Acceptance
from specdecode_operator.tuner.policy import BucketState, PolicyConfig, choose
from specdecode_runtime.contract.goodput import CycleCost

COST = CycleCost(10, 0.0, 0.5, 0, 0.5, 0, 0.5)


def acc(alphas, observed=None):
    n = len(alphas)
    return Acceptance(
        list(alphas),
        [a - 0.02 for a in alphas],
        [min(1, a + 0.02) for a in alphas],
        [1e4] * n,
        n if observed is None else observed,
    )


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
    from specdecode_runtime.contract.goodput import inter_token_latency_ms

    cost = CycleCost(10, 0.5, 1.0, 0, 1.0, 0, 0.5)
    a = acc([0.8] * 8)
    itl = {k: inter_token_latency_ms(a.alphas, cost, k, 8) for k in range(8)}
    best = min(itl, key=itl.get)
    cur = next(k for k in range(8) if k != best and itl[k] / itl[best] - 1 < 0.05)  # a near-optimal neighbour
    slo = (itl[best] + itl[cur]) / 2
    tp = choose(PolicyConfig(hysteresis=0.05), BucketState(steps=cur), a, cost, 8, 1e4, 100.0)
    lat = choose(
        PolicyConfig(hysteresis=0.05, objective="Latency", max_itl_ms=slo),
        BucketState(steps=cur),
        a,
        cost,
        8,
        1e4,
        100.0,
    )
    assert tp.steps == cur and tp.kind == "hold"
    assert lat.steps == best and itl[lat.steps] <= slo


def test_latency_objective_needs_an_slo():
    with pytest.raises(ValueError, match="maxInterTokenLatencyMs"):
        PolicyConfig(objective="Latency")


# -- deployment-level objective, judged climbs, the k=0 escape, exploration that stops --------------------------
from specdecode_operator.tuner.policy import Aggregate, coupled_gain  # noqa: E402
from specdecode_runtime.contract.goodput import goodput  # noqa: E402

CHEAP_DRAFT = CycleCost(8.0, 0.04, 0.19, 0.0, 0.2, 0.0, 0.3)


def test_coupled_gain_is_the_goodput_ratio_for_a_bucket_alone():
    tok_a, sec_a, tok_b, sec_b = 3.0, 0.011, 2.5, 0.010
    own = (tok_a / sec_a) / (tok_b / sec_b) - 1.0
    assert coupled_gain(tok_a, sec_a, tok_b, sec_b, None) == pytest.approx(own)
    assert coupled_gain(tok_a, sec_a, tok_b, sec_b, Aggregate(rate=tok_b / sec_b, share=1.0)) == pytest.approx(own)
    # a tiny share: the Dinkelbach limit (delta tokens - rate x delta time) / (rate x time)
    r = 100.0
    assert coupled_gain(tok_a, sec_a, tok_b, sec_b, Aggregate(rate=r, share=1e-9)) == pytest.approx(
        ((tok_a - tok_b) - r * (sec_a - sec_b)) / (r * sec_b)
    )


def test_a_busy_bucket_in_a_slower_deployment_runs_deeper_than_its_own_optimum():
    """A ms spent in a batch-8 bucket is worth the deployment's tokens/ms, well below the bucket's own: the extra
    draft step that loses a little of the bucket's own goodput still raises the deployment's throughput."""
    a = acc([0.8, 0.74, 0.7, 0.66, 0.62, 0.58, 0.55, 0.52])
    own = {k: goodput(a.alphas, CHEAP_DRAFT, k, 8) for k in range(1, 8)}
    own_best = max(own, key=own.get)
    cfg = PolicyConfig(hysteresis=0.0, cooldown_s=0)
    alone = choose(cfg, BucketState(steps=own_best), a, CHEAP_DRAFT, 8, 1e4, 100.0)
    assert alone.steps == own_best and alone.kind == "hold"
    coupled = choose(
        cfg,
        BucketState(steps=own_best),
        a,
        CHEAP_DRAFT,
        8,
        1e4,
        100.0,
        aggregate=Aggregate(rate=own[own_best] / 3, share=0.2),
    )
    assert coupled.kind == "switch" and coupled.steps > own_best


def test_coupled_rollback_judges_the_deployment_not_the_bucket():
    """Moving deeper on purpose lowers the bucket's own goodput a little; that is not a reason to roll back."""
    cfg = PolicyConfig(cooldown_s=1e9, rollback_margin=0.03)
    agg = Aggregate(rate=700.0, share=0.2)
    st = BucketState(steps=6, pending_rollback=(5, 2300.0, 0.8), rollback_cycle_s=0.0107, last_change=100.0)
    # own goodput -3.5 %, cycle 5 % longer, tokens +1.3 %: worse alone, better for the deployment
    ch = choose(
        cfg, st, HIGH, COST, 8, 1e4, 110.0, measured_goodput=2220.0, aggregate=agg, measured_cycle_s=0.0107 * 1.05
    )
    assert ch.kind != "rollback"
    st = BucketState(steps=6, pending_rollback=(5, 2300.0, 0.8), rollback_cycle_s=0.0107, last_change=100.0)
    assert choose(cfg, st, HIGH, COST, 8, 1e4, 110.0, measured_goodput=2220.0, aggregate=None).kind == "rollback"


def test_a_judged_climb_continues_after_one_interval_but_a_reversal_waits_out_the_cooldown():
    cfg = PolicyConfig(cooldown_s=20.0, hysteresis=0.02)
    st = BucketState(steps=3)
    first = choose(cfg, st, acc([0.95] * 8, observed=3), COST, 1, 1e4, 10.0, measured_goodput=100.0)
    assert first.kind == "switch" and first.steps == 4
    st.steps = 4
    # one clean interval later: the change passed its rollback test, so the next step up is taken at once
    nxt = choose(cfg, st, acc([0.95] * 8, observed=4), COST, 1, 1e4, 20.0, measured_goodput=110.0)
    assert nxt.kind == "switch" and nxt.steps == 5
    st.steps = 5
    # a reversal inside the cooldown still waits, even after the climb was judged
    st.pending_rollback, st.judged_at = None, 30.0
    down = choose(cfg, st, acc([0.3] * 8), COST, 1, 1e4, 30.0)
    assert down.kind == "hold" and "cooldown" in down.reason
    assert choose(cfg, st, acc([0.3] * 8), COST, 1, 1e4, 41.0).kind == "switch"


def test_speculation_is_not_switched_off_while_drafting_could_still_win_within_the_noise():
    """k=0 ends the acceptance data, so it needs the upper bounds of the observed positions to lose too."""
    cost = CycleCost(10.7, 0.11, 3.0, 0.0075, 3.0, 0.0075, 0.3)  # drafting barely pays at alpha ~ 0.55
    alphas = [0.535, 0.52] + [0.5] * 6

    def with_bounds(half):
        return Acceptance(list(alphas), [a - half for a in alphas], [a + half for a in alphas], [400.0] * 8, 2)

    assert max(range(8), key=lambda k: goodput(alphas, cost, k, 1)) == 0  # the point estimate says k=0
    wide = choose(PolicyConfig(), BucketState(steps=3), with_bounds(0.05), cost, 1, 400, 100.0)
    assert wide.kind == "switch" and wide.steps > 0
    tight = choose(PolicyConfig(), BucketState(steps=3), with_bounds(0.002), cost, 1, 4e4, 100.0)
    assert tight.kind == "switch" and tight.steps == 0


def test_exploration_stops_once_the_censored_position_is_observed():
    cfg = PolicyConfig(cooldown_s=0, explore_every_s=0, hysteresis=0.02)
    alphas = [0.6] * 8

    def state_at(observed, upper):
        lo = [a - 0.01 for a in alphas]
        up = [a + 0.01 if i < observed else upper for i, a in enumerate(alphas)]
        return Acceptance(list(alphas), lo, up, [1e4 if i < observed else 0.0 for i in range(8)], observed)

    cur = max(range(1, 4), key=lambda k: goodput(alphas, COST, k, 1))
    unknown = choose(cfg, BucketState(steps=cur), state_at(cur, 1.0), COST, 1, 1e4, 100.0)
    assert unknown.kind == "explore" and unknown.steps == cur + 1
    known = choose(cfg, BucketState(steps=cur), state_at(8, 1.0), COST, 1, 1e4, 100.0)
    assert known.kind == "hold"


@pytest.mark.parametrize(
    "min_steps,max_steps,ok",
    [
        (-1, 3, False),  # minSteps below 0
        (0, 3, True),  # 0 (no speculation) is a valid lower bound
        (1, 3, True),
        (3, 3, True),  # minSteps == maxSteps: one step count
        (4, 3, False),  # just past maxSteps
        (0, 0, True),
    ],
)
def test_step_bounds_at_and_around_their_limits(min_steps, max_steps, ok):
    if ok:
        cfg = PolicyConfig(min_steps=min_steps, max_steps=max_steps)
        assert cfg.allowed() == sorted({0, *range(min_steps, max_steps + 1)})
        assert max(cfg.allowed()) == max_steps
    else:
        with pytest.raises(ValueError) as err:
            PolicyConfig(min_steps=min_steps, max_steps=max_steps)
        assert str(err.value) == (
            f"minSteps/maxSteps must satisfy 0 <= minSteps <= maxSteps, got {min_steps}..{max_steps}"
        )


def test_latency_objective_error_names_the_missing_field():
    with pytest.raises(ValueError) as err:
        PolicyConfig(objective="Latency")
    assert str(err.value) == "objective Latency needs maxInterTokenLatencyMs > 0"


@pytest.mark.parametrize("share_time,rest_rate", [(0.5, 150.0), (0.2, 400.0), (0.9, 0.5)])
def test_coupled_gain_is_the_deployments_relative_change_per_share(share_time, rest_rate):
    """Worked from totals: one bucket (this one) and the rest of the deployment, each with its tokens and seconds of
    decode time; the bucket moves from (tok_cur, sec_cur) to (tok_new, sec_new) per cycle at the same cycle count."""
    tok_cur, sec_cur, tok_new, sec_new = 2.6, 0.012, 3.1, 0.0135
    cycles = 1000.0
    bucket_s = cycles * sec_cur
    rest_s = bucket_s * (1 - share_time) / share_time
    rest_tok = rest_rate * rest_s
    before = (cycles * tok_cur + rest_tok) / (bucket_s + rest_s)
    after = (cycles * tok_new + rest_tok) / (cycles * sec_new + rest_s)
    expected = (after / before - 1.0) / share_time
    agg = Aggregate(rate=before, share=share_time)
    assert coupled_gain(tok_new, sec_new, tok_cur, sec_cur, agg) == pytest.approx(expected, rel=1e-9)
    # the tiny-share limit: (delta tokens - rate x delta time) / (rate x time)
    assert coupled_gain(tok_new, sec_new, tok_cur, sec_cur, Aggregate(rate=before, share=1e-9)) == pytest.approx(
        ((tok_new - tok_cur) - before * (sec_new - sec_cur)) / (before * sec_cur), rel=1e-6
    )


def test_coupled_gain_at_its_edges():
    own = (3.0 / 0.011) / (2.5 / 0.010) - 1.0
    # nothing measured for the current step count: any tokens at all is an unbounded gain, none is no gain
    for tok_cur, sec_cur, sec_new in ((0.0, 0.01, 0.01), (2.5, 0.0, 0.01), (2.5, 0.01, 0.0)):
        assert coupled_gain(0.5, sec_new, tok_cur, sec_cur, None) == math.inf
        assert coupled_gain(0.0, sec_new, tok_cur, sec_cur, None) == 0.0
    # small positive values are measurements like any other
    assert coupled_gain(3.0, 0.011, 0.5, 0.010, None) == pytest.approx((3.0 / 0.011) / (0.5 / 0.010) - 1.0)
    # no deployment rate (nothing else measured): the bucket's own goodput ratio
    assert coupled_gain(3.0, 0.011, 2.5, 0.010, Aggregate(rate=0.0, share=0.5)) == pytest.approx(own)
    # a rate below 1 token/s is still a rate
    low = Aggregate(rate=0.5, share=0.5)
    assert coupled_gain(3.0, 0.011, 2.5, 0.010, low) != pytest.approx(own)
    # a share outside 0..1 is clamped
    rate = 2.5 / 0.010
    assert coupled_gain(3.0, 0.011, 2.5, 0.010, Aggregate(rate=rate, share=1.5)) == pytest.approx(
        coupled_gain(3.0, 0.011, 2.5, 0.010, Aggregate(rate=rate, share=1.0))
    )
