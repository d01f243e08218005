import pytest
from helpers import FakePod, scenario

from specdecode_operator.api.models import Autotune
from specdecode_operator.tuner.policy import PolicyConfig
from specdecode_operator.tuner.snapshot import down, parse_metrics
from specdecode_operator.tuner.tuner import Tuner, TunerConfig
from specdecode_runtime.simulate.engine import SimEngine

ALL = tuple(range(0, 8))


def drive(sc, cfg, seconds, interval=10.0, profile=True):
    eng = SimEngine(sc)
    eng.set_step_table(cfg.initial_steps and [(1, cfg.initial_steps)] or [(1, 0)])
    tuner = Tuner(cfg, profile=sc.cycle_cost() if profile else None)
    decisions = [tuner.step(eng.now, [parse_metrics(eng.metrics_text(), "p", eng.now)])]
    while eng.now < seconds:
        eng.advance(interval)
        d = tuner.step(eng.now, [parse_metrics(eng.metrics_text(), "p", eng.now)])
        decisions.append(d)
        if cfg.mode == "Live" and d.changed:
            eng.set_step_table(d.table)
        if cfg.mode == "Rollout" and d.restart:
            eng.set_step_table(d.table)
            eng.restart(cfg.restart_s)
    return eng, tuner, decisions


def test_drafter_whose_acceptance_collapses_after_position_3_is_not_tuned_to_7():
    sc = scenario([{"seconds": 600, "batchSize": 1, "acceptance": [0.92, 0.92, 0.92, 0.1]}])
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL, cooldown_s=20), initial_steps=1)
    eng, tuner, ds = drive(sc, cfg, 600)
    visited = {d.table[0][1] for d in ds}
    assert max(visited) <= 4  # at most one exploratory step past the cliff
    assert ds[-1].table[0][1] == 3


def test_converges_to_the_model_optimum_and_reports_status():
    sc = scenario([{"seconds": 400, "batchSize": 1, "acceptance": [0.8, 0.75, 0.7, 0.65, 0.6, 0.55, 0.5]}])
    from specdecode_runtime.contract.goodput import best_steps

    truth = best_steps(sc.phases[0].acceptance, sc.cycle_cost(), 1, ALL)[0]
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL), initial_steps=1)
    eng, tuner, ds = drive(sc, cfg, 400)
    last = ds[-1]
    assert last.table[0][1] == truth
    st = last.status
    assert st.numSteps == truth and st.tokensPerSecond > 0 and st.lastTuneTime
    assert 1.0 < st.acceptLength < 1 + truth and 0 < st.acceptRate < 1
    assert st.stepTable[0] == {"minBatch": 1, "steps": truth}
    assert tuner.history and tuner.history[0].fromSteps == 1
    assert any(e.reason == "StepsChanged" for d in ds for e in d.events)
    assert last.step_table_body()["table"][0] == {"minBatch": 1, "steps": truth}
    assert last.condition.status == "True"


def test_off_mode_only_reports():
    sc = scenario([{"seconds": 200, "batchSize": 1, "acceptance": [0.9]}])
    cfg = TunerConfig(mode="Off", policy=PolicyConfig(candidates=ALL), initial_steps=1)
    eng, tuner, ds = drive(sc, cfg, 200)
    assert all(d.table == ds[0].table and not d.changed for d in ds)
    assert any(d.recommended_table[0][1] > 1 for d in ds)
    assert any(e.reason == "StepsRecommended" for d in ds for e in d.events)
    assert tuner.changes == 0


def test_rollout_restarts_only_when_gain_repays_restart():
    sc = scenario([{"seconds": 900, "batchSize": 1, "acceptance": [0.9]}], restartSeconds=30)
    cfg = TunerConfig(
        mode="Rollout", policy=PolicyConfig(candidates=ALL), initial_steps=1, restart_s=30, rollout_cooldown_s=300
    )
    eng, tuner, ds = drive(sc, cfg, 900)
    assert tuner.restarts >= 1 and eng.restarts == tuner.restarts
    assert all(len(d.table) == 1 for d in ds)  # stock SGLang: one step count
    never = TunerConfig(mode="Rollout", policy=PolicyConfig(candidates=ALL), initial_steps=1, restart_s=1e6)
    _, t2, ds2 = drive(sc, never, 300)
    assert t2.restarts == 0 and any(e.reason == "RolloutSkipped" for d in ds2 for e in d.events)


@pytest.mark.parametrize("kind", ["down", "nan", "reset", "none"])
def test_bad_metrics_give_a_condition_and_no_decision(kind):
    pod = FakePod(seed=9)
    tuner = Tuner(TunerConfig(policy=PolicyConfig(candidates=ALL, min_samples=1), initial_steps=2))
    tuner.step(0.0, [pod.snapshot(0.0)])
    pod.run(300, 1, 2, [0.9])
    tuner.step(10.0, [pod.snapshot(10.0)])
    if kind == "down":
        snaps = [down("pod-0", 20.0, "GET http://10.0.0.1:30000/metrics failed: connection refused")]
    elif kind == "nan":
        snaps = [
            parse_metrics(
                pod.text().replace(
                    'specdecode_verify_cycles_total{bucket="1",simulated="true"} 300.0',
                    'specdecode_verify_cycles_total{bucket="1",simulated="true"} NaN',
                ),
                "pod-0",
                20.0,
            )
        ]
        assert snaps[0].problems
    elif kind == "reset":
        fresh = FakePod(seed=10)
        fresh.run(5, 1, 2, [0.9])
        snaps = [fresh.snapshot(20.0)]
    else:
        snaps = []
    before = tuner.table()
    d = tuner.step(20.0, snaps)
    assert d.condition.status == "False"
    assert (
        d.condition.reason
        == {"down": "MetricsDown", "nan": "MetricsInvalid", "reset": "CounterReset", "none": "NoPods"}[kind]
    )
    assert not d.changed and d.table == before and not d.history
    assert any(e.type == "Warning" for e in d.events)


def test_config_from_the_crd_autotune_block():
    cfg = TunerConfig.from_autotune(Autotune(mode="Live", minSteps=2, maxSteps=6, intervalSeconds=15), num_steps=3)
    assert cfg.policy.cooldown_s == 30 and cfg.policy.candidates[0] == 0
    assert all(2 <= k <= 6 for k in cfg.policy.allowed() if k)


def _throughput(sc, phase, table):
    """Analytic tokens/s of a step table for a phase whose batch size is drawn per cycle (the simulator's model)."""
    import bisect

    from specdecode_runtime.contract.goodput import expected_tokens

    cost, los = sc.cycle_cost(), [lo for lo, _ in table]
    sizes, probs = phase.batch_distribution()
    tok = tm = 0.0
    for b, p in zip(sizes, probs):
        k = table[bisect.bisect_right(los, b) - 1][1]
        tok += p * b * (expected_tokens(phase.acceptance, k) if k else 1.0)
        tm += p * cost.cycle_ms(k, b)
    return tok / tm * 1000.0


def test_buckets_are_tuned_for_the_deployments_throughput_not_each_their_own():
    """Batch 1 and batch 8 share the decode time: the tuner's table reaches the deployment optimum (the bench's
    Dinkelbach oracle), not the table of per-bucket optima."""
    from specdecode_operator.bench.tuner_benchmark import oracle_table
    from specdecode_runtime.contract.goodput import best_steps

    cost = {
        "verify": {"base": 8.0, "perToken": 0.04},
        "draftStep": {"base": 0.19},
        "draftExtend": {"base": 0.2},
        "overhead": 0.3,
    }
    sc = scenario(
        [{"seconds": 400, "batchSize": {1: 0.6, 8: 0.4}, "acceptance": [0.8, 0.74, 0.7, 0.66, 0.62, 0.58, 0.55]}],
        cost=cost,
    )
    ph = sc.phases[0]
    per_bucket = [
        (lo, best_steps(ph.acceptance, sc.cycle_cost(), lo, ALL)[0] if lo in (1, 8) else 3) for lo in sc.buckets
    ]
    oracle = oracle_table(sc, ph, ALL)
    assert _throughput(sc, ph, oracle) > _throughput(sc, ph, per_bucket) * 1.003  # the coupling matters here
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL, cooldown_s=20), buckets=tuple(sc.buckets), initial_steps=3)
    eng, tuner, ds = drive(sc, cfg, 400)
    assert _throughput(sc, ph, ds[-1].table) >= _throughput(sc, ph, oracle) * 0.998


def test_a_clearly_better_deeper_k_is_reached_one_position_per_interval():
    """Censoring allows one unobserved position at a time; once a step up has passed its one-interval rollback
    test the next step up need not wait out the rest of the cooldown."""
    sc = scenario(
        [{"seconds": 200, "batchSize": 1, "acceptance": [0.95] * 7}],
        cost={"verify": {"base": 10}, "draftStep": {"base": 0.2}, "draftExtend": {"base": 0.2}, "overhead": 0.5},
    )
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL, cooldown_s=20), initial_steps=1)
    eng, tuner, ds = drive(sc, cfg, 80)
    steps = [d.table[0][1] for d in ds]  # after t = 0, 10, 20, ...
    assert steps[1] == 2 and steps[6] == 7, steps
