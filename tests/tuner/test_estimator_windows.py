"""The windowed estimator at its edges: what a caller reads back (acceptance per position with its bounds, sample
counts, batch means, phase averages, cycle costs) from counters built by hand, with every threshold (window length,
minimum attempts, change test, flip spacing, clamps) probed at, just inside and just outside its value.

Expected values are worked out here from the counts (Beta(1, 1) posterior means, Wilson intervals in their textbook
form, weighted least squares by numpy) or from the cost model's public functions, never from the estimator itself.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np
import pytest

from specdecode_operator.tuner.estimator import (
    Acceptance,
    BucketDelta,
    Estimator,
    bucket_delta,
    decay_extrapolate,
    wilson,
)
from specdecode_operator.tuner.snapshot import BucketCounters, PodSnapshot
from specdecode_runtime.contract.goodput import CycleCost

Z = 1.959964  # the two-sided 95 % normal quantile


class Pod:
    """One pod's cumulative counters, advanced one interval at a time and scraped at a given time."""

    def __init__(self, name: str = "pod-a") -> None:
        self.name = name
        self.buckets: dict[str, BucketCounters] = {}
        self.tokens: float | None = None

    def run(
        self,
        label: str = "1",
        cycles: float = 100.0,
        batch: float = 1.0,
        steps: int | None = 0,
        attempts: dict[int, float] | None = None,
        accepted: dict[int, float] | None = None,
        phase_s: dict[str, float] | None = None,
    ) -> Pod:
        """``cycles`` cycles at mean batch ``batch`` and ``steps`` draft steps (None: the step gauge is absent)."""
        b = self.buckets.setdefault(label, BucketCounters())
        b.cycles += cycles
        b.requests += cycles * batch
        b.draft_steps += cycles * (steps or 0)
        for src, dst in ((attempts, b.attempts), (accepted, b.accepted), (phase_s, b.phase_sum)):
            for key, v in (src or {}).items():
                dst[key] = dst.get(key, 0.0) + v
        b.num_steps = steps
        return self

    def at(self, t: float) -> PodSnapshot:
        values = {} if self.tokens is None else {"tokens_total": self.tokens}
        return PodSnapshot(self.name, t, buckets=copy.deepcopy(self.buckets), values=values)


def feed(est: Estimator, intervals: list[dict], label: str = "1") -> list:
    """Observe a baseline scrape at t = 0, then one scrape every 10 s after each interval's counts; the reports."""
    pod = Pod()
    est.observe([pod.at(0.0)])
    reports = []
    for i, kw in enumerate(intervals, start=1):
        pod.run(label, **kw)
        reports.append(est.observe([pod.at(10.0 * i)]))
    return reports


def posterior(acc: float, att: float) -> float:
    return (acc + 1.0) / (att + 2.0)


def wilson_textbook(s: float, n: float, z: float = Z) -> tuple[float, float]:
    """Wilson's interval in its textbook form: (s + z^2/2 +- z sqrt(s (n - s) / n + z^2 / 4)) / (n + z^2)."""
    centre = (s + z * z / 2) / (n + z * z)
    half = z * math.sqrt(s * (n - s) / n + z * z / 4) / (n + z * z)
    return max(0.0, centre - half), min(1.0, centre + half)


def fields(cost: CycleCost) -> tuple[float, ...]:
    return dataclasses.astuple(cost)


# -- one interval's counts ---------------------------------------------------------------------------------------


def test_bucket_delta_is_the_difference_of_two_scrapes_with_unchanged_series_left_out():
    prev = BucketCounters(
        cycles=10,
        requests=20,
        draft_steps=30,
        attempts={1: 30, 2: 10, 3: 0},
        accepted={1: 20, 2: 5},
        phase_sum={"verify": 1.0, "draft": 0.5},
        num_steps=2,
    )
    cur = BucketCounters(
        cycles=15,
        requests=32,
        draft_steps=40,
        attempts={1: 40, 2: 10, 4: 3},  # position 3 vanished at 0: nothing happened there
        accepted={1: 26, 2: 5, 3: 2},  # position 3 appears with its first increment
        phase_sum={"verify": 1.25, "draft": 0.5, "other": 0.125},
        num_steps=3,
    )
    assert bucket_delta(prev, cur) == BucketDelta(
        steps=3,
        cycles=5,
        requests=12,
        draft_steps=10,
        attempts={1: 10, 4: 3},
        accepted={1: 6, 3: 2},
        phase_sum={"verify": 0.25, "other": 0.125},
    )


def test_bucket_delta_of_a_first_scrape_is_its_counts_and_of_an_idle_bucket_is_empty():
    cur = BucketCounters(cycles=4, requests=8, draft_steps=12, attempts={1: 8}, accepted={1: 6}, phase_sum={"v": 0.5})
    assert bucket_delta(None, cur) == BucketDelta(
        steps=None, cycles=4, requests=8, draft_steps=12, attempts={1: 8}, accepted={1: 6}, phase_sum={"v": 0.5}
    )
    # nothing moved: an empty interval, not a restarted process
    assert bucket_delta(cur, copy.deepcopy(cur)) == BucketDelta(steps=None)


@pytest.mark.parametrize(
    "change",
    [
        {"cycles": 9.0},
        {"requests": 19.0},
        {"draft_steps": 29.0},
        {"attempts": {1: 29.0}},
        {"accepted": {1: 19.0}},
        {"phase_sum": {"verify": 0.9}},
        {"attempts": {}},  # a series gone that had counted something
    ],
)
def test_any_counter_going_backwards_is_a_restart(change):
    prev = BucketCounters(
        cycles=10, requests=20, draft_steps=30, attempts={1: 30}, accepted={1: 20}, phase_sum={"verify": 1.0}
    )
    cur = copy.deepcopy(prev)
    for name, value in change.items():
        setattr(cur, name, value)
    assert bucket_delta(prev, cur) is None


def test_deltas_add_up_per_key_and_keep_the_latest_step_gauge():
    total = BucketDelta(
        steps=2, cycles=1, requests=2, draft_steps=3, attempts={1: 4}, accepted={1: 2}, phase_sum={"verify": 0.5}
    )
    total.add(
        BucketDelta(
            steps=None,
            cycles=10,
            requests=20,
            draft_steps=30,
            attempts={1: 1, 2: 7},
            accepted={2: 3},
            phase_sum={"d": 2},
        )
    )
    assert total == BucketDelta(
        steps=2,  # an interval without the gauge does not erase it
        cycles=11,
        requests=22,
        draft_steps=33,
        attempts={1: 5, 2: 7},
        accepted={1: 2, 2: 3},
        phase_sum={"verify": 0.5, "d": 2},
    )
    total.add(BucketDelta(steps=0))
    assert total.steps == 0
    assert total.tokens == 22 + 5  # one bonus token per request plus every accepted draft
    assert total.busy_s == 2.5


# -- Wilson interval -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("s, n", [(8, 10), (1, 3), (150, 200), (0.5, 2.5), (3, 1000)])
def test_wilson_is_the_textbook_interval(s, n):
    assert wilson(s, n) == pytest.approx(wilson_textbook(s, n), rel=1e-12)
    assert wilson(s, n, z=1.0) == pytest.approx(wilson_textbook(s, n, z=1.0), rel=1e-12)


def test_wilson_without_trials_is_the_whole_unit_interval_and_one_trial_is_not():
    assert wilson(0, 0) == (0.0, 1.0)
    assert wilson(3, -1) == (0.0, 1.0)
    lo, hi = wilson(1, 1)  # one success: lower bound 1 / (1 + z^2)
    assert lo == pytest.approx(1 / (1 + Z * Z), rel=1e-12) and hi == 1.0
    lo, hi = wilson(0.5, 0.5)  # fractional counts (summed over pods, decayed memory) are still data
    assert (lo, hi) == pytest.approx(wilson_textbook(0.5, 0.5), rel=1e-12)


def test_wilson_bounds_stay_inside_zero_and_one_at_the_extremes():
    # unclamped, rounding puts these a hair outside: -2.8e-17 and 1 + 2.2e-16
    assert wilson(0, 7)[0] == 0.0
    assert wilson(20, 20)[1] == 1.0


def test_accept_length_counts_only_observed_positions():
    curve = Acceptance([0.5, 0.5, 0.5], [0.4] * 3, [0.6] * 3, [1e3] * 3, observed=2)
    assert curve.accept_length == 1 + 0.5 + 0.25
    assert dataclasses.replace(curve, observed=0).accept_length == 1.0


# -- ingest ----------------------------------------------------------------------------------------------------------


def test_a_first_scrape_is_only_a_baseline():
    est, pod = Estimator(), Pod()
    pod.run("1", cycles=100)
    rep = est.observe([pod.at(0.0)])
    assert not rep.usable and rep.interval_s is None and rep.tokens_per_s is None
    assert est.buckets() == [] and est.samples("1") == 0 and est.last_seen == {}


def test_an_empty_scrape_round_is_not_usable():
    rep = Estimator().observe([])
    assert not rep.usable and rep.interval_s is None and rep.pods_used == []


def test_interval_and_token_rate_are_averaged_over_the_pods_used():
    est, a, b = Estimator(), Pod("a"), Pod("b")
    b.tokens = 50.0  # pod a's token counter has not appeared yet (a series appears on its first increment)
    est.observe([a.at(0.0), b.at(9.0)])
    a.run("1", cycles=10)
    b.run("1", cycles=20)
    a.tokens, b.tokens = 100.0, 80.0
    rep = est.observe([a.at(10.0), b.at(10.5)])
    assert rep.pods_used == ["a", "b"] and rep.usable
    assert rep.interval_s == pytest.approx((10.0 + 1.5) / 2)
    assert rep.tokens_per_s == pytest.approx((100 + 30) / 5.75)
    assert rep.bucket_cycles == {"1": 30}  # the pods' intervals are summed per bucket
    assert est.last_interval["1"].cycles == 30 and est.samples("1") == 30
    assert est.last_seen == {"1": 10.5}


def test_token_rate_over_an_interval_shorter_than_a_second():
    est, pod = Estimator(), Pod()
    pod.tokens = 0.0
    est.observe([pod.at(0.0)])
    pod.run("1", cycles=5)
    pod.tokens = 10.0
    rep = est.observe([pod.at(0.5)])
    assert rep.interval_s == 0.5 and rep.tokens_per_s == 20.0


def test_unreadable_and_invalid_pods_sit_the_interval_out():
    est, ok = Estimator(), Pod("ok")
    est.observe([ok.at(0.0)])
    ok.run("1", cycles=10)
    invalid = PodSnapshot("nan", 12.0, problems=["x is nan"])
    rep = est.observe([ok.at(10.0), PodSnapshot("t", 99.0, error="timeout"), PodSnapshot("e", 99.0, error=""), invalid])
    assert rep.down == {"t": "timeout", "e": "down"}
    assert rep.invalid == {"nan": ["x is nan"]}
    assert rep.pods_used == ["ok"]
    # the time of the round is the latest readable scrape (an invalid one was read; a down one was not)
    assert est.last_seen == {"1": 12.0}


def test_a_scrape_not_later_than_the_last_is_skipped_and_becomes_the_baseline():
    est, pod = Estimator(), Pod()
    est.observe([pod.at(10.0)])
    pod.run("1", cycles=7)
    rep = est.observe([pod.at(10.0)])  # same time: no interval to divide by
    assert not rep.usable and rep.interval_s is None and est.buckets() == []
    pod.run("1", cycles=5)
    rep = est.observe([pod.at(9.0)])  # a clock that went back
    assert not rep.usable and est.buckets() == []
    pod.run("1", cycles=3)
    rep = est.observe([pod.at(20.0)])
    assert rep.pods_used == ["pod-a"] and rep.interval_s == 11.0
    assert est.samples("1") == 3  # counted from the last scrape, not from the first


def test_a_bucket_going_backwards_drops_the_whole_pod_and_rebases():
    est, pod = Estimator(), Pod()
    pod.run("1", cycles=50).run("2-7", cycles=50, batch=3)
    est.observe([pod.at(0.0)])
    pod.buckets["1"].cycles = 10.0  # a restarted process: its counters start again
    pod.run("2-7", cycles=20, batch=3)
    rep = est.observe([pod.at(10.0)])
    assert rep.resets == ["pod-a"] and not rep.usable and est.buckets() == []
    pod.run("1", cycles=4).run("2-7", cycles=6, batch=3)
    rep = est.observe([pod.at(20.0)])
    assert rep.usable and rep.bucket_cycles == {"1": 4, "2-7": 6}


def test_a_token_counter_going_backwards_is_a_restart_and_an_unchanged_one_is_idle():
    est, pod = Estimator(), Pod()
    pod.tokens = 100.0
    est.observe([pod.at(0.0)])
    pod.run("1", cycles=10)
    rep = est.observe([pod.at(10.0)])  # no new token: a valid interval at rate 0
    assert rep.usable and rep.tokens_per_s == 0.0
    pod.run("1", cycles=10)
    pod.tokens = 40.0
    rep = est.observe([pod.at(20.0)])
    assert rep.resets == ["pod-a"] and not rep.usable and est.samples("1") == 10


def test_a_pod_whose_token_counter_restarted_does_not_drop_the_pods_after_it():
    est, a, b = Estimator(), Pod("a"), Pod("b")
    a.tokens, b.tokens = 100.0, 100.0
    est.observe([a.at(0.0), b.at(0.0)])
    a.run("1", cycles=10)
    b.run("1", cycles=20)
    a.tokens, b.tokens = 5.0, 130.0
    rep = est.observe([a.at(10.0), b.at(10.0)])
    assert rep.resets == ["a"] and rep.pods_used == ["b"]
    assert rep.tokens_per_s == 3.0 and est.samples("1") == 20


def test_a_bucket_without_cycles_in_the_interval_is_not_a_sample():
    est, pod = Estimator(), Pod()
    pod.run("1", cycles=30).run("2-7", cycles=1, batch=2)
    est.observe([pod.at(0.0)])
    pod.run("2-7", cycles=40, batch=2)  # bucket "1" stays idle
    rep = est.observe([pod.at(10.0)])
    assert est.buckets() == ["2-7"] and rep.bucket_cycles == {"2-7": 40}
    assert "1" not in est.last_interval and "1" not in est.last_seen
    assert est.samples("1") == 0 and est.batch_mean("1") is None


def test_the_window_holds_the_latest_intervals_only():
    est = Estimator(window_intervals=2)
    feed(est, [{"cycles": 10}, {"cycles": 20}, {"cycles": 40, "batch": 1.25}])
    assert est.samples("1") == 60
    assert est.batch_mean("1") == pytest.approx((20 + 50) / 60)


def test_the_default_window_is_six_intervals():
    est = Estimator()
    feed(est, [{"cycles": 10 * i} for i in range(1, 8)])
    assert est.samples("1") == sum(10 * i for i in range(2, 8))


# -- workload changes ------------------------------------------------------------------------------------------------


def two_intervals(est: Estimator, old: dict, new: dict) -> list[str]:
    """The changed buckets reported for ``new`` after ``old`` filled the window (500 cycles at batch 1 each)."""
    reports = feed(est, [{"cycles": 500, **old}, {"cycles": 500, **new}])
    assert reports[0].changed_buckets == []
    changed = reports[1].changed_buckets
    assert est.samples("1") == (500 if changed else 1000)  # a change restarts the window at the new interval
    return changed


@pytest.mark.parametrize(
    "new_att, old_att, changed",
    [(50, 400, True), (49, 400, False), (400, 50, True), (400, 49, False)],
)
def test_acceptance_is_compared_only_where_both_sides_have_a_quarter_of_min_attempts(new_att, old_att, changed):
    est = Estimator(min_attempts=200)
    old = {"attempts": {1: old_att}}  # none accepted
    new = {"attempts": {1: new_att}, "accepted": {1: new_att}}  # all accepted: z far above any threshold
    assert two_intervals(est, old, new) == (["1"] if changed else [])


@pytest.mark.parametrize("rising", [True, False])
@pytest.mark.parametrize("change_z, changed", [(10.0, False), (9.999, True)])
def test_acceptance_change_is_a_two_proportion_z_test_strictly_above_change_z(change_z, changed, rising):
    # 50/50 against 0/50: pooled 0.5, se = sqrt(0.25 * (1/50 + 1/50)) = 0.1, z = 1 / 0.1 = 10 exactly
    est = Estimator(min_attempts=200, change_z=change_z)
    none, every = {"attempts": {1: 50}}, {"attempts": {1: 50}, "accepted": {1: 50}}
    old, new = (none, every) if rising else (every, none)
    assert two_intervals(est, old, new) == (["1"] if changed else [])


@pytest.mark.parametrize("change_z, changed", [(3.48, True), (3.49, False)])
def test_acceptance_change_z_with_unequal_counts(change_z, changed):
    # new 70/100, old 150/300: pooled 220/400 = 0.55, se = sqrt(0.55 * 0.45 * (1/100 + 1/300)) = 0.057446,
    # z = 0.2 / 0.057446 = 3.4816
    est = Estimator(min_attempts=200, change_z=change_z)
    old = {"attempts": {1: 300}, "accepted": {1: 150}}
    new = {"attempts": {1: 100}, "accepted": {1: 70}}
    assert two_intervals(est, old, new) == (["1"] if changed else [])


@pytest.mark.parametrize("side", ["new", "old"])
def test_a_position_with_nothing_accepted_counts_as_zero_in_the_change_test(side):
    # 0/50 against 50/50 is z = 10; were the missing count taken as 1, z would be 9.80
    est = Estimator(min_attempts=200, change_z=9.9)
    none, every = {"attempts": {1: 50}}, {"attempts": {1: 50}, "accepted": {1: 50}}
    old, new = (every, none) if side == "new" else (none, every)
    assert two_intervals(est, old, new) == ["1"]


def test_the_default_change_threshold_is_z_4():
    # new 140/200, old 200/400: pooled 340/600, se = sqrt(0.56667 * 0.43333 * (1/200 + 1/400)) = 0.042915, z = 4.66
    old = {"attempts": {1: 400}, "accepted": {1: 200}}
    new = {"attempts": {1: 200}, "accepted": {1: 140}}
    assert two_intervals(Estimator(), old, new) == ["1"]
    # z = 3.48 (the unequal-counts case above) is within the default threshold
    old = {"attempts": {1: 300}, "accepted": {1: 150}}
    new = {"attempts": {1: 100}, "accepted": {1: 70}}
    assert two_intervals(Estimator(), old, new) == []


def test_a_change_at_a_deeper_position_counts_after_shallower_ones_that_did_not():
    est = Estimator(min_attempts=200)
    # position 1: too few attempts to compare; position 2: the same rate; position 3: 0 % against 100 %
    old = {"attempts": {1: 10, 2: 400, 3: 400}, "accepted": {1: 10, 2: 200}}
    new = {"attempts": {1: 10, 2: 400, 3: 400}, "accepted": {1: 0, 2: 200, 3: 400}}
    assert two_intervals(est, old, new) == ["1"]


def test_a_position_the_window_never_attempted_is_not_compared():
    # the step count went up: position 2 is new, all accepted; even with a quarter of min_attempts at 1 attempt, no
    # count of the window's stands against it
    est = Estimator(min_attempts=4)
    old = {"steps": 1, "attempts": {1: 100}, "accepted": {1: 50}}
    new = {"steps": 2, "attempts": {1: 100, 2: 50}, "accepted": {1: 50, 2: 50}}
    assert two_intervals(est, old, new) == []


@pytest.mark.parametrize(
    "b_old, b_new, changed",
    [(4, 6, False), (4, 6.5, True), (4, 2, False), (4, 1.5, True), (1, 1.5, False), (1, 1.6, True)],
)
def test_a_batch_change_beyond_half_the_old_batch_or_half_a_sequence_is_a_change(b_old, b_new, changed):
    est = Estimator()
    assert two_intervals(est, {"batch": b_old}, {"batch": b_new}) == (["1"] if changed else [])


def test_changes_closer_together_than_flip_intervals_are_a_mixture_and_the_window_keeps_averaging():
    est = Estimator()  # flip_intervals 2
    reports = feed(est, [{"batch": 1}, {"batch": 4}, {"batch": 4}, {"batch": 1}])
    assert [r.changed_buckets for r in reports] == [[], ["1"], [], []]
    # the change at interval 4 comes 2 intervals after the one at interval 2: the window keeps 4, 4, 1
    assert est.samples("1") == 300 and est.batch_mean("1") == pytest.approx(3.0)


def test_changes_further_apart_than_flip_intervals_restart_the_window():
    est = Estimator()  # flip_intervals 2: a change 3 intervals after the last one is a new phase
    reports = feed(est, [{"batch": 1}, {"batch": 4}, {"batch": 4}, {"batch": 4}, {"batch": 1}])
    assert [r.changed_buckets for r in reports] == [[], ["1"], [], [], ["1"]]
    assert est.samples("1") == 100 and est.batch_mean("1") == 1.0


def test_a_change_drops_the_remembered_deep_positions_too():
    high = {"steps": 3, "attempts": {1: 400, 2: 400, 3: 400}, "accepted": {1: 360, 2: 320, 3: 280}}
    low = {"steps": 1, "attempts": {1: 400}, "accepted": {1: 40}}
    est = Estimator(window_intervals=1)
    assert feed(est, [high, low])[1].changed_buckets == ["1"]
    curve = est.acceptance("1", 3)
    assert curve.observed == 1 and curve.attempts == [400, 0, 0]
    assert curve.alphas == pytest.approx([posterior(40, 400)] * 3)  # a flat extension of the one position seen
    # the same intervals with the change test off: position 2 and 3 come from memory
    est = Estimator(window_intervals=1, change_z=1e9)
    assert feed(est, [high, low])[1].changed_buckets == []
    curve = est.acceptance("1", 3)
    assert curve.observed == 3 and curve.attempts == [400, 400, 400]
    assert curve.alphas[1:] == pytest.approx([posterior(320, 400), posterior(280, 400)])


# -- position memory -------------------------------------------------------------------------------------------------


def test_a_measured_position_is_remembered_with_halving_weight_after_the_window_slides_past_it():
    est = Estimator(window_intervals=1, change_z=1e9)  # memory_decay 0.5, min_attempts 200
    feed(
        est,
        [
            {"steps": 2, "attempts": {1: 400, 2: 400}, "accepted": {1: 360, 2: 200}},
            {"steps": 2, "attempts": {1: 400, 2: 400}, "accepted": {1: 360, 2: 100}},
            {"steps": 1, "attempts": {1: 400}, "accepted": {1: 360}},
        ],
    )
    # position 2: (200 * 0.5 + 100, 400 * 0.5 + 400) = (200, 600); not halved in interval 3, which did not reach it
    curve = est.acceptance("1", 3)
    assert curve.attempts == [400, 600, 0]
    assert curve.observed == 2
    assert curve.alphas[:2] == pytest.approx([posterior(360, 400), posterior(200, 600)])
    assert (curve.lower[1], curve.upper[1]) == pytest.approx(wilson_textbook(200, 600))
    fitted = decay_extrapolate(curve.alphas[:2], [400, 600], 3)
    assert curve.alphas[2] == pytest.approx(fitted[2])


def test_a_remembered_position_with_nothing_accepted_stays_at_zero_accepted():
    est = Estimator(window_intervals=1)
    feed(
        est,
        [
            {"steps": 2, "attempts": {1: 400, 2: 400}, "accepted": {1: 400}},  # position 2: none accepted
            {"steps": 1, "attempts": {1: 400}, "accepted": {1: 400}},
        ],
    )
    curve = est.acceptance("1", 2)
    assert curve.attempts == [400, 400] and curve.observed == 2
    assert curve.alphas == [posterior(400, 400), posterior(0, 400)]


def test_a_window_with_min_attempts_is_not_replaced_by_a_larger_memory():
    est = Estimator(window_intervals=1, change_z=1e9, min_attempts=200)
    feed(est, [{"attempts": {1: 200}, "accepted": {1: 200}}, {"attempts": {1: 200}}])
    # memory (100, 300) has more attempts, but the window's 200 are enough
    curve = est.acceptance("1", 1)
    assert curve.attempts == [200] and curve.observed == 1 and curve.alphas == [posterior(0, 200)]


def test_a_memory_no_larger_than_the_window_does_not_replace_it():
    est = Estimator(window_intervals=2, change_z=1e9, min_attempts=200)
    feed(
        est,
        [
            {"attempts": {1: 200}, "accepted": {1: 200}},
            {"attempts": {1: 100}},
            {"attempts": {1: 50}},
        ],
    )
    # window (0, 150); memory (200 / 4, 200 / 4 + 100 / 2 + 50) = (50, 150): as many attempts, so the window stands
    curve = est.acceptance("1", 1)
    assert curve.attempts == [150] and curve.observed == 0 and curve.alphas == [posterior(0, 150)]


def test_a_larger_memory_replaces_a_thin_window():
    est = Estimator(window_intervals=1, change_z=1e9, min_attempts=200)
    feed(est, [{"attempts": {1: 300}, "accepted": {1: 240}}, {"attempts": {1: 20}, "accepted": {1: 20}}])
    # memory (240 / 2 + 20, 300 / 2 + 20) = (140, 170) against the window's (20, 20)
    curve = est.acceptance("1", 1)
    assert curve.attempts == [170] and curve.observed == 0 and curve.alphas == [posterior(140, 170)]


# -- acceptance --------------------------------------------------------------------------------------------------


def test_a_bucket_without_data_has_the_uninformed_curve():
    curve = Estimator().acceptance("nothing", 3)
    assert curve == Acceptance([0.5] * 3, [0.0] * 3, [1.0] * 3, [0.0] * 3, 0)
    assert curve.accept_length == 1.0


@pytest.mark.parametrize("att, observed", [(199, 0), (200, 1), (201, 1)])
def test_a_position_is_observed_from_min_attempts_on(att, observed):
    est = Estimator()  # min_attempts 200
    feed(est, [{"attempts": {1: att}, "accepted": {1: att // 2}}])
    curve = est.acceptance("1", 1)
    assert curve.observed == observed and curve.attempts == [att]
    assert curve.alphas == [posterior(att // 2, att)]
    assert (curve.lower[0], curve.upper[0]) == pytest.approx(wilson_textbook(att // 2, att))


def test_observed_stops_at_the_first_position_short_of_min_attempts():
    est = Estimator(min_attempts=200)
    feed(est, [{"attempts": {1: 200, 2: 199, 3: 250}, "accepted": {1: 150, 2: 100, 3: 25}}])
    curve = est.acceptance("1", 3)
    assert curve.observed == 1 and curve.attempts == [200, 199, 250]
    a1 = posterior(150, 200)
    assert curve.alphas == pytest.approx([a1, a1, a1])  # one position seen: a flat extension
    for i, (acc, att) in enumerate([(100, 199), (25, 250)], start=1):
        lo, hi = wilson_textbook(acc, att)
        assert curve.lower[i] == pytest.approx(min(lo, a1)) and curve.upper[i] == pytest.approx(max(hi, a1))


def test_with_no_position_observed_the_thin_counts_stand_as_they_are():
    est = Estimator(min_attempts=200)
    feed(est, [{"attempts": {1: 100, 2: 250}, "accepted": {1: 90, 2: 50}}])
    curve = est.acceptance("1", 2)
    assert curve.observed == 0
    assert curve.alphas == pytest.approx([posterior(90, 100), posterior(50, 250)])  # no 0.5 stand-in
    for i, (acc, att) in enumerate([(90, 100), (50, 250)]):
        lo, hi = wilson_textbook(acc, att)
        assert curve.lower[i] == pytest.approx(min(lo, curve.alphas[i]))
        assert curve.upper[i] == pytest.approx(max(hi, curve.alphas[i]))
    assert curve.accept_length == 1.0


def test_extrapolated_positions_take_the_fitted_decay_and_widen_their_bounds_to_it():
    est = Estimator(min_attempts=200)
    feed(
        est,
        [
            {
                "attempts": {1: 1000, 2: 500, 3: 100, 4: 100},
                "accepted": {1: 900, 2: 350, 3: 99, 4: 5},
            }
        ],
    )
    curve = est.acceptance("1", 5)
    seen = [posterior(900, 1000), posterior(350, 500)]
    fitted = decay_extrapolate(seen, [1000, 500], 5)
    assert curve.observed == 2
    assert curve.alphas == pytest.approx(fitted)
    assert fitted[2] < seen[1] and fitted[4] < fitted[3] < fitted[2]
    lo3, hi3 = wilson_textbook(99, 100)  # well above the fit: the fit is the lower bound
    lo4, hi4 = wilson_textbook(5, 100)  # well below the fit: the fit is the upper bound
    assert lo3 > fitted[2] and hi4 < fitted[3]
    assert curve.lower[2:] == pytest.approx([fitted[2], lo4, 0.0])
    assert curve.upper[2:] == pytest.approx([hi3, fitted[3], 1.0])
    assert curve.accept_length == pytest.approx(1 + seen[0] + seen[0] * seen[1])


# -- the latest interval alone ---------------------------------------------------------------------------------------


def test_latest_alphas_take_positions_with_min_attempts_from_the_latest_interval():
    est = Estimator(min_attempts=50)
    feed(est, [{"attempts": {1: 50, 2: 49, 3: 60}, "accepted": {1: 25, 2: 49}}])
    assert est.latest_alphas("1", [0.9, 0.8]) == [0.5, 0.8]  # position 3 lies beyond the curve asked for
    assert est.latest_alphas("1", [0.9, 0.8, 0.7]) == [0.5, 0.8, 0.0]  # attempted, none accepted
    assert est.latest_alphas("other", [0.9]) == [0.9]


def test_latest_alphas_keep_the_fallback_where_the_interval_did_not_attempt_a_position():
    est = Estimator(min_attempts=1)
    feed(est, [{"steps": 1, "attempts": {1: 4}, "accepted": {1: 3}}])
    assert est.latest_alphas("1", [0.9, 0.8, 0.7]) == [0.75, 0.8, 0.7]


# -- phase averages and measured costs -------------------------------------------------------------------------------


def test_phase_ms_is_the_window_mean_per_cycle_and_draft_step_the_mean_per_draft_step():
    est = Estimator()
    feed(
        est,
        [
            {"steps": 3, "phase_s": {"verify": 1.0, "draft": 0.4, "draft_extend": 0.1, "other": 0.05}},
            {"steps": 0, "phase_s": {"verify": 0.8, "other": 0.05}},
        ],
    )
    # 200 cycles, 300 draft steps
    assert est.phase_ms("1") == pytest.approx(
        {"verify": 9.0, "draft": 2.0, "draft_extend": 0.5, "other": 0.5, "draft_step": 400 / 300}
    )


def test_phase_ms_of_a_single_cycle_and_a_single_draft_step():
    est = Estimator()
    feed(est, [{"cycles": 1, "steps": 1, "phase_s": {"verify": 0.01, "draft": 0.002}}])
    assert est.phase_ms("1") == pytest.approx({"verify": 10.0, "draft": 2.0, "draft_step": 2.0})
    assert est.measured_cycle_s("1") == pytest.approx(0.012)
    assert est.samples("1") == 1 and est.batch_mean("1") == 1.0


def test_phase_ms_without_draft_steps_or_draft_time():
    est = Estimator()
    assert est.phase_ms("1") == {}
    feed(est, [{"steps": 0, "phase_s": {"verify": 1.0}}])
    assert est.phase_ms("1") == pytest.approx({"verify": 10.0})  # plain decoding: no per-step cost
    est = Estimator()
    feed(est, [{"steps": 2, "phase_s": {"verify": 1.0}}])
    assert est.phase_ms("1") == pytest.approx({"verify": 10.0, "draft_step": 0.0})


def test_measured_cycle_time_is_the_latest_interval_alone():
    est = Estimator()
    assert est.measured_cycle_s("1") is None
    feed(est, [{"phase_s": {"verify": 1.0}}, {"cycles": 50, "phase_s": {"verify": 0.3, "other": 0.2}}])
    assert est.measured_cycle_s("1") == pytest.approx(0.5 / 50)
    feed(est := Estimator(), [{"cycles": 100}])  # no phase timings exported
    assert est.measured_cycle_s("1") is None


def test_measured_goodput_is_tokens_per_busy_second_over_the_window_or_the_latest_interval():
    est = Estimator()
    assert est.measured_goodput("1") is None and est.measured_goodput("1", latest_only=True) is None
    feed(
        est,
        [
            {"cycles": 100, "batch": 2, "attempts": {1: 200}, "accepted": {1: 100}, "phase_s": {"verify": 1.0}},
            {"cycles": 100, "batch": 2, "attempts": {1: 200}, "accepted": {1: 110}, "phase_s": {"verify": 0.25}},
        ],
    )
    assert est.measured_goodput("1") == pytest.approx((400 + 210) / 1.25)
    assert est.measured_goodput("1", latest_only=True) == pytest.approx((200 + 110) / 0.25)
    feed(est := Estimator(), [{"cycles": 100}])
    assert est.measured_goodput("1") is None and est.measured_goodput("1", latest_only=True) is None


PROFILE = CycleCost(
    verify_base=8.0,
    verify_per_token=0.04,
    draft_base=0.6,
    draft_per_seq=0.002,
    extend_base=0.67,
    extend_per_token=0.0017,
    overhead=0.001,  # with the broadcast, well under 1 ms of overhead predicted over the window
    broadcast=0.002,
    warm_extend_base=0.2,
    warm_extend_per_seq=0.01,
    host_base=0.0005,  # host work of a speculative cycle: "other", like the overhead
    host_per_step=0.0002,
)


def test_without_data_the_cost_is_the_profile_or_nothing():
    est = Estimator()
    assert est.cost("1", PROFILE) == (PROFILE, "profile")
    assert est.cost("1", None) == (None, "none")


def test_measured_constants_without_a_profile():
    est = Estimator()
    feed(
        est,
        [
            {"batch": 2, "steps": 1, "phase_s": {"verify": 1.2, "draft": 0.45, "draft_extend": 0.1, "other": 0.04}},
            {"batch": 2, "steps": 0, "phase_s": {"verify": 0.8, "other": 0.04}},
            {"batch": 2, "steps": None, "phase_s": {"verify": 1.0, "other": 0.04}},  # no step gauge: not speculative
        ],
    )
    cost, source = est.cost("1", None)
    assert source == "measured"
    # 300 cycles, 100 draft steps, 100 speculative cycles (the one-step interval)
    expected = CycleCost(
        verify_base=1000 * 3.0 / 300,
        verify_per_token=0.0,
        draft_base=1000 * 0.45 / 100,
        draft_per_seq=0.0,
        extend_base=1000 * 0.1 / 100,
        extend_per_token=0.0,
        overhead=1000 * 0.12 / 300,
    )
    assert fields(cost) == pytest.approx(fields(expected))


def test_measured_constants_of_plain_decoding_have_no_draft_parts():
    est = Estimator()
    feed(est, [{"steps": 0, "phase_s": {"verify": 1.0, "other": 0.1}}])
    cost, source = est.cost("1", None)
    assert source == "measured"
    assert fields(cost) == pytest.approx(fields(CycleCost(10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)))


@pytest.mark.parametrize(
    "phase_s, expected",
    [
        ({"verify": 1.0}, (10.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)),
        ({"other": 0.1}, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0)),
        ({"draft": 0.4, "draft_extend": 0.2}, (0.0, 0.0, 2.0, 0.0, 2.0, 0.0, 0.0)),
    ],
)
def test_measured_constants_of_a_phase_not_timed_are_zero(phase_s, expected):
    est = Estimator()
    feed(est, [{"steps": 2, "phase_s": phase_s}])  # 100 cycles, 200 draft steps
    cost, source = est.cost("1", None)
    assert source == "measured"
    assert fields(cost) == pytest.approx(fields(CycleCost(*expected)))


def scaled(profile: CycleCost, intervals: list[dict], prior: float) -> CycleCost:
    """The profile with each phase's parts scaled by 1 + w (measured / predicted - 1), w = cycles / (cycles + prior),
    the prediction summed over the intervals from the profile's own phase costs."""
    pred = dict.fromkeys(("verify", "draft", "draft_extend", "other"), 0.0)
    meas = dict.fromkeys(pred, 0.0)
    cycles = 0.0
    for iv in intervals:
        c, b, k = iv["cycles"], iv["batch"], iv["steps"] or 0
        cycles += c
        pred["verify"] += c * profile.verify_ms(k, b)
        pred["draft"] += c * k * profile.draft_step_ms(b)
        pred["draft_extend"] += c * (profile.extend_ms(k, b) if k else profile.warm_extend_ms(b))
        pred["other"] += c * (profile.overhead + (profile.broadcast + profile.host_ms(k) if k else 0.0))
        for phase, s in iv["phase_s"].items():
            meas[phase] += 1000.0 * s
    w = cycles / (cycles + prior)
    f = {p: 1 + w * (meas[p] / pred[p] - 1) if pred[p] else 1.0 for p in pred}
    return CycleCost(
        profile.verify_base * f["verify"],
        profile.verify_per_token * f["verify"],
        profile.draft_base * f["draft"],
        profile.draft_per_seq * f["draft"],
        profile.extend_base * f["draft_extend"],
        profile.extend_per_token * f["draft_extend"],
        profile.overhead * f["other"],
        profile.broadcast * f["other"],
        profile.warm_extend_base * f["draft_extend"],
        profile.warm_extend_per_seq * f["draft_extend"],
        profile.host_base * f["other"],
        profile.host_per_step * f["other"],
    )


def test_the_profile_is_scaled_phase_by_phase_weighted_by_the_cycles_behind_it():
    intervals = [
        {
            "cycles": 100,
            "batch": 2,
            "steps": 3,
            "phase_s": {"verify": 1.0, "draft": 0.25, "draft_extend": 0.09, "other": 0.0004},
        },
        {"cycles": 100, "batch": 2.5, "steps": 0, "phase_s": {"verify": 0.9, "draft_extend": 0.03, "other": 0.0001}},
    ]
    est = Estimator(prior_weight_cycles=50)
    feed(est, [dict(iv) for iv in intervals])
    cost, source = est.cost("1", PROFILE)
    assert source == "profile-scaled"
    expected = scaled(PROFILE, intervals, prior=50)
    assert fields(cost) == pytest.approx(fields(expected), rel=1e-9)
    # every part moved: verify measured 1900 ms against 100 * 8.32 + 100 * 8.1 predicted, weight 200 / 250
    assert expected.verify_base == pytest.approx(8.0 * (1 + 0.8 * (1900 / 1642 - 1)))
    assert all(a != b for a, b in zip(fields(expected), fields(PROFILE)))


def test_the_default_prior_weighs_as_much_as_200_cycles():
    iv = {"cycles": 200, "batch": 1, "steps": 2, "phase_s": {"verify": 3.2, "draft": 0.3, "draft_extend": 0.2}}
    est = Estimator()
    feed(est, [dict(iv)])
    cost, _ = est.cost("1", PROFILE)
    assert fields(cost) == pytest.approx(fields(scaled(PROFILE, [iv], prior=200)), rel=1e-9)
    # half weight: the verify part moves halfway from the profile's 8.12 ms to the measured 16 ms per cycle
    assert cost.verify_ms(2, 1) == pytest.approx((PROFILE.verify_ms(2, 1) + 16.0) / 2)


def test_an_interval_without_the_step_gauge_is_predicted_as_plain_decoding():
    iv = {"cycles": 100, "batch": 1, "steps": None, "phase_s": {"verify": 1.2, "draft_extend": 0.04, "other": 0.01}}
    est = Estimator(prior_weight_cycles=100)
    feed(est, [dict(iv)])
    cost, _ = est.cost("1", PROFILE)
    assert fields(cost) == pytest.approx(fields(scaled(PROFILE, [iv], prior=100)), rel=1e-9)


def test_plain_decoding_leaves_the_parts_it_cannot_see_as_profiled():
    profile = dataclasses.replace(PROFILE, warm_extend_base=0.0, warm_extend_per_seq=0.0)
    est = Estimator(prior_weight_cycles=100)
    feed(est, [{"cycles": 100, "batch": 1, "steps": 0, "phase_s": {"verify": 1.6, "other": 0.0002}}])
    cost, source = est.cost("1", profile)
    assert source == "profile-scaled"
    # no draft step and no draft extend predicted: those parts stay; verify and overhead move halfway
    assert (cost.draft_base, cost.draft_per_seq) == (profile.draft_base, profile.draft_per_seq)
    assert (cost.extend_base, cost.extend_per_token) == (profile.extend_base, profile.extend_per_token)
    assert cost.verify_ms(0, 1) == pytest.approx((profile.verify_ms(0, 1) + 16.0) / 2)
    assert cost.overhead == pytest.approx(profile.overhead * (1 + 0.5 * (0.2 / 0.1 - 1)))  # 0.2 ms against 0.1


def test_a_single_cycle_interval_scales_the_profile():
    iv = {"cycles": 1, "batch": 1, "steps": 1, "phase_s": {"verify": 0.02, "draft": 0.001, "draft_extend": 0.001}}
    est = Estimator(prior_weight_cycles=1)
    feed(est, [dict(iv)])
    cost, _ = est.cost("1", PROFILE)
    assert fields(cost) == pytest.approx(fields(scaled(PROFILE, [iv], prior=1)), rel=1e-9)
    assert cost.verify_base != PROFILE.verify_base


# -- decay extrapolation ---------------------------------------------------------------------------------------------


def test_decay_without_data_is_one_half_and_with_one_position_flat():
    assert decay_extrapolate([], [], 3) == [0.5, 0.5, 0.5]
    assert decay_extrapolate([], [], 0) == []
    assert decay_extrapolate([0.8], [500], 3) == [0.8, 0.8, 0.8]


def test_decay_is_a_weighted_least_squares_line_through_log_alpha():
    alphas, weights = [0.9, 0.7, 0.65], [1000.0, 300.0, 50.0]
    out = decay_extrapolate(alphas, weights, 6)
    # numpy weights residuals, not their squares: sqrt of the least-squares weights
    slope = np.polyfit([1, 2, 3], np.log(alphas), 1, w=np.sqrt(weights))[0]
    assert out[:3] == alphas
    assert out[3:] == pytest.approx([0.65 * math.exp(slope * k) for k in (1, 2, 3)], rel=1e-9)


def test_decay_gives_a_zero_weight_position_no_say():
    out = decay_extrapolate([0.1, 0.8, 0.6], [0.0, 100.0, 100.0], 4)
    assert out[3] == pytest.approx(0.6 * 0.6 / 0.8, rel=1e-6)


def test_decay_depends_on_relative_weights_only_however_small():
    alphas = [0.9, 0.7, 0.65]
    small = decay_extrapolate(alphas, [0.01, 0.003, 0.0005], 5)
    assert small == pytest.approx(decay_extrapolate(alphas, [1000.0, 300.0, 50.0], 5), rel=1e-9)
    assert small[4] < small[3] < 0.65


def test_decay_never_extrapolates_above_one():
    assert decay_extrapolate([1.2], [1.0], 3) == [1.2, 1.0, 1.0]
    assert decay_extrapolate([0.5, 0.9], [100, 100], 3)[2] == pytest.approx(0.9)


def test_decay_through_a_zero_alpha_stays_finite():
    out = decay_extrapolate([0.9, 0.8, 0.0, 0.5], [1.0, 1.0, 1.0, 2.0], 5)
    ys = np.log([0.9, 0.8, 1e-6, 0.5])  # an alpha of 0 enters the fit as 1e-6
    slope = np.polyfit([1, 2, 3, 4], ys, 1, w=np.sqrt([1.0, 1.0, 1.0, 2.0]))[0]
    assert slope < 0 and math.isfinite(out[4]) and out[4] == pytest.approx(0.5 * math.exp(slope), rel=1e-9)
