"""What the tuner decides at the edges of its inputs, seen from its caller (the ``Decision``, the cost it reports).

Pinned down here, because each is a way the tuner could quietly decide on the wrong grounds:

- two buckets already share the decode time: the deployment's throughput couples them, not only three or more;
- the acceptance a bucket remembers is used, in a coupled deployment and in Rollout, while a workload change leaves the
  window short of attempts; a Rollout bucket is advised with exactly the curve it was advised with before;
- a bucket still waiting for samples at a step count above 0 is left alone (the "re-probe" is for steps 0 only);
- the steps-0 re-probe depends on elapsed time only, so any monotonic clock (whatever its origin) gives one decision;
- a bucket whose first interval ended in plain decoding (nothing learnt from its timings) is still decided, on its
  per-cycle phase averages;
- Rollout with no step count it may render waits through intervals without data;
- the MetricsAvailable condition lists every pod and every problem, each separated by "; ";
- a bucket idle in an interval keeps its step count (nothing new to judge it on), and the status's figures "over the
  last interval" are the buckets that ran in it;
- Rollout with no step count to render holds, as Live does; pods that time no cycle and no profile give no decision
  rather than a division by a zero cycle.

The pods are the exact counters of ``test_tuner_bookkeeping.Pod`` (expected counts, no sampling)."""

from __future__ import annotations

import pytest
from test_tuner_bookkeeping import (
    ALL,
    COST,
    COSTLY,
    HIGH,
    REPROBE,
    TOKENY,
    Pod,
    expected_choices,
    first_decision,
    live,
    nan_snapshot,
    primed,
    rollout,
)

from specdecode_operator.tuner.policy import PolicyConfig
from specdecode_operator.tuner.snapshot import down
from specdecode_operator.tuner.tuner import FIRST_SCRAPE, Event, Tuner, TunerConfig


# -- buckets decided for the deployment's throughput -----------------------------------------------------------------
def test_two_buckets_are_tuned_for_the_deployments_throughput():
    """The smallest deployment with a choice to couple: batch 1-7 and batch 8+ share the decode time."""
    cfg = TunerConfig(
        policy=PolicyConfig(candidates=ALL, min_samples=10), buckets=(1, 8), initial_steps=2, restart_s=1.0
    )
    tuner, pod = Tuner(cfg, profile={"1-7": TOKENY, "8+": TOKENY}, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    cycles = {"1-7": 300.0, "8+": 600.0}
    pod.run("1-7", cycles["1-7"], 1, 2, [0.95], cost=TOKENY)
    pod.run("8+", cycles["8+"], 16, 2, [0.6], cost=TOKENY)
    d = tuner.step(10.0, [pod.snap(10.0)])
    coupled = expected_choices(tuner, 10.0, cycles, steps=2)
    alone = expected_choices(tuner, 10.0, cycles, steps=2, coupled=False)
    for label in cycles:
        got = d.buckets[label].choice
        assert (got.steps, got.kind) == (coupled[label].steps, coupled[label].kind)
        assert got.predicted_gain == pytest.approx(coupled[label].predicted_gain, rel=1e-9)
        assert got.predicted_gain != pytest.approx(alone[label].predicted_gain, rel=1e-3)


# -- remembered acceptance -------------------------------------------------------------------------------------------
def test_after_a_workload_change_a_coupled_bucket_is_decided_on_the_acceptance_it_remembers():
    """Batch 1 -> 4 in bucket 1-7 empties its window (a new workload); 30 cycles are too few attempts to observe any
    position, so the bucket goes on with the curve it saw 10 s ago, also while the buckets are coupled."""
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 8), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=TOKENY, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1-7", 300, 1, 2, HIGH, cost=TOKENY)
    pod.run("8+", 300, 8, 2, HIGH, cost=TOKENY)
    seen = tuner.step(10.0, [pod.snap(10.0)]).buckets["1-7"]
    assert seen.observed_positions == 2
    pod.run("1-7", 30, 4, tuner.states["1-7"].steps, HIGH, cost=TOKENY)
    pod.run("8+", 300, 8, tuner.states["8+"].steps, HIGH, cost=TOKENY)
    d = tuner.step(20.0, [pod.snap(20.0)])
    assert tuner.estimator.acceptance("1-7", max(ALL) + 1).observed == 0  # the window alone observes nothing
    again = d.buckets["1-7"]
    assert again.observed_positions == 2 and again.alphas == seen.alphas
    assert again.choice.kind == "wait" and d.condition.reason == "Scraped"


def test_rollout_advises_a_bucket_short_of_fresh_data_with_the_curve_it_last_advised_with():
    tuner, pod = rollout(restart_s=1e9), Pod()
    first = first_decision(tuner, pod, alphas=[0.95]).buckets["1"]
    assert first.observed_positions == 2 and len(first.alphas) == max(tuner.config.policy.allowed()) + 1
    pod.run("1", 30, 4, 2, [0.95])  # a new workload (batch 4), too few attempts to observe a position
    again = tuner.step(20.0, [pod.snap(20.0)]).buckets["1"]
    assert again.observed_positions == 2 and again.alphas == first.alphas


# -- the steps-0 re-probe --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("steps", [1, 2, 3])
def test_a_bucket_waiting_for_samples_above_steps_zero_is_left_alone(steps):
    """Too few cycles to decide, and too few attempts to know any acceptance: wait, no probe of another depth."""
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), initial_steps=steps)
    tuner, pod = Tuner(cfg, profile=COSTLY, refine=False), Pod()
    before = tuner.table()
    assert before[0] == (1, steps)
    d = first_decision(tuner, pod, cycles=30, steps=steps)
    rep = d.buckets["1"]
    assert rep.observed_positions == 0
    assert (rep.choice.kind, rep.choice.steps) == ("wait", steps)
    assert d.table == before and not d.changed and d.history == [] and d.events == []


@pytest.mark.parametrize("origin", [0.0, 1e6, -1e6])
def test_the_steps_zero_reprobe_depends_on_elapsed_time_not_on_the_clocks_origin(origin):
    """Snapshot times come from any monotonic clock: the acceptance seen at origin + 10 is stale 601 s later (the
    workload changed since, so nothing is observed any more) and the bucket at steps 0 probes steps 1 again."""
    cfg = TunerConfig(policy=PolicyConfig(candidates=(0, 1, 2, 3)), initial_steps=0)
    tuner, pod = Tuner(cfg, profile=COSTLY, refine=False), Pod()
    tuner.step(origin, [pod.snap(origin)])
    pod.run("1", 300, 1, 2, HIGH)  # the pods drafted 2 steps before the tuner took over
    d = tuner.step(origin + 10.0, [pod.snap(origin + 10.0)])
    assert d.buckets["1"].observed_positions == 2 and d.buckets["1"].choice.kind == "hold"
    pod.run("1", 300, 4, 0, HIGH)  # batch 4 at steps 0: a new workload, no position attempted
    now = origin + 10.0 + 601.0
    d = tuner.step(now, [pod.snap(now)])
    ch = d.buckets["1"].choice
    assert d.buckets["1"].observed_positions == 0
    assert (ch.steps, ch.kind, ch.reason) == (1, "explore", REPROBE)
    assert d.table[0] == (1, 1) and d.changed


# -- costs -----------------------------------------------------------------------------------------------------------
def test_a_bucket_whose_first_interval_ended_in_plain_decoding_is_decided_on_its_phase_averages():
    """Half the interval drafted 2 steps, then the gauge says 0: the share of drafting cycles is unknown, so the
    timings teach the refinement nothing, and the bucket is decided on the phase averages as they are."""
    tuner, pod = Tuner(live(), refine=True), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1", 150, 1, 2, HIGH)
    pod.run("1", 150, 1, 0, HIGH)
    d = tuner.step(10.0, [pod.snap(10.0)])
    rep = d.buckets["1"]
    assert rep.cost_source == "PhaseAverages" and rep.choice.kind in ("hold", "switch", "explore")
    (entry,) = d.status.costProfile
    assert (entry.bucket, entry.source) == ("1", "PhaseAverages") and d.status.costSource == "PhaseAverages"
    cost, source = tuner.cost("1")
    averages, _ = tuner.estimator.cost("1", None)
    assert source == "PhaseAverages"
    for steps in (0, 1, 2, 5):
        assert cost.cycle_ms(steps, 1.0) == pytest.approx(averages.cycle_ms(steps, 1.0), rel=1e-12)


# -- Rollout ---------------------------------------------------------------------------------------------------------
def test_rollout_with_no_step_count_to_render_waits_through_intervals_without_data():
    cfg = TunerConfig(mode="Rollout", policy=PolicyConfig(candidates=()), initial_steps=2)
    tuner = Tuner(cfg, profile=TOKENY, refine=False)
    d = tuner.step(0.0, [Pod().snap(0.0)])
    assert (d.condition.reason, d.condition.message) == ("WarmingUp", f"no decision this interval: {FIRST_SCRAPE}")
    assert not d.restart and d.table == [(1, 2)] and d.rollout_steps == 2 and d.history == []
    d = tuner.step(10.0, [down("pod-0", 10.0, "timeout")])
    assert d.condition.reason == "MetricsDown" and not d.restart and d.table == [(1, 2)]
    assert [e.reason for e in d.events] == ["MetricsDown"]


# -- the MetricsAvailable condition ----------------------------------------------------------------------------------
def test_invalid_samples_of_several_pods_are_listed_pod_by_pod():
    tuner, pods = primed("a", "b")
    d = tuner.step(
        10.0,
        [nan_snapshot(pods["b"], 10.0, ["y is nan"]), nan_snapshot(pods["a"], 10.0, ["x is nan", "z is nan"])],
    )
    message = "no decision this interval: invalid samples: a: x is nan, z is nan; b: y is nan"
    assert (d.condition.status, d.condition.reason, d.condition.message) == ("False", "MetricsInvalid", message)
    assert d.events == [Event("Warning", "MetricsInvalid", message)]


def test_a_partial_decision_lists_every_problem():
    tuner, pods = primed("a", "b", "c")
    d = tuner.step(
        10.0, [nan_snapshot(pods["c"], 10.0, ["x is nan"]), down("b", 10.0, "timeout"), pods["a"].snap(10.0)]
    )
    assert (d.condition.status, d.condition.reason) == ("True", "PartialMetrics")
    assert d.condition.message == "decided on 1 pod(s); down: b: timeout; invalid samples: c: x is nan"
    assert d.buckets and all(e.type == "Normal" for e in d.events)


# -- holding where there is nothing to decide on -----------------------------------------------------------------------
@pytest.mark.parametrize("policy", [dict(candidates=()), dict(candidates=(0,), allow_zero=False)])
def test_rollout_with_no_step_count_to_render_holds(policy):
    cfg = TunerConfig(mode="Rollout", policy=PolicyConfig(**policy), initial_steps=2)
    d = first_decision(Tuner(cfg, profile=COST, refine=False), Pod())
    assert not d.restart and d.table == [(1, 2)]


@pytest.mark.parametrize("refine", [True, False])
def test_pods_without_cycle_timings_and_no_profile_give_no_decision(refine):
    """No override, no start-up probe, and counters without cycle-phase timings: there is no cost to compare step
    counts with, so the bucket keeps its step count (a 0 ms cycle would divide the goodput by zero)."""
    tuner = Tuner(TunerConfig(policy=PolicyConfig(candidates=ALL), initial_steps=2), refine=refine)
    d = first_decision(tuner, Pod(), cost=None)
    assert d.table[0] == (1, 2) and "1" not in d.buckets
    assert tuner.estimator.cost("1", None) == (None, "none")  # what the estimator says: cycles counted, none timed


def idle_after_one_interval() -> tuple[Tuner, list]:
    """Bucket 1-7 runs one interval (batch 1, acceptance 0.95), then only bucket 8+ runs (acceptance 0.1)."""
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 8), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=COST, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1-7", 1000, 1, 2, [0.95])
    decisions = [tuner.step(10.0, [pod.snap(10.0)])]
    for k in range(2, 40):
        pod.run("8+", 300, 8, tuner.states["8+"].steps, [0.1])
        decisions.append(tuner.step(10.0 * k, [pod.snap(10.0 * k)]))
    return tuner, decisions


def test_an_idle_bucket_keeps_its_step_count():
    """Decided again on its old window every interval, an idle bucket's one-interval probes are never judged (no
    traffic) and it climbed 3 -> 4 -> ... -> 7 without running a cycle; the table pushed to the pods said so."""
    tuner, decisions = idle_after_one_interval()
    after_its_interval = decisions[0].table[0][1]
    assert tuner.table()[0] == (1, after_its_interval), [(h.time, h.bucket, h.toSteps) for h in tuner.history]
    assert all("1-7" not in d.buckets for d in decisions[1:])


def test_status_figures_of_the_last_interval_are_the_buckets_that_ran_in_it():
    """acceptLength / acceptRate are "over the last interval": six minutes after batch 1-7 stopped, its one interval
    (acceptance 0.95) must not outweigh the traffic that runs (0.1), and numSteps follows the bucket that runs."""
    tuner, decisions = idle_after_one_interval()
    st = decisions[-1].status
    assert st.acceptRate == pytest.approx(0.1, abs=0.01)
    assert st.numSteps == tuner.states["8+"].steps


def test_an_interval_without_traffic_keeps_the_figures_of_the_latest_one_with_some():
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 8), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=COST, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1-7", 1000, 1, 2, [0.95])
    pod.run("8+", 300, 8, 2, [0.1])
    busy = tuner.step(10.0, [pod.snap(10.0)]).status
    quiet = tuner.step(20.0, [pod.snap(20.0)]).status  # no cycle at all in this interval
    assert (quiet.acceptRate, quiet.acceptLength, quiet.numSteps) == (busy.acceptRate, busy.acceptLength, busy.numSteps)
    assert 0.1 < busy.acceptRate < 0.95  # both buckets of that interval count


def test_a_bucket_without_cycle_timings_leaves_the_other_buckets_decided():
    """Pods that time no cycle of one bucket (no cost for it, no profile) still get the other buckets decided."""
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 8), initial_steps=2)
    tuner, pod = Tuner(cfg), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1-7", 1000, 1, 2, [0.95], cost=None)
    pod.run("8+", 1000, 8, 2, [0.95])
    d = tuner.step(10.0, [pod.snap(10.0)])
    assert "1-7" not in d.buckets and "8+" in d.buckets


def test_one_cycle_is_traffic_for_the_status_figures():
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), buckets=(1, 8), initial_steps=2)
    tuner, pod = Tuner(cfg, profile=COST, refine=False), Pod()
    tuner.step(0.0, [pod.snap(0.0)])
    pod.run("1-7", 1000, 1, 2, [0.95])
    first = tuner.step(10.0, [pod.snap(10.0)]).status
    pod.run("8+", 1, 8, 2, [0.0])  # one cycle, nothing accepted
    one = tuner.step(20.0, [pod.snap(20.0)]).status
    assert first.acceptRate > 0.9 and one.acceptRate == 0.0
