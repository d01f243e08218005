"""The pinned SGLang's shipped adaptive step controller (CPU code path) driven by the simulated runtime through the
per-cycle observer: the comparison baseline the tuner benchmark needs, and a check that the simulator's contract
(accepted drafts per request, bonus excluded, as ``num_correct_drafts_per_req``) is what SGLang consumes."""

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.simulate.engine import SimEngine

adaptive = pytest.importorskip("sglang.srt.speculative.adaptive_spec_params")
SCEN = Path(__file__).resolve().parents[2] / "bench" / "scenarios"


def test_sglang_controller_runs_on_the_simulator():
    s = load_scenario(SCEN / "pcie8-seed.yaml")
    ctl = adaptive.AdaptiveSpeculativeParams(initial_steps=3)
    eng = SimEngine(s)
    eng.set_step_table([(1, ctl.get_steps_for_batch(1))])
    chosen = []

    def feed(batch, steps, accepted, cycle_ms):
        assert len(accepted) == batch and all(0 <= c <= steps for c in accepted)
        new = ctl.on_verify_complete(accepted, batch)
        chosen.append(steps)
        if new is not None and new != steps:
            eng.set_step_table([(1, new)])

    eng.observe(feed)
    eng.advance(120)
    assert set(chosen) <= set(ctl.candidate_steps)
    # seed acceptance is ~0.5 per position: SGLang's rule ("probe one step beyond the EMA") settles low, never at 7
    tail = chosen[len(chosen) // 2 :]
    assert max(tail) <= 3
    final = eng.table.lookup(1)
    vals = {
        (x.name, x.labels.get("bucket")): x.value
        for f in text_string_to_metric_families(eng.metrics_text())
        for x in f.samples
    }
    assert vals[("specdecode_num_steps", "1")] == final
    assert vals[("specdecode_verify_cycles_total", "1")] == len(chosen)
    assert vals[("specdecode_draft_steps_total", "1")] == sum(chosen)
