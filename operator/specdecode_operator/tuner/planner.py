"""Should the draft run on fewer GPUs? Predict tokens/s for every draft TP x step count from the scenario's cost
profile (optionally rescaled to measured phase costs) with the one goodput model.

The answer differs per cluster (on PCIe with slow collectives TP1 wins, on NVLink sharding wins), so it is a
prediction from numbers, reported with the numbers, never a default.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Sequence

from specdecode_runtime.contract.goodput import CycleCost, expected_tokens
from specdecode_runtime.contract.scenario import Phase, Scenario, allowed_draft_tps, cost_for_draft_tp

from ..api.models import Recommendation


@dataclass
class Plan:
    draft_tps: list[int]
    candidate_steps: list[int]
    tokens_per_s: dict[int, dict[int, float]]  # draft TP -> steps -> predicted tok/s (simulated prediction)
    current_tp: int
    best_tp: int
    best_steps: int
    current_best_steps: int
    recommendation: Recommendation


def phase_rate(phase: Phase, cost: CycleCost, steps: int, alphas: Sequence[float] | None = None) -> float:
    """Tokens per second of one phase's batch mix at ``steps`` (batch sizes drawn per cycle, as in the simulator)."""
    sizes, probs = phase.batch_distribution()
    a = alphas if alphas is not None else phase.acceptance
    toks: float = sum(p * b * (expected_tokens(a, steps) if steps else 1.0) for b, p in zip(sizes, probs))
    cycle_ms: float = sum(p * cost.cycle_ms(steps, b) for b, p in zip(sizes, probs))
    return toks / cycle_ms * 1000.0


def predict(scenario: Scenario, cost: CycleCost, steps: int, alphas: Sequence[float] | None = None) -> float:
    """Time-weighted over the scenario's phases (each phase is a share of wall time)."""
    total = scenario.duration
    return sum(p.seconds / total * phase_rate(p, cost, steps, alphas) for p in scenario.phases)


def plan(
    scenario: Scenario,
    candidate_steps: list[int],
    target_tp: int | None = None,
    current_tp: int | None = None,
    alphas: list[float] | None = None,
    measured_scale: float = 1.0,
) -> Plan:
    """``measured_scale`` rescales the draft step cost (measured draft step / profiled draft step at the current
    TP) so a running deployment's measurement moves the prediction for every TP alike."""
    if scenario.draft_tp is None:
        raise ValueError(f"scenario {scenario.name!r} has no draftTp block: it cannot predict other draft TP sizes")
    d = scenario.draft_tp
    target_tp = target_tp or d.target_tp
    current_tp = current_tp or d.current
    tps = [n for n in allowed_draft_tps(scenario) if target_tp % n == 0]
    if current_tp not in tps:
        raise ValueError(
            f"draft TP {current_tp} is not among the TP sizes the scenario describes and that divide "
            f"target TP {target_tp}: {tps}"
        )
    table: dict[int, dict[int, float]] = {}
    for n in tps:
        c = cost_for_draft_tp(scenario, n)
        if measured_scale != 1.0:
            c = dataclasses.replace(
                c,
                draft_base=c.draft_base * measured_scale,
                draft_per_seq=c.draft_per_seq * measured_scale,
                extend_base=c.extend_base * measured_scale,
                extend_per_token=c.extend_per_token * measured_scale,
                warm_extend_base=c.warm_extend_base * measured_scale,
                warm_extend_per_seq=c.warm_extend_per_seq * measured_scale,
            )
        table[n] = {steps: predict(scenario, c, steps, alphas) for steps in candidate_steps}
    best_tp, best_steps = max(
        ((n, steps) for n in tps for steps in candidate_steps),
        key=lambda pair: (table[pair[0]][pair[1]], -pair[0], -pair[1]),
    )
    cur_steps = max(candidate_steps, key=lambda steps: (table[current_tp][steps], -steps))
    best, cur = table[best_tp][best_steps], table[current_tp][cur_steps]
    if best_tp == current_tp:
        reason = (
            f"draft TP {current_tp} (current) is best: {best:.1f} tok/s at {best_steps} steps (simulated prediction)"
        )
    else:
        reason = (
            f"draft TP {best_tp} predicts {best:.1f} tok/s at {best_steps} steps vs {cur:.1f} at TP {current_tp} "
            f"({best / cur - 1:+.1%}, simulated prediction)"
        )
    rec = Recommendation(
        draftTensorParallelSize=best_tp,
        numSteps=best_steps,
        predictedTokensPerSecond=round(best, 2),
        currentPredictedTokensPerSecond=round(cur, 2),
        reason=reason,
    )
    return Plan(tps, list(candidate_steps), table, current_tp, best_tp, best_steps, cur_steps, rec)


def format_plan(p: Plan) -> str:
    head = "draft TP | " + " ".join(f"{'steps=' + str(steps):>8}" for steps in p.candidate_steps)
    lines = ["Predicted tokens/s (simulated prediction from the scenario's cost profile)", head, "-" * len(head)]
    for n in p.draft_tps:
        mark = " (current)" if n == p.current_tp else ""
        lines.append(f"{n:>8} | " + " ".join(f"{p.tokens_per_s[n][steps]:8.1f}" for steps in p.candidate_steps) + mark)
    lines.append(f"recommendation: {p.recommendation.reason}")
    return "\n".join(lines)


def plot_plan(p: Plan, path: str, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for n in p.draft_tps:
        ax.plot(
            p.candidate_steps,
            [p.tokens_per_s[n][steps] for steps in p.candidate_steps],
            marker="o",
            label=f"draft TP {n}" + (" (current)" if n == p.current_tp else ""),
        )
    ax.scatter(
        [p.best_steps],
        [p.tokens_per_s[p.best_tp][p.best_steps]],
        s=160,
        facecolors="none",
        edgecolors="k",
        label="best",
    )
    ax.set_xlabel("speculative steps (0 = no speculation)")
    ax.set_ylabel("tokens/s (simulated)")
    ax.set_title(f"{title}: predicted tokens/s by draft TP (SIMULATED)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
