"""The contract's derived values: each computed once, here, for the renderer, the tuner and the launcher."""

import pytest
from runtime_testlib import config

from specdecode_runtime.contract.capabilities import autotune_steps, candidate_steps, step_candidates
from specdecode_runtime.contract.config import RuntimeConfig
from specdecode_runtime.contract.derived import (
    draft_is_split,
    draft_tokens_per_cycle,
    draft_tp_problems,
    is_split_draft,
    num_draft_tokens,
)
from specdecode_runtime.contract.step_table import StepTable, StepTableError, parse_step_table
from specdecode_runtime.contract.versions import SGLANG_VERSION
from specdecode_runtime.draft_group import DraftGroupError, choose_draft_ranks
from specdecode_runtime.launch import unsupported_reasons


def test_autotune_steps_off_keeps_the_step_count_as_the_only_candidate():
    assert autotune_steps("Off", 1, 7, 9) == (9, [9])


@pytest.mark.parametrize("mode", ["Live", "Rollout"])
def test_autotune_steps_clamps_into_the_range_and_spreads_candidates(mode):
    steps, tiers = autotune_steps(mode, 2, 6, 9)
    # Live also captures the target-only tier (steps 0); a Rollout restart can only render steps >= 1
    zero = [0] if mode == "Live" else []
    assert steps == 6 and tiers == zero + candidate_steps(2, 6, 6) and {2, 6} <= set(tiers)
    assert autotune_steps(mode, 2, 6, 1)[0] == 2


def test_the_tuner_chooses_only_steps_a_rendered_pod_serves():
    from specdecode_runtime.contract.capabilities import tuner_steps

    assert tuner_steps("Live", 1, 7, 3) == autotune_steps("Live", 1, 7, 3)[1] == [0, 1, 2, 3, 4, 5, 6, 7]
    assert tuner_steps("Rollout", 1, 7, 3) == autotune_steps("Rollout", 1, 7, 3)[1] == [1, 2, 3, 4, 5, 6, 7]
    assert tuner_steps("Off", 1, 7, 3) == tuner_steps("Live", 1, 7, 3)  # recommends what Live would serve


def test_draft_tokens_per_cycle_is_steps_plus_one_for_a_chain_only():
    assert draft_tokens_per_cycle(4, 1, configured=99) == 5
    assert draft_tokens_per_cycle(4, 2, configured=7) == 7
    assert draft_tokens_per_cycle(4, 2) is None
    assert num_draft_tokens(config()) == 4


def test_split_decision():
    assert is_split_draft(1, 8) and is_split_draft(4, 8)
    assert not is_split_draft(8, 8)
    assert draft_is_split(config()) and not draft_is_split(config(**{"tensorParallelSize: 2": "tensorParallelSize: 8"}))


def test_step_candidates_are_the_candidates_in_live_mode_only():
    assert step_candidates(config()) == [1, 3, 5]
    assert step_candidates(config(**{"mode: Live": "mode: Rollout"})) == [3]


@pytest.mark.parametrize(
    "target, draft, ranks, fragment",
    [
        (8, 16, None, "larger than target TP"),
        (8, 3, None, "must divide"),
        (8, 2, [0], "has 1 entries"),
        (8, 2, [1, 1], "duplicates"),
        (8, 2, [0, 8], "not inside the target TP group"),
        (8, 0, None, ">= 1"),
    ],
)
def test_draft_tp_rule_names_the_problem(target, draft, ranks, fragment):
    problems = draft_tp_problems(target, draft, ranks)
    assert len(problems) == 1 and fragment in problems[0]


@pytest.mark.parametrize("target, draft, ranks", [(8, 1, None), (8, 2, [6, 7]), (8, 8, None), (4, 4, [3, 2, 1, 0])])
def test_draft_tp_rule_accepts_servable_layouts(target, draft, ranks):
    assert draft_tp_problems(target, draft, ranks) == []


@pytest.mark.parametrize(
    "target, draft, ranks",
    [(8, 2, None), (8, 3, None), (8, 16, None), (8, 2, [0]), (8, 2, [3, 3]), (8, 2, [0, 9]), (8, 4, [4, 5, 6, 7])],
)
def test_launcher_and_rank_choice_apply_the_same_rule(target, draft, ranks):
    """The launcher's refusal and the rank choice report exactly the contract's problem, not their own version."""
    problems = draft_tp_problems(target, draft, ranks)
    try:
        choose_draft_ranks(target, draft, ranks)
        raised = []
    except DraftGroupError as e:
        raised = [str(e)]
    assert raised == problems[:1]
    cfg = config(
        **{
            "tensorParallelSize: 8": f"tensorParallelSize: {target}",
            "{model: /d, tensorParallelSize: 2}": f"{{model: /d, tensorParallelSize: {draft}, ranks: {ranks}}}"
            if ranks
            else f"{{model: /d, tensorParallelSize: {draft}}}",
        }
    )
    reasons = unsupported_reasons(cfg, [], SGLANG_VERSION)
    assert [r for r in reasons if r.startswith("draft.tensorParallelSize: ")] == [
        f"draft.tensorParallelSize: {p}" for p in problems
    ]


def test_step_table_serialises_in_the_wire_format_and_parses_back():
    table = StepTable.from_pairs([(1, 3), (8, 2), (32, 0)])
    body = table.to_json()
    assert body == {"table": [{"minBatch": 1, "steps": 3}, {"minBatch": 8, "steps": 2}, {"minBatch": 32, "steps": 0}]}
    assert parse_step_table(body, candidates=[0, 2, 3]) == table
    with pytest.raises(StepTableError) as err:
        parse_step_table(body, candidates=[2, 3])
    assert "table[2].steps: 0 is not a captured candidate" in err.value.errors


def test_a_live_pod_serves_the_target_only_tier_and_a_rollout_pod_refuses_it():
    """The seed example's rendered runtime.yaml (Live) captures steps 0, so the pod's step channel takes a table
    with 0; the same config in Rollout captures numSteps only and refuses 0 naming what it serves."""
    from pathlib import Path

    from specdecode_runtime.contract.step_table import StepTable, StepTableError
    from specdecode_runtime.control import StepControlChannel

    text = (Path(__file__).resolve().parents[2] / "examples/runtime/pcie8-glm5-eagle3.runtime.yaml").read_text()
    live = RuntimeConfig.from_yaml(text)
    assert step_candidates(live)[0] == 0
    StepControlChannel(candidates=step_candidates(live)).submit(StepTable.from_pairs([(1, 3), (64, 0)]))
    rollout = RuntimeConfig.from_yaml(text.replace("mode: Live", "mode: Rollout"))
    with pytest.raises(StepTableError) as err:
        StepControlChannel(candidates=step_candidates(rollout)).submit(StepTable.single(0))
    assert err.value.allowed == [live.speculative.num_steps]
