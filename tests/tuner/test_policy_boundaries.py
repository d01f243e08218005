"""The policy's thresholds at, just inside and just outside each boundary, and every field of each kind of choice.

Why: the tuner writes a choice's kind, reason and predicted gain into the resource's history and Events, and acts on
its step count; a comparison written ``<`` for ``<=``, a tie broken the other way or a reason that names the wrong
numbers changes what an operator reads and what the deployment runs. Each expected value here is worked out from the
goodput model's own functions (``goodput``, ``inter_token_latency_ms``, ``expected_tokens``), never copied from a
run of the policy."""

import math

import pytest
from helpers import COST, HIGH, acc

from specdecode_operator.tuner.cost_refine import RefinedCost
from specdecode_operator.tuner.estimator import Acceptance
from specdecode_operator.tuner.policy import (
    Aggregate,
    BucketState,
    PolicyConfig,
    Round,
    after_probe,
    cautious_best,
    choose,
    content_factor,
    coupled_gain,
    explore,
    judge_rollback,
    switch,
)
from specdecode_runtime.contract.goodput import CycleCost, expected_tokens, goodput, inter_token_latency_ms


def round_of(state, a=HIGH, cfg=None, now=100.0, workload_changed=False, aggregate=None, cost=COST, batch=1):
    cfg = cfg or PolicyConfig()
    allowed = [k for k in cfg.allowed() if k not in state.blocked or k == state.steps]
    return Round.of(cfg, state, a, cost, batch, now, allowed, workload_changed, aggregate)


def model(alphas, ks, cost=COST, batch=1):
    """The goodput model's tokens/s of each step count in ``ks``."""
    return {k: goodput(alphas, cost, k, batch) for k in ks}


# -- enough data --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("samples,decides", [(99, False), (100, True), (101, True)])
def test_a_decision_needs_the_minimum_sample_count_and_no_more(samples, decides):
    ch = choose(PolicyConfig(min_samples=100), BucketState(steps=7), HIGH, COST, 1, samples, 100.0)
    if decides:
        assert (ch.kind, ch.reason) == ("hold", "steps=7 is the model's best")
    else:
        assert (ch.kind, ch.steps, ch.reason) == ("wait", 7, "99 cycles in window < minimum 100")


# -- what each kind of choice carries ------------------------------------------------------------------------------


def test_holding_the_models_best_reports_no_gain_and_the_model_goodput_of_each_step_count():
    ch = choose(PolicyConfig(), BucketState(steps=7), HIGH, COST, 1, 1e4, 100.0)
    assert (ch.steps, ch.kind, ch.reason) == (7, "hold", "steps=7 is the model's best")
    assert ch.predicted_gain == 0.0
    assert ch.goodput == pytest.approx(model(HIGH.alphas, range(8)))


def test_a_switch_names_the_predicted_goodputs_and_arms_the_rollback_test():
    """Position 4 is censored (observed 3): its goodput is the estimate's, not the optimistic bound's."""
    a = Acceptance([0.95, 0.9, 0.85, 0.6] + [0.6] * 4, [0.9] * 8, [1.0] * 8, [1e4] * 3 + [0.0] * 5, 3)
    st = BucketState(steps=3)
    ch = choose(PolicyConfig(), st, a, COST, 1, 1e4, 100.0, measured_goodput=80.0, measured_cycle_s=0.0125)
    g = model(a.alphas, range(5))  # one position past the deepest observed one
    gain = g[4] / g[3] - 1.0
    assert (ch.steps, ch.kind) == (4, "switch")
    assert ch.reason == f"predicted goodput {g[4]:.1f} vs {g[3]:.1f} tok/s ({gain:+.1%})"
    assert ch.predicted_gain == pytest.approx(gain)
    assert ch.goodput == pytest.approx(g)
    assert st.pending_rollback == (3, 80.0, 0.95) and st.rollback_cycle_s == 0.0125
    assert (st.last_change, st.last_direction) == (100.0, 1)


def test_a_switch_without_a_measurement_arms_no_rollback_test():
    st = BucketState(steps=3)
    ch = choose(PolicyConfig(), st, acc([0.95] * 8, observed=3), COST, 1, 1e4, 100.0)
    assert ch.kind == "switch" and st.pending_rollback is None and st.rollback_cycle_s is None


def test_a_gain_inside_hysteresis_is_held_with_the_gain_it_had():
    st = BucketState(steps=3)
    ch = choose(PolicyConfig(hysteresis=0.6), st, HIGH, COST, 1, 1e4, 100.0)
    g = model(HIGH.alphas, range(8))
    gain = g[7] / g[3] - 1.0
    assert 0 < gain < 0.6
    assert (ch.steps, ch.kind) == (3, "hold")
    assert ch.reason == f"steps=7 predicted {gain:+.1%} <= hysteresis 60%"  # no cost doubt without a refined cost
    assert ch.predicted_gain == pytest.approx(gain)
    assert ch.goodput == pytest.approx(g)


def test_scores_are_the_goodput_ratio_over_the_current_step_count_for_a_bucket_alone():
    r = round_of(BucketState(steps=2), a=acc([0.7, 0.6, 0.5] + [0.4] * 5))
    g = model(r.acc.alphas, range(8))
    assert r.g == pytest.approx(g)
    assert r.score == pytest.approx({k: g[k] / g[2] - 1.0 for k in range(8)})  # step 1 included: E(1) = 1 + alpha1


# -- the cost model's doubt ----------------------------------------------------------------------------------------

DOUBTFUL = RefinedCost(COST, cov=((0.0025, 0.0, 0.0), (0.0, 0.0025, 0.0), (0.0, 0.0, 0.0025)))


def test_the_cost_models_doubt_is_the_refined_costs_relative_sd_of_the_move():
    r = round_of(BucketState(steps=3), cost=DOUBTFUL)
    gain, doubt = r.gain_and_doubt(7)
    assert gain == r.score[7]
    assert doubt == DOUBTFUL.relative_sd(7, 3, 1) > 0
    assert r.gain_and_doubt(3) == (0.0, 0.0)  # staying put has nothing to doubt


@pytest.mark.parametrize("doubts,switches", [(0.5, False), (1.5, True)])
def test_a_gain_inside_hysteresis_plus_the_cost_doubt_is_not_evidence(doubts, switches):
    """Hysteresis set to the gain less ``doubts`` times the doubt: half a doubt short of the gain holds (and says
    why), one and a half switches."""
    doubt = DOUBTFUL.relative_sd(7, 3, 1)
    g = model(HIGH.alphas, range(8), cost=DOUBTFUL)
    gain = g[7] / g[3] - 1.0
    cfg = PolicyConfig(hysteresis=gain - doubts * doubt)
    assert cfg.hysteresis > 0
    ch = choose(cfg, BucketState(steps=3), HIGH, DOUBTFUL, 1, 1e4, 100.0)
    if switches:
        assert (ch.kind, ch.steps) == ("switch", 7)
    else:
        assert (ch.kind, ch.steps) == ("hold", 3)
        assert ch.reason == (
            f"steps=7 predicted {gain:+.1%} <= hysteresis {cfg.hysteresis:.0%} + cost doubt {doubt:.1%}"
        )


# -- cooldown --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("now,held", [(99.0, True), (100.0, False), (101.0, False)])
def test_the_cooldown_holds_a_reversal_until_it_has_run_out_exactly(now, held):
    cfg = PolicyConfig(cooldown_s=60)
    st = BucketState(steps=2, last_change=40.0, last_direction=-1)
    r = round_of(st, cfg=cfg, now=now)
    gain, doubt = r.gain_and_doubt(7)
    ch = switch(r, 7, gain, doubt, None, None)
    if held:
        assert (ch.steps, ch.kind) == (2, "hold")
        assert ch.reason == f"cooldown: steps=7 predicted {gain:+.1%} but last change 59s ago < 60s"
        assert ch.predicted_gain == gain and ch.goodput == r.g
        assert st.last_change == 40.0  # nothing changed
    else:
        assert (ch.steps, ch.kind) == (7, "switch") and st.last_change == now


@pytest.mark.parametrize("judged_at,cooling", [(89.0, True), (90.0, True), (91.0, False)])
def test_a_change_counts_as_judged_only_after_it_was_made(judged_at, cooling):
    st = BucketState(steps=3, last_change=90.0, last_direction=1, judged_at=judged_at)
    r = round_of(st, cfg=PolicyConfig(cooldown_s=60))
    assert r.cooling(1) is cooling
    assert r.cooling(-1) is True  # a reversal waits whatever was judged


def test_a_judged_step_down_lets_the_next_step_down_skip_the_cooldown():
    cfg = PolicyConfig(cooldown_s=60)
    low = acc([0.05] * 8)
    for judged_at, kind in ((95.0, "switch"), (-math.inf, "hold")):
        st = BucketState(steps=3, last_change=90.0, last_direction=-1, judged_at=judged_at)
        ch = choose(cfg, st, low, COST, 1, 1e4, 100.0)
        assert ch.kind == kind, judged_at
        assert ch.steps == (0 if kind == "switch" else 3)


# -- censoring after a workload change -------------------------------------------------------------------------------


def test_a_workload_change_lets_a_switch_reach_further_past_the_observed_depth():
    a = acc([0.95] * 8, observed=3)
    cfg = PolicyConfig(reach=1, reach_after_change=2)
    assert max(round_of(BucketState(steps=3), a=a, cfg=cfg).g) == 4
    assert max(round_of(BucketState(steps=3), a=a, cfg=cfg, workload_changed=True).g) == 5
    ch = choose(cfg, BucketState(steps=3), a, COST, 1, 1e4, 100.0, workload_changed=True)
    assert (ch.kind, ch.steps) == ("switch", 5)


# -- Latency objective ---------------------------------------------------------------------------------------------

LAT_COST = CycleCost(10, 0.5, 1.0, 0, 1.0, 0, 0.5)
LAT_ACC = acc([0.8] * 8)


def _near_optimal():
    """A step count whose ITL is within 5 % of the best one (the hysteresis band) at batch 8."""
    itl = {k: inter_token_latency_ms(LAT_ACC.alphas, LAT_COST, k, 8) for k in range(8)}
    best = min(itl, key=itl.get)
    cur = next(k for k in range(8) if k != best and itl[k] / itl[best] - 1 < 0.05)
    return itl, best, cur


@pytest.mark.parametrize("slo_over_itl,switches", [(0.99, True), (1.0, False), (1.01, False)])
def test_an_slo_violation_overrides_hysteresis_only_when_the_itl_is_past_the_slo(slo_over_itl, switches):
    """The SLO at, just inside and just outside the current ITL (the ITL of a cycle that emits E(steps) tokens per
    sequence, not one token): only a violation moves the step count inside the hysteresis band."""
    itl, best, cur = _near_optimal()
    cfg = PolicyConfig(hysteresis=0.05, objective="Latency", max_itl_ms=itl[cur] * slo_over_itl)
    assert LAT_COST.cycle_ms(cur, 8) > cfg.max_itl_ms  # one token per cycle would be a violation at every row
    ch = choose(cfg, BucketState(steps=cur), LAT_ACC, LAT_COST, 8, 1e4, 100.0)
    if switches:
        assert (ch.kind, ch.steps) == ("switch", best)
        # the gain acted on is just above hysteresis, not the (smaller) predicted one
        assert ch.predicted_gain == pytest.approx(0.05, abs=1e-6)
    else:
        assert (ch.kind, ch.steps) == ("hold", cur)
        assert ch.predicted_gain == pytest.approx(itl[cur] / itl[best] - 1.0)


def test_an_slo_no_step_count_meets_goes_to_the_lowest_itl():
    itl, best, cur = _near_optimal()
    assert best != min(itl)  # the lowest ITL is not merely the smallest step count
    cfg = PolicyConfig(hysteresis=0.05, objective="Latency", max_itl_ms=min(itl.values()) / 2)
    r = round_of(BucketState(steps=cur), a=LAT_ACC, cfg=cfg, cost=LAT_COST, batch=8)
    assert r.best() == best
    ch = choose(cfg, BucketState(steps=cur), LAT_ACC, LAT_COST, 8, 1e4, 100.0)
    assert (ch.kind, ch.steps) == ("switch", best)


def test_the_latency_objective_scores_the_bucket_alone_even_with_a_deployment_aggregate():
    """The SLO is per bucket: the deployment's rate does not weigh a Latency bucket's step counts."""
    agg = Aggregate(rate=50.0, share=0.3)
    lat = round_of(BucketState(steps=3), cfg=PolicyConfig(objective="Latency", max_itl_ms=1e9), aggregate=agg)
    g = model(HIGH.alphas, range(8))
    assert lat.agg is None
    assert lat.score == pytest.approx({k: g[k] / g[3] - 1.0 for k in range(8)})
    tp = round_of(BucketState(steps=3), aggregate=agg)
    assert tp.score[7] != pytest.approx(lat.score[7])


def test_latency_moves_down_to_the_models_best_without_the_throughput_caution():
    unsure = acc([0.3] * 8, spread=0.6)
    tp = round_of(BucketState(steps=5), a=unsure)
    assert tp.best() < cautious_best(tp)  # Throughput stops short (tests/tuner/test_policy_stages.py)
    lat = round_of(BucketState(steps=5), a=unsure, cfg=PolicyConfig(objective="Latency", max_itl_ms=1e9))
    assert cautious_best(lat) == lat.best() < 5


# -- ties and the downward caution -----------------------------------------------------------------------------------

# Every step count at exactly the same goodput: acceptance 1 (E(steps) = steps + 1) and a cycle whose time grows in
# proportion (125 ms per token verified; eighths of a second, exact in binary).
TIE_COST = CycleCost(0, 125, 0, 0, 0, 0, 0)
TIE_ACC = acc([1.0] * 8)


def test_a_tie_in_predicted_goodput_goes_to_the_smaller_step_count():
    r = round_of(BucketState(steps=3), a=TIE_ACC, cost=TIE_COST)
    assert set(r.score.values()) == {0.0}
    assert r.best() == 0  # less draft work for the same tokens


def test_a_tie_never_moves_a_step_count_down():
    """Going down stops measuring the positions above; a deeper step count that is as good keeps measuring them."""
    r = round_of(BucketState(steps=3), a=TIE_ACC, cost=TIE_COST)
    assert cautious_best(r) == 3
    ch = choose(PolicyConfig(), BucketState(steps=3), TIE_ACC, TIE_COST, 1, 1e4, 100.0)
    assert (ch.kind, ch.steps, ch.reason) == ("hold", 3, "steps=3 is the model's best")


def test_a_move_down_the_current_step_count_could_still_win_is_not_made():
    """From steps 1 to 0: the upper bound of position 1 says drafting could still be as good, so it stays."""
    cost = CycleCost(10.7, 0.11, 3.0, 0.0075, 3.0, 0.0075, 0.3)  # drafting barely pays at alpha ~ 0.55
    a = acc([0.5] * 8, spread=0.1)
    r = round_of(BucketState(steps=1), a=a, cost=cost)
    assert r.best() == 0
    assert cautious_best(r) == 1


def test_a_move_down_goes_to_the_best_estimate_among_the_step_counts_the_data_cannot_rule_out():
    a = acc([0.4] * 8, spread=0.4)
    r = round_of(BucketState(steps=7), a=a)
    best = r.best()
    at_upper = a.alphas[:best] + a.upper[best:]
    plausible = [k for k in range(best + 1, 8) if r.gain_of(k, at_upper) >= r.score[best]]
    assert plausible == list(range(best + 1, 8))  # every deeper one could match the model's best...
    stop = max(plausible, key=lambda k: r.score[k])
    assert stop < 7
    assert cautious_best(r) == stop  # ...so the move goes to the best estimate of them, not back to the current one


def test_positions_never_measured_do_not_hold_a_move_down():
    """Only measured positions are taken at their upper bound: a censored one keeps its estimate (its data-free
    bound would hold every downward move). Here positions 1-3 are measured exactly; 4 and 5 were never measured."""
    alphas = [0.7 * 0.8**i for i in range(8)]
    a = Acceptance(alphas, list(alphas), alphas[:3] + [1.0] * 5, [1e4] * 3 + [0.0] * 5, 3)
    r = round_of(BucketState(steps=5), a=a)
    assert r.best() == 3
    assert cautious_best(r) == 3


# -- probes ----------------------------------------------------------------------------------------------------------


def test_a_finished_probe_switches_on_when_the_model_prefers_a_third_step_count():
    st = BucketState(steps=5, probing_from=3)
    r = round_of(st)
    ch = after_probe(r)
    assert (ch.steps, ch.kind) == (7, "switch")  # neither the probed 5 nor the 3 it came from
    assert ch.reason == "probe of steps=5 done: model prefers steps=7"
    assert ch.predicted_gain == r.score[7] and ch.goodput == r.g
    assert (st.probing_from, st.last_change, st.last_direction) == (None, 100.0, 1)


def test_a_confirmed_probe_is_held_with_no_gain():
    st = BucketState(steps=7, probing_from=6)
    r = round_of(st)
    ch = after_probe(r)
    assert (ch.steps, ch.kind, ch.reason) == (7, "hold", "probe of steps=7 confirmed")
    assert ch.predicted_gain == 0.0 and ch.goodput == r.g


def test_choose_ends_a_probe_before_anything_else():
    st = BucketState(steps=7, probing_from=6)
    ch = choose(PolicyConfig(), st, HIGH, COST, 1, 1e4, 100.0)
    assert (ch.kind, ch.reason) == ("hold", "probe of steps=7 confirmed")
    assert st.probing_from is None and st.judged_at == 100.0


CENSORED = acc([0.9] * 8, observed=2, spread=0.05)


def test_a_probe_names_the_optimistic_goodput_it_hopes_for():
    st = BucketState(steps=2)
    r = round_of(st, a=CENSORED)
    ch = explore(r)
    optimistic = CENSORED.alphas[:2] + CENSORED.upper[2:]
    opt = goodput(optimistic, COST, 3, 1)
    g_cur = goodput(CENSORED.alphas, COST, 2, 1)
    assert (ch.steps, ch.kind) == (3, "explore")
    assert ch.reason == f"position 3 unobserved: optimistic {opt:.1f} vs {g_cur:.1f} tok/s, probing one interval"
    assert ch.predicted_gain == pytest.approx(opt / g_cur - 1.0)
    assert ch.goodput == r.g


@pytest.mark.parametrize("since_probe,probes", [(119.0, False), (120.0, True), (121.0, True)])
def test_a_probe_waits_out_the_exploration_period_exactly(since_probe, probes):
    st = BucketState(steps=2, last_probe=100.0 - since_probe)
    ch = explore(round_of(st, a=CENSORED))
    assert (ch is not None) is probes
    assert st.last_probe == (100.0 if probes else 100.0 - since_probe)


def test_a_probe_follows_a_judged_climb_inside_the_cooldown_but_not_an_unjudged_one():
    cfg = PolicyConfig(cooldown_s=60)
    for judged_at, probes in ((95.0, True), (-math.inf, False)):
        st = BucketState(steps=2, last_change=90.0, last_direction=1, judged_at=judged_at)
        assert (explore(round_of(st, a=CENSORED, cfg=cfg)) is not None) is probes, judged_at


def test_a_probe_needs_an_optimistic_gain_above_hysteresis():
    r = round_of(BucketState(steps=2), a=CENSORED)
    opt_gain = r.gain_of(3, CENSORED.alphas[:2] + CENSORED.upper[2:])
    for hysteresis, probes in ((opt_gain * 0.99, True), (opt_gain, False), (opt_gain * 1.01, False)):
        st = BucketState(steps=2)
        assert (explore(round_of(st, a=CENSORED, cfg=PolicyConfig(hysteresis=hysteresis))) is not None) is probes


# -- the rollback test -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("margin_over_drop,rolls_back", [(0.99, True), (1.0, False), (1.01, False)])
def test_a_drop_rolls_back_only_past_the_noise_floor(margin_over_drop, rolls_back):
    drop = -(97.0 / 100.0 - 1.0)  # the relative change measured: 100 tok/s before, 97 after
    st = BucketState(steps=4, pending_rollback=(3, 100.0, 0.9))
    r = round_of(st, cfg=PolicyConfig(rollback_margin=drop * margin_over_drop))
    ch = judge_rollback(r, measured_goodput=97.0, measured_cycle_s=None)
    if rolls_back:
        assert (ch.steps, ch.kind) == (3, "rollback") and 4 in st.blocked
    else:
        assert ch is None and st.judged_at == 100.0 and not st.blocked


def test_a_rollback_says_what_was_measured():
    st = BucketState(steps=4, pending_rollback=(3, 100.0, 0.9))
    r = round_of(st)
    ch = judge_rollback(r, measured_goodput=90.0, measured_cycle_s=None)
    assert ch.reason == "measured 90.0 tok/s after steps=4 vs 100.0 before (steps=3): -10.0%"
    assert ch.predicted_gain == pytest.approx(-0.1) and ch.goodput == r.g


def test_a_coupled_rollback_reports_the_deployments_change():
    agg = Aggregate(rate=700.0, share=0.2)
    st = BucketState(steps=6, pending_rollback=(5, 2300.0, 0.8), rollback_cycle_s=0.0107)
    cycle = 0.0107 * 1.05
    ch = judge_rollback(round_of(st, aggregate=agg), measured_goodput=2000.0, measured_cycle_s=cycle)
    expected = coupled_gain(2000.0 * cycle, cycle, 2300.0 * 0.0107, 0.0107, agg)
    assert expected < -0.03
    assert (ch.kind, ch.steps) == ("rollback", 5) and ch.predicted_gain == pytest.approx(expected)


@pytest.mark.parametrize("aggregate", [None, Aggregate(rate=700.0, share=0.2)])
def test_without_the_cycle_time_before_the_change_the_raw_ratio_judges(aggregate):
    """A deployment aggregate needs both cycle times; with one missing the measured tokens/s are compared."""
    st = BucketState(steps=4, pending_rollback=(3, 100.0, 0.9), rollback_cycle_s=None)
    ch = judge_rollback(round_of(st, aggregate=aggregate), measured_goodput=90.0, measured_cycle_s=0.012)
    assert ch.kind == "rollback" and ch.predicted_gain == pytest.approx(-0.1)


EASY, HARD = (0.85,) * 8, (0.70,) * 8


def test_choose_judges_a_change_on_the_content_of_the_latest_interval():
    """The same measured drop is the text getting harder when the latest interval's acceptance says so, and a worse
    step count without it."""
    harder = 100.0 * expected_tokens(HARD, 5) / expected_tokens(EASY, 5) * 1.01
    for latest, kind in ((HARD, "hold"), (None, "rollback")):
        st = BucketState(steps=7, pending_rollback=(5, 100.0, 0.85), rollback_content=EASY, last_change=100.0)
        ch = choose(PolicyConfig(), st, HIGH, COST, 1, 1e4, 110.0, measured_goodput=harder, latest_alphas=latest)
        assert ch.kind == kind, latest


@pytest.mark.parametrize(
    "steps,before,after,factor",
    [
        (5, None, HARD, 1.0),  # no curve before the change
        (5, EASY, None, 1.0),  # none after
        (5, (), HARD, 1.0),
        (0, EASY, HARD, 1.0),  # no speculation: one token per cycle whatever the content
        (1, EASY, HARD, (1 + 0.70) / (1 + 0.85)),
        (3, EASY, HARD, expected_tokens(HARD, 3) / expected_tokens(EASY, 3)),
        # nothing accepted before (E = 1): the factor is the tokens per cycle after
        (3, (0.0,) * 8, HARD, expected_tokens(HARD, 3)),
    ],
)
def test_content_factor_at_its_edges(steps, before, after, factor):
    assert content_factor(steps, before, after) == pytest.approx(factor)
