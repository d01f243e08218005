"""How fast the in-process simulated runtime runs: simulated decode cycles per wall second for every shipped
scenario (target >= 50,000 cycles/s, so ~10 scenarios x ~10 tuner strategies run in minutes on 2 cores).

    .venv/bin/python bench/sim/sim_speed.py [--observed]

``--observed`` also times runs with a per-cycle observer attached (how SGLang's AdaptiveController is fed)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.simulate.engine import SimEngine

TARGET = 50_000


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--observed", action="store_true")
    args = ap.parse_args()
    rows = []
    for path in sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.yaml")):
        s = load_scenario(path)
        for steps in (0, 3, 5):
            for observed in (False, True) if args.observed else (False,):
                e = SimEngine(s)
                e.set_step_table([(1, steps)])
                if observed:
                    e.observe(lambda *a: None)
                t = time.perf_counter()
                e.advance(s.duration)
                wall = time.perf_counter() - t
                rows.append((s.name, steps, observed, e.cycles_total, wall, e.cycles_total / wall))
    print(f"{'scenario':<16} {'steps':>5} {'observer':>8} {'cycles':>8} {'wall s':>8} {'cycles/s':>11} {'ratio':>7}")
    for name, steps, obs, cycles, wall, rate in rows:
        print(f"{name:<16} {steps:>5} {str(obs):>8} {cycles:>8} {wall:>8.3f} {rate:>11,.0f} {rate / TARGET:>7.1f}")
    worst = min(r[-1] for r in rows if not r[2])
    print(f"slowest unobserved run: {worst:,.0f} cycles/s = {worst / TARGET:.1f}x the {TARGET:,} target")
    return 0 if worst >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
