"""Check the planner's split-vs-sharded prediction against a measured multi-GPU run.

`specdecode plan` predicts, per draft TP n, a draft step of ``compute/n + collectives * allReduceUs[n]`` (plus a
per-sequence term) and a proposal broadcast when the draft runs on fewer ranks than the target. This script takes a
result file of ``bench/gpu/micro/multigpu_draft.py`` (N ranks; the draft sharded over all N, and on S of d ranks for every
d < N dividing N) and, for every batch size and step count that run measured, sets the planner's prediction beside
the measurement:

- the draft step at each layout (predicted ms vs measured median ms);
- the full cycle, split over sharded (a ratio above 1: the split cycle is slower). The verify pass is taken from
  the run's own plain decode at that batch size, on both sides, so the ratio tests the draft-layout model only;
- which layout the planner would pick at that (batch, steps) and which one the measurement found faster. Differences
  smaller than the run's own spread (its p10-p90 ranges overlap) count as a tie, which either choice matches.

Only the planner's inputs come from the scenario file: the measurement is never fed back into the prediction. Note
that a scenario's ``allReduceUs`` entry may itself have been calibrated from the same run (the file's comments say
so); for that TP size the agreement is partly by construction, and the other sizes are the real check.

    python bench/operator/plan_vs_measured.py --measured bench/results/multigpu_draft_h200x2.json \
        --scenario bench/scenarios/h200-nvlink.yaml --profile nvlink --out bench/results/plan_vs_measured_h200x2.md
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass
from pathlib import Path

from specdecode_runtime.contract.goodput import CycleCost
from specdecode_runtime.contract.scenario import Scenario, cost_for_draft_tp, load_scenario


@dataclass
class Row:
    batch: int
    steps: int
    d: int
    predicted_ratio: float
    measured_ratio: float
    measured_tie: bool
    planner_pick: str
    measured_pick: str

    @property
    def matches(self) -> bool:
        return self.measured_tie or self.planner_pick == self.measured_pick


def scenario_for_world(scenario: Scenario, world: int) -> Scenario:
    """The same cost profile on a box of ``world`` ranks with the draft sharded over all of them."""
    if scenario.draft_tp is None:
        raise SystemExit(f"scenario {scenario.name!r} has no draftTp block: nothing to predict")
    missing = [n for n in _divisors(world) if n > 1 and n not in scenario.draft_tp.all_reduce_us]
    if missing:
        raise SystemExit(f"scenario {scenario.name!r}: draftTp.allReduceUs has no entry for draft TP {missing}")
    d = scenario.draft_tp.model_copy(update={"target_tp": world, "current": world})
    return scenario.model_copy(update={"draft_tp": d})


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _cycle(cost: CycleCost, steps: int, batch: int, verify_ms: float) -> float:
    """Cycle time with the verify pass replaced by a measured plain decode (the same on both layouts)."""
    return cost.cycle_ms(steps, batch) - cost.verify_ms(steps, batch) + verify_ms


def _spread_overlaps(a: dict, b: dict) -> bool:
    return a["p10_ms"] <= b["p90_ms"] and b["p10_ms"] <= a["p90_ms"]


def compare(measured: dict, scenario: Scenario, profile: str) -> tuple[list[str], list[Row]]:
    world = int(measured["meta"]["world"])
    prof = measured["profiles"][profile]
    scn = scenario_for_world(scenario, world)
    costs = {n: cost_for_draft_tp(scn, n) for n in _divisors(world)}
    lines: list[str] = []

    lines.append(f"### Draft step, {profile} ({world} ranks): predicted vs measured (ms)")
    lines.append("")
    splits = sorted(
        int(key[len("split") : -len("_step")])
        for key in prof["draft_step"]["1"]
        if key.startswith("split") and key.endswith("_step")
    )
    head = ["batch", f"sharded TP{world} pred", "meas"] + [x for d in splits for x in (f"on {d} pred", "meas")]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---:|" * len(head))
    for b in sorted(int(x) for x in prof["draft_step"]):
        step = prof["draft_step"][str(b)]
        cells = [str(b), f"{costs[world].draft_step_ms(b):.3f}", f"{step['full']['median_ms']:.3f}"]
        for d in splits:
            cells += [f"{costs[d].draft_step_ms(b):.3f}", f"{step[f'split{d}_step']['median_ms']:.3f}"]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")

    rows: list[Row] = []
    for steps_key, by_batch in sorted(prof["cycles"].items(), key=lambda kv: int(kv[0])):
        steps = int(steps_key)
        for b_key, layouts in sorted(by_batch.items(), key=lambda kv: int(kv[0])):
            b = int(b_key)
            verify = prof["decode"][b_key]["median_ms"]
            full_pred = _cycle(costs[world], steps, b, verify)
            for key, stats in layouts.items():
                if not key.startswith("split") or key.endswith("_nobcast"):
                    continue
                d = int(key[len("split") :])
                pred = _cycle(costs[d], steps, b, verify) / full_pred
                meas = stats["median_ms"] / layouts["full"]["median_ms"]
                rows.append(
                    Row(
                        batch=b,
                        steps=steps,
                        d=d,
                        predicted_ratio=pred,
                        measured_ratio=meas,
                        measured_tie=_spread_overlaps(stats, layouts["full"]),
                        planner_pick=f"on {d}" if pred < 1 else "sharded",
                        measured_pick=f"on {d}" if meas < 1 else "sharded",
                    )
                )

    lines.append(f"### Full cycle, split / sharded, {profile}: predicted vs measured (verify = measured decode)")
    lines.append("")
    lines.append("| batch | k | draft on | predicted | measured | planner picks | faster measured | match |")
    lines.append("|---:|---:|---:|---:|---:|---|---|---|")
    for r in rows:
        faster = "tie (spreads overlap)" if r.measured_tie else r.measured_pick
        lines.append(
            f"| {r.batch} | {r.steps} | {r.d} | {r.predicted_ratio:.3f} | {r.measured_ratio:.3f} | "
            f"{r.planner_pick} | {faster} | {'yes' if r.matches else 'NO'} |"
        )
    lines.append("")
    errors = [abs(r.predicted_ratio - r.measured_ratio) for r in rows]
    n_match = sum(r.matches for r in rows)
    lines.append(
        f"Planner's layout choice matches the measurement in {n_match} of {len(rows)} (batch, k) points; "
        f"ratio error median {sorted(errors)[len(errors) // 2]:.3f}, max {max(errors):.3f}."
    )
    lines.append("")
    return lines, rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--measured", required=True, help="result JSON of bench/gpu/micro/multigpu_draft.py")
    p.add_argument("--scenario", required=True, help="the scenario whose draftTp block the planner uses")
    p.add_argument("--profile", action="append", help="NCCL profile(s) of the run to compare (default: all)")
    p.add_argument("--out", help="write the Markdown report here as well")
    args = p.parse_args(argv)
    try:
        measured = json.loads(Path(args.measured).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        print(f"error: --measured {args.measured}: {e}", file=sys.stderr)
        return 2
    scenario = load_scenario(args.scenario)
    profiles = args.profile or sorted(measured["profiles"])
    cmd = "python bench/operator/plan_vs_measured.py " + " ".join(argv if argv is not None else sys.argv[1:])
    out = [
        f"# Planner vs measurement: {Path(args.measured).name} against {Path(args.scenario).name}",
        "",
        f"Command: `{cmd}`",
        "",
        f"Measured: {measured['meta'].get('command', '?')} ({measured['meta'].get('gpus', '?').count('GPU ')} GPUs). "
        "Predicted: the scenario's draftTp model (`cost_for_draft_tp`), never fitted to this file by this script.",
        "",
    ]
    all_match = True
    for prof in profiles:
        if prof not in measured["profiles"]:
            print(f"error: --profile {prof}: the run has {sorted(measured['profiles'])}", file=sys.stderr)
            return 2
        lines, rows = compare(measured, scenario, prof)
        out += lines
        all_match &= all(r.matches for r in rows)
    text = "\n".join(out)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    return 0 if all_match else 1


if __name__ == "__main__":
    sys.exit(main())
