"""Summarise ``specdecode bench tuner --json`` runs into the tables of bench/results/tuner.md (all simulated).

    python bench/operator/tuner_results.py main.json [--label NAME=run.json ...]

Prints, per labelled run, the geometric means of the four ratios over the shipped, stress and held-out scenarios
and the worst scenario of each, so runs with different settings (seed, interval, cost knowledge) line up.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

RATIOS = ("ours_over_oracle", "ours_over_best_static", "ours_over_sglang_adaptive", "ours_over_sglang_0to7")
SHORT = {
    "ours_over_oracle": "o/orc",
    "ours_over_best_static": "o/bst",
    "ours_over_sglang_adaptive": "o/sgl",
    "ours_over_sglang_0to7": "o/s07",
}
HELD_OUT = {"ramp-up-down", "pcie-best-k-moves", "flip-20s", "noisy-regimes"}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def summary_row(label: str, run: dict) -> str:
    sc = run["scenarios"]
    cells = []
    for r in RATIOS:
        vals = {s["name"]: s["ratios"][r] for s in sc}
        worst = min(vals, key=vals.get)
        cells.append(f"{geomean(list(vals.values())):.3f} (min {vals[worst]:.3f} {worst})")
    return f"| {label} | " + " | ".join(cells) + " |"


def per_scenario(runs: dict[str, dict]) -> list[str]:
    names = [s["name"] for s in next(iter(runs.values()))["scenarios"]]
    out = ["| scenario | " + " | ".join(runs) + " |", "|---|" + "---|" * len(runs)]
    for n in names:
        cells = []
        for run in runs.values():
            s = next(x for x in run["scenarios"] if x["name"] == n)
            cells.append("/".join(f"{s['ratios'][r]:.3f}" for r in RATIOS))
        out.append(f"| {n}{' (held out)' if n in HELD_OUT else ''} | " + " | ".join(cells) + " |")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", metavar="LABEL=FILE")
    p.add_argument("--per-scenario", action="store_true", help="one row per scenario, o/orc/o/bst/o/sgl/o/s07 per run")
    args = p.parse_args(argv)
    runs = {}
    for item in args.runs:
        label, _, path = item.partition("=")
        if not path:
            print(f"tuner_results: error: expected LABEL=FILE, got {item!r}", file=sys.stderr)
            return 2
        with open(path) as f:
            runs[label] = json.load(f)
    if args.per_scenario:
        print("\n".join(per_scenario(runs)))
        return 0
    print("| run | " + " | ".join(f"{SHORT[r]} geomean (worst)" for r in RATIOS) + " |")
    print("|---|" + "---|" * len(RATIOS))
    for label, run in runs.items():
        print(summary_row(label, run))
    return 0


if __name__ == "__main__":
    sys.exit(main())
