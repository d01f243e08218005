"""The tuner's own bookkeeping, seen from its caller: what a ``Decision`` says (table, history, events, condition,
status, per-bucket reports), which cost each bucket is decided with and where it comes from, and how Rollout, Off
and the steps-0 re-probe keep their state.

The pods here are exact: counters advanced by the expected counts of a known acceptance curve and cycle cost, so
every expected value can be worked out from the goodput model and the estimator's own queries."""

from __future__ import annotations

import copy
import math
import time
from dataclasses import astuple

import pytest

from specdecode_operator.api.models import Autotune
from specdecode_operator.tuner.cost_refine import (
    PRIOR_SD_MEASURED,
    PRIOR_SD_OVERRIDE,
    PRIOR_SD_PHASE_AVERAGES,
    CostRefiner,
    Observation,
)
from specdecode_operator.tuner.estimator import Estimator
from specdecode_operator.tuner.policy import Aggregate, BucketState, PolicyConfig, choose
from specdecode_operator.tuner.snapshot import BucketCounters, PodSnapshot, down
from specdecode_operator.tuner.tuner import (
    FIRST_SCRAPE,
    NO_PODS,
    Event,
    Tuner,
    TunerConfig,
    iso,
)
from specdecode_runtime.contract.capabilities import tuner_steps
from specdecode_runtime.contract.cost_profile import fit_profile, points_from_samples
from specdecode_runtime.contract.goodput import CycleCost, alpha_at, expected_tokens, goodput
from specdecode_runtime.contract.metric_names import DEFAULT_BUCKETS

# 10 ms verify, 0.5 ms per draft step, per draft extend and of overhead (per-token terms 0: batch does not matter)
COST = CycleCost(10, 0.0, 0.5, 0, 0.5, 0, 0.5)
# drafting that never pays: a draft step costs more than a whole plain cycle
COSTLY = CycleCost(10, 0.0, 40.0, 0, 0.5, 0, 0.5)
ALL = tuple(range(8))
HIGH = [0.9]


class Pod:
    """One pod's cumulative counters, advanced by the exact expected counts (no sampling) of ``cycles`` cycles at a
    batch, a step count and a conditional acceptance curve, timed by a cycle cost."""

    def __init__(self, name: str = "pod-0") -> None:
        self.name = name
        self.counters: dict[str, BucketCounters] = {}
        self.tokens = 0.0
        self.candidates: list[int] = []
        self.costs: dict[tuple[str, int, str, int], float] = {}

    def run(
        self,
        label: str,
        cycles: float,
        batch: float,
        steps: int,
        alphas: list[float],
        cost: CycleCost | None = COST,
    ) -> None:
        b = self.counters.setdefault(label, BucketCounters())
        req = cycles * batch
        b.cycles += cycles
        b.requests += req
        b.draft_steps += cycles * steps
        survive, tokens = float(req), float(req)
        for j in range(1, steps + 1):
            b.attempts[j] = b.attempts.get(j, 0.0) + survive
            survive *= alpha_at(alphas, j)
            b.accepted[j] = b.accepted.get(j, 0.0) + survive
            tokens += survive
        if cost is not None:
            phases = {
                "verify": cost.verify_ms(steps, batch) if steps else cost.cycle_ms(0, batch) - cost.overhead,
                "draft": steps * cost.draft_step_ms(batch),
                "draft_extend": cost.extend_ms(steps, batch) if steps else 0.0,
                "other": cost.overhead + (cost.broadcast if steps else 0.0),
            }
            for phase, ms in phases.items():
                b.phase_sum[phase] = b.phase_sum.get(phase, 0.0) + cycles * ms / 1000.0
                b.phase_count[phase] = b.phase_count.get(phase, 0.0) + cycles
        b.num_steps = steps
        self.tokens += tokens

    def snap(self, t: float) -> PodSnapshot:
        return PodSnapshot(
            self.name,
            t,
            buckets=copy.deepcopy(self.counters),
            values={"tokens_total": self.tokens},
            candidates=list(self.candidates),
            costs=dict(self.costs),
        )


def probe_samples(cost: CycleCost, label: str, batch: int = 1) -> dict[tuple[str, int, str, int], float]:
    """A start-up cost probe of ``cost`` at one batch (seconds per stage at tiers 0 and 2)."""
    return {
        ("verify", 0, label, batch): cost.verify_ms(0, batch) / 1000.0,
        ("verify", 2, label, batch): cost.verify_ms(2, batch) / 1000.0,
        ("draft_step", 2, label, batch): cost.draft_step_ms(batch) / 1000.0,
        ("draft_extend", 2, label, batch): cost.extend_ms(2, batch) / 1000.0,
        ("overhead", 2, label, batch): cost.overhead / 1000.0,
    }


def live(**policy) -> TunerConfig:
    policy.setdefault("candidates", ALL)
    return TunerConfig(policy=PolicyConfig(**policy), initial_steps=2)


def first_decision(tuner: Tuner, pod: Pod, label="1", cycles=300, batch=1, steps=2, alphas=HIGH, t=10.0, **run):
    """Prime the tuner with the pod's counters at 0, run one interval of traffic, decide at ``t``."""
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run(label, cycles, batch, steps, alphas, **run)
    return tuner.step(t, [pod.snap(t)])


# -- configuration ---------------------------------------------------------------------------------------------------
def test_from_autotune_maps_every_field():
    at = Autotune(
        mode="Rollout", minSteps=2, maxSteps=6, intervalSeconds=15, objective="Latency", maxInterTokenLatencyMs=40
    )
    cfg = TunerConfig.from_autotune(at, num_steps=4, buckets=(1, 4, 16), restart_s=45.0)
    assert cfg.mode == "Rollout" and cfg.initial_steps == 4 and cfg.restart_s == 45.0
    assert cfg.buckets == (1, 4, 16)
    p = cfg.policy
    assert (p.min_steps, p.max_steps, p.objective, p.max_itl_ms) == (2, 6, "Latency", 40)
    assert p.candidates == tuple(tuner_steps("Rollout", 2, 6, 4))
    assert p.cooldown_s == 30.0 and p.explore_every_s == 180.0


def test_from_autotune_defaults_and_explicit_candidates():
    cfg = TunerConfig.from_autotune(Autotune(mode="Live"), num_steps=3, candidates=[0, 2, 5])
    assert cfg.policy.candidates == (0, 2, 5)
    assert cfg.buckets == DEFAULT_BUCKETS and cfg.restart_s == 300.0
    assert TunerConfig.from_autotune(Autotune(mode="Live"), 3, candidates=[]).policy.candidates == ()


@pytest.mark.parametrize("interval, explore", [(5, 120.0), (10, 120.0), (11, 132.0), (60, 720.0)])
def test_exploration_period_is_twelve_intervals_but_never_under_two_minutes(interval, explore):
    cfg = TunerConfig.from_autotune(Autotune(mode="Live", intervalSeconds=interval), num_steps=3)
    assert cfg.policy.explore_every_s == explore
    assert cfg.policy.cooldown_s == 2.0 * interval


def test_iso_is_utc_to_the_second(monkeypatch):
    assert iso(0) == "1970-01-01T00:00:00Z"
    assert iso(86400 + 3661.9) == "1970-01-02T01:01:01Z"
    monkeypatch.setenv("TZ", "America/New_York")  # the operator's local zone does not leak into status
    time.tzset()
    try:
        assert iso(0) == "1970-01-01T00:00:00Z"
    finally:
        monkeypatch.undo()
        time.tzset()


def test_a_new_tuner_runs_the_initial_steps_in_every_bucket():
    tuner = Tuner(TunerConfig(buckets=(8, 1, 32), initial_steps=4))
    assert tuner.table() == [(1, 4), (8, 4), (32, 4)]
    assert list(tuner.labels) == ["1-7", "8-31", "32+"]
    rollout = Tuner(TunerConfig(mode="Rollout", buckets=(1, 8), initial_steps=4))
    assert rollout.table() == [(1, 4)]
    assert tuner.last_reports == {} and tuner.history == [] and (tuner.changes, tuner.restarts) == (0, 0)
    assert tuner.measured_tokens_per_s is None


# -- a decision ------------------------------------------------------------------------------------------------------
def test_a_live_switch_is_applied_recorded_and_announced():
    tuner = Tuner(live(), profile=COST, refine=False)
    pod = Pod()
    d = first_decision(tuner, pod)
    rep = d.buckets["1"]
    ch = rep.choice
    assert (ch.kind, ch.steps) == ("switch", 3)
    # the report: the bucket before the change, its inputs, and where its cost came from
    assert (rep.bucket, rep.min_batch, rep.steps, rep.samples, rep.batch) == ("1", 1, 2, 300.0, 1.0)
    assert rep.observed_positions == 2 and len(rep.alphas) == max(ALL) + 1
    assert rep.alphas[0] == pytest.approx((270 + 1) / (300 + 2))
    assert rep.cost_source == "Override"
    # buckets never observed get the prior's report: bucket 1's acceptance at their own cost, no samples of their own
    others = [label for label in d.buckets if label != "1"]
    assert others == ["2-7", "8-31", "32-63", "64+"]
    for label in others:
        prior = d.buckets[label]
        assert prior.samples == 0 and prior.choice.kind == "switch" and prior.choice.steps == 3
        assert prior.choice.reason.startswith("prior from bucket 1 ")
    # applied: the table, the change count (every prior switch included), the decision's flags
    assert d.mode == "Live" and d.time == 10.0
    assert d.table == [(lo, 3) for lo in DEFAULT_BUCKETS] == tuner.table()
    assert d.changed and d.restart is False and d.rollout_steps is None
    assert d.recommended_table == d.table
    assert tuner.states["1"].steps == 3 and tuner.changes == 5
    # recorded: the observed bucket's switch first, then the priors
    h = d.history[0]
    assert [e.bucket for e in d.history] == ["1", *others]
    assert (h.time, h.bucket, h.fromSteps, h.toSteps) == ("1970-01-01T00:00:10Z", "1", 2, 3)
    assert h.reason == f"switch: {ch.reason}"
    assert h.predictedGain == round(ch.predicted_gain, 4) and h.predictedGain != ch.predicted_gain
    assert tuner.history == d.history
    # announced (a scraped interval adds no warning)
    assert d.events[0] == Event("Normal", "StepsChanged", f"bucket 1: steps 2 -> 3 (switch: {ch.reason})")
    assert [e.reason for e in d.events] == ["StepsChanged"] * 5
    assert d.step_table_body() == {"table": [{"minBatch": lo, "steps": 3} for lo in DEFAULT_BUCKETS]}


def test_a_hold_changes_nothing_and_records_nothing():
    tuner = Tuner(live(candidates=(2,)), profile=COST, refine=False)  # the only tier the pods serve
    d = first_decision(tuner, Pod())
    ch = d.buckets["1"].choice
    assert (ch.steps, ch.kind, ch.reason) == (2, "hold", "steps=2 is the model's best")
    assert not d.changed and d.history == [] and tuner.history == [] and tuner.changes == 0
    assert d.events == [] and d.table == tuner.table() == [(lo, 2) for lo in DEFAULT_BUCKETS]


def test_off_mode_recommends_without_applying_and_keeps_recommending():
    """Off reports the change every interval it is still the model's choice: the policy's armed rollback test is
    undone, so a slower interval (the same step count, nothing changed on the pods) is not taken for a failed
    change."""
    cfg = TunerConfig(mode="Off", policy=PolicyConfig(candidates=ALL, cooldown_s=0), initial_steps=2)
    tuner = Tuner(cfg, profile=COST, refine=False)
    pod = Pod()
    d = first_decision(tuner, pod)
    ch = d.buckets["1"].choice
    assert (ch.kind, ch.steps) == ("switch", 3)
    assert d.table == [(lo, 2) for lo in DEFAULT_BUCKETS] and not d.changed
    assert d.recommended_table == [(lo, 3) for lo in DEFAULT_BUCKETS]  # the never-observed buckets: the prior's
    h = d.history[0]
    assert (h.fromSteps, h.toSteps) == (2, 3) and len(d.history) == len(DEFAULT_BUCKETS)
    assert h.reason == f"switch: {ch.reason} (mode Off: not applied)"
    assert all("prior from bucket 1 " in e.reason and "(mode Off: not applied)" in e.reason for e in d.history[1:])
    assert d.events[0] == Event("Normal", "StepsRecommended", f"bucket 1: steps 2 -> 3 (switch: {ch.reason})")
    assert {e.reason for e in d.events} == {"StepsRecommended"}
    assert tuner.states["1"].steps == 2 and tuner.states["1"].pending_rollback is None and tuner.changes == 0
    # the pods keep running steps 2, 20 % slower this interval: still a recommendation, not a rollback
    pod.run("1", 300, 1, 2, HIGH, cost=CycleCost(12, 0.0, 0.6, 0, 0.6, 0, 0.6))
    d = tuner.step(20.0, [pod.snap(20.0)])
    assert d.buckets["1"].choice.kind == "switch"
    assert [(h.fromSteps, h.toSteps) for h in d.history] == [(2, 3)] * len(DEFAULT_BUCKETS)
    assert [(h.time, h.toSteps) for h in tuner.history if h.bucket == "1"] == [
        ("1970-01-01T00:00:10Z", 3),
        ("1970-01-01T00:00:20Z", 3),
    ]
    assert tuner.table() == [(lo, 2) for lo in DEFAULT_BUCKETS] and tuner.changes == 0


def test_history_keeps_the_latest_entries_up_to_its_limit():
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 2, 8), initial_steps=2, history_limit=2)
    tuner = Tuner(cfg, profile=COST, refine=False)
    pod = Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    for label, batch in (("1", 1), ("2-7", 4), ("8+", 8)):
        pod.run(label, 300, batch, 2, [0.95])
    d = tuner.step(10.0, [pod.snap(10.0)])
    assert [h.bucket for h in d.history] == ["1", "2-7", "8+"]  # the decision carries all of this interval's
    assert tuner.history == d.history[-2:]
    assert tuner.changes == 3 and d.table == [(1, 3), (2, 3), (8, 3)]
    assert [e.message.split(":")[0] for e in d.events] == ["bucket 1", "bucket 2-7", "bucket 8+"]


# -- which cost a bucket is decided with -----------------------------------------------------------------------------
SLOW = CycleCost(12, 0.0, 0.6, 0, 0.6, 0, 0.6)  # the pods' true cost where it differs from the profile


def three_buckets(profile, refine: bool) -> tuple[Tuner, Pod]:
    """Buckets 1, 2-7 and 8+; traffic in the first two only (at steps 2, timed by SLOW)."""
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 2, 8), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=profile, refine=refine), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1", 300, 1, 2, HIGH, cost=SLOW)
    pod.run("2-7", 300, 4, 2, HIGH, cost=SLOW)
    tuner.step(10.0, [pod.snap(10.0)])
    return tuner, pod


def test_an_override_applies_to_the_buckets_it_names_unrefined():
    tuner, _ = three_buckets({"1": COST}, refine=False)
    assert tuner.cost("1") == (COST, "Override")
    phase_avg, _ = tuner.estimator.cost("2-7", None)
    assert tuner.cost("2-7") == (phase_avg, "PhaseAverages") and phase_avg.verify_base == pytest.approx(12.0)
    assert tuner.cost("8+") == (None, "None")  # no override, no probe, no traffic: nothing to decide with
    assert tuner.last_reports["1"].cost_source == "Override"
    assert tuner.last_reports["2-7"].cost_source == "PhaseAverages"

    tuner, _ = three_buckets(lambda label: COST if label == "2-7" else None, refine=False)
    assert tuner.cost("2-7") == (COST, "Override") and tuner.cost("1")[1] == "PhaseAverages"
    tuner, _ = three_buckets(COST, refine=False)
    assert [tuner.cost(label) for label in tuner.labels] == [(COST, "Override")] * 3


def assert_refined(got, base: CycleCost, prior_sd: float, observations: list[tuple]) -> None:
    """``got`` is ``base`` refined by exactly these (batch, steps, spec fraction, cycle ms, cycles) with this prior."""
    want = CostRefiner()
    for obs in observations:
        want.add(*obs)
    want = want.refine(base, prior_sd)
    assert got.base == base
    assert [got.rv, got.rs, got.rd] == pytest.approx([want.rv, want.rs, want.rd], rel=1e-9)
    assert [v for row in got.cov for v in row] == pytest.approx([v for row in want.cov for v in row], rel=1e-6)


def test_each_source_is_refined_with_its_own_prior():
    slow1, slow4 = (1.0, 2.0, 1.0, SLOW.cycle_ms(2, 1), 300), (4.0, 2.0, 1.0, SLOW.cycle_ms(2, 4), 300)
    # an override: trusted more than a probe, and named Override even with live timings
    tuner, _ = three_buckets(COST, refine=True)
    cost, source = tuner.cost("1")
    assert source == "Override"
    assert_refined(cost, COST, PRIOR_SD_OVERRIDE, [slow1])
    # phase averages: their split into parts barely known
    tuner, _ = three_buckets(None, refine=True)
    cost, source = tuner.cost("2-7")
    assert source == "PhaseAverages"
    assert_refined(cost, tuner.estimator.cost("2-7", None)[0], PRIOR_SD_PHASE_AVERAGES, [slow4])
    assert tuner.cost("8+") == (None, "None")


def test_a_probe_is_measured_at_start_until_live_timings_refine_it():
    tuner, pod = Tuner(live(), refine=True), Pod()
    pod.costs = probe_samples(COST, "1")
    d = first_decision(tuner, pod, cycles=19, alphas=HIGH, cost=SLOW)  # fewer cycles than one observation needs
    assert tuner.measured == fit_profile(points_from_samples(pod.costs))
    assert tuner.measured["1"].cycle_ms(3, 1) == pytest.approx(COST.cycle_ms(3, 1))
    assert d.buckets["1"].cost_source == "MeasuredAtStart" and not tuner.refiners["1"].observations
    (entry,) = d.status.costProfile
    assert entry.source == "MeasuredAtStart" and entry.observedSteps is None
    pod.run("1", 20, 1, 2, HIGH, cost=SLOW)
    d = tuner.step(20.0, [pod.snap(20.0)])
    assert d.buckets["1"].cost_source == "RefinedOnline" == d.status.costSource
    cost, _ = tuner.cost("1")
    assert_refined(cost, tuner.measured["1"], PRIOR_SD_MEASURED, [(1.0, 2.0, 1.0, SLOW.cycle_ms(2, 1), 20)])
    assert d.status.costProfile[0].observedSteps == [2]
    assert d.status.costProfile[0].cycleMs == round(cost.cycle_ms(tuner.states["1"].steps, 1.0), 4)


def test_the_probe_is_read_once_per_pod_and_fitted_over_all_pods():
    tuner = Tuner(live())
    a, b, c = Pod("a"), Pod("b"), Pod("c")
    assert tuner.wants_costs("a") and tuner.wants_costs("b")
    a.costs = probe_samples(COST, "1")
    c.costs = probe_samples(SLOW, "8-31")
    gone = down("c", 0.0, "connection refused")
    gone.costs = dict(c.costs)  # a snapshot that could not be read is never learned from
    tuner.step(0.0, [a.snap(0.0), b.snap(0.0), gone])
    assert not tuner.wants_costs("a")
    assert tuner.wants_costs("b") and tuner.wants_costs("c")  # b sent no probe; c was down
    fitted = tuner.measured
    assert fitted == fit_profile(points_from_samples(a.costs)) and set(fitted) == {"1"}
    tuner.step(10.0, [a.snap(10.0), b.snap(10.0)])  # the same probe again: nothing to fit again
    assert tuner.measured is fitted
    b.costs = probe_samples(SLOW, "2-7", batch=4)
    tuner.step(20.0, [a.snap(20.0), b.snap(20.0)])
    assert tuner.measured == fit_profile(points_from_samples({**a.costs, **b.costs}))
    assert set(tuner.measured) == {"1", "2-7"} and not tuner.wants_costs("b")


def test_a_restarted_pod_is_asked_for_its_probe_again():
    tuner, pod = Tuner(live()), Pod()
    pod.costs = probe_samples(COST, "1")
    first_decision(tuner, pod)
    assert not tuner.wants_costs("pod-0")
    fresh = Pod()  # the counters went back: the pod restarted and measured again
    fresh.run("1", 10, 1, 2, HIGH)
    d = tuner.step(20.0, [fresh.snap(20.0)])
    assert d.condition.reason == "CounterReset" and tuner.wants_costs("pod-0")
    fresh.run("1", 10, 1, 2, HIGH)
    tuner.step(30.0, [fresh.snap(30.0)])
    assert not tuner.wants_costs("pod-0")


def observations(tuner: Tuner, label: str = "1") -> list[Observation]:
    return list(tuner.refiners[label].observations) if label in tuner.refiners else []


def test_live_timings_give_each_bucket_one_observation_per_interval():
    tuner, pod = Tuner(live(), profile=COST, refine=True), Pod()
    first_decision(tuner, pod, cost=SLOW)
    (obs,) = observations(tuner)
    assert obs == Observation(1.0, 2.0, 1.0, pytest.approx(SLOW.cycle_ms(2, 1)), 300.0)
    # half the cycles at steps 0, half at 3 (the gauge at the end says 3): half of them drafted, 1.5 steps a cycle
    pod.run("1", 100, 2, 0, HIGH, cost=SLOW)
    pod.run("1", 100, 2, 3, HIGH, cost=SLOW)
    tuner.step(20.0, [pod.snap(20.0)])
    mixed = (SLOW.cycle_ms(0, 2) + SLOW.cycle_ms(3, 2)) / 2
    assert observations(tuner)[-1] == Observation(2.0, 1.5, 0.5, pytest.approx(mixed), 200.0)
    # more steps per cycle than the gauge says (it went down within the interval): every cycle drafted
    pod.run("1", 100, 1, 4, HIGH, cost=SLOW)
    pod.run("1", 100, 1, 2, HIGH, cost=SLOW)
    tuner.step(30.0, [pod.snap(30.0)])
    assert observations(tuner)[-1].steps == 3.0 and observations(tuner)[-1].spec_fraction == 1.0
    # ended at steps 0 after drafting: the share of drafting cycles is unknown, nothing learned
    pod.run("1", 100, 1, 2, HIGH, cost=SLOW)
    pod.run("1", 100, 1, 0, HIGH, cost=SLOW)
    tuner.step(40.0, [pod.snap(40.0)])
    assert len(observations(tuner)) == 3
    # plain decoding all interval: an observation at steps 0
    pod.run("1", 100, 1, 0, HIGH, cost=SLOW)
    tuner.step(50.0, [pod.snap(50.0)])
    assert observations(tuner)[-1] == Observation(1.0, 0.0, 0.0, pytest.approx(SLOW.cycle_ms(0, 1)), 100.0)
    # cycles without any timing: nothing to learn from
    pod.run("1", 100, 1, 2, HIGH, cost=None)
    tuner.step(60.0, [pod.snap(60.0)])
    assert len(observations(tuner)) == 4


@pytest.mark.parametrize("skipped", ["untimed", "ended at steps 0"])
def test_a_bucket_with_nothing_to_learn_does_not_stop_the_others(skipped):
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 2), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=COST, refine=True), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    if skipped == "untimed":
        pod.run("1", 300, 1, 2, HIGH, cost=None)
    else:
        pod.run("1", 150, 1, 2, HIGH, cost=SLOW)
        pod.run("1", 150, 1, 0, HIGH, cost=SLOW)
    pod.run("2+", 300, 4, 2, HIGH, cost=SLOW)
    tuner.step(10.0, [pod.snap(10.0)])
    assert observations(tuner, "1") == []
    assert observations(tuner, "2+") == [Observation(4.0, 2.0, 1.0, pytest.approx(SLOW.cycle_ms(2, 4)), 300.0)]


def test_the_cost_is_worked_out_again_every_interval():
    tuner, pod = Tuner(live(), profile=COST, refine=True), Pod()
    d = first_decision(tuner, pod, cost=SLOW)
    one, _ = tuner.cost("1")
    assert d.status.costProfile[0].cycleMs == round(one.cycle_ms(3, 1.0), 4)
    pod.run("1", 300, 1, 3, HIGH, cost=SLOW)
    d = tuner.step(20.0, [pod.snap(20.0)])
    two, _ = tuner.cost("1")
    assert_refined(
        two,
        COST,
        PRIOR_SD_OVERRIDE,
        [(1.0, 2.0, 1.0, SLOW.cycle_ms(2, 1), 300), (1.0, 3.0, 1.0, SLOW.cycle_ms(3, 1), 300)],
    )
    assert two != one and d.status.costProfile[0].observedSteps == [2, 3]


# -- the tiers the pods serve ----------------------------------------------------------------------------------------
def with_candidates(name: str, candidates: list[int]) -> PodSnapshot:
    pod = Pod(name)
    pod.candidates = candidates
    return pod.snap(0.0)


def test_live_choice_is_narrowed_to_the_tiers_every_pod_serves_and_widens_back():
    tuner = Tuner(live(candidates=(0, 1, 2, 3, 5)))
    tuner.step(0.0, [with_candidates("a", [1, 2, 3, 5, 6]), with_candidates("b", [0, 1, 3, 5]), down("c", 0, "x")])
    assert tuner.config.policy.candidates == (1, 3, 5)  # what both pods serve, within what was rendered
    tuner.step(10.0, [with_candidates("a", [0, 1, 2, 3, 5, 6])])  # b is gone: the rendered tiers a serves
    assert tuner.config.policy.candidates == (0, 1, 2, 3, 5)
    tuner.step(20.0, [with_candidates("a", [4, 6])])  # nothing in common: the last choice stands
    assert tuner.config.policy.candidates == (0, 1, 2, 3, 5)
    tuner.step(30.0, [with_candidates("a", [])])  # a pod that reports no tiers restricts nothing
    assert tuner.config.policy.candidates == (0, 1, 2, 3, 5)


def test_without_rendered_candidates_the_bounds_limit_the_served_tiers():
    cfg = TunerConfig(policy=PolicyConfig(max_steps=5), initial_steps=2)
    tuner = Tuner(cfg)
    tuner.step(0.0, [with_candidates("a", [0, 2, 5, 6, 7])])
    assert tuner.config.policy.candidates == (0, 2, 5)
    tuner.step(10.0, [with_candidates("a", [0, 1, 2, 3, 4, 5, 6])])
    assert tuner.config.policy.candidates == (0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize("mode", ["Rollout", "Off"])
def test_only_live_follows_the_pods_tiers(mode):
    cfg = TunerConfig(mode=mode, policy=PolicyConfig(candidates=(1, 2, 3)), initial_steps=2)
    tuner = Tuner(cfg)
    tuner.step(0.0, [with_candidates("a", [2])])
    assert tuner.config.policy.candidates == (1, 2, 3)


# -- acceptance memory and the steps-0 re-probe ----------------------------------------------------------------------
REPROBE = "acceptance unknown or stale at steps=0: probing one interval"


def test_acceptance_seen_once_is_used_until_it_is_stale():
    cfg = TunerConfig(mode="Off", policy=PolicyConfig(candidates=(0, 1, 2, 3)), initial_steps=0)
    tuner, pod = Tuner(cfg, profile=COSTLY, refine=False), Pod()
    d = first_decision(tuner, pod, steps=2)  # the pods drafted 2 positions before the tuner took over
    seen = d.buckets["1"]
    assert seen.observed_positions == 2 and seen.choice.kind == "hold"  # observed: no re-probe
    tuner.estimator.min_attempts = math.inf  # from now on no position has enough attempts to count as observed
    pod.run("1", 100, 1, 0, [])  # plain decoding drafts nothing: no acceptance of its own
    at_limit = tuner.step(10.0 + 600.0, [pod.snap(610.0)]).buckets["1"]
    assert at_limit.observed_positions == 2 and at_limit.alphas == seen.alphas
    assert at_limit.choice.kind == "hold"
    pod.run("1", 100, 1, 0, [])
    stale = tuner.step(610.5, [pod.snap(610.5)]).buckets["1"]
    assert stale.observed_positions == 0 and stale.alphas[2] == 0.5  # the window alone: position 3 never drafted
    assert (stale.choice.steps, stale.choice.kind, stale.choice.reason) == (1, "explore", REPROBE)


def test_steps_zero_reprobes_the_smallest_positive_tier_once_per_exploration_period():
    cfg = TunerConfig(mode="Off", policy=PolicyConfig(candidates=(0, 2, 3)), initial_steps=0)
    tuner, pod = Tuner(cfg, profile=COSTLY, refine=False), Pod()
    d = first_decision(tuner, pod, steps=0)
    rep = d.buckets["1"]
    assert (rep.steps, rep.observed_positions) == (0, 0)
    assert (rep.choice.steps, rep.choice.kind, rep.choice.reason, rep.choice.predicted_gain) == (
        2,
        "explore",
        REPROBE,
        None,
    )
    (h,) = d.history
    assert (h.fromSteps, h.toSteps, h.predictedGain) == (0, 2, None)
    assert h.reason == f"explore: {REPROBE} (mode Off: not applied)"
    assert d.recommended_table[0] == (1, 2) and d.table[0] == (1, 0)
    state = tuner.states["1"]
    assert (state.steps, state.last_probe, state.probing_from) == (0, 10.0, None)  # Off: nothing left armed
    explore_every = cfg.policy.explore_every_s
    for now, kind, reason in (
        (10.0 + explore_every - 0.5, "hold", "steps=0 is the model's best"),
        (10.0 + explore_every, "explore", REPROBE),
    ):
        pod.run("1", 300, 1, 0, HIGH)
        d = tuner.step(now, [pod.snap(now)])
        assert (d.buckets["1"].choice.kind, d.buckets["1"].choice.reason) == (kind, reason)
        assert d.recommended_table[0] == (1, 2 if kind == "explore" else 0)


def test_steps_zero_reprobes_while_waiting_for_samples_and_returns_after_the_probe():
    cfg = TunerConfig(policy=PolicyConfig(candidates=(0, 1, 2)), initial_steps=0)
    tuner, pod = Tuner(cfg, profile=COSTLY, refine=False), Pod()
    d = first_decision(tuner, pod, cycles=30, steps=0)  # fewer cycles than a decision needs
    ch = d.buckets["1"].choice
    assert (ch.steps, ch.kind) == (1, "explore") and d.table[0] == (1, 1) and d.changed and tuner.changes == 1
    assert d.events == [Event("Normal", "StepsChanged", f"bucket 1: steps 0 -> 1 (explore: {REPROBE})")]
    pod.run("1", 300, 1, 1, [0.3])
    d = tuner.step(20.0, [pod.snap(20.0)])
    ch = d.buckets["1"].choice
    assert (ch.steps, ch.kind) == (0, "return") and d.table[0] == (1, 0)


@pytest.mark.parametrize("candidates", [(0,), (0, 1)])
def test_no_reprobe_without_a_positive_tier_or_with_acceptance_in_hand(candidates):
    tuner = Tuner(
        TunerConfig(policy=PolicyConfig(candidates=candidates), initial_steps=0), profile=COSTLY, refine=False
    )
    pod = Pod()
    steps = 0 if candidates == (0,) else 1  # with (0, 1): the pods drafted one position, so it is observed
    d = first_decision(tuner, pod, steps=steps)
    ch = d.buckets["1"].choice
    assert (ch.steps, ch.kind) == (0, "hold") and d.history == [] and not d.changed


# -- the MetricsAvailable condition ----------------------------------------------------------------------------------
def primed(*names: str) -> tuple[Tuner, dict[str, Pod]]:
    """A tuner that has seen one snapshot of each pod, and the pods after one interval of traffic."""
    tuner, pods = Tuner(live(), profile=COST, refine=False), {n: Pod(n) for n in names}
    for p in pods.values():
        p.run("1", 300, 1, 2, HIGH)  # counters already running when the tuner first looks
    tuner.step(0.0, [p.snap(0.0) for p in pods.values()])
    for p in pods.values():
        p.run("1", 300, 1, 2, HIGH)
    return tuner, pods


def nan_snapshot(pod: Pod, t: float, problems: list[str]) -> PodSnapshot:
    snap = pod.snap(t)
    snap.problems = problems
    return snap


def test_no_pods_is_its_own_condition_and_a_warning():
    d = Tuner(live()).step(0.0, [])
    assert d.condition == NO_PODS and d.condition is not NO_PODS
    assert d.events == [Event("Warning", "NoPods", "no pods to scrape")]
    assert d.status.lastTuneTime is None and d.buckets == {} and not d.changed


def test_the_first_scrape_is_warming_up():
    tuner = Tuner(live())
    d = tuner.step(0.0, [Pod().snap(0.0)])
    assert (d.condition.status, d.condition.reason) == ("Unknown", "WarmingUp")
    assert d.condition.message == f"no decision this interval: {FIRST_SCRAPE}"
    assert d.events == [Event("Warning", "WarmingUp", d.condition.message)]


@pytest.mark.parametrize(
    "kinds, reason, message",
    [
        (
            ("down", "down"),
            "MetricsDown",
            "down: a: GET failed: refused; b: GET failed: refused",
        ),
        (
            ("down", "invalid"),
            "MetricsInvalid",
            "down: a: GET failed: refused; invalid samples: b: x is nan, y is nan, z is nan",
        ),
        (("down", "reset"), "MetricsDown", "down: a: GET failed: refused; counter reset (pod restarted?): b"),
        (
            ("invalid", "reset"),
            "MetricsInvalid",
            "invalid samples: a: x is nan, y is nan, z is nan; counter reset (pod restarted?): b",
        ),
        (("reset", "reset"), "CounterReset", "counter reset (pod restarted?): a, b"),
    ],
)
def test_an_interval_without_a_usable_pod_says_what_went_wrong(kinds, reason, message):
    tuner, pods = primed("b", "a")  # listed out of order: the message sorts pods by name
    snaps = []
    for name, kind in zip(("a", "b"), kinds):
        if kind == "down":
            snaps.append(down(name, 10.0, "GET failed: refused"))
        elif kind == "invalid":
            snaps.append(nan_snapshot(pods[name], 10.0, ["x is nan", "y is nan", "z is nan", "w is nan"]))
        else:  # a restarted process: its counters went back
            fresh = Pod(name)
            fresh.run("1", 10, 1, 2, HIGH)
            snaps.append(fresh.snap(10.0))
    d = tuner.step(10.0, snaps[::-1])
    assert (d.condition.type, d.condition.status, d.condition.reason) == ("MetricsAvailable", "False", reason)
    assert d.condition.message == f"no decision this interval: {message}"
    assert d.events == [Event("Warning", reason, d.condition.message)]
    assert d.buckets == {} and d.history == [] and d.status.lastTuneTime is None


def test_a_decision_on_some_pods_is_partial_and_no_warning():
    tuner, pods = primed("a", "b", "c")
    d = tuner.step(10.0, [pods["a"].snap(10.0), down("c", 10.0, "timeout"), pods["b"].snap(10.0)])
    assert (d.condition.status, d.condition.reason) == ("True", "PartialMetrics")
    assert d.condition.message == "decided on 2 pod(s); down: c: timeout"
    assert all(e.type == "Normal" for e in d.events) and d.buckets
    tuner, pods = primed("a", "b")
    d = tuner.step(10.0, [pods["a"].snap(10.0), pods["b"].snap(10.0)])
    assert (d.condition.status, d.condition.reason, d.condition.message) == ("True", "Scraped", "2 pod(s) scraped")
    assert d.status.lastTuneTime == "1970-01-01T00:00:10Z"


# -- status ----------------------------------------------------------------------------------------------------------
# every term non-zero, so the batch a figure is evaluated at matters
TOKENY = CycleCost(8.0, 0.04, 0.6, 0.002, 0.67, 0.0017, 0.3, 0.05)


def test_status_reports_the_busiest_buckets_steps_and_cost_source():
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 2, 8), initial_steps=2)
    tuner, pod = Tuner(cfg, profile={"1": COST}, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1", 300, 1, 2, [0.95])
    pod.run("2-7", 500, 4, 2, [0.1])
    d = tuner.step(10.0, [pod.snap(10.0)])
    st = d.status
    assert tuner.states["1"].steps != tuner.states["2-7"].steps
    assert st.numSteps == tuner.states["2-7"].steps  # the bucket that ran the most cycles
    assert st.costSource == "PhaseAverages" and [e.source for e in st.costProfile] == ["Override", "PhaseAverages"]
    tokens = 300 * (1 + 0.95 + 0.95**2) + 2000 * (1 + 0.1 + 0.1**2)
    accepted = 300 * (0.95 + 0.95**2) + 2000 * (0.1 + 0.1**2)
    assert st.acceptLength == round(tokens / 2300, 4)
    assert st.acceptRate == round(accepted / (2300 * 2), 4)
    assert st.tokensPerSecond == round(tokens / 10.0, 2)
    assert st.stepTable == [{"minBatch": lo, "steps": steps} for lo, steps in d.table]
    assert st.lastTuneTime == "1970-01-01T00:00:10Z"
    # as many cycles in both: the first bucket counts as the busiest
    tuner, pod = Tuner(cfg, profile={"1": COST}, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1", 300, 1, 2, [0.95])
    pod.run("2-7", 300, 4, 2, [0.1])
    st = tuner.step(10.0, [pod.snap(10.0)]).status
    assert st.numSteps == tuner.states["1"].steps and st.costSource == "Override"


def test_status_before_any_traffic_and_after_a_lost_interval():
    tuner, pod = Tuner(TunerConfig(policy=PolicyConfig(candidates=ALL), initial_steps=4), profile=COST), Pod()
    st = tuner.step(0.0, [pod.snap(0.0)]).status
    assert st.numSteps == 4 and st.stepTable[0] == {"minBatch": 1, "steps": 4}
    assert st.acceptLength is None and st.acceptRate is None and st.tokensPerSecond is None
    assert st.costSource is None and st.costProfile is None and st.lastTuneTime is None
    pod.run("1", 300, 1, 4, HIGH)
    first = tuner.step(10.0, [pod.snap(10.0)]).status
    lost = tuner.step(20.0, [down("pod-0", 20.0, "timeout")]).status
    assert first.tokensPerSecond == round(300 * expected_tokens(HIGH, 4) / 10.0, 2)
    assert lost.tokensPerSecond == first.tokensPerSecond  # the last measured rate, not nothing
    assert lost.lastTuneTime is None and lost.acceptLength == first.acceptLength


def test_status_of_a_single_bucket_before_any_traffic():
    tuner = Tuner(TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1,), initial_steps=5))
    st = tuner.step(0.0, [Pod().snap(0.0)]).status
    assert st.numSteps == 5 and st.stepTable == [{"minBatch": 1, "steps": 5}]


def test_status_of_plain_decoding_has_no_accept_rate():
    tuner = Tuner(TunerConfig(policy=PolicyConfig(candidates=(0,)), initial_steps=0), profile=COST)
    st = first_decision(tuner, Pod(), steps=0).status
    assert st.acceptLength == 1.0 and st.acceptRate is None and st.numSteps == 0


def test_cost_profile_entries_are_evaluated_at_the_buckets_mean_batch():
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 2, 8), initial_steps=2)
    tuner, pod = Tuner(cfg, profile={"2-7": TOKENY}, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("2-7", 100, 2, 2, HIGH, cost=TOKENY)
    pod.run("2-7", 200, 3, 2, HIGH, cost=TOKENY)
    pod.run("8+", 300, 8, 2, HIGH, cost=TOKENY)
    d = tuner.step(10.0, [pod.snap(10.0)])
    over, phase = d.status.costProfile  # bucket 1 ran nothing: no entry
    b = 800 / 300
    steps = tuner.states["2-7"].steps
    assert (over.bucket, over.source, over.batch) == ("2-7", "Override", 2.67)
    assert over.plainCycleMs == round(TOKENY.cycle_ms(0, b), 4)
    assert over.cycleMs == round(TOKENY.cycle_ms(steps, b), 4)
    assert over.stepMs == round(TOKENY.cycle_ms(2, b) - TOKENY.cycle_ms(1, b), 4)
    assert over.observedSteps == [2]
    assert (phase.bucket, phase.source, phase.batch, phase.observedSteps) == ("8+", "PhaseAverages", 8.0, None)
    measured, _ = tuner.estimator.cost("8+", None)
    assert phase.cycleMs == round(measured.cycle_ms(tuner.states["8+"].steps, 8.0), 4)


# -- Rollout ---------------------------------------------------------------------------------------------------------
def rollout(
    restart_s: float = 1.0, cooldown_s: float = 1000.0, initial: int = 2, profile: CycleCost = COST, **policy
) -> Tuner:
    policy.setdefault("candidates", (1, 2, 3, 4, 5, 6, 7))
    cfg = TunerConfig(
        mode="Rollout",
        policy=PolicyConfig(**policy),
        initial_steps=initial,
        restart_s=restart_s,
        rollout_cooldown_s=cooldown_s,
    )
    return Tuner(cfg, profile=profile, refine=False)


def rollout_gain(tuner: Tuner, steps: int, cur: int = 2, label: str = "1") -> float:
    """The predicted relative gain of rolling every pod from ``cur`` onto ``steps`` (one bucket: its own goodput
    ratio)."""
    acc = tuner.estimator.acceptance(label, max(tuner.config.policy.allowed()) + 1)
    batch = tuner.estimator.batch_mean(label)
    cost, _ = tuner.cost(label)
    return goodput(acc.alphas, cost, steps, batch) / goodput(acc.alphas, cost, cur, batch) - 1.0


def test_rollout_restarts_only_when_the_gain_over_the_cooldown_repays_the_restart():
    probe = rollout(restart_s=1e9)
    d = first_decision(probe, Pod(), alphas=[0.95])
    gain = rollout_gain(probe, 3)  # observed 2 positions: 3 is as deep as a rollout may go
    assert gain > 0.2 and rollout_gain(probe, 7) > gain
    assert d.events == [
        Event(
            "Normal",
            "RolloutSkipped",
            f"steps=3 predicted {gain:+.1%}, which over 1000s does not repay a 1000000000s restart",
        )
    ]
    assert not d.restart and d.table == [(1, 2)] and d.history == [] and probe.restarts == 0

    at_cost = rollout(restart_s=gain * 1000.0)
    d = first_decision(at_cost, Pod(), alphas=[0.95])
    assert not d.restart and [e.reason for e in d.events] == ["RolloutSkipped"]

    worth = rollout(restart_s=gain * 1000.0 * (1 - 1e-9))
    d = first_decision(worth, Pod(), alphas=[0.95])
    restart_s = f"{gain * 1000.0 * (1 - 1e-9):.0f}"
    assert d.restart and d.changed and d.table == [(1, 3)] and d.rollout_steps == 3
    (h,) = d.history
    assert (h.time, h.bucket, h.fromSteps, h.toSteps) == ("1970-01-01T00:00:10Z", "all", 2, 3)
    assert h.reason == f"rollout: predicted {gain:+.1%} over 1000s repays a {restart_s}s restart"
    assert h.predictedGain == round(gain, 4)
    assert d.events == [Event("Normal", "RolloutStarted", f"--speculative-num-steps 2 -> 3 ({gain:+.1%} predicted)")]
    assert (worth.rollout_steps, worth.restarts, worth.changes) == (3, 1, 1)
    assert worth.history == [h] and d.status.numSteps == 3
    assert d.status.costProfile[0].cycleMs == round(COST.cycle_ms(3, 1.0), 4)


@pytest.mark.parametrize("nudge, restarts", [(0.0, False), (-1e-9, True)])
def test_rollout_gain_must_clear_the_hysteresis(nudge, restarts):
    probe = rollout()
    first_decision(probe, Pod(), alphas=[0.95])
    tuner = rollout(hysteresis=rollout_gain(probe, 3) + nudge)
    d = first_decision(tuner, Pod(), alphas=[0.95])
    assert d.restart is restarts and len(d.history) == int(restarts)
    assert [e.reason for e in d.events] == (["RolloutStarted"] if restarts else [])


@pytest.mark.parametrize("min_samples, restarts", [(300.0, True), (300.5, False)])
def test_rollout_waits_for_enough_cycles(min_samples, restarts):
    d = first_decision(rollout(min_samples=min_samples), Pod(), alphas=[0.95])
    assert d.restart is restarts and d.rollout_steps == (3 if restarts else 2)


def test_rollout_waits_out_its_cooldown_between_restarts():
    tuner, pod = rollout(cooldown_s=100.0), Pod()
    assert first_decision(tuner, pod, alphas=[0.95]).restart  # the first change waits for nothing
    pod.run("1", 300, 1, 3, [0.95])
    early = tuner.step(109.5, [pod.snap(109.5)])
    assert not early.restart and early.events == [] and early.rollout_steps == 3
    report = early.buckets["1"]
    assert report.steps == 3 and tuner.states["1"].steps == 2  # per-bucket advice is at the rolled-out steps
    pod.run("1", 300, 1, 3, [0.95])
    d = tuner.step(110.0, [pod.snap(110.0)])
    assert d.restart and (d.history[0].fromSteps, d.history[0].toSteps) == (3, 4)
    assert (tuner.restarts, tuner.changes) == (2, 2) and d.table == [(1, 4)]


def test_rollout_may_go_back_to_a_depth_it_runs_but_not_past_what_was_observed():
    """Running steps 4 with half the drafts rejected observes position 1 only; 3 and 4 are not censored (the pods run
    4) and 3 is the best of them."""
    tuner, pod = rollout(initial=4, hysteresis=0.0), Pod()
    d = first_decision(tuner, pod, steps=4, alphas=[0.5])
    assert d.buckets["1"].observed_positions == 1
    gains = {k: rollout_gain(tuner, k, cur=4) for k in (1, 2, 3)}
    assert max(gains, key=gains.get) == 3 and gains[3] > 0
    assert d.restart and d.rollout_steps == 3 and d.history[0].predictedGain == round(gains[3], 4)


def test_rollout_never_picks_steps_zero_when_zero_is_not_allowed():
    # min_steps 0 puts 0 in bounds; allow_zero False still keeps a restart from rendering it
    tuner = rollout(profile=COSTLY, candidates=(0, 1, 2, 3), min_steps=0, allow_zero=False)
    d = first_decision(tuner, Pod(), alphas=[0.3], cost=COSTLY)
    assert d.restart and d.rollout_steps == 1
    tuner = rollout(profile=COSTLY, candidates=(0, 1, 2, 3), min_steps=0)
    d = first_decision(tuner, Pod(), alphas=[0.3], cost=COSTLY)
    assert d.restart and d.rollout_steps == 0


def test_rollout_keeps_using_the_acceptance_it_remembers():
    tuner, pod = rollout(restart_s=1e9), Pod()
    first = first_decision(tuner, pod, alphas=[0.95]).events
    tuner.estimator.min_attempts = math.inf  # no position counts as observed any more
    pod.run("1", 300, 1, 2, [0.95])
    again = tuner.step(20.0, [pod.snap(20.0)])
    assert again.buckets["1"].observed_positions == 2 and again.events == first


def test_rollout_reads_every_position_up_to_the_deepest_allowed():
    """At steps 7 with the 7th draft mostly rejected, 6 beats 7: the last position must be read, not assumed."""
    tuner, pod = rollout(initial=7, hysteresis=0.0), Pod()
    d = first_decision(tuner, pod, cycles=2000, steps=7, alphas=[0.9] * 6 + [0.05])
    assert d.buckets["1"].observed_positions == 7
    gains = {k: rollout_gain(tuner, k, cur=7) for k in range(1, 8)}
    assert max(gains, key=gains.get) == 6 and gains[6] > 0
    assert d.restart and d.rollout_steps == 6 and d.history[0].predictedGain == round(gains[6], 4)


def test_rollout_weighs_each_bucket_by_its_share_of_decode_time():
    cfg = TunerConfig(
        mode="Rollout",
        policy=PolicyConfig(candidates=(1, 2, 3, 4, 5, 6, 7)),
        buckets=(1, 8),
        initial_steps=2,
        restart_s=1.0,
    )
    tuner, pod = Tuner(cfg, profile={"1-7": TOKENY, "8+": TOKENY}, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1-7", 300, 1, 2, [0.95], cost=TOKENY)
    pod.run("8+", 600, 16, 2, [0.4], cost=TOKENY)
    d = tuner.step(10.0, [pod.snap(10.0)])
    busy = {label: tuner.estimator.window(label).busy_s for label in ("1-7", "8+")}
    share = {label: busy[label] / sum(busy.values()) for label in busy}
    score = {k: sum(share[label] * (1 + rollout_gain(tuner, k, label=label)) for label in busy) for k in (1, 2, 3)}
    best = max(score, key=score.get)
    assert best != 2 and d.restart and d.rollout_steps == best
    assert d.history[0].predictedGain == round(score[best] - 1.0, 4)


# -- buckets decided for the deployment's throughput -----------------------------------------------------------------
def expected_choices(tuner: Tuner, now: float, cycles: dict[str, float], steps: int, coupled: bool = True) -> dict:
    """Each bucket's choice worked out with the policy itself, fed the deployment's rate and the bucket's share of
    decode time over this interval (every bucket at ``steps``)."""
    est, positions = tuner.estimator, max(tuner.config.policy.allowed()) + 1
    parts = {}
    for label, n in cycles.items():
        batch = est.batch_mean(label)
        acc = est.acceptance(label, positions)
        cost, _ = tuner.cost(label)
        parts[label] = (n, batch * expected_tokens(acc.alphas, steps), cost.cycle_ms(steps, batch) / 1000.0)
    total = sum(n * sec for n, _, sec in parts.values())
    rate = sum(n * tok for n, tok, _ in parts.values()) / total
    out = {}
    for label, (n, _, sec) in parts.items():
        acc = est.acceptance(label, positions)
        out[label] = choose(
            tuner.config.policy,
            BucketState(steps=steps),
            acc,
            tuner.cost(label)[0],
            est.batch_mean(label),
            est.samples(label),
            now,
            measured_goodput=est.measured_goodput(label, latest_only=True),
            aggregate=Aggregate(rate, n * sec / total) if coupled else None,
            measured_cycle_s=est.measured_cycle_s(label),
            latest_alphas=est.latest_alphas(label, acc.alphas),
        )
    return out


def busy_buckets(
    mode: str = "Live", objective: str = "Throughput", steps: int = 2, scale: float = 1.0, tiny: bool = True
) -> tuple[Tuner, Pod, dict]:
    """Buckets 1, 2-7 and 8+ (each priced by its own entry of the profile): 1 and 8+ busy, 2-7 with a single cycle
    (too few to decide on, but part of the deployment's decode time), and a bucket label the tuner does not know."""
    cfg = TunerConfig(
        mode=mode,
        policy=PolicyConfig(candidates=ALL, objective=objective, max_itl_ms=1000.0, min_samples=10),
        buckets=(1, 2, 8),
        initial_steps=steps,
        restart_s=1.0,
    )
    profile = {"1": TOKENY, "2-7": TOKENY, "8+": TOKENY}
    tuner, pod = Tuner(cfg, profile=profile, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    cycles = {"1": 300.0 * scale, "2-7": 1.0, "8+": 600.0 * scale}
    if not tiny:
        del cycles["2-7"]
    pod.run("9", 50, 9, steps, [0.6], cost=TOKENY)  # unknown to this tuner: left out of everything
    for label, batch, alphas in (("1", 1, [0.95]), ("2-7", 4, [0.6]), ("8+", 16, [0.6])):
        if label in cycles:
            pod.run(label, cycles[label], batch, steps, alphas, cost=TOKENY)
    return tuner, pod, cycles


@pytest.mark.parametrize("steps", [2, 1, 0])
def test_each_bucket_is_decided_against_the_deployments_rate_and_its_time_share(steps):
    tuner, pod, cycles = busy_buckets(steps=steps)
    d = tuner.step(10.0, [pod.snap(10.0)])
    want = expected_choices(tuner, 10.0, cycles, steps=steps)
    alone = expected_choices(tuner, 10.0, cycles, steps=steps, coupled=False)
    assert set(d.buckets) == {"1", "2-7", "8+"} and d.buckets["2-7"].choice.kind in ("wait", "explore")
    # at steps 0 bucket 1 has never drafted: the tuner re-probes it instead (tested on its own)
    for label in ["1", "8+"] if steps else ["8+"]:
        got = d.buckets[label].choice
        assert (got.steps, got.kind) == (want[label].steps, want[label].kind)
        assert got.predicted_gain == pytest.approx(want[label].predicted_gain, rel=1e-9)
        assert got.predicted_gain != pytest.approx(alone[label].predicted_gain, rel=1e-3)  # the coupling matters here


def test_less_than_a_second_of_decode_time_is_still_coupled():
    tuner, pod, cycles = busy_buckets(scale=0.05)
    d = tuner.step(10.0, [pod.snap(10.0)])
    want = expected_choices(tuner, 10.0, cycles, steps=2)
    alone = expected_choices(tuner, 10.0, cycles, steps=2, coupled=False)
    got = d.buckets["8+"].choice
    assert (got.steps, got.kind) == (want["8+"].steps, want["8+"].kind)
    assert got.predicted_gain == pytest.approx(want["8+"].predicted_gain, rel=1e-9)
    assert got.predicted_gain != pytest.approx(alone["8+"].predicted_gain, rel=1e-3)


def test_a_latency_objective_decides_each_bucket_on_its_own():
    tuner, pod, cycles = busy_buckets(objective="Latency")
    d = tuner.step(10.0, [pod.snap(10.0)])
    alone = expected_choices(tuner, 10.0, cycles, steps=2, coupled=False)
    for label in ("1", "8+"):
        got = d.buckets[label].choice
        assert (got.steps, got.kind, got.predicted_gain) == (
            alone[label].steps,
            alone[label].kind,
            pytest.approx(alone[label].predicted_gain, rel=1e-12),
        )


def test_rollout_couples_the_buckets_at_the_rolled_out_steps():
    tuner, pod, cycles = busy_buckets(mode="Rollout", tiny=False)
    assert tuner.step(10.0, [pod.snap(10.0)]).restart
    steps = tuner.rollout_steps
    assert steps != 2 and tuner.states["1"].steps == 2
    pod.run("1", cycles["1"], 1, steps, [0.95], cost=TOKENY)
    pod.run("8+", cycles["8+"], 16, steps, [0.6], cost=TOKENY)
    d = tuner.step(20.0, [pod.snap(20.0)])
    want = expected_choices(tuner, 20.0, cycles, steps=steps)
    for label in cycles:
        got = d.buckets[label].choice
        assert got.predicted_gain == pytest.approx(want[label].predicted_gain, rel=1e-9)


# -- odds and ends of a decision -------------------------------------------------------------------------------------
def test_the_last_reports_survive_an_interval_that_decided_nothing():
    tuner, pod = Tuner(live(), profile=COST, refine=False), Pod()
    first_decision(tuner, pod)
    reports = tuner.last_reports
    assert set(reports) == {"1"}  # the observed bucket's decision; the priors of the others are not kept here
    d = tuner.step(20.0, [down("pod-0", 20.0, "timeout")])
    assert d.buckets == {} and tuner.last_reports is reports


def test_without_any_allowed_tier_a_bucket_holds_and_estimates_one_position():
    tuner = Tuner(TunerConfig(policy=PolicyConfig(candidates=()), initial_steps=2), profile=COST, refine=False)
    rep = first_decision(tuner, Pod()).buckets["1"]
    assert len(rep.alphas) == 1 and (rep.choice.steps, rep.choice.kind) == (2, "hold")


def test_a_given_estimator_is_the_one_used():
    est = Estimator(min_attempts=50)
    tuner = Tuner(live(), profile=COST, refine=False, estimator=est)
    assert tuner.estimator is est
    rep = first_decision(tuner, Pod(), cycles=100, alphas=[0.4]).buckets["1"]
    assert rep.observed_positions == 1  # 100 attempts at position 1 and 40 at position 2: 200 would see none
    rep = first_decision(Tuner(live(), profile=COST, refine=False), Pod(), cycles=100, alphas=[0.4]).buckets["1"]
    assert rep.observed_positions == 0


def test_status_of_a_bucket_with_a_single_cycle_and_of_a_pod_without_the_steps_gauge():
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 2), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=COST, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("2+", 300, 4, 2, HIGH)
    tuner.step(10.0, [pod.snap(10.0)])
    assert tuner.states["2+"].steps == 3 and tuner.states["1"].steps == 3  # bucket 1: the prior from 2+
    pod.run("2+", 1, 4, 3, HIGH)
    st = tuner.step(20.0, [pod.snap(20.0)]).status
    assert st.numSteps == tuner.states["2+"].steps > 2  # one cycle is still the busiest bucket
    pod.run("2+", 100, 4, 3, HIGH)
    pod.counters["2+"].num_steps = None  # the gauge went missing: what was drafted is unknown
    st = tuner.step(30.0, [pod.snap(30.0)]).status
    assert st.acceptRate is None and st.acceptLength == round(1 + 0.9 + 0.81 + 0.729, 4)


def test_a_change_is_judged_on_the_interval_after_it_and_rolled_back():
    """The rollback test reads the latest interval alone: 5 % under the goodput before the change is a loss,
    though the window (both intervals) would average it away. (One bucket: its own goodput ratio is the test.)"""
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1,), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=COST, refine=False), Pod()
    assert first_decision(tuner, pod, label="1+").buckets["1+"].choice.kind == "switch"
    before = 1000.0 * expected_tokens(HIGH, 2) / COST.cycle_ms(2, 1)
    # steps 3 timed so that it measures 5 % under `before`
    verify = 1000.0 * expected_tokens(HIGH, 3) / (0.95 * before) - (COST.cycle_ms(3, 1) - COST.verify_base)
    pod.run("1+", 300, 1, 3, HIGH, cost=CycleCost(verify, 0.0, 0.5, 0, 0.5, 0, 0.5))
    d = tuner.step(20.0, [pod.snap(20.0)])
    assert tuner.estimator.measured_goodput("1+", latest_only=True) == pytest.approx(0.95 * before)
    assert tuner.estimator.measured_goodput("1+") > 0.97 * before
    ch = d.buckets["1+"].choice
    assert (ch.kind, ch.steps) == ("rollback", 2) and d.table == [(1, 2)]
    (h,) = d.history
    assert (h.fromSteps, h.toSteps, h.reason) == (3, 2, f"rollback: {ch.reason}")
    assert ch.predicted_gain == pytest.approx(-0.05)  # measured after / measured before - 1
    assert h.predictedGain == round(ch.predicted_gain, 4)
    assert tuner.changes == 2 and [e.reason for e in d.events] == ["StepsChanged"]


def test_a_change_for_the_deployments_sake_is_judged_on_the_deployments_measured_rate():
    """Bucket 1 (batch 1, little of the decode time) is moved to steps 0 because its drafting costs the deployment
    more than it brings. The next interval measures it far below its old goodput, which is the expected price, not a
    failed change: the rollback test weighs the measured change by the deployment's rate and the bucket's time, as
    the change was chosen. The policy fed the same measured inputs gives the same choices."""
    tuner, pod, cycles = busy_buckets(tiny=False)
    d = tuner.step(10.0, [pod.snap(10.0)])
    assert [(d.buckets[k].choice.kind, d.buckets[k].choice.steps) for k in ("1", "8+")] == [
        ("switch", 0),
        ("switch", 3),
    ]
    before = copy.deepcopy(tuner.states)
    slower = CycleCost(*[1.08 * v for v in astuple(TOKENY)])
    pod.run("1", 300, 1, 0, [0.95], cost=slower)
    pod.run("8+", 600, 16, 3, [0.6], cost=slower)
    d = tuner.step(20.0, [pod.snap(20.0)])
    est, positions = tuner.estimator, max(ALL) + 1
    assert est.measured_goodput("1", latest_only=True) < 0.5 * before["1"].pending_rollback[1]
    assert (d.buckets["1"].choice.kind, d.buckets["1"].choice.steps) == ("hold", 0)
    assert (d.buckets["8+"].choice.kind, d.buckets["8+"].choice.steps) == ("rollback", 2)
    # the same choices from the policy, given the tuner's inputs
    agg = {}
    parts = {}
    for label, n in (("1", 300.0), ("8+", 600.0)):
        batch, acc = est.batch_mean(label), est.acceptance(label, positions)
        steps = before[label].steps
        tok = batch * (expected_tokens(acc.alphas, steps) if steps else 1.0)
        parts[label] = (n, tok, TOKENY.cycle_ms(steps, batch) / 1000.0)
    total = sum(n * sec for n, _, sec in parts.values())
    rate = sum(n * tok for n, tok, _ in parts.values()) / total
    agg = {label: Aggregate(rate, n * sec / total) for label, (n, _, sec) in parts.items()}
    for label in ("1", "8+"):
        acc = est.acceptance(label, positions)
        want = choose(
            tuner.config.policy,
            before[label],
            acc,
            TOKENY,
            est.batch_mean(label),
            est.samples(label),
            20.0,
            measured_goodput=est.measured_goodput(label, latest_only=True),
            aggregate=agg[label],
            measured_cycle_s=est.measured_cycle_s(label),
            latest_alphas=est.latest_alphas(label, acc.alphas),
        )
        got = d.buckets[label].choice
        assert (got.kind, got.steps, got.reason) == (want.kind, want.steps, want.reason)
        assert got.predicted_gain == pytest.approx(want.predicted_gain, rel=1e-9)


def test_a_change_is_judged_on_the_same_content_before_and_after():
    """Harder text after a change (acceptance 0.85 instead of 0.9) lowers what any step count emits: the goodput
    before the change is scaled to that content first, so 4 % less measured is no loss here."""
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1,), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=COST, refine=False), Pod()
    assert first_decision(tuner, pod, label="1+").buckets["1+"].choice.kind == "switch"
    before = 1000.0 * expected_tokens(HIGH, 2) / COST.cycle_ms(2, 1)
    harder = [0.85]
    verify = 1000.0 * expected_tokens(harder, 3) / (0.96 * before) - (COST.cycle_ms(3, 1) - COST.verify_base)
    pod.run("1+", 300, 1, 3, harder, cost=CycleCost(verify, 0.0, 0.5, 0, 0.5, 0, 0.5))
    d = tuner.step(20.0, [pod.snap(20.0)])
    assert tuner.estimator.measured_goodput("1+", latest_only=True) == pytest.approx(0.96 * before)
    # the change passed: the next step up is taken at once (a judged climb need not wait out the cooldown)
    ch = d.buckets["1+"].choice
    assert (ch.kind, ch.steps) == ("switch", 4) and [(h.fromSteps, h.toSteps) for h in d.history] == [(3, 4)]


def test_a_detected_workload_change_is_not_judged_as_a_failed_change():
    """Acceptance collapses (0.9 -> 0.2) in the interval after a switch: a new workload, detected by the estimator.
    The drop is not blamed on the switch (no rollback to 2); the tuner follows the new workload at once."""
    tuner, pod = Tuner(live(), profile=COST, refine=False), Pod()
    assert first_decision(tuner, pod).table[0] == (1, 3)
    pod.run("1", 300, 1, 3, [0.2])
    d = tuner.step(20.0, [pod.snap(20.0)])
    ch = d.buckets["1"].choice
    assert (ch.kind, ch.steps) == ("switch", 1) and d.table[0] == (1, 1)
