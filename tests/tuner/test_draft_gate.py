"""The draft canary's gate: per-position acceptance of the new draft against the old one over N intervals."""

from __future__ import annotations

import pytest

from specdecode_operator.tuner.draft_gate import Acceptance, CanaryGate, delta, ratio
from specdecode_operator.tuner.snapshot import BucketCounters, PodSnapshot


def acc(rates: dict[int, float], drafted: float = 1000.0) -> Acceptance:
    return Acceptance({p: drafted for p in rates}, {p: drafted * r for p, r in rates.items()})


OLD = {1: 0.8, 2: 0.6, 3: 0.4}


@pytest.mark.parametrize(
    "new,expected",
    [
        ({1: 0.85, 2: 0.65, 3: 0.45}, "promote"),  # better
        (OLD, "promote"),  # equal
        ({1: 0.79, 2: 0.59, 3: 0.39}, "promote"),  # within minAcceptRatio 0.97
        ({1: 0.6, 2: 0.4, 3: 0.2}, "rollback"),  # worse
        ({1: 0.0, 2: 0.0, 3: 0.0}, "rollback"),  # a corrupted draft: nothing accepted
    ],
)
def test_verdict_after_the_configured_intervals(new, expected):
    gate = CanaryGate(intervals=2, min_ratio=0.97)
    gate.add(new=acc(new), old=acc(OLD))
    assert gate.decide().action == "wait"
    gate.add(new=acc(new), old=acc(OLD))
    verdict = gate.decide()
    assert verdict.action == expected, verdict.message


def test_worse_is_rolled_back_within_the_interval_count_single_replica():
    """One replica alternates: each draft gets its own intervals; the verdict comes after N of each, no later."""
    gate = CanaryGate(intervals=3, min_ratio=0.97)
    for i in range(3):
        gate.add(new=acc({1: 0.5, 2: 0.3}))
        assert gate.decide().action == "wait"
        gate.add(old=acc({1: 0.8, 2: 0.6}))
        assert gate.decide().action == ("rollback" if i == 2 else "wait")


def test_idle_intervals_do_not_count():
    gate = CanaryGate(intervals=1, min_ratio=0.97)
    gate.add(new=acc({1: 0.1}, drafted=3), old=acc({1: 0.8}))
    gate.add(new=None, old=acc({1: 0.8}))
    assert gate.decide().action == "wait"
    gate.add(new=acc({1: 0.8}), old=acc({1: 0.8}))
    assert gate.decide().action == "promote"


def test_positions_are_compared_per_position_not_pooled():
    """The new draft ran more steps (deep positions accept less): pooled it looks worse, per position it is equal."""
    new = Acceptance({1: 1000, 2: 1000, 3: 1000, 4: 1000}, {1: 800, 2: 600, 3: 400, 4: 100})
    old = Acceptance({1: 1000, 2: 1000}, {1: 800, 2: 600})
    assert new.rate() < old.rate()
    assert ratio(new, old) == pytest.approx(1.0)


def snap(pod, att, accd, ok=True):
    b = BucketCounters(attempts=dict(att), accepted=dict(accd))
    return PodSnapshot(pod, 0.0, buckets={"1-7": b}, error=None if ok else "down")


def test_delta_and_restarted_pod():
    a = snap("p", {1: 100, 2: 50}, {1: 80, 2: 30})
    b = snap("p", {1: 300, 2: 150}, {1: 240, 2: 90})
    d = delta(a, b)
    assert d is not None and d.attempts == {1: 200, 2: 100} and d.accepted == {1: 160, 2: 60}
    assert delta(b, a) is None  # counters went back: the pod restarted
    assert delta(a, snap("p", {}, {}, ok=False)) is None
    assert delta(None, b) is None
