"""Online cost refinement: live cycle timings at the k that runs correct a biased start-up profile."""

from __future__ import annotations

import dataclasses

import pytest
from helpers import REFINE_COST

from specdecode_operator.tuner.cost_refine import CostRefiner, RefinedCost, parts
from specdecode_runtime.contract.goodput import CycleCost

TRUE = REFINE_COST
# the probe read verify 12 % low and the draft step 15 % high: the per-step slope is wrong
BIASED = CycleCost(
    verify_base=8.0 * 0.88,
    verify_per_token=0.04 * 0.88,
    draft_base=0.6 * 1.15,
    draft_per_seq=0.0023,
    extend_base=0.67,
    extend_per_token=0.0017,
    overhead=0.3,
    broadcast=0.05,
)


def test_parts_reproduce_the_cycle_time():
    for b in (1, 7.5, 40):
        t0, s, d = parts(TRUE, b)
        assert t0 == pytest.approx(TRUE.cycle_ms(0, b))
        for k in (1, 3, 7):
            assert t0 + s + d * k == pytest.approx(TRUE.cycle_ms(k, b))
    assert RefinedCost(TRUE).cycle_ms(4, 12) == pytest.approx(TRUE.cycle_ms(4, 12))


def test_a_profile_that_keeps_the_draft_warm_at_steps_0_is_refined_without_bias():
    """Timings that match the profile exactly, at steps 0 and at two speculative step counts, leave every factor at
    1: the fit's features split the cycle the way ``cycle_ms`` does, steps 0's draft extend in the plain part."""
    warm = dataclasses.replace(TRUE, warm_extend_base=0.5, warm_extend_per_seq=0.01)
    for b in (1, 7.5, 40):
        t0, s, d = parts(warm, b)
        assert t0 == pytest.approx(warm.cycle_ms(0, b))
        assert t0 + s + 3 * d == pytest.approx(warm.cycle_ms(3, b))
    r = CostRefiner()
    for _ in range(6):
        for k, frac in ((0, 0.0), (3, 1.0), (6, 1.0)):
            r.add(8.0, k, frac, warm.cycle_ms(k, 8.0), 500)
    fitted = r.refine(warm)
    assert (fitted.rv, fitted.rs, fitted.rd) == pytest.approx((1.0, 1.0, 1.0), abs=1e-6)


def test_no_observations_keep_the_profile():
    assert CostRefiner().refine(BIASED).cycle_ms(3, 4) == pytest.approx(BIASED.cycle_ms(3, 4))


def test_one_k_fixes_that_k_and_two_ks_fix_the_slope():
    r = CostRefiner()
    for _ in range(5):
        r.add(batch=4, steps=3, spec_fraction=1.0, cycle_ms=TRUE.cycle_ms(3, 4), cycles=500)
    one = r.refine(BIASED)
    assert abs(one.cycle_ms(3, 4) / TRUE.cycle_ms(3, 4) - 1) < 0.01  # where it ran: right
    assert abs(one.cycle_ms(3, 4) - TRUE.cycle_ms(3, 4)) < abs(BIASED.cycle_ms(3, 4) - TRUE.cycle_ms(3, 4))
    for _ in range(5):
        r.add(batch=4, steps=6, spec_fraction=1.0, cycle_ms=TRUE.cycle_ms(6, 4), cycles=500)
        r.add(batch=4, steps=0, spec_fraction=0.0, cycle_ms=TRUE.cycle_ms(0, 4), cycles=500)
    two = r.refine(BIASED)
    for k in (0, 1, 3, 5, 7):
        assert two.cycle_ms(k, 4) == pytest.approx(TRUE.cycle_ms(k, 4), rel=0.01)
    slope_true = TRUE.cycle_ms(5, 4) - TRUE.cycle_ms(4, 4)
    assert two.step_ms(4) == pytest.approx(slope_true, rel=0.03)
    assert r.steps_seen() == [0, 3, 6]


def test_sparse_intervals_are_ignored_and_old_ones_fade():
    r = CostRefiner(min_cycles=20)
    r.add(batch=4, steps=3, spec_fraction=1.0, cycle_ms=100.0, cycles=5)  # too few cycles to trust
    assert not r.observations
    r.add(batch=4, steps=3, spec_fraction=1.0, cycle_ms=TRUE.cycle_ms(3, 4) * 1.3, cycles=500)  # an old, slower era
    for _ in range(60):
        r.add(batch=4, steps=3, spec_fraction=1.0, cycle_ms=TRUE.cycle_ms(3, 4), cycles=500)
    assert r.refine(BIASED).cycle_ms(3, 4) == pytest.approx(TRUE.cycle_ms(3, 4), rel=0.01)


def test_doubt_is_large_only_for_parts_no_timing_has_exercised():
    r = CostRefiner()
    prior = r.refine(BIASED)
    assert prior.relative_sd(4, 3, 4) > 0  # no data: the prior's error
    for _ in range(6):
        r.add(batch=4, steps=2, spec_fraction=1.0, cycle_ms=TRUE.cycle_ms(2, 4), cycles=500)
        r.add(batch=4, steps=3, spec_fraction=1.0, cycle_ms=TRUE.cycle_ms(3, 4), cycles=500)
    fit = r.refine(BIASED)
    between_seen = fit.relative_sd(3, 2, 4)
    to_plain = fit.relative_sd(0, 2, 4)  # plain decoding never ran: its split from the speculative extra is unknown
    assert between_seen < 0.01 and to_plain > 2 * between_seen
    assert fit.relative_sd(2, 2, 4) == 0.0
