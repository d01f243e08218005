"""The tuner chooses only step counts a pod can serve: in Live the tiers the pods report they captured
(``specdecode_candidate_steps``), in Rollout the values a restart renders as they are (never 0, which a restart
cannot render: SGLang needs ``--speculative-num-steps`` >= 1)."""

from helpers import scenario

from specdecode_operator.api.models import Autotune
from specdecode_operator.tuner.policy import PolicyConfig
from specdecode_operator.tuner.snapshot import parse_metrics
from specdecode_operator.tuner.tuner import Tuner, TunerConfig
from specdecode_runtime.contract.capabilities import autotune_steps
from specdecode_runtime.simulate.engine import SimEngine

ALL = tuple(range(0, 8))
# drafting loses at every depth here: the model's best is no speculation (steps 0)
LOSING = [{"seconds": 900, "batchSize": 1, "acceptance": [0.02]}]


def drive(cfg: TunerConfig, served: list[int] | None, seconds: float = 900, interval: float = 10.0):
    sc = scenario(LOSING, restartSeconds=30)
    eng = SimEngine(sc)
    if served is not None:
        eng.set_candidates(served)
    eng.set_step_table([(1, cfg.initial_steps)])
    tuner = Tuner(cfg, profile=sc.cycle_cost())
    ds = [tuner.step(eng.now, [parse_metrics(eng.metrics_text(), "p", eng.now)])]
    while eng.now < seconds:
        eng.advance(interval)
        d = tuner.step(eng.now, [parse_metrics(eng.metrics_text(), "p", eng.now)])
        ds.append(d)
        if cfg.mode == "Live" and d.changed:
            eng.set_step_table(d.table)
        if cfg.mode == "Rollout" and d.restart:
            eng.set_step_table(d.table)
            eng.restart(cfg.restart_s)
    return tuner, ds


def test_live_tuner_chooses_only_the_tiers_the_pod_reports():
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL, cooldown_s=20), initial_steps=3)
    _, ds = drive(cfg, served=[0, 1, 3, 5])
    assert ds[-1].table[0][1] == 0  # the pod serves the target-only tier, and it wins here
    cfg = TunerConfig(policy=PolicyConfig(candidates=ALL, cooldown_s=20), initial_steps=3)
    tuner, ds = drive(cfg, served=[1, 3, 5])  # a pod without tier 0
    chosen = {steps for d in ds for _, steps in d.table}
    assert chosen <= {1, 3, 5} and 0 not in chosen, chosen
    assert ds[-1].table[0][1] == 1 and tuner.config.policy.allowed() == [1, 3, 5]


def test_rollout_never_chooses_a_step_count_the_rendering_would_change():
    at = Autotune(mode="Rollout", minSteps=1, maxSteps=7, intervalSeconds=10)
    cfg = TunerConfig.from_autotune(at, num_steps=3, restart_s=30)
    cfg.rollout_cooldown_s = 600
    assert 0 not in cfg.policy.allowed()
    tuner, ds = drive(cfg, served=None)
    assert tuner.restarts >= 1  # it does move (down, towards the least drafting)
    for d in ds:
        rendered, _ = autotune_steps("Rollout", at.minSteps, at.maxSteps, d.rollout_steps)
        assert d.rollout_steps >= 1 and rendered == d.rollout_steps == d.status.numSteps
    # the same tuner offered steps 0 (as before rendering and choice were tied) goes to 0, which renders as 1
    old = TunerConfig(
        mode="Rollout", policy=PolicyConfig(candidates=ALL), initial_steps=3, restart_s=30, rollout_cooldown_s=600
    )
    _, ds = drive(old, served=None)
    assert ds[-1].rollout_steps == 0 and autotune_steps("Rollout", 1, 7, 0)[0] == 1


def test_live_from_autotune_offers_the_captured_tiers():
    at = Autotune(mode="Live", minSteps=2, maxSteps=6, intervalSeconds=10)
    cfg = TunerConfig.from_autotune(at, num_steps=3)
    assert list(cfg.policy.candidates) == autotune_steps("Live", 2, 6, 3)[1] == [0, 2, 3, 4, 5, 6]
