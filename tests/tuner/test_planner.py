"""The draft-TP planner's arithmetic, choice and report, each worked out from the goodput model and the scenario's
own cost derivation (``cost_for_draft_tp``), so a weighting, a tie-break or a number in the recommendation that
drifts from them fails here rather than in a recommendation someone acts on."""

import struct
from pathlib import Path

import pytest

from specdecode_operator.tuner.planner import format_plan, phase_rate, plan, plot_plan, predict
from specdecode_runtime.contract.goodput import CycleCost, expected_tokens
from specdecode_runtime.contract.scenario import cost_for_draft_tp, load_scenario, parse_scenario

ROOT = Path(__file__).resolve().parents[2]
SEED = load_scenario(ROOT / "bench/scenarios/pcie8-seed.yaml")  # PCIe: TP 1, 2, 4 and 8 described, current 8
COST = CycleCost(10, 0.05, 1.0, 0.01, 1.0, 0.002, 0.5)


def scenario(phases, draft_tp=None, cost=None):
    data = {
        "name": "planner-test",
        "cost": cost
        or {
            "verify": {"base": 10, "perToken": 0.05},
            "draftStep": {"base": 1.0},
            "draftExtend": {"base": 1.0},
            "overhead": 0.5,
        },
        "phases": phases,
    }
    if draft_tp is not None:
        data["draftTp"] = draft_tp
    return parse_scenario(data)


MIXED = scenario(
    [
        {"seconds": 60, "batchSize": 1, "acceptance": [0.85, 0.8, 0.7]},
        {"seconds": 180, "batchSize": {8: 0.25, 40: 0.75}, "acceptance": [0.5]},
    ]
)


def test_a_phase_rate_is_tokens_over_time_of_its_batch_mix_not_a_mean_of_rates():
    mix = MIXED.phases[1]
    for steps in (0, 1, 3):
        e = expected_tokens([0.5], steps) if steps else 1.0
        toks = 0.25 * 8 * e + 0.75 * 40 * e
        ms = 0.25 * COST.cycle_ms(steps, 8) + 0.75 * COST.cycle_ms(steps, 40)
        assert phase_rate(mix, COST, steps) == pytest.approx(toks / ms * 1000.0)
    # an acceptance curve given replaces the phase's own
    assert phase_rate(mix, COST, 3, [0.9]) == pytest.approx(
        (0.25 * 8 + 0.75 * 40)
        * expected_tokens([0.9], 3)
        / (0.25 * COST.cycle_ms(3, 8) + 0.75 * COST.cycle_ms(3, 40))
        * 1000
    )


def test_a_scenario_prediction_weights_each_phase_by_its_share_of_wall_time():
    one, mix = MIXED.phases
    for steps in (0, 2):
        expected = 0.25 * phase_rate(one, COST, steps) + 0.75 * phase_rate(mix, COST, steps)
        assert predict(MIXED, COST, steps) == pytest.approx(expected)
    assert predict(MIXED, COST, 2, [0.9]) == pytest.approx(
        0.25 * phase_rate(one, COST, 2, [0.9]) + 0.75 * phase_rate(mix, COST, 2, [0.9])
    )


def test_the_table_predicts_every_described_draft_tp_that_divides_the_target_tp():
    p = plan(SEED, [0, 3, 5])
    assert p.draft_tps == [1, 2, 4, 8] and p.current_tp == 8  # current from the scenario
    for n in p.draft_tps:
        assert p.tokens_per_s[n] == pytest.approx({k: predict(SEED, cost_for_draft_tp(SEED, n), k) for k in (0, 3, 5)})
    assert plan(SEED, [0, 3, 5], target_tp=4, current_tp=2).draft_tps == [1, 2, 4]
    assert plan(SEED, [0, 3, 5], target_tp=6, current_tp=2).draft_tps == [1, 2]


def test_the_best_draft_tp_and_step_count_and_the_current_tps_own_best():
    p = plan(SEED, list(range(8)))
    cells = {(n, k): p.tokens_per_s[n][k] for n in p.draft_tps for k in range(8)}
    assert (p.best_tp, p.best_steps) == max(cells, key=cells.get)
    assert p.current_best_steps == max(range(8), key=lambda k: p.tokens_per_s[8][k])
    assert p.best_tp != 8  # PCIe's slow collectives: a split draft wins (test_planner_and_cli.py)
    best, cur = cells[(p.best_tp, p.best_steps)], p.tokens_per_s[8][p.current_best_steps]
    rec = p.recommendation
    assert (rec.draftTensorParallelSize, rec.numSteps) == (p.best_tp, p.best_steps)
    assert rec.predictedTokensPerSecond == round(best, 2) and rec.currentPredictedTokensPerSecond == round(cur, 2)
    assert rec.reason == (
        f"draft TP {p.best_tp} predicts {best:.1f} tok/s at {p.best_steps} steps vs {cur:.1f} at TP 8 "
        f"({best / cur - 1:+.1%}, simulated prediction)"
    )


def test_when_the_current_draft_tp_is_best_the_recommendation_says_so():
    p = plan(SEED, list(range(8)), current_tp=1)
    assert p.best_tp == 1 == p.current_tp and p.best_steps == p.current_best_steps
    best = p.tokens_per_s[1][p.best_steps]
    assert p.recommendation.reason == (
        f"draft TP 1 (current) is best: {best:.1f} tok/s at {p.best_steps} steps (simulated prediction)"
    )
    assert p.recommendation.predictedTokensPerSecond == p.recommendation.currentPredictedTokensPerSecond


# Every draft TP and step count at exactly one rate: free drafting (no compute, no collectives, no broadcast),
# acceptance 1 (E(steps) = steps + 1) and a verify of 125 ms per token (eighths of a second, exact in binary).
TIED = scenario(
    [{"seconds": 60, "batchSize": 1, "acceptance": [1.0]}],
    draft_tp={
        "current": 2,
        "targetTp": 4,
        "computeMs": {"base": 0.0, "perSeq": 0.0},
        "collectivesPerStep": 0,
        "allReduceUs": {2: 0.0, 4: 0.0},
        "broadcastUs": 0.0,
    },
    cost={
        "verify": {"base": 0.0, "perToken": 125.0},
        "draftStep": {"base": 0.0},
        "draftExtend": {"base": 0.0},
        "overhead": 0.0,
    },
)


def test_a_tie_goes_to_the_fewest_gpus_and_the_fewest_steps():
    p = plan(TIED, [1, 2, 3])
    assert {v for row in p.tokens_per_s.values() for v in row.values()} == {8.0}
    assert (p.best_tp, p.best_steps, p.current_best_steps) == (1, 1, 1)


@pytest.mark.parametrize("scale", [1.5, 2.0, 0.5])
def test_a_measured_draft_step_rescales_the_draft_parts_of_every_tp_alike(scale):
    p = plan(SEED, [0, 3, 5], measured_scale=scale)
    for n in p.draft_tps:
        c = cost_for_draft_tp(SEED, n)
        scaled = CycleCost(
            c.verify_base,
            c.verify_per_token,
            c.draft_base * scale,
            c.draft_per_seq * scale,
            c.extend_base * scale,
            c.extend_per_token * scale,
            c.overhead,
            c.broadcast,
        )
        assert p.tokens_per_s[n] == pytest.approx({k: predict(SEED, scaled, k) for k in (0, 3, 5)}, rel=1e-12)
    assert plan(SEED, [0, 3, 5], measured_scale=1.0).tokens_per_s == plan(SEED, [0, 3, 5]).tokens_per_s


def test_a_plan_needs_a_draft_tp_block_and_a_current_tp_it_describes():
    with pytest.raises(ValueError) as err:
        plan(MIXED, [0, 3])
    assert str(err.value) == ("scenario 'planner-test' has no draftTp block: it cannot predict other draft TP sizes")
    with pytest.raises(ValueError) as err:
        plan(SEED, [0, 3], target_tp=4, current_tp=8)
    assert str(err.value) == (
        "draft TP 8 is not among the TP sizes the scenario describes and that divide target TP 4: [1, 2, 4]"
    )


def test_the_printed_plan_is_the_table_then_the_recommendation():
    p = plan(SEED, [0, 5])
    head = "draft TP | " + "steps=0".rjust(8) + " " + "steps=5".rjust(8)
    rows = [
        f"{n:>8} | {p.tokens_per_s[n][0]:8.1f} {p.tokens_per_s[n][5]:8.1f}" + (" (current)" if n == 8 else "")
        for n in (1, 2, 4, 8)
    ]
    assert format_plan(p).split("\n") == [
        "Predicted tokens/s (simulated prediction from the scenario's cost profile)",
        head,
        "-" * len(head),
        *rows,
        f"recommendation: {p.recommendation.reason}",
    ]


def test_an_acceptance_curve_given_to_the_plan_is_used_for_every_draft_tp():
    """A running deployment's measured acceptance replaces the scenario's for the whole table."""
    measured = [0.8, 0.75, 0.7, 0.65, 0.6]
    p = plan(SEED, [0, 3, 5], alphas=measured)
    for n in p.draft_tps:
        c = cost_for_draft_tp(SEED, n)
        assert p.tokens_per_s[n] == pytest.approx({k: predict(SEED, c, k, measured) for k in (0, 3, 5)})
    assert p.tokens_per_s[8][5] != pytest.approx(plan(SEED, [0, 3, 5]).tokens_per_s[8][5])


def test_the_plot_marks_the_current_tp_and_the_best_cell_and_says_it_is_simulated(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    drawn = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig=None: (drawn.append(fig), close(fig)))
    p = plan(SEED, [0, 3, 5])
    png = tmp_path / "plan.png"
    plot_plan(p, str(png), "pcie8")
    (fig,) = drawn
    ax = fig.axes[0]
    assert ax.get_xlabel() == "speculative steps (0 = no speculation)"
    assert ax.get_ylabel() == "tokens/s (simulated)"
    assert ax.get_title() == "pcie8: predicted tokens/s by draft TP (SIMULATED)"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["draft TP 1", "draft TP 2", "draft TP 4", "draft TP 8 (current)", "best"]
    for line, n in zip(ax.get_lines(), p.draft_tps):
        assert list(line.get_xdata()) == [0, 3, 5]
        assert list(line.get_ydata()) == pytest.approx([p.tokens_per_s[n][k] for k in (0, 3, 5)])
    (best,) = ax.collections[0].get_offsets()
    assert list(best) == pytest.approx([p.best_steps, p.tokens_per_s[p.best_tp][p.best_steps]])
    # a 7 x 4.2 inch figure at 110 dpi: the size the report embeds
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (770, 462)
