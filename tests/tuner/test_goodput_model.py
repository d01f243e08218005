"""The tuner relies on the shared goodput model; these pin it to the closed forms it must reproduce."""

import pytest

from specdecode_runtime.contract.goodput import CycleCost, best_steps, expected_tokens, goodput


@pytest.mark.parametrize("alpha", [0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 7])
def test_iid_expected_tokens_matches_leviathan_closed_form(alpha, k):
    assert expected_tokens([alpha], k) == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha), rel=1e-12)


def test_goodput_is_batch_times_tokens_over_cycle_time():
    cost = CycleCost(10, 0.1, 1, 0, 1, 0, 0.5)
    k, b = 3, 4
    expected = b * expected_tokens([0.7], k) / (10 + 0.1 * b * 4 + 3 * 1 + 1 + 0.5) * 1000
    assert goodput([0.7], cost, k, b) == pytest.approx(expected)


def test_expensive_draft_makes_no_speculation_best():
    cost = CycleCost(10, 0.0, 20, 0, 5, 0, 0.0)
    assert best_steps([0.5], cost, 1, range(0, 8))[0] == 0
