"""The cost refiner's admission thresholds, its memory, and its fit checked against the textbook posterior.

Why: the fit is written over all observations at once (vectorised), while ``features`` states what one observation
contributes; a sign or a ``/`` for ``*`` in the vectorised form only shows at batch sizes above 1 with every part
of the profile non-zero, and a weight written wrong only shows with observations of unequal age and size. The
reference here is the closed-form Bayesian linear regression (prior N(1, sd^2) per factor, observation variance
(obs_sd x y)^2 faded by ``forget`` per interval of age) over rows built with ``features``."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from helpers import REFINE_COST

from specdecode_operator.tuner.cost_refine import MAX_OBS, CostRefiner, RefinedCost, features, parts

BASE = REFINE_COST


def test_features_are_the_plain_cycle_the_speculative_extra_and_the_steps():
    t0, s, d = parts(BASE, 16)
    assert list(features(BASE, 0, 16)) == [t0, 0.0, 0.0]  # no speculation: no speculative extra
    assert list(features(BASE, 1, 16)) == pytest.approx([t0, s, d])
    assert list(features(BASE, 3, 16)) == pytest.approx([t0, s, 3 * d])


@pytest.mark.parametrize(
    "batch,cycle_ms,cycles,kept",
    [
        (8, 12.0, 19.0, False),  # fewer cycles than the minimum: too noisy
        (8, 12.0, 20.0, True),  # exactly the minimum
        (8, 12.0, 21.0, True),
        (8, 0.0, 100.0, False),  # no time measured
        (8, 0.5, 100.0, True),  # a sub-millisecond cycle is still a measurement
        (0.0, 12.0, 100.0, False),  # no batch
        (0.5, 12.0, 100.0, True),
    ],
)
def test_an_interval_is_kept_only_with_enough_cycles_time_and_batch(batch, cycle_ms, cycles, kept):
    r = CostRefiner()  # the default minimum: 20 cycles
    r.add(batch, 3, 1.0, cycle_ms, cycles)
    assert len(r.observations) == (1 if kept else 0)
    if kept:
        assert r.observations[0].cycles == cycles


def test_the_refiner_remembers_the_latest_intervals_only():
    r = CostRefiner()
    for i in range(MAX_OBS + 5):
        r.add(8, 3, 1.0, 10.0 + i, 100.0)
    assert len(r.observations) == MAX_OBS
    assert r.observations[0].cycle_ms == 10.0 + 5  # the five oldest were dropped


def reference_fit(base, observations, prior_sd, obs_sd, forget):
    prec = np.eye(3) / prior_sd**2
    rhs = prec @ np.ones(3)
    n = len(observations)
    for age, (b, steps, f, y) in zip(range(n - 1, -1, -1), observations):
        x = np.array(features(base, steps, b))
        x[1] = parts(base, b)[1] * f  # a mix of plain and speculative cycles pays the extra on a fraction f
        w = forget**age / (obs_sd * y) ** 2
        prec += w * np.outer(x, x)
        rhs += w * y * x
    cov = np.linalg.inv(prec)
    return cov @ rhs, cov


# the served calibration's host terms (a fixed part and a per-step part) belong to the speculative extra and the slope
SERVED_BASE = dataclasses.replace(BASE, host_base=0.7, host_per_step=0.15)


@pytest.mark.parametrize("base", [BASE, SERVED_BASE], ids=["replayed", "served-calibrated"])
def test_the_fit_is_the_posterior_of_the_per_observation_features(base):
    obs = [(1.0, 0.0, 0.0, 8.9), (16.0, 3.0, 1.0, 14.2), (24.0, 5.0, 0.8, 19.5), (4.0, 2.0, 1.0, 11.1)]
    r = CostRefiner(prior_sd=0.2, obs_sd=0.03, forget=0.9)
    for b, steps, f, y in obs:
        r.add(b, steps, f, y, 100.0)
    fitted = r.refine(base)
    mean, cov = reference_fit(base, obs, 0.2, 0.03, 0.9)
    assert [fitted.rv, fitted.rs, fitted.rd] == pytest.approx(list(mean), rel=1e-9)
    assert np.asarray(fitted.cov) == pytest.approx(cov, rel=1e-9)


def test_a_prior_given_to_refine_replaces_the_refiners_own():
    r = CostRefiner(prior_sd=0.15)
    assert np.asarray(r.refine(BASE, prior_sd=0.05).cov) == pytest.approx(np.eye(3) * 0.05**2)
    assert np.asarray(r.refine(BASE).cov) == pytest.approx(np.eye(3) * 0.15**2)


def test_a_profile_without_a_fit_has_no_doubt():
    assert RefinedCost(BASE).relative_sd(5, 1, 8) == 0.0
