"""Writes bench/scenarios/unseen/*.yaml: the tuner benchmark's held-out scenarios (simulated).

They stress what the shipped scenarios do not: batch ramps up and down through mixed batch distributions, a PCIe
box whose best step count moves between phases, acceptance that flips faster than the tuning interval, and noisy
acceptance that jumps between regimes at irregular times. Random draws come from fixed numpy seeds, so the files are
reproducible; the per-phase optimum of each phase (1..6 steps across the set) is printed with
``python bench/sim/make_unseen_scenarios.py --check``.

    python bench/sim/make_unseen_scenarios.py            # (re)write the files
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import yaml

OUT = Path(__file__).resolve().parents[1] / "scenarios" / "unseen"

H200_COST = {  # h200-nvlink.yaml: draft on all 8 ranks
    "interconnect": "NVLink",
    "cost": {
        "verify": {"base": 8.0, "perToken": 0.04},
        "draftStep": {"base": 0.1927, "perSeq": 0.000249},
        "draftExtend": {"base": 0.2012, "perToken": 0.000217},
        "overhead": 0.3,
        "broadcast": 0.0,
    },
}
# pcie8-seed.yaml with the draft on rank 0 (draft TP 1): the target's verify and overhead, the draft step derived
# from the measured H200 step scaled by memory bandwidth (docs/scenarios.md, pcie8-seed calibration), an assumed
# 50 us proposal broadcast.
PCIE_RANK0_COST = {
    "interconnect": "PCIe",
    "cost": {
        "verify": {"base": 10.7, "perToken": 0.11},
        "draftStep": {"base": 1.40, "perSeq": 0.06},
        "draftExtend": {"base": 1.40, "perToken": 0.06},
        "overhead": 0.3,
        "broadcast": 0.05,
    },
}


def chain(first: float, decay: float, n: int = 7) -> list[float]:
    return [round(min(first * decay**i, 0.99), 3) for i in range(n)]


def scenarios() -> dict[str, dict]:
    out = {}
    # 1. Load ramps up through mixed batch distributions and back down (H200).
    chat = chain(0.8, 0.94)
    mixes = [
        ("b1", {1: 1.0}),
        ("b1-4", {1: 0.5, 4: 0.5}),
        ("b4-12", {4: 0.4, 12: 0.6}),
        ("b16-24", {16: 0.5, 24: 0.5}),
        ("b40-64", {40: 0.5, 64: 0.5}),
        ("b96", {96: 1.0}),
        ("b24-40", {24: 0.5, 40: 0.5}),
        ("b6-10", {6: 0.5, 10: 0.5}),
        ("b2", {2: 1.0}),
    ]
    out["ramp-up-down"] = {
        "name": "ramp-up-down",
        "description": "H200 NVLink, load ramps 1 -> 96 and back through mixed batches, 120 s per step (simulated)",
        **H200_COST,
        "restartSeconds": 300,
        "phases": [{"name": n, "seconds": 120, "batchSize": m, "acceptance": chat} for n, m in mixes],
        "seed": 101,
    }
    # 2. PCIe box, draft on rank 0: the workload moves between chat, code, summarisation and agentic tool calls;
    # the best step count moves with it.
    regimes = [
        ("chat", chain(0.62, 0.95)),
        ("code", chain(0.9, 0.98)),
        ("summarise", chain(0.42, 0.9)),
        ("agent", chain(0.78, 0.96)),
        ("chat-b4", chain(0.62, 0.95)),
        ("code-b2", chain(0.9, 0.98)),
    ]
    batches = [{1: 1.0}, {1: 1.0}, {1: 0.7, 2: 0.3}, {1: 0.5, 2: 0.5}, {4: 1.0}, {2: 1.0}]
    out["pcie-best-k-moves"] = {
        "name": "pcie-best-k-moves",
        "description": "PCIe 8-GPU box, draft on rank 0, chat/code/summarise/agent phases of 150 s (simulated)",
        **PCIE_RANK0_COST,
        "restartSeconds": 300,
        "phases": [{"name": n, "seconds": 150, "batchSize": b, "acceptance": a} for (n, a), b in zip(regimes, batches)],
        "seed": 102,
    }
    # 3. Acceptance flips every 20 s, faster than the tuning interval (H200, batch 1-4).
    hi, lo = chain(0.88, 0.97), chain(0.58, 0.9)
    out["flip-20s"] = {
        "name": "flip-20s",
        "description": "H200 NVLink, acceptance flips between code-like and chat-like every 20 s for 15 min (simulated)",
        **H200_COST,
        "restartSeconds": 300,
        "phases": [
            {"name": f"f{i:02d}", "seconds": 20, "batchSize": {1: 0.6, 4: 0.4}, "acceptance": hi if i % 2 else lo}
            for i in range(45)
        ],
        "seed": 103,
    }
    # 4. Noisy acceptance jumping between three regimes at irregular times (15-90 s), with per-phase jitter.
    rng = np.random.default_rng(2026)
    phases, t = [], 0
    levels = [(0.9, 0.97), (0.72, 0.94), (0.5, 0.88)]
    while t < 1200:
        sec = int(rng.integers(15, 91))
        first, decay = levels[int(rng.integers(0, 3))]
        first = float(np.clip(first + rng.normal(0, 0.04), 0.3, 0.97))
        decay = float(np.clip(decay + rng.normal(0, 0.015), 0.8, 0.995))
        phases.append(
            {
                "name": f"n{len(phases):02d}",
                "seconds": sec,
                "batchSize": {1: 0.4, 2: 0.3, 8: 0.3},
                "acceptance": chain(first, decay),
            }
        )
        t += sec
    out["noisy-regimes"] = {
        "name": "noisy-regimes",
        "description": "H200 NVLink, acceptance jumps between three noisy regimes every 15-90 s for 20 min (simulated)",
        **H200_COST,
        "restartSeconds": 300,
        "phases": phases,
        "seed": 104,
    }
    # --- Written after the tuner's rules were fixed and evaluated once, never tuned on (bench/results/tuner.md) ---
    # 5. The PCIe box with the draft on all 8 ranks (the seed's layout): batch grows 1 -> 6 while acceptance moves.
    pcie_tp8 = {
        "interconnect": "PCIe",
        "cost": {
            "verify": {"base": 10.7, "perToken": 0.11},
            "draftStep": {"base": 2.9963, "perSeq": 0.0075},
            "draftExtend": {"base": 2.9963, "perToken": 0.0075},
            "overhead": 0.3,
            "broadcast": 0.0,
        },
    }
    steps5 = [
        ("chat-b1", {1: 1.0}, chain(0.57, 0.93)),
        ("code-b1", {1: 1.0}, chain(0.93, 0.99)),
        ("code-b2", {2: 1.0}, chain(0.93, 0.99)),
        ("chat-b3", {2: 0.5, 4: 0.5}, chain(0.6, 0.94)),
        ("code-b6", {4: 0.5, 8: 0.5}, chain(0.93, 0.99)),
        ("chat-b6", {4: 0.5, 8: 0.5}, chain(0.57, 0.93)),
    ]
    out["fresh-pcie-tp8-ramp"] = {
        "name": "fresh-pcie-tp8-ramp",
        "description": "PCIe 8-GPU box, draft on TP8, batch 1 -> 6 with chat/code acceptance, 120 s phases (simulated)",
        **pcie_tp8,
        "restartSeconds": 300,
        "phases": [{"name": n, "seconds": 120, "batchSize": b, "acceptance": a} for n, b, a in steps5],
        "seed": 105,
    }
    # 6. Acceptance cycles through three regimes every 45 s while the batch mix shifts every 135 s (H200).
    regimes3 = [chain(0.85, 0.97), chain(0.65, 0.92), chain(0.75, 0.95)]
    mixes3 = [{1: 0.7, 2: 0.3}, {2: 0.5, 8: 0.5}, {8: 0.5, 24: 0.5}, {1: 0.5, 16: 0.5}]
    out["fresh-flip-45s-mix"] = {
        "name": "fresh-flip-45s-mix",
        "description": "H200 NVLink, acceptance regime every 45 s, batch mix every 135 s, 18 min (simulated)",
        **H200_COST,
        "restartSeconds": 300,
        "phases": [
            {"name": f"m{i:02d}", "seconds": 45, "batchSize": mixes3[(i // 3) % 4], "acceptance": regimes3[i % 3]}
            for i in range(24)
        ],
        "seed": 106,
    }
    # 7. Irregular chat/code phases (30-150 s) with jitter, batch 1-4 (H200), drawn with another seed.
    rng = np.random.default_rng(777)
    phases, t = [], 0
    while t < 1200:
        sec = int(rng.integers(30, 151))
        first = float(np.clip(rng.choice([0.6, 0.88]) + rng.normal(0, 0.05), 0.3, 0.97))
        decay = float(np.clip(rng.choice([0.9, 0.97]) + rng.normal(0, 0.01), 0.8, 0.995))
        phases.append(
            {
                "name": f"r{len(phases):02d}",
                "seconds": sec,
                "batchSize": {1: 0.5, 2: 0.25, 4: 0.25},
                "acceptance": chain(first, decay),
            }
        )
        t += sec
    out["fresh-irregular"] = {
        "name": "fresh-irregular",
        "description": "H200 NVLink, irregular chat/code phases of 30-150 s with jitter, 20 min (simulated)",
        **H200_COST,
        "restartSeconds": 300,
        "phases": phases,
        "seed": 107,
    }
    return out


HEADER = (
    "# SIMULATED held-out scenario for the tuner benchmark, written by bench/sim/make_unseen_scenarios.py (do not edit\n"
    "# by hand; change the script and re-run it). Every number a simulator derives from this file is simulated.\n"
)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--check", action="store_true", help="print each phase's oracle step table instead of writing")
    args = p.parse_args(argv)
    docs = scenarios()
    if args.check:
        from specdecode_operator.bench.tuner_benchmark import oracle_table
        from specdecode_runtime.contract.scenario import parse_scenario

        for name, doc in docs.items():
            sc = parse_scenario(doc, name)
            optimal_steps = sorted(
                {
                    steps
                    for ph in sc.phases
                    for lo, steps in oracle_table(sc, ph, range(8))
                    if any(
                        lo <= b < (sc.buckets + [10**9])[sc.buckets.index(lo) + 1] for b in ph.batch_distribution()[0]
                    )
                }
            )
            print(f"{name}: per-phase optimal step counts in use {optimal_steps}")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for name, doc in docs.items():
        (OUT / f"{name}.yaml").write_text(
            HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)
        )
    print(f"wrote {len(docs)} scenarios to {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
