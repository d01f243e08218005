"""The in-process simulated runtime: calibration, determinism, phases, restarts and the metrics it emits."""

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.contract.goodput import expected_tokens
from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.contract.step_table import StepTable
from specdecode_runtime.simulate.engine import SimEngine

SCEN = Path(__file__).resolve().parents[2] / "bench" / "scenarios"


@pytest.fixture(scope="module")
def seed():
    return load_scenario(SCEN / "pcie8-seed.yaml")


def metric(text, name, **labels):
    total = 0.0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def run(scenario, steps, seconds=600, **kw):
    e = SimEngine(scenario, **kw)
    e.set_step_table([(1, steps)])
    e.advance(seconds)
    return e


def test_seed_calibration(seed):
    base = run(seed, 0)
    assert base.throughput() == pytest.approx(90.0, abs=1.0)
    tp8 = run(seed, 5)
    assert tp8.throughput() == pytest.approx(71.0, abs=3.0)
    text = tp8.metrics_text()
    cycles = metric(text, "specdecode_verify_cycles_total", bucket="1")
    tokens = metric(text, "specdecode_tokens_generated_total")
    assert tokens / cycles == pytest.approx(2.1, abs=0.08)  # accept length
    assert run(seed, 2, draft_tp=1).throughput() > 100  # draft on rank 0, tuned k


def test_same_seed_same_result_and_chunking_does_not_matter(seed):
    a = run(seed, 3, seconds=120)
    b = SimEngine(seed)
    b.set_step_table([(1, 3)])
    for _ in range(40):
        b.advance(3.0)
    assert (a.tokens_total, a.cycles_total) == (b.tokens_total, b.cycles_total)
    c = run(seed, 3, seconds=120, seed=99)
    assert c.tokens_total != a.tokens_total


def test_per_position_rates_recover_the_scenario_acceptance(seed):
    e = run(seed, 5, seconds=1200)
    text = e.metrics_text()
    alphas = seed.phases[0].acceptance
    for j in range(1, 6):
        att = metric(text, "specdecode_position_attempts_total", bucket="1", position=str(j))
        acc = metric(text, "specdecode_position_accepted_total", bucket="1", position=str(j))
        assert acc / att == pytest.approx(alphas[j - 1], abs=0.03), j
    assert metric(text, "specdecode_verify_cycles_total", simulated="true") == e.cycles_total


def test_phase_seconds_add_up_to_simulated_time(seed):
    e = run(seed, 4, seconds=60)
    text = e.metrics_text()
    total = sum(
        metric(text, "specdecode_cycle_seconds_sum", phase=p) for p in ("draft", "verify", "draft_extend", "other")
    )
    assert total == pytest.approx(e.now, rel=1e-9)
    cost = e.cost
    draft = metric(text, "specdecode_cycle_seconds_sum", phase="draft")
    steps = metric(text, "specdecode_draft_steps_total")
    assert draft / steps * 1000 == pytest.approx(cost.draft_step_ms(1))


def test_step_table_per_bucket_and_phases():
    s = load_scenario(SCEN / "batch-ramp.yaml")
    e = SimEngine(s)
    e.set_step_table(StepTable.from_pairs([(1, 5), (8, 3), (32, 1)]))
    e.advance(s.duration)
    text = e.metrics_text()
    assert e.phase_index == len(s.phases) - 1 and e.finished
    assert metric(text, "specdecode_num_steps", bucket="8-31") == 3
    assert metric(text, "specdecode_num_steps", bucket="64+") == 1
    assert metric(text, "specdecode_draft_steps_total", bucket="64+") == metric(
        text, "specdecode_verify_cycles_total", bucket="64+"
    )
    assert metric(text, "specdecode_position_attempts_total", bucket="64+", position="2") == 0
    assert metric(text, "specdecode_verify_cycles_total", bucket="2-7") > 0


def test_throughput_matches_the_goodput_model_per_phase():
    s = load_scenario(SCEN / "chat-to-code.yaml")
    for i, ph in enumerate(s.phases[:2]):
        e = SimEngine(s)
        e.set_step_table([(1, 4)])
        e.advance(sum(p.seconds for p in s.phases[:i]))
        before_t, before_tok = e.now, e.tokens_total
        e.advance(ph.seconds)
        measured = (e.tokens_total - before_tok) / (e.now - before_t)
        sizes, probs = ph.batch_distribution()
        cost = s.cycle_cost()
        # time-average: E[tokens per cycle] / E[cycle time]
        tok = sum(p * b * expected_tokens(ph.acceptance, 4) for b, p in zip(sizes, probs))
        ms = sum(p * cost.cycle_ms(4, b) for b, p in zip(sizes, probs))
        assert measured == pytest.approx(tok / ms * 1000, rel=0.03), ph.name


def test_restart_costs_time_and_resets_counters(seed):
    e = run(seed, 2, seconds=100)
    tokens = e.tokens_total
    e.restart()
    assert e.now == pytest.approx(100 + seed.restart_seconds, abs=0.05)
    assert e.tokens_total == tokens
    assert metric(e.metrics_text(), "specdecode_verify_cycles_total") == 0
    assert metric(e.metrics_text(), "specdecode_num_steps", bucket="1") == 2
    e.advance(10)
    assert e.tokens_total > tokens


def test_observer_sees_every_cycle_and_can_change_steps(seed):
    e = SimEngine(seed)
    e.set_step_table([(1, 5)])
    seen = []

    def hook(batch, steps, accepted, cycle_ms):
        seen.append((batch, steps, accepted, cycle_ms))
        if len(seen) == 10:
            e.set_step_table([(1, 1)])

    e.observe(hook)
    e.advance(2.0)
    assert [s for _, s, _, _ in seen[:10]] == [5] * 10
    assert all(s == 1 for _, s, _, _ in seen[10:]) and len(seen) > 20
    assert all(len(a) == b and all(0 <= c <= s for c in a) for b, s, a, _ in seen)
    assert sum(ms for *_, ms in seen) / 1000 == pytest.approx(e.now)
    assert e.tokens_total == sum(sum(a) + len(a) for _, _, a, _ in seen)


def test_sglang_style_gauges_are_present_and_simulated(seed):
    text = run(seed, 5, seconds=30).metrics_text()
    assert 1.0 <= metric(text, "sglang:spec_accept_length", simulated="true") <= 6.0
    assert metric(text, "sglang:gen_throughput", simulated="true") > 0
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            assert s.labels.get("simulated") == "true", s


def test_simulation_speed(seed):
    import time

    e = SimEngine(seed)
    e.set_step_table([(1, 3)])
    t = time.perf_counter()
    e.advance(600)
    rate = e.cycles_total / (time.perf_counter() - t)
    assert rate > 50_000, rate
