"""Checks that the seed PCIe scenario reproduces the seed story (all numbers SIMULATED, from one run each):
no speculation ~90 tok/s, EAGLE-3 at 5 steps with the draft on all 8 ranks ~71 tok/s at accept length ~2.1 (ratio 0.79),
the best step count with the draft still on TP8 barely above baseline, and the draft on rank 0 with a tuned step
count above it.

    .venv/bin/python bench/sim/sim_calibration.py [--scenario bench/scenarios/pcie8-seed.yaml] [--seconds 600]"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.contract.scenario import allowed_draft_tps, load_scenario
from specdecode_runtime.simulate.engine import SimEngine


def accept_length(engine: SimEngine) -> float:
    vals = {
        s.name: s.value
        for f in text_string_to_metric_families(engine.metrics_text())
        for s in f.samples
        if s.name in ("specdecode_tokens_generated_total", "specdecode_requests_verified_total")
    }
    return vals["specdecode_tokens_generated_total"] / vals["specdecode_requests_verified_total"]


def run(scenario, steps: int, seconds: float, draft_tp: int | None) -> SimEngine:
    e = SimEngine(scenario, draft_tp=draft_tp)
    e.set_step_table([(1, steps)])
    e.advance(seconds)
    return e


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default=str(Path(__file__).resolve().parents[1] / "scenarios" / "pcie8-seed.yaml"))
    ap.add_argument("--seconds", type=float, default=600.0)
    args = ap.parse_args()
    s = load_scenario(args.scenario)
    base = run(s, 0, args.seconds, None).throughput()
    print(f"SIMULATED results for scenario {s.name} ({args.seconds:g} simulated s per run)")
    print(f"no speculation: {base:.1f} tok/s")
    for tp in allowed_draft_tps(s) or [None]:
        label = f"draft TP{tp}" if tp else "draft as in cost block"
        results = {steps: run(s, steps, args.seconds, tp) for steps in range(1, 8)}
        best = max(results, key=lambda steps: results[steps].throughput())
        at_seed_steps = results[5]
        print(
            f"{label:<24} k=5: {at_seed_steps.throughput():6.1f} tok/s (x{at_seed_steps.throughput() / base:.3f} of "
            f"baseline, accept length {accept_length(at_seed_steps):.2f}); "
            f"best k={best}: {results[best].throughput():6.1f} tok/s "
            f"(x{results[best].throughput() / base:.3f})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
