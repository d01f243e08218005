"""The contract's arithmetic, tables and refusals at their edges: each bound at, just inside and just outside, and
each branch's outcome. The tuner, the simulator and the planner all read these functions, so a flipped comparison
here would show up as a wrong decision everywhere at once."""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math

import pytest
import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator
from runtime_testlib import CONFIG, config

from specdecode_runtime.contract.capabilities import (
    ADAPTIVE_ALGORITHMS,
    ALWAYS_REFUSED,
    LIVE_REFUSED,
    MAX_CANDIDATES,
    OWNED_FLAGS,
    RULES,
    SPLIT_DRAFT_ALGORITHMS,
    SPLIT_REFUSED,
    TARGET_ONLY_STEPS,
    autotune_steps,
    candidate_steps,
    rule_names,
    serving_problems,
    step_candidates,
    tuner_steps,
)
from specdecode_runtime.contract.cli_common import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_INVALID,
    EXIT_OK,
    CommandFailed,
    UsageError,
    add_completion_command,
    add_lazy_commands,
    add_version,
    autocomplete,
    check_can_listen,
    check_port,
    command_in,
    completing,
    float_in,
    int_in,
    package_version,
    positive_float,
    run_command,
)
from specdecode_runtime.contract.config import (
    CONFIG_FILE_NAME,
    CONFIG_PATH,
    TOKEN_PATH,
    AutotuneConfig,
    RuntimeConfig,
    load_runtime_config,
)
from specdecode_runtime.contract.cost_profile import (
    STAGES,
    ProbePoint,
    _line,
    fit_bucket,
    fit_profile,
    points_from_samples,
)
from specdecode_runtime.contract.derived import (
    draft_tokens_per_cycle,
    draft_tp_problems,
    is_split_draft,
    live,
    nccl_environment,
    num_draft_tokens,
)
from specdecode_runtime.contract.goodput import (
    CycleCost,
    alpha_at,
    best_steps,
    expected_tokens,
    expected_tokens_tree,
    goodput,
    inter_token_latency_ms,
)
from specdecode_runtime.contract.http_limits import (
    MAX_BODY_BYTES,
    MAX_INT_DIGITS,
    MAX_JSON_DEPTH,
    REQUEST_DEADLINE_SECONDS,
    SERVER_LIMITS,
    BodyError,
    parse_json,
    read_json,
)
from specdecode_runtime.contract.input_files import (
    MAX_BYTES,
    MAX_DEPTH,
    BoundedLoader,
    InputError,
    _yaml_problem,
    format_loc,
    format_validation_error,
    load_documents,
    load_single,
    parse_yaml_documents,
    read_text,
)
from specdecode_runtime.contract.metric_names import (
    DEFAULT_BUCKETS,
    METRICS,
    Metric,
    bucket_label,
    bucket_labels,
    exposed_name,
    position_counts,
    sample_names,
)
from specdecode_runtime.contract.model_source import (
    HubSource,
    ModelSourceError,
    PathSource,
    PvcSource,
    hub_sources,
    pvc_claims,
)
from specdecode_runtime.contract.model_source import parse as parse_model
from specdecode_runtime.contract.nccl import profile_env, profile_settings, resolve_profile
from specdecode_runtime.contract.scenario import (
    MAX_BATCH,
    MAX_COST_MS,
    MAX_CYCLES,
    ScenarioError,
    allowed_draft_tps,
    cost_for_draft_tp,
    load_scenario,
    parse_scenario,
)
from specdecode_runtime.contract.server_args import expand_env_refs, flag_value, sglang_cli_args, unexpanded_refs
from specdecode_runtime.contract.step_table import MAX_TABLE_ENTRIES, StepTable, StepTableError, parse_step_table

# every coefficient distinct and non-zero, so dropping or swapping a term changes the total
COST = CycleCost(
    verify_base=11.0,
    verify_per_token=0.3,
    draft_base=2.0,
    draft_per_seq=0.07,
    extend_base=1.5,
    extend_per_token=0.05,
    overhead=0.7,
    broadcast=0.4,
)


# ---- acceptance ----------------------------------------------------------------------------------------------------
def test_alpha_at_reads_one_based_positions_and_repeats_the_last():
    alphas = [0.9, 0.6, 0.3]
    assert [alpha_at(alphas, p) for p in (1, 2, 3)] == [0.9, 0.6, 0.3]
    assert alpha_at(alphas, 4) == 0.3 and alpha_at(alphas, 50) == 0.3  # just past the end and far past it
    assert alpha_at([0.5], 1) == 0.5 and alpha_at([0.5], 2) == 0.5


def test_no_acceptance_data_means_nothing_is_accepted():
    assert alpha_at([], 1) == 0.0
    assert expected_tokens([], 5) == 1.0  # the bonus token only


def test_expected_tokens_multiplies_conditional_rates_position_by_position():
    alphas = [0.9, 0.5, 0.2]
    assert expected_tokens(alphas, 0) == 1.0
    assert expected_tokens(alphas, 1) == pytest.approx(1 + 0.9)
    assert expected_tokens(alphas, 2) == pytest.approx(1 + 0.9 + 0.45)
    assert expected_tokens(alphas, 3) == pytest.approx(1 + 0.9 + 0.45 + 0.09)
    assert expected_tokens(alphas, 4) == pytest.approx(1 + 0.9 + 0.45 + 0.09 + 0.018)  # the last rate repeats


@pytest.mark.parametrize("topk", [1, 0])
@pytest.mark.parametrize("alphas", [[0.8, 0.4], [0.09]])
def test_a_tree_of_width_one_or_less_is_exactly_a_chain(topk, alphas):
    # exactly: 1 - (1 - 0.09) is not 0.09 in floating point, so a width-1 tree must not be widened at all
    assert expected_tokens_tree(alphas, 3, topk) == expected_tokens(alphas, 3)


def test_a_tree_level_is_accepted_when_any_of_its_candidates_is():
    alphas = [0.8, 0.4]
    w1, w2 = 1 - 0.2**2, 1 - 0.6**2  # topk 2: a level fails only when both siblings fail
    assert expected_tokens_tree(alphas, 1, 2) == pytest.approx(1 + w1)
    assert expected_tokens_tree(alphas, 3, 2) == pytest.approx(1 + w1 + w1 * w2 + w1 * w2 * w2)
    w1_3 = 1 - 0.2**3
    assert expected_tokens_tree(alphas, 1, 3) == pytest.approx(1 + w1_3)
    assert expected_tokens_tree(alphas, 0, 2) == 1.0


# ---- cycle cost ----------------------------------------------------------------------------------------------------
def test_cycle_cost_parts():
    b = 4.0
    assert COST.verify_ms(3, b) == pytest.approx(11.0 + 0.3 * 4 * 4)
    assert COST.draft_step_ms(b) == pytest.approx(2.0 + 0.07 * 4)
    assert COST.extend_ms(3, b) == pytest.approx(1.5 + 0.05 * 4 * 4)


@pytest.mark.parametrize("steps", [1, 2, 5])
def test_a_speculative_cycle_adds_verify_drafts_extend_overhead_and_broadcast(steps):
    b = 6.0
    want = (11.0 + 0.3 * b * (steps + 1)) + steps * (2.0 + 0.07 * b) + (1.5 + 0.05 * b * (steps + 1)) + 0.7 + 0.4
    assert COST.cycle_ms(steps, b) == pytest.approx(want, rel=1e-12)


@pytest.mark.parametrize("steps", [0, -1])
def test_plain_decoding_verifies_one_token_per_sequence_without_draft_or_broadcast(steps):
    assert COST.cycle_ms(steps, 6.0) == pytest.approx(11.0 + 0.3 * 6.0 + 0.7, rel=1e-12)


def test_the_broadcast_defaults_to_free():
    cost = CycleCost(11.0, 0.3, 2.0, 0.07, 1.5, 0.05, 0.7)
    assert cost.cycle_ms(2, 6.0) == pytest.approx(COST.cycle_ms(2, 6.0) - 0.4, rel=1e-12)


# ---- goodput and the best step count -------------------------------------------------------------------------------
def test_goodput_is_the_batch_s_tokens_per_second():
    alphas, b = [0.8, 0.5], 6.0
    assert goodput(alphas, COST, 0, b) == pytest.approx(b / COST.cycle_ms(0, b) * 1000, rel=1e-12)
    for steps in (1, 3):
        want = b * expected_tokens(alphas, steps) / COST.cycle_ms(steps, b) * 1000
        assert goodput(alphas, COST, steps, b) == pytest.approx(want, rel=1e-12)


def test_inter_token_latency_is_the_cycle_over_the_tokens_it_emits():
    alphas, b = [0.8, 0.5], 6.0
    assert inter_token_latency_ms(alphas, COST, 0, b) == pytest.approx(COST.cycle_ms(0, b), rel=1e-12)
    for steps in (1, 4):
        want = COST.cycle_ms(steps, b) / expected_tokens(alphas, steps)
        assert inter_token_latency_ms(alphas, COST, steps, b) == pytest.approx(want, rel=1e-12)


class _Cycles:
    """A cost whose goodput is the same at every step count (every draft token accepted, cycle time proportional to
    the tokens), scaled per step count by ``gain``: lets a test put two candidates exactly at, just under and just
    over the tie tolerance."""

    def __init__(self, gain: dict[int, float]) -> None:
        self.gain = gain

    def cycle_ms(self, steps: int, batch: float) -> float:
        return (max(steps, 0) + 1) * 10.0 / self.gain.get(steps, 1.0)


def test_best_steps_picks_the_highest_goodput():
    alphas, b = [0.85, 0.7, 0.5], 4.0
    chosen, g = best_steps(alphas, COST, b, [3, 1, 2, 0, 5])
    every = {s: goodput(alphas, COST, s, b) for s in (0, 1, 2, 3, 5)}
    assert chosen == max(every, key=every.__getitem__) and g == every[chosen]
    assert every[chosen] > max(v for s, v in every.items() if s != chosen)


def test_best_steps_breaks_ties_towards_fewer_steps():
    exact = _Cycles({})
    assert goodput([1.0], exact, 1, 2.0) == goodput([1.0], exact, 3, 2.0)  # the tie is exact
    assert best_steps([1.0], exact, 2.0, [3, 1, 2]) == (1, goodput([1.0], exact, 1, 2.0))
    # within the 1e-12 tolerance a larger step count still does not win; past it, it does
    assert best_steps([1.0], _Cycles({2: 1 + 5e-13}), 2.0, [1, 2])[0] == 1
    assert best_steps([1.0], _Cycles({2: 1 + 1e-9}), 2.0, [1, 2])[0] == 2
    assert best_steps([1.0], _Cycles({1: 1 + 1e-9}), 2.0, [1, 2])[0] == 1


def test_best_steps_reads_each_candidate_once_in_order():
    assert best_steps([1.0], _Cycles({4: 2.0}), 2.0, [4, 4, 1])[0] == 4
    assert best_steps([1.0], _Cycles({1: 0.5}), 2.0, iter([1, 2]))[0] == 2  # a one-pass iterable


def test_best_steps_with_a_single_candidate_returns_it_even_when_slow():
    chosen, g = best_steps([0.0], COST, 1.0, [7])
    assert chosen == 7 and g == pytest.approx(goodput([0.0], COST, 7, 1.0)) and 0 < g < math.inf


def test_best_steps_without_candidates_refuses():
    with pytest.raises(ValueError, match="^no candidate step counts given$"):
        best_steps([0.5], COST, 1.0, [])


# ---- the step table ------------------------------------------------------------------------------------------------
def _errors(body) -> list[str]:
    with pytest.raises(StepTableError) as err:
        parse_step_table(body)
    assert err.value.allowed is None and str(err.value) == "; ".join(err.value.errors)
    return err.value.errors


def _rows(*pairs):
    return {"table": [{"minBatch": b, "steps": s} for b, s in pairs]}


@pytest.mark.parametrize("min_batch", [1, 2, 1 << 20])
def test_min_batch_inside_its_bounds_is_taken(min_batch):
    table = parse_step_table(_rows((1, 2), (min_batch, 3)) if min_batch != 1 else _rows((1, 2)))
    assert table.lookup(min_batch) == (3 if min_batch != 1 else 2)


@pytest.mark.parametrize(
    "min_batch, message",
    [
        (0, "table[1].minBatch: Input should be greater than or equal to 1, got 0"),
        ((1 << 20) + 1, f"table[1].minBatch: Input should be less than or equal to {1 << 20}, got {(1 << 20) + 1}"),
    ],
)
def test_min_batch_just_outside_its_bounds_is_refused_by_name(min_batch, message):
    assert _errors(_rows((1, 2), (min_batch, 3))) == [message]


@pytest.mark.parametrize("steps", [0, 1, 64])
def test_steps_inside_their_bounds_are_taken(steps):
    assert parse_step_table(_rows((1, steps))).lookup(1) == steps


@pytest.mark.parametrize(
    "steps, message",
    [
        (-1, "table[0].steps: Input should be greater than or equal to 0, got -1"),
        (65, "table[0].steps: Input should be less than or equal to 64, got 65"),
        (True, "table[0].steps: Input should be a valid integer"),
        (3.0, "table[0].steps: Input should be a valid integer"),
        ("3", "table[0].steps: Input should be a valid integer"),
    ],
)
def test_steps_outside_their_bounds_or_not_json_integers_are_refused(steps, message):
    assert _errors(_rows((1, steps))) == [message]


def test_a_table_holds_one_to_sixteen_entries():
    assert MAX_TABLE_ENTRIES == 16
    full = [(1, 1), *((b, 2) for b in range(2, 17))]
    assert len(parse_step_table(_rows(*full)).pairs()) == 16
    assert _errors(_rows(*full, (17, 3))) == ["table: List should have at most 16 items after validation, not 17"]
    assert _errors({"table": []}) == ["table: List should have at least 1 item after validation, not 0"]


def test_a_table_names_its_repeated_min_batch_and_needs_one_starting_at_1():
    assert _errors(_rows((1, 1), (4, 2), (4, 3))) == ["(top level): table[2].minBatch 4 appears twice"]
    assert _errors(_rows((2, 1), (4, 2))) == [
        "(top level): one entry must have minBatch 1 so that every batch size has a step count"
    ]
    assert _errors({"table": [{"minBatch": 1, "steps": 1, "max": 2}]}) == ["table[0].max: unknown field"]


def test_lookup_takes_the_entry_with_the_largest_min_batch_at_or_below_the_batch():
    table = StepTable.from_pairs([(16, 1), (1, 5), (4, 3)])  # written out of order
    assert table.pairs() == [(1, 5), (4, 3), (16, 1)]
    assert [e.min_batch for e in table.entries()] == [1, 4, 16]
    assert {b: table.lookup(b) for b in (1, 3, 4, 5, 15, 16, 17, 10_000)} == {
        1: 5,
        3: 5,
        4: 3,
        5: 3,
        15: 3,
        16: 1,
        17: 1,
        10_000: 1,
    }
    assert table.lookup(0) == 5  # below every entry: the first one's
    assert StepTable.single(4).pairs() == [(1, 4)]


def test_a_table_serialises_under_the_wire_names_in_its_own_order():
    body = StepTable.from_pairs([(8, 2), (1, 3)]).to_json()
    assert body == {"table": [{"minBatch": 8, "steps": 2}, {"minBatch": 1, "steps": 3}]}
    assert json.loads(json.dumps(body)) == body and parse_step_table(body).pairs() == [(1, 3), (8, 2)]


def test_candidates_name_every_uncaptured_entry_and_what_is_allowed():
    body = _rows((1, 3), (8, 5), (32, 0))
    with pytest.raises(StepTableError) as err:
        parse_step_table(body, candidates=(5, 1, 5))
    assert err.value.errors == [
        "table[0].steps: 3 is not a captured candidate",
        "table[2].steps: 0 is not a captured candidate",
        "allowed steps: [1, 5]",
    ]
    assert err.value.allowed == [1, 5]
    assert parse_step_table(body, candidates=[0, 3, 5]).pairs() == [(1, 3), (8, 5), (32, 0)]
    assert parse_step_table(body, candidates=None).pairs() == [(1, 3), (8, 5), (32, 0)]
    with pytest.raises(StepTableError):
        parse_step_table(body, candidates=[])  # an empty set of tiers serves nothing


# ---- derived values ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "target, draft, expected",
    [
        (8, 0, "tp sizes must be >= 1 (target 8, draft 0)"),
        (0, 1, "tp sizes must be >= 1 (target 0, draft 1)"),
        (8, 9, "draft TP 9 is larger than target TP 8: the draft group must be inside the target group"),
        (8, 3, "draft TP 3 must divide target TP 8"),
        (8, 5, "draft TP 5 must divide target TP 8"),
    ],
)
def test_draft_tp_sizes_just_outside_the_rule(target, draft, expected):
    assert draft_tp_problems(target, draft) == [expected]


@pytest.mark.parametrize("target, draft", [(1, 1), (8, 8), (8, 4), (8, 1), (6, 3)])
def test_draft_tp_sizes_at_and_inside_the_rule(target, draft):
    assert draft_tp_problems(target, draft) == [] and is_split_draft(draft, target) == (draft < target)


@pytest.mark.parametrize(
    "ranks, expected",
    [
        ([0], "draft.ranks has 1 entries, draft TP is 2"),
        ([0, 1, 2], "draft.ranks has 3 entries, draft TP is 2"),
        ([5, 5], "draft.ranks [5, 5] has duplicates"),
        (
            [-1, 0],
            "draft.ranks [-1] are not inside the target TP group 0..7: a draft outside the target group would "
            "need the verify hidden states moved every step",
        ),
        (
            [7, 8],
            "draft.ranks [8] are not inside the target TP group 0..7: a draft outside the target group would "
            "need the verify hidden states moved every step",
        ),
    ],
)
def test_draft_ranks_just_outside_the_rule(ranks, expected):
    assert draft_tp_problems(8, 2, ranks) == [expected]


@pytest.mark.parametrize("ranks", [[0, 7], [7, 0], ["6", "7"], None])
def test_draft_ranks_at_the_group_edges(ranks):
    assert draft_tp_problems(8, 2, ranks) == []


def test_draft_tokens_follow_the_config():
    assert num_draft_tokens(config()) == 4
    assert num_draft_tokens(config(**{"eagleTopK: 1": "eagleTopK: 4, numDraftTokens: 9"})) == 9
    assert num_draft_tokens(config(**{"eagleTopK: 1": "eagleTopK: 4"})) is None
    assert num_draft_tokens(config(**{"eagleTopK: 1": "eagleTopK: 1, numDraftTokens: 9"})) == 4
    assert draft_tokens_per_cycle(0, 1) == 1


def test_live_is_the_live_mode_only():
    assert live(config())
    assert not live(config(**{"mode: Live": "mode: Rollout"})) and not live(config(**{"mode: Live": "mode: 'Off'"}))


def test_the_nccl_environment_is_the_profile_s_with_the_user_s_on_top():
    single = nccl_environment(config())
    assert single == profile_env("PCIe", multi_node=False, overrides={})
    two = config(**{"nccl: {profile: PCIe}": "nccl: {profile: PCIe, env: {NCCL_DEBUG: INFO}}\ntopology: {nodes: 2}"})
    env = nccl_environment(two)
    assert env == profile_env("PCIe", multi_node=True, overrides={"NCCL_DEBUG": "INFO"}) and env["NCCL_DEBUG"] == "INFO"
    one = config(**{"nccl: {profile: PCIe}": "nccl: {profile: PCIe}\ntopology: {nodes: 1}"})
    assert nccl_environment(one) == single


# ---- the step tiers a pod serves -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "lo, hi, current, limit, expected",
    [
        (1, 7, 3, 8, [1, 2, 3, 4, 5, 6, 7]),  # the whole span fits
        (7, 1, 3, 8, [1, 2, 3, 4, 5, 6, 7]),  # bounds given the wrong way round
        (1, 8, 1, 8, [1, 2, 3, 4, 5, 6, 7, 8]),  # exactly the limit
        (1, 9, 1, 8, [1, 2, 3, 4, 6, 7, 8, 9]),  # one over: an inner value is left out, never a bound
        (1, 5, 9, 8, [1, 2, 3, 4, 5]),  # current above the range is clamped to it
        (1, 5, -3, 8, [1, 2, 3, 4, 5]),
        (1, 3, 1, 8, [1, 2, 3]),  # three values: the middle one is spread in
        (1, 2, 1, 8, [1, 2]),
        (4, 4, 4, 8, [4]),
        (1, 20, 1, 4, [1, 7, 14, 20]),  # evenly spread
        (1, 20, 10, 4, [1, 10, 11, 20]),  # the current value takes a slot
        (1, 20, 10, 3, [1, 10, 20]),  # no slot left
        (1, 20, 10, 2, [1, 10]),  # fewer slots than bounds and current: the smallest
        (1, 20, 10, 1, [1]),
        (1, 20, 10, 0, [1]),  # always at least one tier
    ],
)
def test_candidate_steps_table(lo, hi, current, limit, expected):
    assert candidate_steps(lo, hi, current, limit) == expected


def test_candidate_steps_default_to_eight_tiers():
    assert MAX_CANDIDATES == 8 and candidate_steps(1, 30, 1) == [1, 5, 9, 13, 18, 22, 26, 30]
    # a spread value that lands on the current one is not replaced: one tier fewer
    assert candidate_steps(1, 30, 15) == [1, 6, 11, 15, 20, 25, 30]


@pytest.mark.parametrize("steps, start", [(0, 2), (1, 2), (2, 2), (4, 4), (6, 6), (7, 6)])
def test_autotune_steps_clamp_the_start_at_and_past_each_bound(steps, start):
    for mode in ("Live", "Rollout"):
        assert autotune_steps(mode, 2, 6, steps)[0] == start
    assert autotune_steps("Off", 2, 6, steps) == (steps, [steps])


def test_only_live_adds_the_target_only_tier():
    assert autotune_steps("Live", 2, 4, 3) == (3, [TARGET_ONLY_STEPS, 2, 3, 4]) and TARGET_ONLY_STEPS == 0
    assert autotune_steps("Rollout", 2, 4, 3) == (3, [2, 3, 4])
    assert tuner_steps("Rollout", 2, 4, 3) == [2, 3, 4]
    assert tuner_steps("Live", 2, 4, 3) == tuner_steps("Off", 2, 4, 3) == [0, 2, 3, 4]


def test_step_candidates_read_the_live_tiers_sorted_and_once():
    assert step_candidates(config(**{"candidateSteps: [1, 3, 5]": "candidateSteps: [5, 0, 3, 3, 1]"})) == [0, 1, 3, 5]
    assert step_candidates(config(**{"mode: Live": "mode: Rollout"})) == [3]
    assert step_candidates(config(**{"mode: Live": "mode: 'Off'"})) == [3]


# ---- what a pod refuses --------------------------------------------------------------------------------------------
SPLIT = "with a split draft (draft TP 2 < target TP 8)"
FULL = {"{model: /d, tensorParallelSize: 2}": "{model: /d, tensorParallelSize: 8}"}
ROLLOUT = {"mode: Live": "mode: Rollout"}


def _problems(args=None, **changes) -> list[tuple[str, str, str]]:
    cfg = config(**changes)
    return [(p.field, p.message, p.rule) for p in serving_problems(cfg, args)]


def _extra(*args: str) -> str:
    return "nccl: {profile: PCIe}\nextraArgs: [" + ", ".join(f"'{a}'" for a in args) + "]"


def test_a_servable_config_has_no_problems():
    assert _problems() == [] and _problems(**FULL) == [] and _problems(**ROLLOUT) == []


@pytest.mark.parametrize("flag", sorted(ALWAYS_REFUSED))
def test_always_refused_flags(flag):
    want = [("extraArgs", f"{flag}: {ALWAYS_REFUSED[flag]}", f"always:{flag}")]
    assert _problems(**{"nccl: {profile: PCIe}": _extra(flag)}) == want
    assert _problems(**FULL, **{"nccl: {profile: PCIe}": _extra(flag)}) == want  # whatever the placement
    for on in ("true", "1", "yes", "True"):
        assert _problems(["--tp-size", "8", f"{flag}={on}"]) == want
    for off in ("false", "0", "no", "FALSE", "No"):
        assert _problems([f"{flag}={off}"]) == []


@pytest.mark.parametrize("flag", sorted(SPLIT_REFUSED))
def test_split_refused_flags_only_with_a_split_draft(flag):
    with_flag = {"nccl: {profile: PCIe}": _extra(flag)}
    assert ("extraArgs", f"{flag} {SPLIT}: {SPLIT_REFUSED[flag]}", f"split:{flag}") in _problems(**ROLLOUT, **with_flag)
    assert [p for p in _problems(**ROLLOUT, **FULL, **with_flag) if p[2].startswith("split")] == []
    assert _problems([f"{flag}=false"], **ROLLOUT) == []


@pytest.mark.parametrize("flag", ["--pp-size", "--pipeline-parallel-size"])
def test_pipeline_parallelism_with_a_split_draft(flag):
    want = ("extraArgs", f"pipeline parallelism {SPLIT}: PP already hosts the draft on the last stage only", "split-pp")
    assert _problems([flag, "2"]) == [want] and _problems([f"{flag}=4"]) == [want]
    assert _problems([flag, "1"]) == [] and _problems([]) == []
    assert _problems([flag, "2"], **FULL) == []


@pytest.mark.parametrize("flag", ["--dp-size", "--data-parallel-size"])
def test_data_parallelism_with_a_split_draft(flag):
    want = ("extraArgs", f"data parallelism (--dp-size) {SPLIT} is not supported", "split-dp")
    assert _problems([flag, "2"]) == [want]
    assert _problems([flag, "1"]) == [] and _problems([flag, "2"], **FULL) == []


def test_split_draft_algorithms():
    standalone = {"{model: /d, tensorParallelSize: 2}": "{model: /d, tensorParallelSize: 2, algorithm: STANDALONE}"}
    assert _problems(["--speculative-algorithm", "STANDALONE"], **standalone, **ROLLOUT) == [
        (
            "draft.algorithm",
            f"STANDALONE {SPLIT}: the split draft supports EAGLE/EAGLE3/NEXTN drafts only; set "
            "draft.tensorParallelSize to 8 for STANDALONE",
            "split-algorithm",
        )
    ]
    for algorithm in SPLIT_DRAFT_ALGORITHMS:
        draft = {"{model: /d, tensorParallelSize: 2}": f"{{model: /d, tensorParallelSize: 2, algorithm: {algorithm}}}"}
        assert _problems(**draft, **ROLLOUT) == []
    full_standalone = {
        "{model: /d, tensorParallelSize: 2}": "{model: /d, tensorParallelSize: 8, algorithm: STANDALONE}"
    }
    assert _problems(**full_standalone, **ROLLOUT) == []


def test_the_algorithm_flag_must_agree_with_the_draft():
    assert _problems(["--speculative-algorithm", "eagle3"]) == []  # letter case does not matter
    assert _problems(["--speculative-algorithm=EAGLE3"]) == []
    assert _problems(["--speculative-algorithm", "NEXTN"]) == [
        ("extraArgs", "--speculative-algorithm NEXTN contradicts draft.algorithm EAGLE3", "algorithm-flag")
    ]
    assert _problems(["--speculative-algorithm", "nextn"])[0][1].startswith("--speculative-algorithm NEXTN ")
    # the launcher's own arguments carry the draft's algorithm; a user's later flag overrides it
    assert _problems(**{"nccl: {profile: PCIe}": _extra("--speculative-algorithm", "NEXTN")})[0][2] == "algorithm-flag"


@pytest.mark.parametrize("flag", OWNED_FLAGS)
def test_the_runtime_owns_the_adaptive_flags(flag):
    message = (
        f"{flag}: the runtime writes SGLang's adaptive config itself (autotune mode Live, from "
        "speculative.candidateSteps); another controller would change steps behind the step table"
    )
    want = [("extraArgs", message, f"owned:{flag}")]
    assert _problems([flag]) == want and _problems([flag, "/tmp/x"]) == want
    assert _problems([f"{flag}=false"], **ROLLOUT) == want  # any value: the flag itself is the problem


def test_live_needs_adaptive_algorithms():
    nextn = {"{model: /d, tensorParallelSize: 2}": "{model: /d, tensorParallelSize: 8, algorithm: NEXTN}"}
    want = (
        "draft.algorithm",
        "autotune Live needs SGLang's adaptive step tiers, which support EAGLE/EAGLE3 only, not NEXTN",
        "live-algorithm",
    )
    assert _problems(["--speculative-algorithm", "NEXTN"], **nextn) == [want]
    assert _problems(["--speculative-algorithm", "NEXTN"], **nextn, **ROLLOUT) == []
    for algorithm in ADAPTIVE_ALGORITHMS:
        draft = {"{model: /d, tensorParallelSize: 2}": f"{{model: /d, tensorParallelSize: 8, algorithm: {algorithm}}}"}
        assert _problems(["--speculative-algorithm", algorithm], **draft) == []


@pytest.mark.parametrize("top_k, refused", [(1, False), (2, True), (0, True)])
def test_live_needs_a_chain(top_k, refused):
    want = (
        "speculative.eagleTopK",
        f"autotune Live needs SGLang's adaptive step tiers, which support eagleTopK 1 only, not {top_k}",
        "live-top-k",
    )
    assert _problems([], **{"eagleTopK: 1": f"eagleTopK: {top_k}"}) == ([want] if refused else [])
    assert _problems([], **ROLLOUT, **{"eagleTopK: 1": f"eagleTopK: {top_k}"}) == []


@pytest.mark.parametrize("steps, refused", [(1, False), (5, False), (0, True), (4, True), (6, True)])
def test_a_live_start_must_be_a_captured_tier(steps, refused):
    want = (
        "speculative.numSteps",
        f"numSteps {steps} is not in candidateSteps [1, 3, 5]: SGLang starts on numSteps and needs it captured",
        "live-num-steps",
    )
    changes = {"numSteps: 3": f"numSteps: {steps}", "candidateSteps: [1, 3, 5]": "candidateSteps: [5, 3, 1]"}
    assert _problems([], **changes) == ([want] if refused else [])
    assert _problems([], **ROLLOUT, **changes) == []


@pytest.mark.parametrize("flag", sorted(LIVE_REFUSED))
def test_live_refused_flags(flag):
    want = ("extraArgs", f"{flag} with autotune Live: {LIVE_REFUSED[flag]}", f"live:{flag}")
    assert _problems([flag], **FULL) == [want]
    assert _problems([flag], **FULL, **ROLLOUT) == [] and _problems([f"{flag}=no"], **FULL) == []


def test_an_empty_rank_list_is_no_rank_list():
    ranks = {"{model: /d, tensorParallelSize: 2}": "{model: /d, tensorParallelSize: 2, ranks: []}"}
    assert _problems(**ranks) == []
    bad = {"{model: /d, tensorParallelSize: 2}": "{model: /d, tensorParallelSize: 3}"}
    assert _problems(**bad) == [("draft.tensorParallelSize", "draft TP 3 must divide target TP 8", "draft-tp")]


def test_problems_come_in_rule_order_and_read_as_field_and_message():
    changes = {
        "{model: /d, tensorParallelSize: 2}": "{model: /d, tensorParallelSize: 2, algorithm: STANDALONE}",
        "eagleTopK: 1": "eagleTopK: 2",
        "numSteps: 3": "numSteps: 4",
    }
    args = ["--enable-symm-mem", "--enable-pdmux", "--pp-size", "2", "--dp-size", "2", "--speculative-adaptive"]
    problems = serving_problems(config(**changes), args)
    assert [p.rule for p in problems] == [
        "always:--enable-symm-mem",
        "split:--enable-pdmux",
        "split-pp",
        "split-dp",
        "split-algorithm",
        "owned:--speculative-adaptive",
        "live-algorithm",
        "live-top-k",
        "live-num-steps",
        "live:--enable-pdmux",
    ]
    assert str(problems[0]) == f"extraArgs: --enable-symm-mem: {ALWAYS_REFUSED['--enable-symm-mem']}"
    assert {p.rule for p in problems} <= set(rule_names())


def test_every_rule_name_is_one_a_refusal_can_carry():
    names = rule_names()
    assert (
        len(names)
        == len(set(names))
        == len(RULES) + len(ALWAYS_REFUSED) + len(SPLIT_REFUSED) + len(LIVE_REFUSED) + len(OWNED_FLAGS)
    )
    tripped = set()
    for flag in ALWAYS_REFUSED:
        tripped |= {p[2] for p in _problems([flag])}
    for flag in SPLIT_REFUSED:
        tripped |= {p[2] for p in _problems([flag], **ROLLOUT)}
    for flag in LIVE_REFUSED:
        tripped |= {p[2] for p in _problems([flag], **FULL)}
    for flag in OWNED_FLAGS:
        tripped |= {p[2] for p in _problems([flag])}
    assert tripped == {n for n in names if ":" in n}
    assert set(RULES) == {
        "draft-tp",
        "split-pp",
        "split-dp",
        "split-algorithm",
        "algorithm-flag",
        "live-algorithm",
        "live-top-k",
        "live-num-steps",
        "served-warmup",
    }


SERVED = {"nccl: {profile: PCIe}": "nccl: {profile: PCIe}\ncostProbe: {served: {batches: [1, 8]}}"}


@pytest.mark.parametrize("mode", ["mode: Live", "mode: Rollout", "mode: 'Off'"])
def test_the_served_calibration_refuses_a_skipped_warm_up_in_every_mode(mode):
    changes = {**SERVED, "mode: Live": mode}
    want = (
        "costProbe.served",
        "the served calibration runs in SGLang's server warm-up, which --skip-server-warmup skips; remove one of them",
        "served-warmup",
    )
    assert [p for p in _problems(["--skip-server-warmup"], **changes) if p[2] == "served-warmup"] == [want]
    assert [p for p in _problems(["--skip-server-warmup=false"], **changes) if p[2] == "served-warmup"] == []
    assert _problems([], **changes) == []
    assert _problems(["--skip-server-warmup"]) == []  # without the calibration the warm-up may be skipped


@pytest.mark.parametrize(
    "served, error",
    [
        ("{}", None),
        ("{batches: [1, 4096], tokens: 8, timeoutSeconds: 3600}", None),
        ("{batches: [1, 2, 3, 4, 5, 6, 7, 8], tokens: 4096}", None),
        ("{batches: []}", "costProbe.served.batches"),
        ("{batches: [1, 2, 3, 4, 5, 6, 7, 8, 9]}", "costProbe.served.batches"),
        ("{batches: [0]}", "costProbe.served.batches[0]"),
        ("{batches: [4097]}", "costProbe.served.batches[0]"),
        ("{tokens: 7}", "costProbe.served.tokens"),
        ("{tokens: 4097}", "costProbe.served.tokens"),
        ("{timeoutSeconds: 0}", "costProbe.served.timeoutSeconds"),
        ("{timeoutSeconds: 3601}", "costProbe.served.timeoutSeconds"),
        ("{batch: [1]}", "costProbe.served.batch"),
    ],
)
def test_served_calibration_bounds(served, error):
    text = CONFIG.replace("nccl: {profile: PCIe}", f"nccl: {{profile: PCIe}}\ncostProbe: {{served: {served}}}")
    if error is None:
        cfg = RuntimeConfig.from_yaml(text)
        assert cfg.cost_probe.served is not None
        again = RuntimeConfig.from_yaml(cfg.to_yaml())  # the renderer's round trip keeps it
        assert again.cost_probe.served == cfg.cost_probe.served
    else:
        with pytest.raises(InputError) as err:
            RuntimeConfig.from_yaml(text)
        assert error in str(err.value)


def test_without_served_the_probe_config_dumps_as_before():
    cfg = config(**{"nccl: {profile: PCIe}": "nccl: {profile: PCIe}\ncostProbe: {budgetMs: 3}"})
    assert cfg.cost_probe.served is None
    assert "served" not in cfg.to_yaml()


# ---- SGLang's arguments --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "args, value",
    [
        ([], None),
        (["--port", "1"], None),
        (["--flag", "v"], "v"),
        (["--flag=v"], "v"),
        (["--flag=a=b"], "a=b"),
        (["--flag="], ""),
        (["--flag"], "true"),  # bare, last
        (["--flag", "--other"], "true"),  # bare, followed by a flag
        (["--flag", "-1"], "-1"),  # a negative number is a value
        (["--flag", "1", "--flag=2"], "2"),  # the last one wins
        (["--flag=2", "--flag", "3"], "3"),
        (["--flag", "1", "--flag"], "true"),
        (["--flagx", "v", "--flag-y=1", "x--flag=2"], None),  # other flags sharing the prefix
        (["v", "--flag"], "true"),
    ],
)
def test_flag_value(args, value):
    assert flag_value(args, "--flag") == value


def test_sglang_arguments_of_a_config():
    cfg = config(**{"nccl: {profile: PCIe}": _extra("--mem-fraction-static", "0.8")})
    args = sglang_cli_args(cfg, ["--log-level", "debug"])
    expect = {
        "--model-path": "/t",
        "--tp-size": "8",
        "--speculative-algorithm": "EAGLE3",
        "--speculative-draft-model-path": "/d",
        "--speculative-num-steps": "3",
        "--speculative-eagle-topk": "1",
        "--speculative-num-draft-tokens": "4",
        "--host": "0.0.0.0",
        "--port": "30000",
        "--enable-metrics": "true",
    }
    assert {f: flag_value(args, f) for f in expect} == expect
    for absent in ("--quantization", "--context-length", "--nnodes", "--node-rank", "--dist-init-addr"):
        assert flag_value(args, absent) is None
    assert args[:4] == ["--model-path", "/t", "--tp-size", "8"]
    assert args[-4:] == ["--mem-fraction-static", "0.8", "--log-level", "debug"]  # the user's last, then the caller's
    tree = sglang_cli_args(config(**{"eagleTopK: 1": "eagleTopK: 4"}))
    assert (
        flag_value(tree, "--speculative-num-draft-tokens") is None
        and flag_value(tree, "--speculative-eagle-topk") == "4"
    )


def test_sglang_arguments_of_a_quantized_multi_node_target():
    cfg = config(
        **{
            "target: {model: /t, tensorParallelSize: 8}": "target: {model: /t, tensorParallelSize: 8, quantization: fp8, "
            "contextLength: 4096}",
            "nccl: {profile: PCIe}": "nccl: {profile: PCIe}\ntopology: {nodes: 2}\nserver: {port: 8080}",
        }
    )
    args = sglang_cli_args(cfg)
    assert flag_value(args, "--quantization") == "fp8" and flag_value(args, "--context-length") == "4096"
    assert flag_value(args, "--port") == "8080" and flag_value(args, "--nnodes") == "2"
    assert flag_value(args, "--node-rank") == "$(SPECDECODE_NODE_RANK)"
    assert flag_value(args, "--dist-init-addr") == "$(SPECDECODE_DIST_INIT_ADDR)"
    assert unexpanded_refs(args) == ["SPECDECODE_DIST_INIT_ADDR", "SPECDECODE_NODE_RANK"]
    env = {"SPECDECODE_NODE_RANK": "1", "SPECDECODE_DIST_INIT_ADDR": "10.0.0.1:5000"}
    expanded = expand_env_refs(args, env)
    assert flag_value(expanded, "--node-rank") == "1" and flag_value(expanded, "--dist-init-addr") == "10.0.0.1:5000"
    assert unexpanded_refs(expanded) == [] and len(expanded) == len(args)
    partly = expand_env_refs(["a$(SPECDECODE_NODE_RANK)b", "$(UNSET_VAR)", "$(1BAD)"], {"SPECDECODE_NODE_RANK": "3"})
    assert partly == ["a3b", "$(UNSET_VAR)", "$(1BAD)"] and unexpanded_refs(partly) == ["UNSET_VAR"]
    one_node = config(**{"nccl: {profile: PCIe}": "nccl: {profile: PCIe}\ntopology: {nodes: 1}"})
    assert flag_value(sglang_cli_args(one_node), "--nnodes") is None


# ---- the runtime config file ---------------------------------------------------------------------------------------
def _config_errors(text: str) -> list[str]:
    with pytest.raises(InputError) as err:
        RuntimeConfig.from_yaml(text)
    assert err.value.source == CONFIG_FILE_NAME == "runtime.yaml"
    return err.value.errors


@pytest.mark.parametrize("port", [1, 2, 65534, 65535])
def test_ports_at_and_inside_their_bounds(port):
    cfg = config(**{"nccl: {profile: PCIe}": f"nccl: {{profile: PCIe}}\nserver: {{port: {port}, controlPort: {port}}}"})
    assert cfg.server.port == port and cfg.server.control_port == port


@pytest.mark.parametrize(
    "port, message",
    [(0, "greater than or equal to 1, got 0"), (65536, "less than or equal to 65535, got 65536")],
)
@pytest.mark.parametrize("field", ["port", "controlPort"])
def test_ports_just_outside_their_bounds(port, message, field):
    text = CONFIG.replace("nccl: {profile: PCIe}", f"nccl: {{profile: PCIe}}\nserver: {{{field}: {port}}}")
    assert _config_errors(text) == [f"server.{field}: Input should be {message}"]


def test_server_defaults():
    server = config().server
    assert (server.port, server.control_port, server.token_file) == (30000, 30001, TOKEN_PATH)
    assert TOKEN_PATH == "/var/run/secrets/specdecode/token" and CONFIG_PATH == "/etc/specdecode/runtime.yaml"
    assert server.buckets == list(DEFAULT_BUCKETS)


@pytest.mark.parametrize("budget", [0.001, 2.0, 100])
def test_cost_probe_budget_at_and_inside_its_bounds(budget):
    cfg = config(**{"nccl: {profile: PCIe}": f"nccl: {{profile: PCIe}}\ncostProbe: {{budgetMs: {budget}}}"})
    assert cfg.cost_probe is not None and cfg.cost_probe.budget_ms == budget and cfg.cost_probe.enabled


@pytest.mark.parametrize(
    "budget, message",
    [(0, "greater than 0, got 0"), (-1, "greater than 0, got -1"), (100.5, "less than or equal to 100")],
)
def test_cost_probe_budget_just_outside_its_bounds(budget, message):
    text = CONFIG.replace("nccl: {profile: PCIe}", f"nccl: {{profile: PCIe}}\ncostProbe: {{budgetMs: {budget}}}")
    (error,) = _config_errors(text)
    assert error.startswith(f"costProbe.budgetMs: Input should be {message}")


def test_config_defaults_and_the_device():
    cfg = config()
    assert cfg.api_version == "specdecode.io/runtime/v1" and cfg.draft.algorithm == "EAGLE3"
    assert cfg.cost_probe is None and cfg.extra_args == [] and cfg.device is None and cfg.target_device == "cuda"
    assert (cfg.topology.nodes, cfg.topology.gpus_per_node, cfg.topology.interconnect) == (1, 8, "PCIe")
    assert (cfg.speculative.autotune.min_steps, cfg.speculative.autotune.max_steps) == (1, 5)
    assert AutotuneConfig().mode == "Off" and (AutotuneConfig().min_steps, AutotuneConfig().max_steps) == (1, 7)
    assert config(**{"nccl: {profile: PCIe}": "nccl: {profile: PCIe}\ndevice: cpu"}).target_device == "cpu"
    assert config(**{"nccl: {profile: PCIe}": "nccl: {profile: PCIe}\ndevice: cuda"}).target_device == "cuda"


def test_the_config_round_trips_through_its_yaml_and_leaves_unset_options_out():
    cfg = config(**{"nccl: {profile: PCIe}": "nccl: {profile: PCIe, env: {NCCL_DEBUG: INFO}}\nextraArgs: ['--x', '1']"})
    text = cfg.to_yaml()
    assert RuntimeConfig.from_yaml(text) == cfg
    data = yaml.safe_load(text)
    assert list(data) == sorted(data)  # keys sorted: the rendered ConfigMap is stable
    assert data["target"] == {"model": "/t", "tensorParallelSize": 8}  # aliases; None fields left out
    assert "costProbe" not in data and "device" not in data and "preflight" not in data["nccl"]
    assert data["speculative"]["candidateSteps"] == [1, 3, 5] and data["extraArgs"] == ["--x", "1"]


def test_a_kubernetes_object_is_not_a_runtime_config():
    sdd = "apiVersion: specdecode.io/v1alpha1\nkind: SpecDecodeDeployment\nmetadata: {name: x}\nspec: {}\n"
    (error,) = _config_errors(sdd)
    assert error.startswith("this is a SpecDecodeDeployment, not a runtime config; runtime.yaml is rendered from a ")
    assert "`specdecode render -f SDD -o runtime-config`" in error
    (other,) = _config_errors("apiVersion: v1\nkind: ConfigMap\nspec: {}\n")
    assert other.startswith("this is a ConfigMap, not a runtime config")
    (bare,) = _config_errors("spec: {}\n")
    assert bare.startswith("this is a Kubernetes object, not a runtime config")
    assert _config_errors("kind: SpecDecodeDeployment\n")[0].startswith("this is a SpecDecodeDeployment")


def test_yaml_problems_name_the_config_s_source():
    with pytest.raises(InputError) as err:
        RuntimeConfig.from_yaml("name: [demo\n", source="pod/runtime.yaml")
    assert err.value.source == "pod/runtime.yaml" and err.value.errors[0].startswith("line 2, column 1: not valid YAML")


def test_a_runtime_config_is_one_document():
    assert _config_errors(CONFIG + "---\n" + CONFIG) == ["holds 2 YAML documents; expected one runtime config"]
    assert _config_errors("") == ["(top level): expected a mapping (runtime config), got nothing (an empty document)"]
    assert _config_errors("- 1\n") == ["(top level): expected a mapping (runtime config), got a list"]


def test_a_runtime_config_file_is_read_and_checked(tmp_path):
    path = tmp_path / "runtime.yaml"
    path.write_text(CONFIG)
    assert load_runtime_config(str(path)) == config()
    path.write_text(CONFIG + "---\n" + CONFIG)
    with pytest.raises(InputError) as err:
        load_runtime_config(str(path))
    assert err.value.source == str(path) and err.value.errors == ["holds 2 YAML documents; expected one runtime config"]
    path.write_text("kind: SpecDecodeDeployment\n")
    with pytest.raises(InputError, match="this is a SpecDecodeDeployment"):
        load_runtime_config(str(path))
    path.write_text(CONFIG.replace("name: demo\n", ""))
    with pytest.raises(InputError) as err:
        load_runtime_config(str(path))
    assert err.value.errors == ["name: required"]


# ---- NCCL profiles -------------------------------------------------------------------------------------------------
MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.mark.parametrize("interconnect, resolved", [("NVLink", "NVLink"), ("PCIe", "PCIe"), ("nvlink", "PCIe")])
def test_auto_follows_the_declared_interconnect(interconnect, resolved):
    assert resolve_profile("Auto", interconnect) == resolved


def test_named_profiles_resolve_to_themselves_and_unknown_ones_are_refused():
    for name in ("PCIe", "NVLink", "None"):
        assert resolve_profile(name, "NVLink") == name
    with pytest.raises(ValueError) as err:
        resolve_profile("Fast", "PCIe")
    assert str(err.value) == "unknown NCCL profile 'Fast'; allowed: Auto, PCIe, NVLink, None"
    with pytest.raises(ValueError) as err:
        profile_settings("Auto")  # a profile must be resolved before its settings are read
    assert str(err.value) == "unknown NCCL profile 'Auto'; allowed: PCIe, NVLink, None"


def test_every_profile_starts_with_multicast_off():
    for name in ("PCIe", "NVLink", "None"):
        for multi_node in (False, True):
            settings = profile_settings(name, multi_node=multi_node)
            assert {s.name: s.value for s in settings[:3]} == MULTICAST
    assert profile_env("None") == MULTICAST
    assert profile_env("NVLink") == {**MULTICAST, "NCCL_CUMEM_ENABLE": "0"}


def test_the_pcie_profile_skips_the_infiniband_probe_on_one_node_only():
    single, multi = profile_env("PCIe"), profile_env("PCIe", multi_node=True)
    assert single["NCCL_IB_DISABLE"] == "1" and "NCCL_IB_DISABLE" not in multi
    assert {k: v for k, v in single.items() if k != "NCCL_IB_DISABLE"} == multi
    assert multi["NCCL_P2P_LEVEL"] == "SYS" and multi["NCCL_PROTO"] == "^LL128" and multi["NCCL_MIN_NCHANNELS"] == "8"
    assert list(single) == sorted(single)


def test_the_user_s_nccl_env_wins_except_over_multicast():
    env = profile_env("PCIe", overrides={"NCCL_P2P_LEVEL": "PHB", "NCCL_NVLS_ENABLE": "1", "NCCL_DEBUG": 3})
    assert env["NCCL_P2P_LEVEL"] == "PHB" and env["NCCL_DEBUG"] == "3" and env["NCCL_NVLS_ENABLE"] == "0"
    assert profile_env("PCIe", overrides=None) == profile_env("PCIe", overrides={}) == profile_env("PCIe")


# ---- metric names --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "batch, label",
    [
        (1, "1"),
        (2, "2-7"),
        (7, "2-7"),
        (8, "8-31"),
        (31, "8-31"),
        (32, "32-63"),
        (63, "32-63"),
        (64, "64+"),
        (999, "64+"),
    ],
)
def test_bucket_labels_at_each_bound(batch, label):
    assert bucket_label(batch) == label


def test_bucket_labels_of_other_bounds():
    assert bucket_label(0) == "1" and bucket_label(-5) == "1"  # below every bucket: the first one's
    assert bucket_label(5, [4, 1]) == "4+" and bucket_label(3, (4, 1)) == "1-3"  # bounds in any order
    assert bucket_label(1, [1]) == "1+"
    assert bucket_labels() == ["1", "2-7", "8-31", "32-63", "64+"] and bucket_labels([3, 1]) == ["1-2", "3+"]


def test_exposed_names_follow_the_metric_type():
    gauge = next(m for m in METRICS.values() if m.kind == "gauge")
    counter = next(m for m in METRICS.values() if m.kind == "counter")
    summary = next(m for m in METRICS.values() if m.kind == "summary")
    assert exposed_name(gauge.name) == gauge.name and exposed_name(counter.name) == counter.name + "_total"
    with pytest.raises(ValueError) as err:
        exposed_name(summary.name)
    assert str(err.value) == (
        f"{summary.name} is a summary: its samples are ('{summary.name}_sum', '{summary.name}_count')"
    )
    assert {summary.name + "_sum", summary.name + "_count", counter.name + "_total"} <= sample_names()


@pytest.mark.parametrize(
    "steps, accepted, attempts_want, accepted_want",
    [
        (3, [0], [1, 0, 0], [0, 0, 0]),  # the first draft was tried and refused
        (3, [1], [1, 1, 0], [1, 0, 0]),
        (3, [3], [1, 1, 1], [1, 1, 1]),  # all accepted: no position after the last to try
        (3, [0, 2, 3], [3, 2, 2], [2, 2, 1]),
        (3, [], [0, 0, 0], [0, 0, 0]),
        (0, [0], [], []),
    ],
)
def test_position_counts(steps, accepted, attempts_want, accepted_want):
    assert position_counts(steps, accepted) == (attempts_want, accepted_want)


@pytest.mark.parametrize("count", [-1, 4])
def test_position_counts_refuse_counts_outside_the_steps(count):
    with pytest.raises(ValueError) as err:
        position_counts(3, [count])
    assert str(err.value) == f"accepted drafts per request must be within 0..3 (steps), got {count}"


# ---- the cost probe's fit ------------------------------------------------------------------------------------------
def _pt(stage: str, steps: int, ms: float, batch: int = 4, bucket: str = "2-7") -> ProbePoint:
    return ProbePoint(stage, steps, bucket, batch, ms / 1000.0)


def test_line_fit_edges():
    assert _line([], []) == (0.0, 0.0)
    assert _line([3, 3], [2.0, 4.0]) == (3.0, 0.0)  # one distinct x: the mean, no slope
    assert _line([3], [-2.0]) == (0.0, 0.0) and _line([3], [-2.0], clamp=False) == (-2.0, 0.0)
    assert _line([1, 2, 3], [5.0, 8.0, 11.0]) == pytest.approx((2.0, 3.0))
    assert _line([1, 2, 3], [9.0, 6.0, 3.0]) == pytest.approx((6.0, 0.0))  # a falling cost: no slope, the mean
    assert _line([2, 4], [1.0, 7.0]) == pytest.approx((0.0, 3.0))  # intercept -5 clamped
    assert _line([2, 4], [1.0, 7.0], clamp=False) == pytest.approx((-5.0, 3.0))


def test_a_bucket_needs_a_verify_point_and_a_draft_cost_for_speculative_tiers():
    assert fit_bucket([]) is None
    assert fit_bucket([_pt("draft_step", 1, 1.0), _pt("overhead", 1, 0.3)]) is None
    assert fit_bucket([_pt("verify", 0, 5.0), _pt("verify", 2, 8.0)]) is None  # would make drafting free
    plain = fit_bucket([_pt("verify", 0, 5.0)])
    assert plain == CycleCost(5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert fit_bucket([_pt("verify", 0, 5.0), _pt("verify", 2, 8.0), _pt("draft", 1, 1.0)]) is not None


def test_a_bucket_fit_from_each_stage():
    verify = [_pt("verify", k, 2.0 + 0.5 * 4 * (k + 1)) for k in (0, 1, 3)]  # 2 ms + 0.5 ms per token
    extend = [_pt("draft_extend", k, 1.0 + 0.25 * 4 * (k + 1)) for k in (1, 3)]
    steps = [_pt("draft_step", 1, ms) for ms in (1.0, 3.0, 2.5)]
    extras = [_pt("overhead", 1, 0.2), _pt("overhead", 3, 0.4), _pt("overhead", 2, 0.9), _pt("broadcast", 1, 0.05)]
    cost = fit_bucket([*verify, *extend, *steps, *extras])
    assert cost is not None
    assert cost.verify_base == pytest.approx(2.0) and cost.verify_per_token == pytest.approx(0.5)
    assert cost.extend_base == pytest.approx(1.0) and cost.extend_per_token == pytest.approx(0.25)
    assert cost.draft_base == pytest.approx(2.5) and cost.draft_per_seq == 0.0  # the median draft step
    assert cost.overhead == pytest.approx(0.4) and cost.broadcast == pytest.approx(0.05)


def test_a_tier_s_whole_draft_phase_splits_into_a_step_cost_and_a_once_per_cycle_part():
    verify = [_pt("verify", k, 2.0 + 0.5 * 4 * (k + 1)) for k in (0, 1, 3)]
    extend = [_pt("draft_extend", k, 3.0 + 0.25 * 4 * (k + 1)) for k in (1, 3)]
    draft = [_pt("draft", k, -1.0 + 2.0 * k) for k in (1, 2, 3)]  # EAGLE: tier 1 runs no draft forward
    cost = fit_bucket([*verify, *extend, *draft, _pt("draft_step", 1, 9.0)])
    assert cost is not None
    assert cost.draft_base == pytest.approx(2.0)  # the slope of the whole phase, not the draft_step point
    assert cost.extend_base == pytest.approx(3.0 - 1.0)  # the negative once-per-cycle part joins the extend
    deep = [_pt("draft", k, -9.0 + 2.0 * k) for k in (1, 2, 3)]
    assert fit_bucket([*verify, *extend, *deep]).extend_base == 0.0  # never below zero
    assert fit_bucket([*verify, *deep]).overhead == 0.0 and fit_bucket([*verify, *deep]).broadcast == 0.0


def test_a_profile_has_one_cost_per_bucket_that_could_be_fitted():
    points = [
        _pt("verify", 0, 5.0, bucket="1", batch=1),
        _pt("verify", 0, 6.0, bucket="2-7", batch=4),
        _pt("verify", 2, 9.0, bucket="2-7", batch=4),  # no draft cost: left out
        _pt("draft_step", 1, 1.0, bucket="8-31", batch=8),  # no verify: left out
    ]
    profile = fit_profile(points)
    assert list(profile) == ["1"] and profile["1"].verify_base == pytest.approx(5.0)
    assert fit_profile([]) == {}


def test_scraped_samples_become_points_unless_unknown_negative_or_nan():
    samples = {
        ("verify", 0, "1", 1): 0.005,
        ("draft", 2, "1", 1): 0.0,
        ("warmup", 0, "1", 1): 0.5,
        ("overhead", 1, "1", 1): -0.001,
        ("broadcast", 1, "1", 1): math.nan,
        ("cycle", 3, "1", 1): 0.009,
    }
    assert points_from_samples(samples) == [
        ProbePoint("verify", 0, "1", 1, 0.005),
        ProbePoint("draft", 2, "1", 1, 0.0),
        ProbePoint("cycle", 3, "1", 1, 0.009),
    ]
    assert set(STAGES) == {"draft_step", "draft", "verify", "draft_extend", "overhead", "broadcast", "cycle"}


# ---- bounded JSON bodies -------------------------------------------------------------------------------------------
def _body_error(raw: bytes, **kw) -> tuple[int, str]:
    with pytest.raises(BodyError) as err:
        parse_json(raw, **kw)
    assert str(err.value) == err.value.message
    return err.value.status, err.value.message


def test_json_nesting_at_and_past_the_depth_bound():
    assert MAX_JSON_DEPTH == 8
    assert parse_json(b"[" * 8 + b"]" * 8) == eval("[" * 8 + "]" * 8)  # noqa: S307 - a literal built here
    assert _body_error(b"[" * 9 + b"]" * 9) == (400, "JSON nested deeper than 8 levels")
    assert _body_error(b'{"a":' * 9 + b"1" + b"}" * 9) == (400, "JSON nested deeper than 8 levels")
    assert parse_json(b"[[[]]]", max_depth=3) == [[[]]]
    assert _body_error(b"[[[[]]]]", max_depth=3) == (400, "JSON nested deeper than 3 levels")
    # closing brackets give the depth back: many shallow siblings are fine
    assert parse_json(b"[" + b",".join([b"[[]]"] * 20) + b"]", max_depth=3) == [[[]]] * 20


def test_brackets_inside_strings_do_not_count_towards_the_depth():
    text = '["' + "[{" * 20 + '"]'
    assert parse_json(text.encode(), max_depth=1) == ["[{" * 20]
    escaped = '["\\"' + "[" * 20 + '"]'  # an escaped quote does not end the string
    assert parse_json(escaped.encode(), max_depth=1) == ['"' + "[" * 20]
    backslash = '["\\\\", ' + "[" * 2 + "]" * 2 + "]"  # an escaped backslash does end the escape
    assert _body_error(backslash.encode(), max_depth=2) == (400, "JSON nested deeper than 2 levels")


@pytest.mark.parametrize("digits", [1, 17, 18])
def test_integers_up_to_eighteen_digits(digits):
    value = int("9" * digits)
    assert parse_json(str(value).encode()) == value and parse_json(f"[-{value}]".encode()) == [-value]


@pytest.mark.parametrize("text", ["9" * 19, "-" + "9" * 19, "1" + "0" * 4400])
def test_longer_integers_are_refused_before_they_are_converted(text):
    digits = len(text.lstrip("-"))
    assert MAX_INT_DIGITS == 18
    assert _body_error(text.encode()) == (400, f"integer with {digits} digits: at most 18 are accepted")


@pytest.mark.parametrize("name", ["NaN", "Infinity", "-Infinity"])
def test_non_json_constants_are_refused(name):
    assert _body_error(f"[{name}]".encode()) == (400, f"{name} is not JSON")


def test_bodies_that_are_not_utf8_json():
    assert _body_error(b"\xff") == (400, "body is not UTF-8")
    status, message = _body_error(b"{'a': 1}")
    assert status == 400 and message.startswith("body is not valid JSON: Expecting property name")
    status, message = _body_error(b'"' + b"x" * 500)
    assert (status, message) == (
        400,
        "body is not valid JSON: Unterminated string starting at: line 1 column 1 (char 0)",
    )


class _Content:
    def __init__(self, data: bytes, chunk: int, delay: float = 0.0) -> None:
        self.data, self.chunk, self.delay, self.asked = data, chunk, delay, []

    async def read(self, n: int) -> bytes:
        self.asked.append(n)
        if self.delay:
            await asyncio.sleep(self.delay)
        out, self.data = self.data[: min(n, self.chunk)], self.data[min(n, self.chunk) :]
        return out


class _Request:
    """The three things ``read_json`` reads of an aiohttp request."""

    def __init__(self, data: bytes, *, content_type="application/json", length=-1, chunk=7, delay=0.0) -> None:
        self.content_type = content_type
        self.content_length = len(data) if length == -1 else length
        self.content = _Content(data, chunk, delay)


async def _read_error(request, **kw) -> tuple[int, str]:
    with pytest.raises(BodyError) as err:
        await read_json(request, **kw)
    return err.value.status, err.value.message


async def test_a_body_at_the_size_bound_is_read_in_chunks():
    body = json.dumps({"table": [{"minBatch": 1, "steps": 3}]}).encode()
    assert await read_json(_Request(body), max_bytes=len(body)) == {"table": [{"minBatch": 1, "steps": 3}]}
    request = _Request(body, length=None, chunk=5)  # chunked transfer: no Content-Length
    assert await read_json(request, max_bytes=len(body)) == {"table": [{"minBatch": 1, "steps": 3}]}
    assert request.content.asked[0] == len(body) + 1  # never asks for more than one byte past the bound
    assert all(n >= 1 for n in request.content.asked)
    assert MAX_BODY_BYTES == 16 * 1024


async def test_a_body_one_byte_over_the_bound_is_refused():
    body = b"[" + b"1," * 10 + b"1]"
    assert await _read_error(_Request(body), max_bytes=len(body) - 1) == (
        413,
        f"body of {len(body)} bytes: at most {len(body) - 1} are accepted",
    )
    # a client that leaves Content-Length out (or understates it) is cut off at the bound, not read to the end
    request = _Request(body * 100, length=None, chunk=4)
    assert await _read_error(request, max_bytes=len(body) - 1) == (413, f"body larger than {len(body) - 1} bytes")
    assert len(body) * 100 - len(request.content.data) == len(body)  # read: the bound and one byte past it
    assert await _read_error(_Request(body, length=3), max_bytes=len(body) - 1) == (
        413,
        f"body larger than {len(body) - 1} bytes",
    )


@pytest.mark.parametrize("content_type, shown", [("text/plain", "'text/plain'"), ("", "'none'")])
async def test_only_json_bodies_are_read(content_type, shown):
    assert await _read_error(_Request(b"{}", content_type=content_type)) == (
        415,
        f"Content-Type must be application/json, got {shown}",
    )


async def test_a_slow_body_times_out():
    slow = _Request(b"[1, 2, 3, 4]", chunk=1, delay=0.02)
    assert await _read_error(slow, timeout=0.05) == (408, "body not received within 0.05 s")
    assert await read_json(_Request(b"[1, 2, 3, 4]", chunk=1, delay=0.001), timeout=5) == [1, 2, 3, 4]


async def test_the_body_is_parsed_with_the_depth_bound():
    assert await _read_error(_Request(b"[[[1]]]"), max_depth=2) == (400, "JSON nested deeper than 2 levels")
    assert await read_json(_Request(b"[[1]]"), max_depth=2) == [[1]]


def test_server_limits():
    assert SERVER_LIMITS == {
        "keepalive_timeout": REQUEST_DEADLINE_SECONDS,
        "max_line_size": 4096,
        "max_field_size": 4096,
        "max_headers": 32,
    }
    assert REQUEST_DEADLINE_SECONDS == 10.0


# ---- input files ---------------------------------------------------------------------------------------------------
def _yaml_errors(text: str) -> list[str]:
    with pytest.raises(InputError) as err:
        parse_yaml_documents(text, "f.yaml")
    assert err.value.source == "f.yaml"
    return err.value.errors


def test_an_input_error_reads_as_one_line_or_an_indented_list():
    assert str(InputError("f.yaml", ["a: bad"])) == "f.yaml: a: bad"
    assert str(InputError("f.yaml", ["a: bad", "b: worse"])) == "f.yaml:\n  a: bad\n  b: worse"
    errors = ["x"]
    err = InputError("f", errors)
    errors.append("y")
    assert err.errors == ["x"]  # a copy


def test_yaml_nesting_at_and_past_the_depth_bound():
    depth = BoundedLoader.max_depth
    assert depth == MAX_DEPTH == 32
    assert parse_yaml_documents("[" * depth + "]" * depth, "f") == [eval("[" * depth + "]" * depth)]  # noqa: S307
    assert _yaml_errors("[" * (depth + 1) + "]" * (depth + 1)) == [
        f"line 1, column {depth + 1}: not valid YAML: nested deeper than {depth} levels"
    ]


def test_alias_expansion_at_and_past_the_node_bound(monkeypatch):
    monkeypatch.setattr(BoundedLoader, "max_nodes", 9)
    text = "a: &x [1, 2]\nb: *x\n"  # mapping 1 + key a 1 + list 3 + key b 1 + the alias, counted again 3
    assert parse_yaml_documents(text, "f") == [{"a": [1, 2], "b": [1, 2]}]
    assert parse_yaml_documents("[1, 2, 3, 4, 5, 6, 7, 8]", "f") == [[1, 2, 3, 4, 5, 6, 7, 8]]
    (error,) = _yaml_errors("[1, 2, 3, 4, 5, 6, 7, 8, 9]")
    assert error == "line 1, column 1: not valid YAML: expands to more than 9 values (aliases included)"
    monkeypatch.setattr(BoundedLoader, "max_nodes", 8)
    assert _yaml_errors(text)[0].endswith("not valid YAML: expands to more than 8 values (aliases included)")
    # each document is weighed on its own
    assert len(parse_yaml_documents("[1, 2, 3, 4, 5, 6, 7]\n---\n[1, 2, 3, 4, 5, 6, 7]\n", "f")) == 2


def test_duplicate_keys_are_named_with_the_first_line():
    assert _yaml_errors("a: 1\nb: 2\na: 3\n") == [
        "line 3, column 1: not valid YAML: duplicate key 'a' (first on line 1)"
    ]
    assert _yaml_errors("x:\n  k: 1\n  k: 2\n") == [
        "line 3, column 3: not valid YAML: duplicate key 'k' (first on line 2)"
    ]
    assert parse_yaml_documents("a: 1\nb: {a: 2}\n", "f") == [{"a": 1, "b": {"a": 2}}]  # another mapping's key
    assert parse_yaml_documents("base: &b {x: 1}\nc:\n  <<: *b\n  <<: *b\n", "f")[0]["c"] == {"x": 1}
    (unhashable,) = _yaml_errors("? [1]\n: x\n")
    assert unhashable.startswith("line 1, column 3: not valid YAML: while constructing a mapping: found unhashable key")


def test_yaml_problems_name_line_column_and_context():
    assert _yaml_errors("a: b: c\n") == ["line 1, column 5: not valid YAML: mapping values are not allowed here"]
    assert _yaml_errors("a: [1\n") == [
        "line 2, column 1: not valid YAML: while parsing a flow sequence: expected ',' or ']', but got '<stream end>'"
    ]
    assert _yaml_errors("a: 1\nb: \x01\n") == ["line 2: not valid YAML: character #x0001 is not allowed in YAML text"]
    assert _yaml_errors("\x7f") == ["line 1: not valid YAML: character #x007f is not allowed in YAML text"]


def test_empty_documents_are_skipped():
    assert parse_yaml_documents("", "f") == [] and parse_yaml_documents("---\n---\n", "f") == []
    assert parse_yaml_documents("---\nnull\n---\na: 1\n", "f") == [{"a": 1}]
    assert parse_yaml_documents("0\n---\n''\n", "f") == [0, ""]  # falsy values are documents


@pytest.mark.parametrize(
    "text, value",
    [("1e3", 1000.0), ("-1.5e-3", -0.0015), ("+2E+2", 200.0), ("1_0e1", 100.0), ("1.e2", 100.0)],
)
def test_yaml_12_exponent_numbers(text, value):
    assert parse_yaml_documents(f"a: {text}\n", "f") == [{"a": value}]


@pytest.mark.parametrize("text", ["1e", "e3", "1e3x", "x1e3", "1.5e", "'1e3'"])
def test_strings_that_only_look_like_exponent_numbers(text):
    (doc,) = parse_yaml_documents(f"a: {text}\n", "f")
    assert isinstance(doc["a"], str)


def test_read_text_at_and_past_the_size_bound(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_bytes(b"a" * 100)
    assert read_text(str(f), max_bytes=100) == "a" * 100
    with pytest.raises(InputError) as err:
        read_text(str(f), max_bytes=99)
    assert (err.value.source, err.value.errors) == (str(f), ["larger than 99 bytes"])
    assert MAX_BYTES == 1 << 20


def test_read_text_from_standard_input(monkeypatch):
    assert read_text("-", stdin=io.StringIO("a: é\n")) == "a: é\n"  # a text stream without a byte buffer
    assert read_text("-", stdin=io.TextIOWrapper(io.BytesIO(b"b: 1\n"))) == "b: 1\n"
    with pytest.raises(InputError) as err:
        read_text("-", stdin=io.StringIO("x" * 11), max_bytes=10)
    assert (err.value.source, err.value.errors) == ("<stdin>", ["larger than 10 bytes"])
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"c: 2\n")))
    assert read_text("-") == "c: 2\n"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"c: 2\n")))
    assert load_documents("-") == [{"c": 2}]


def test_non_utf8_text_names_the_line_byte_and_offset(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_bytes(b"a: 1\nb: 2\nc: \xe9\n")
    with pytest.raises(InputError) as err:
        read_text(str(f))
    assert err.value.errors == ["line 3: not UTF-8 text (byte 0xe9 at offset 13); save the file as UTF-8"]


def test_an_unreadable_file_names_the_reason(tmp_path):
    with pytest.raises(InputError) as err:
        read_text(str(tmp_path / "missing.yaml"))
    assert err.value.errors == ["cannot read file: No such file or directory"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "empty: expected one thing mapping"),
        ("a: 1\n---\nb: 2\n", "holds 2 YAML documents; expected one thing"),
        ("- 1\n", "(top level): expected a mapping (thing), got a list"),
        ("hello\n", "(top level): expected a mapping (thing), got a string"),
        ("3\n", "(top level): expected a mapping (thing), got a number"),
        ("1.5\n", "(top level): expected a mapping (thing), got a number"),
        ("true\n", "(top level): expected a mapping (thing), got a boolean"),
        ("2024-01-02\n", "(top level): expected a mapping (thing), got date"),
    ],
)
def test_a_single_mapping_file(tmp_path, text, message):
    f = tmp_path / "x.yaml"
    f.write_text(text)
    with pytest.raises(InputError) as err:
        load_single(str(f), what="thing")
    assert (err.value.source, err.value.errors) == (str(f), [message])


def test_a_single_mapping_file_is_returned(tmp_path):
    f = tmp_path / "x.yaml"
    f.write_text("---\na: 1\n---\n")
    assert load_single(str(f), what="thing") == {"a": 1}


def test_validation_errors_name_the_field_as_written():
    cfg_errors = _config_errors(
        CONFIG.replace("nccl: {profile: PCIe}", "nccl: {profile: PCIe}\ntopology: {interconnect: IB}")
    )
    assert cfg_errors == ["topology.interconnect: Input should be 'PCIe' or 'NVLink'"]
    text = CONFIG.replace("tensorParallelSize: 2}", "tensorParallelSize: 2, ranks: [0, x]}").replace(
        "name: demo\n", "name: demo\nsurprise: 1\n"
    )
    assert _config_errors(text) == [
        "draft.ranks[1]: Input should be a valid integer, unable to parse string as an integer",
        "surprise: unknown field",
    ]
    assert _config_errors(CONFIG.replace("name: demo\n", "")) == ["name: required"]
    budget = CONFIG.replace("nccl: {profile: PCIe}", "nccl: {profile: PCIe}\ncostProbe: {budgetMs: .nan}")
    assert _config_errors(budget) == ["costProbe.budgetMs: must be a finite number, got nan"]


@pytest.mark.parametrize(
    "loc, path",
    [
        ((), "(top level)"),
        (("spec", "draft", "ranks", 0), "spec.draft.ranks[0]"),
        ((0, "a"), "[0].a"),
        (("topology", "interconnect"), "topology.interconnect"),  # starts like the marker "int"
        (("strength",), "strength"),
        (("floaty", "list_of"), "floaty.list_of"),
        (("b", "constrained-int"), "b"),
        (("c", "list[int]"), "c"),
        (("c", "dict[str,int]"), "c"),
        (("d", "bool"), "d"),
        (("d", "float"), "d"),
        (("d", "str"), "d"),
        (("e", "int"), "e"),
        (("x", "function-after[check(), int]"), "x"),
        (("tensor_parallel_size",), "tensorParallelSize"),
    ],
)
def test_field_paths(loc, path):
    assert format_loc(loc, {"tensor_parallel_size": "tensorParallelSize"}) == path


def test_messages_of_a_whole_object_rule():
    class Ranked(BaseModel):
        a: int = Field(ge=1)
        b: float = Field(lt=2.0)
        c: int | None = None

        @model_validator(mode="after")
        def _check(self):
            if self.a == 7:
                raise ValueError("a: seven is refused")
            if self.a == 8:
                raise ValueError("eight is refused")
            if self.a == 9:
                raise AssertionError("nine is refused")  # pydantic says "Assertion failed, nine is refused"
            return self

    def lines(**data):
        with pytest.raises(ValidationError) as err:
            Ranked(**data)
        return format_validation_error(err.value)

    assert lines(a=0, b=1) == ["a: Input should be greater than or equal to 1, got 0"]
    assert lines(a=1, b=2.0) == ["b: Input should be less than 2, got 2.0"]
    assert lines(a=1, b=math.inf) == ["b: must be a finite number, got inf"]
    assert lines(a=7, b=1) == ["a: seven is refused"]  # the rule's message already names its field
    assert lines(a=8, b=1) == ["(top level): eight is refused"]
    assert lines(a=9, b=1) == ["(top level): nine is refused"]
    assert lines(a=1, b=1, c="x") == ["c: Input should be a valid integer, unable to parse string as an integer"]
    assert lines(a=0, b=3) == [
        "a: Input should be greater than or equal to 1, got 0",
        "b: Input should be less than 2, got 3",
    ]


# ---- scenarios -----------------------------------------------------------------------------------------------------
def _scenario(**changes) -> dict:
    data = {
        "name": "box",
        "cost": {
            "verify": {"base": 10.0, "perToken": 0.5},
            "draftStep": {"base": 2.0, "perSeq": 0.1},
            "draftExtend": {"base": 3.0, "perToken": 0.2},
            "overhead": 0.4,
            "broadcast": 0.05,
        },
        "phases": [
            {"name": "a", "seconds": 10, "batchSize": 4, "acceptance": [0.8]},
            {"name": "b", "seconds": 5, "batchSize": {8: 0.25, 2: 0.75}, "acceptance": [0.7, 0.5]},
        ],
    }
    for path, value in changes.items():
        *parents, leaf = path.split(".")
        node = data
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        if value is None:
            node.pop(leaf)
        else:
            node[leaf] = value
    return data


def _scenario_errors(data: dict) -> list[str]:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(data, "s.yaml")
    assert err.value.source == "s.yaml"
    return err.value.errors


def test_a_scenario_s_timeline():
    s = parse_scenario(_scenario())
    assert s.duration == 15.0
    assert [s.phase_at(t)[0] for t in (0.0, 9.999, 10.0, 14.999, 15.0, 1e9)] == [0, 0, 1, 1, 1, 1]
    assert s.phase_at(10.0)[1].name == "b" and s.phase_at(-1.0)[0] == 0
    assert s.phases[0].batch_distribution() == ([4], [1.0]) and s.phases[0].mean_batch() == 4.0
    assert s.phases[1].batch_distribution() == ([2, 8], [0.75, 0.25])
    assert s.phases[1].mean_batch() == pytest.approx(2 * 0.75 + 8 * 0.25)


def test_a_scenario_s_cycle_cost_and_shortest_step():
    s = parse_scenario(_scenario())
    assert s.cycle_cost() == CycleCost(10.0, 0.5, 2.0, 0.1, 3.0, 0.2, 0.4, 0.05)
    assert s.plain_step_ms() == pytest.approx(10.0 + 0.5 + 0.4)
    assert s.max_simulated_seconds() == pytest.approx(MAX_CYCLES * 10.9 / 1000.0)


def test_a_scenario_s_host_work_prices_speculative_cycles_only():
    s = parse_scenario(_scenario(**{"cost.host": {"base": 1.5, "perStep": 0.25}}))
    plain = parse_scenario(_scenario())
    cost = s.cycle_cost()
    assert (cost.host_base, cost.host_per_step) == (1.5, 0.25)
    assert cost.cycle_ms(0, 4) == plain.cycle_cost().cycle_ms(0, 4)  # a plain cycle's host work is its overhead
    assert cost.cycle_ms(3, 4) == pytest.approx(plain.cycle_cost().cycle_ms(3, 4) + 1.5 + 3 * 0.25)
    assert s.plain_step_ms() == plain.plain_step_ms()
    assert plain.cycle_cost().host_base == plain.cycle_cost().host_per_step == 0.0  # absent: stage replays alone


@pytest.mark.parametrize(
    "host, error",
    [
        ({"base": 0.0, "perStep": 0.0}, None),
        ({"base": MAX_COST_MS, "perStep": MAX_COST_MS}, None),
        ({"base": -0.001}, "cost.host.base"),
        ({"perStep": -0.001}, "cost.host.perStep"),
        ({"base": MAX_COST_MS * 1.01}, "cost.host.base"),
        ({"per_step": 1.0, "bogus": 1}, "cost.host.bogus"),
    ],
)
def test_a_scenario_s_host_work_bounds(host, error):
    data = _scenario(**{"cost.host": host})
    if error is None:
        parse_scenario(data)
    else:
        assert any(e.startswith(error) for e in _scenario_errors(data)), _scenario_errors(data)


@pytest.mark.parametrize("batch", [1, 2, MAX_BATCH, 3.0])
def test_batch_sizes_at_and_inside_their_bounds(batch):
    assert parse_scenario(_scenario(**{"phases.0.batchSize": batch})).phases[0].batch_size == int(batch)


@pytest.mark.parametrize(
    "batch, message",
    [
        (0, "batch sizes must be whole numbers within 1..1000000, got 0"),
        (MAX_BATCH + 1, "batch sizes must be whole numbers within 1..1000000, got 1e+06"),
        (2.5, "batch sizes must be whole numbers within 1..1000000, got 2.5"),
        (1e30, "batch sizes must be whole numbers within 1..1000000, got 1e+30"),
    ],
)
def test_batch_sizes_just_outside_their_bounds(batch, message):
    (error,) = _scenario_errors(_scenario(**{"phases.0.batchSize": batch}))
    assert error == f"phases[0].batchSize: {message}"


def test_batch_size_distributions():
    ok = parse_scenario(_scenario(**{"phases.0.batchSize": {1: 0.5, 3: 0.5 - 1e-7}}))
    assert ok.phases[0].batch_distribution()[0] == [1, 3]
    assert parse_scenario(_scenario(**{"phases.0.batchSize": {5: 1.0}})).phases[0].mean_batch() == 5.0
    cases = {
        "{}": ({}, "a batch-size distribution needs at least one entry, e.g. {1: 0.5, 8: 0.5}"),
        "sum": ({1: 0.5, 3: 0.4}, "probabilities must sum to 1, got 0.9"),
        "over": ({1: 0.5, 3: 0.5 + 1e-5}, "probabilities must sum to 1, got 1.00001"),
        "p>1": ({1: 1.5, 3: -0.5}, "probability of batch 1 must be within 0..1, got 1.5"),
        "p<0": ({1: 1.0, 3: -0.1}, "probability of batch 3 must be within 0..1, got -0.1"),
        "b=0": ({0: 1.0}, "batch sizes must be whole numbers within 1..1000000, got 0"),
    }
    for name, (dist, message) in cases.items():
        assert _scenario_errors(_scenario(**{"phases.0.batchSize": dist})) == [f"phases[0].batchSize: {message}"], name


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_acceptance_at_its_bounds(rate):
    assert parse_scenario(_scenario(**{"phases.0.acceptance": [rate, 0.5]})).phases[0].acceptance == [rate, 0.5]


@pytest.mark.parametrize("rate", [-0.01, 1.01])
def test_acceptance_just_outside_its_bounds(rate):
    assert _scenario_errors(_scenario(**{"phases.0.acceptance": [0.5, rate]})) == [
        f"phases[0].acceptance: acceptance[1] must be within 0..1 (a conditional probability), got {rate}"
    ]


def test_buckets_start_at_1_and_increase():
    assert parse_scenario(_scenario(buckets=[1])).buckets == [1]
    assert parse_scenario(_scenario()).buckets == list(DEFAULT_BUCKETS)
    for bad in ([2, 8], [1, 8, 8], [1, 8, 4]):
        assert _scenario_errors(_scenario(buckets=bad)) == [
            f"buckets: bucket lower bounds must be strictly increasing and start at 1, got {bad}"
        ]


def test_a_decode_step_takes_time_and_the_timeline_is_bounded():
    free = _scenario(**{"cost.verify": {"base": 0.0, "perToken": 0.0}, "cost.overhead": 0.0})
    assert _scenario_errors(free) == [
        # a whole-scenario rule that names its field keeps that name
        "cost: verify.base + verify.perToken + overhead must be > 0 ms (a decode step takes time)"
    ]
    tiny = {"cost.verify": {"base": 0.0, "perToken": 0.0}, "cost.overhead": 0.001}  # 1 us per decode step
    at = {"phases": [{"seconds": MAX_CYCLES * 0.001 / 1000.0, "batchSize": 1, "acceptance": [0.5]}]}
    assert parse_scenario(_scenario(**tiny, **at)).duration == pytest.approx(100.0)
    over = {"phases": [{"seconds": 100.001, "batchSize": 1, "acceptance": [0.5]}]}
    (error,) = _scenario_errors(_scenario(**tiny, **over))
    assert error.startswith("phases: 100.001 simulated seconds at 0.001 ms per decode step is about 1e+08 cycles")


DRAFT_TP = {
    "current": 8,
    "targetTp": 8,
    "computeMs": {"base": 1.6, "perSeq": 0.08},
    "collectivesPerStep": 4,
    "allReduceUs": {2: 250.0, 4: 450.0, 8: 500.0},
    "broadcastUs": 50.0,
}
# the cost block of a box whose draft runs on all 8 ranks: 1.6/8 + 4 * 0.5 ms per forward, 0.08/8 per sequence
TP8_COST = {
    "verify": {"base": 10.0, "perToken": 0.5},
    "draftStep": {"base": 2.2, "perSeq": 0.01},
    "draftExtend": {"base": 2.2, "perToken": 0.01},
    "overhead": 0.4,
    "broadcast": 0.0,
}


def test_draft_tp_costs_per_size():
    s = parse_scenario(_scenario(cost=TP8_COST, draftTp=DRAFT_TP))
    assert allowed_draft_tps(s) == [1, 2, 4, 8]
    one = cost_for_draft_tp(s, 1)  # no collectives, the whole compute, a broadcast
    assert (one.draft_base, one.draft_per_seq, one.extend_base, one.extend_per_token) == pytest.approx(
        (1.6, 0.08, 1.6, 0.08)
    )
    assert one.broadcast == pytest.approx(0.05) and (one.verify_base, one.overhead) == (10.0, 0.4)
    two = cost_for_draft_tp(s, 2)
    assert two.draft_base == pytest.approx(0.8 + 4 * 0.25) and two.extend_base == pytest.approx(0.8 + 1.0)
    assert two.draft_per_seq == pytest.approx(0.04) and two.broadcast == pytest.approx(0.05)
    eight = cost_for_draft_tp(s, 8)
    assert eight.draft_base == pytest.approx(2.2) and eight.broadcast == 0.0  # the draft is on every target rank
    hosted = parse_scenario(_scenario(cost={**TP8_COST, "host": {"base": 0.7, "perStep": 0.1}}, draftTp=DRAFT_TP))
    for n in (1, 2, 8):  # the target's scheduler does the host work, whatever the draft's TP
        c = cost_for_draft_tp(hosted, n)
        assert (c.host_base, c.host_per_step) == (0.7, 0.1)
        assert c.cycle_ms(3, 4) == pytest.approx(cost_for_draft_tp(s, n).cycle_ms(3, 4) + 0.7 + 0.3)
    extend = {**DRAFT_TP, "current": 1, "extendMs": {"base": 3.0, "perToken": 0.3}}
    cost1 = {**TP8_COST, "draftStep": {"base": 1.6, "perSeq": 0.08}, "draftExtend": {"base": 3.0, "perToken": 0.3}}
    s1 = parse_scenario(_scenario(cost={**cost1, "broadcast": 0.05}, draftTp=extend))
    assert cost_for_draft_tp(s1, 4).extend_base == pytest.approx(0.75 + 1.8)
    assert cost_for_draft_tp(s1, 4).extend_per_token == pytest.approx(0.075)


def test_draft_tp_sizes_a_scenario_does_not_describe():
    s = parse_scenario(
        _scenario(cost=TP8_COST, draftTp={**DRAFT_TP, "targetTp": 8, "allReduceUs": {8: 500.0, 16: 1.0}})
    )
    assert allowed_draft_tps(s) == [1, 8]  # a size above the target's TP is not offered
    with pytest.raises(ValueError) as err:
        cost_for_draft_tp(s, 4)
    assert str(err.value) == "draft TP 4 is not described by scenario 'box'; allowed: [1, 8]"
    plain = parse_scenario(_scenario())
    assert allowed_draft_tps(plain) == []
    with pytest.raises(ValueError) as err:
        cost_for_draft_tp(plain, 1)
    assert str(err.value) == "scenario 'box' has no draftTp block; cannot derive a cost for draft TP 1"


def test_the_cost_block_must_agree_with_draft_tp_within_two_percent():
    near = {**TP8_COST, "draftStep": {"base": 2.2 * 1.019, "perSeq": 0.01}}
    assert parse_scenario(_scenario(cost=near, draftTp=DRAFT_TP)).cost.draft_step.base == pytest.approx(2.2418)
    far = {**TP8_COST, "draftStep": {"base": 2.2 * 1.021, "perSeq": 0.01}}
    (error,) = _scenario_errors(_scenario(cost=far, draftTp=DRAFT_TP))
    assert error == (
        "(top level): cost.draftStep.base = 2.2462 disagrees with draftTp (current 8) which gives 2.2; "
        "make them agree within 2 %"
    )
    for field, cost in (
        ("cost.draftStep.perSeq", {**TP8_COST, "draftStep": {"base": 2.2, "perSeq": 0.02}}),
        ("cost.draftExtend.base", {**TP8_COST, "draftExtend": {"base": 2.5, "perToken": 0.01}}),
        ("cost.draftExtend.perToken", {**TP8_COST, "draftExtend": {"base": 2.2, "perToken": 0.02}}),
        ("cost.broadcast", {**TP8_COST, "broadcast": 0.05}),
    ):
        (error,) = _scenario_errors(_scenario(cost=cost, draftTp=DRAFT_TP))
        assert error.startswith(f"(top level): {field} = "), error


def test_draft_tp_block_bounds():
    def errors(**block):
        return _scenario_errors(_scenario(cost=TP8_COST, draftTp={**DRAFT_TP, **block}))

    assert errors(current=9) == ["draftTp: current (9) must be <= targetTp (8)"]
    assert errors(allReduceUs={2: 250.0, 4: 450.0}) == ["draftTp: allReduceUs needs an entry for current draft TP 8"]
    assert errors(allReduceUs={1: 5.0, 8: 500.0}) == ["draftTp.allReduceUs: keys are draft TP sizes >= 2, got 1"]
    assert errors(allReduceUs={2: -1.0, 8: 500.0}) == [
        "draftTp.allReduceUs: latency for TP 2 must be within 0..6e+07 microseconds, got -1.0"
    ]
    assert errors(allReduceUs={2: 6e7 + 1, 8: 500.0}) == [
        "draftTp.allReduceUs: latency for TP 2 must be within 0..6e+07 microseconds, got 60000001.0"
    ]
    tp1 = {**TP8_COST, "draftStep": {"base": 1.6, "perSeq": 0.08}, "draftExtend": {"base": 1.6, "perToken": 0.08}}
    ok = parse_scenario(
        _scenario(cost={**tp1, "broadcast": 0.05}, draftTp={**DRAFT_TP, "current": 1, "allReduceUs": {}})
    )
    assert ok.draft_tp.current == 1 and allowed_draft_tps(ok) == [1]
    edge = {**DRAFT_TP, "allReduceUs": {2: 0.0, 4: 6e7, 8: 500.0}}
    assert parse_scenario(_scenario(cost=TP8_COST, draftTp=edge)).draft_tp.all_reduce_us[4] == 6e7


def test_a_scenario_file_is_read_through_the_bounded_reader(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(yaml.safe_dump(_scenario()))
    assert load_scenario(f) == parse_scenario(_scenario())
    f.write_text("a: 1\na: 2\n")
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    assert err.value.source == str(f) and "duplicate key 'a'" in err.value.errors[0]
    f.write_text(yaml.safe_dump(_scenario(name="")))
    with pytest.raises(ScenarioError) as err:
        load_scenario(str(f))
    assert err.value.errors == ["name: String should have at least 1 character"]
    with pytest.raises(ScenarioError) as err:
        load_scenario(tmp_path / "missing.yaml")
    assert err.value.errors == ["cannot read file: No such file or directory"]
    assert _scenario_errors([1]) == ["(top level): expected a mapping (scenario), got a list"]


# ---- model sources -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "model, source, local",
    [
        ("/models/GLM-5", PathSource("/models/GLM-5"), "/models/GLM-5"),
        ("relative/dir", PathSource("relative/dir"), "relative/dir"),
        ("pvc://models", PvcSource("models", ""), "/mnt/pvc/models"),
        ("pvc://models/", PvcSource("models", ""), "/mnt/pvc/models"),
        ("pvc://models/glm/v5/", PvcSource("models", "glm/v5"), "/mnt/pvc/models/glm/v5"),
        ("pvc://a.b-c/x_y.z", PvcSource("a.b-c", "x_y.z"), "/mnt/pvc/a.b-c/x_y.z"),
    ],
)
def test_paths_and_claims(model, source, local):
    parsed = parse_model(model)
    assert parsed == source and parsed.local_path() == local
    if isinstance(parsed, PvcSource):
        assert parsed.mount_path() == f"/mnt/pvc/{parsed.claim}"


@pytest.mark.parametrize(
    "model, repo, revision",
    [
        ("hf://org/name", "org/name", "main"),
        ("hf://Org-1/Name_2.5", "Org-1/Name_2.5", "main"),
        ("hf://org/name@v1.0", "org/name", "v1.0"),
        ("hf://org/name@refs/pr/12", "org/name", "refs/pr/12"),
        ("hf://org/name@0123abcd", "org/name", "0123abcd"),
    ],
)
def test_hub_repositories(model, repo, revision):
    source = parse_model(model)
    assert source == HubSource(repo, revision) and source.uri == f"hf://{repo}@{revision}"


@pytest.mark.parametrize(
    "model",
    ["pvc://", "pvc://Models/x", "pvc://models/../etc", "pvc://models/.hidden", "pvc://-models/x", "pvc://models//x"],
)
def test_claims_that_are_refused(model):
    with pytest.raises(ModelSourceError) as err:
        parse_model(model, "spec.target.model")
    assert str(err.value) == (
        f"spec.target.model: {model!r} is not pvc://CLAIM/PATH (CLAIM a PersistentVolumeClaim name, PATH segments of "
        "letters, digits, '-', '_' and '.', none starting with '.')"
    )


@pytest.mark.parametrize(
    "model", ["hf://", "hf://name", "hf://org/name/extra", "hf://org/name@", "hf://org/name@../x", "hf://.org/name"]
)
def test_hub_ids_that_are_refused(model):
    with pytest.raises(ModelSourceError) as err:
        parse_model(model, "draft.model")
    assert str(err.value) == (
        f"draft.model: {model!r} is not hf://ORG/NAME[@REVISION] (a Hugging Face Hub repository id, optionally a "
        "branch, tag or commit after '@')"
    )


@pytest.mark.parametrize("model", ["s3://bucket/model", "HTTPS://x/y", "git+ssh://host/repo"])
def test_other_schemes_are_refused(model):
    with pytest.raises(ModelSourceError) as err:
        parse_model(model)
    assert str(err.value) == (
        f"model: {model!r} has a scheme that is not supported; use a path, pvc://CLAIM/PATH or hf://ORG/NAME[@REVISION]"
    )


def test_a_colon_without_a_scheme_is_a_path():
    assert parse_model("/models/a://b") == PathSource("/models/a://b")
    assert parse_model("1x://y") == PathSource("1x://y")  # a scheme starts with a letter


def test_sources_are_listed_once_in_order():
    models = ("hf://o/b", "pvc://c2/x", "hf://o/a@main", "hf://o/a", "/p", "pvc://c1/y", "pvc://c2/z", "hf://o/a@v2")
    assert hub_sources(*models) == [HubSource("o/b", "main"), HubSource("o/a", "main"), HubSource("o/a", "v2")]
    assert pvc_claims(*models) == ["c2", "c1"]
    assert hub_sources() == [] and pvc_claims("/p") == []


# ---- the commands' shared conventions ------------------------------------------------------------------------------
@pytest.mark.parametrize("text, value", [("0.001", 0.001), ("5", 5.0), ("10", 10.0)])
def test_float_flags_inside_and_at_the_upper_bound(text, value):
    assert float_in(0.0, 10.0)(text) == value


@pytest.mark.parametrize(
    "text, message",
    [
        ("0", "must be > 0 (a finite number), got 0"),
        ("-1", "must be > 0 (a finite number), got -1"),
        ("nan", "must be > 0 (a finite number), got nan"),
        ("inf", "must be > 0 (a finite number), got inf"),
        ("10.5", "must be at most 10, got 10.5"),
        ("x", "expected a number, got 'x'"),
    ],
)
def test_float_flags_just_outside_their_bounds(text, message):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        float_in(0.0, 10.0)(text)
    assert str(err.value) == message


@pytest.mark.parametrize("text, value", [("1", 1), ("2", 2), ("7", 7)])
def test_integer_flags_at_and_inside_their_bounds(text, value):
    assert int_in(1, 7)(text) == value


@pytest.mark.parametrize(
    "text, message",
    [
        ("0", "must be within 1..7, got 0"),
        ("8", "must be within 1..7, got 8"),
        ("2.5", "expected an integer, got '2.5'"),
    ],
)
def test_integer_flags_just_outside_their_bounds(text, message):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        int_in(1, 7)(text)
    assert str(err.value) == message


def test_argparse_names_the_expected_type_in_its_errors(capsys):
    parser = argparse.ArgumentParser(prog="p")
    parser.add_argument("--n", type=int_in(1, 7))
    parser.add_argument("--f", type=positive_float)
    with pytest.raises(SystemExit):
        parser.parse_args(["--n", "x"])
    assert "argument --n: expected an integer, got 'x'" in capsys.readouterr().err
    assert parser.parse_args(["--f", "1e9"]).f == 1e9
    with pytest.raises(SystemExit):
        parser.parse_args(["--f", "1.1e9"])
    assert "argument --f: must be at most 1e+09, got 1.1e9" in capsys.readouterr().err
    assert int_in(1, 7).__name__ == "integer 1..7" and float_in(0, 1).__name__ == "number"


@pytest.mark.parametrize("port", [0, 1, 65535])
def test_port_flags_at_their_bounds(port):
    check_port("--port", port)


@pytest.mark.parametrize("port", [-1, 65536])
def test_port_flags_just_outside_their_bounds(port):
    with pytest.raises(UsageError) as err:
        check_port("--port", port)
    assert str(err.value) == f"--port must be within 0..65535, got {port}" and err.value.exit_code == 2


def test_a_port_that_cannot_be_bound_is_named_by_its_flag():
    import socket

    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(UsageError) as err:
            check_can_listen("--metrics-port", "127.0.0.1", port)
    assert str(err.value).startswith(f"--metrics-port: cannot listen on 127.0.0.1:{port}: Address already in use")
    check_can_listen("--metrics-port", "127.0.0.1", 0)


@pytest.mark.parametrize(
    "outcome, code, stderr",
    [
        (lambda: None, 0, ""),
        (lambda: 3, 3, ""),
        (lambda: _raise(CommandFailed("no tuning seen")), 1, "error: no tuning seen\n"),
        (lambda: _raise(UsageError("bad --flag")), 2, "error: bad --flag\n"),
        (lambda: _raise(InputError("f.yaml", ["a: bad"])), 2, "error: f.yaml: a: bad\n"),
        (lambda: _raise(KeyboardInterrupt()), 130, ""),
        (lambda: _raise(BrokenPipeError()), 0, ""),
    ],
)
def test_exit_codes(outcome, code, stderr, capsys):
    assert run_command(lambda args: outcome(), argparse.Namespace()) == code
    assert capsys.readouterr().err == stderr


def _raise(error: BaseException):
    raise error


def test_other_errors_keep_their_traceback():
    with pytest.raises(ZeroDivisionError):
        run_command(lambda args: 1 // 0, argparse.Namespace())
    assert (EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED) == (0, 1, 2, 130)


def test_the_subcommand_is_the_first_word_that_is_not_an_option():
    assert command_in(["-v", "--x", "render", "-f", "a"]) == "render"
    assert command_in(["--help"]) is None and command_in([]) is None


def test_only_the_wanted_command_module_is_imported():
    seen = []
    commands = {"one": ("json", "first"), "two": ("specdecode_runtime.not_a_module", "second")}
    parser = argparse.ArgumentParser(prog="p")
    sub = parser.add_subparsers(dest="cmd")
    add_lazy_commands(sub, commands, "one", lambda module, name, help: seen.append((module.__name__, name, help)))
    assert seen == [("json", "one", "first")]  # "two" was declared without importing its (missing) module
    assert list(sub.choices) == ["two"] and sub.choices["two"].add_help is False  # "one" is register's to add
    seen.clear()
    parser = argparse.ArgumentParser(prog="p")
    commands = {"one": ("json", "first"), "two": ("os", "second")}
    add_lazy_commands(parser.add_subparsers(), commands, "*", lambda m, n, h: seen.append(n))
    assert seen == ["one", "two"]


def test_version_and_completion(capsys, monkeypatch):
    parser = argparse.ArgumentParser(prog="specdecode")
    add_version(parser)
    sub = parser.add_subparsers()
    completion = add_completion_command(sub, "specdecode")
    with pytest.raises(SystemExit) as done:
        parser.parse_args(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out == f"specdecode {package_version()}\n"
    assert "show the program's version number and exit" in parser.format_help()
    args = parser.parse_args(["completion", "bash"])
    assert args.func(args) == 0 and "specdecode" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        parser.parse_args(["completion", "cmd.exe"])
    assert "invalid choice: 'cmd.exe'" in capsys.readouterr().err
    assert 'eval "$(specdecode completion bash)"' in completion.description
    monkeypatch.delenv("_ARGCOMPLETE", raising=False)
    assert not completing()
    autocomplete(parser)  # not asked: nothing happens
    monkeypatch.setenv("_ARGCOMPLETE", "1")
    assert completing()


def test_the_version_is_the_installed_distribution_s_or_the_source_tree_s(monkeypatch):
    from importlib import metadata

    import specdecode_runtime

    def missing(name):
        assert name == "specdecode-operator"
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", missing)
    assert package_version() == specdecode_runtime.__version__
    monkeypatch.setattr(metadata, "version", lambda name: "9.9.9" if name == "specdecode-operator" else "?")
    assert package_version() == "9.9.9"


# ---- edges the first mutation runs found untested ------------------------------------------------------------------
def test_line_fit_over_a_narrow_spread_of_x():
    assert _line([1, 2], [3.0, 5.0]) == pytest.approx((1.0, 2.0))  # sum of squares 0.5: still a line


def test_a_bucket_probed_at_tier_1_without_a_draft_cost_is_not_fitted():
    assert fit_bucket([_pt("verify", 0, 5.0), _pt("verify", 1, 8.0)]) is None


def test_each_argument_follows_the_model_path_with_a_quantized_target():
    cfg = config(
        **{
            "target: {model: /t, tensorParallelSize: 8}": "target: {model: /t, tensorParallelSize: 8, quantization: fp8}"
        }
    )
    assert sglang_cli_args(cfg)[:6] == ["--model-path", "/t", "--tp-size", "8", "--quantization", "fp8"]


def test_references_expand_from_the_process_environment_by_default(monkeypatch):
    monkeypatch.setenv("SPECDECODE_NODE_RANK", "2")
    assert expand_env_refs(["--node-rank", "$(SPECDECODE_NODE_RANK)"]) == ["--node-rank", "2"]


@pytest.mark.parametrize(
    "raw, message",
    [
        (b"[" + b"X" * 9 + b"]", "body is not valid JSON"),  # letters outside strings are no brackets
        (b"[X" + b"[" * 8, "JSON nested deeper than 8 levels"),
        (b"[" * 8 + b"]" + b"[[", "JSON nested deeper than 8 levels"),  # a close gives back one level, not more
    ],
)
def test_only_brackets_outside_strings_count_towards_the_depth(raw, message):
    assert _body_error(raw)[1].startswith(message)


async def test_a_body_that_reaches_the_bound_exactly_is_checked_for_one_byte_more():
    body = b"[" + b"1," * 20 + b"1]"  # 43 bytes, read 4 at a time: 20 bytes land exactly on the bound
    request = _Request(body, length=None, chunk=4)
    assert await _read_error(request, max_bytes=20) == (413, "body larger than 20 bytes")


def test_registering_a_metric(monkeypatch):
    from specdecode_runtime.contract import metric_names

    monkeypatch.setattr(metric_names, "METRICS", {})
    assert metric_names._metric("x_seconds", "summary", ("bucket",), "seconds", "help text") == "x_seconds"
    assert metric_names.METRICS == {"x_seconds": Metric("x_seconds", "summary", ("bucket",), "seconds", "help text")}


@pytest.mark.parametrize("text", ["1e3", "1E3", "-2.5e-3", "+1_0E+2"])
def test_the_yaml_12_exponent_pattern(text):
    from specdecode_runtime.contract.input_files import _yaml12_float

    assert _yaml12_float().match(text)
    assert not _yaml12_float().match("x" + text)


def test_depth_is_given_back_level_by_level():
    depth = BoundedLoader.max_depth
    # the deepest branch comes after a finished sibling two levels down: 2 + (depth - 1) = depth + 1 levels
    text = "[[[], " + "[" * (depth - 1) + "]" * (depth - 1) + "]]"
    assert _yaml_errors(text)[0].endswith(f"not valid YAML: nested deeper than {depth} levels")
    ok = "[[[], " + "[" * (depth - 2) + "]" * (depth - 2) + "]]"
    assert parse_yaml_documents(ok, "f")


def test_a_merge_key_does_not_end_the_duplicate_check():
    (error,) = _yaml_errors("b: &b {x: 1}\nc:\n  <<: *b\n  y: 1\n  y: 2\n")
    assert error.endswith("duplicate key 'y' (first on line 4)")


def test_past_the_recursion_limit_the_depth_bound_still_answers(monkeypatch):
    monkeypatch.setattr(BoundedLoader, "max_depth", 10**6)
    assert _yaml_errors("[" * 5000 + "]" * 5000) == ["not valid YAML: nested deeper than 1000000 levels"]


def test_documents_from_standard_input_and_a_bounded_file(tmp_path):
    with pytest.raises(InputError) as err:
        load_documents("-", stdin=io.StringIO("a: [\n"))
    assert err.value.source == "<stdin>"
    assert load_documents("-", stdin=io.StringIO("a: 1\n")) == [{"a": 1}]
    f = tmp_path / "x.yaml"
    f.write_text("a: 1234567\n")
    for read in (lambda: load_documents(str(f), max_bytes=5), lambda: load_single(str(f), what="x", max_bytes=5)):
        with pytest.raises(InputError) as err:
            read()
        assert err.value.errors == ["larger than 5 bytes"]


def test_a_marker_inside_a_path_is_skipped_not_the_rest():
    assert format_loc(("c", "list[int]", 1)) == "c[1]"


def test_validation_errors_use_the_given_field_names_in_declaration_order():
    class Late(BaseModel):
        zeta: int
        alpha: int

    with pytest.raises(ValidationError) as err:
        Late(zeta="x", alpha="y")
    assert format_validation_error(err.value, {"zeta": "zetaField"}) == [  # not alphabetical: as declared
        "zetaField: Input should be a valid integer, unable to parse string as an integer",
        "alpha: Input should be a valid integer, unable to parse string as an integer",
    ]


def test_profile_settings_default_to_one_node():
    assert "NCCL_IB_DISABLE" in {s.name for s in profile_settings("PCIe")}


def test_completion_scripts_differ_per_shell(capsys):
    sub = argparse.ArgumentParser(prog="specdecode").add_subparsers()
    completion = add_completion_command(sub, "specdecode")
    scripts = {}
    for shell in ("bash", "fish"):
        args = completion.parse_args([shell])
        assert args.func(args) == 0
        scripts[shell] = capsys.readouterr().out
    assert scripts["bash"] != scripts["fish"] and "complete --command specdecode" in scripts["fish"]
    assert "the shell to complete in" in completion.format_help()
    assert "print the shell completion script" in sub._choices_actions[0].help


def test_lazy_commands_keep_their_help():
    parser = argparse.ArgumentParser(prog="p")
    add_lazy_commands(parser.add_subparsers(), {"two": ("os", "the second command")}, None, lambda *a: None)
    assert "the second command" in parser.format_help()


def test_several_step_table_errors_read_as_one_line():
    with pytest.raises(StepTableError) as err:
        parse_step_table(_rows((1, 3), (8, 4)), candidates=[1])
    assert str(err.value) == (
        "table[0].steps: 3 is not a captured candidate; table[1].steps: 4 is not a captured candidate; "
        "allowed steps: [1]"
    )


def test_a_timeline_of_three_phases():
    data = _scenario()
    data["phases"].append({"name": "c", "seconds": 20, "batchSize": 1, "acceptance": [0.5]})
    s = parse_scenario(data)
    assert [s.phase_at(t)[0] for t in (9.0, 12.0, 15.0, 34.9)] == [0, 1, 2, 2]
    assert s.phase_at(35.0) == (2, s.phases[2]) and s.phase_at(1e9)[1].name == "c"


def test_scenario_errors_name_their_source(tmp_path):
    with pytest.raises(ScenarioError) as err:
        parse_scenario([1])
    assert err.value.source == "<scenario>"
    f = tmp_path / "s.yaml"
    f.write_text("")
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    assert (err.value.source, err.value.errors) == (str(f), ["empty: expected one scenario mapping"])
    f.write_text(yaml.safe_dump(_scenario(name="")))
    with pytest.raises(ScenarioError) as err:
        load_scenario(f)
    assert err.value.source == str(f)


def test_a_claim_path_keeps_its_own_letters():
    assert parse_model("pvc://models/X/") == PvcSource("models", "X")
    assert parse_model("pvc://models/dirXX") == PvcSource("models", "dirXX")


class _Recording(io.BytesIO):
    def __init__(self, data: bytes) -> None:
        super().__init__(data)
        self.asked: list[int | None] = []

    def read(self, n=-1):
        self.asked.append(n)
        return super().read(n)


class _Stdin:
    """Standard input as a process sees it: text with a byte buffer underneath."""

    def __init__(self, data: bytes) -> None:
        self.buffer = _Recording(data)

    def read(self, n=-1):
        raise AssertionError("the text layer is not read when there is a byte buffer")


def test_standard_input_is_read_as_bytes_up_to_one_past_the_bound():
    stdin = _Stdin(b"a" * 10)
    assert read_text("-", stdin=stdin, max_bytes=10) == "a" * 10 and stdin.buffer.asked == [11]
    with pytest.raises(InputError) as err:
        read_text("-", stdin=_Stdin(b"\xff"))
    assert err.value.errors == ["line 1: not UTF-8 text (byte 0xff at offset 0); save the file as UTF-8"]

    class Text(io.StringIO):
        asked: list = []

        def read(self, n=-1):
            self.asked.append(n)
            return super().read(n)

    text = Text("b" * 5)
    assert read_text("-", stdin=text, max_bytes=7) == "bbbbb" and text.asked == [8]


def test_an_unreadable_file_is_named():
    with pytest.raises(InputError) as err:
        read_text("/nonexistent/dir/x.yaml")
    assert err.value.source == "/nonexistent/dir/x.yaml"


def test_yaml_problems_without_a_problem_mark_or_a_problem():
    assert _yaml_problem(yaml.YAMLError("boom")) == "not valid YAML: boom"
    mark = yaml.Mark("f", 0, 4, 2, None, None)
    context_only = yaml.MarkedYAMLError("while parsing a block", mark, "bad indent", None)
    assert _yaml_problem(context_only) == "line 5, column 3: not valid YAML: while parsing a block: bad indent"
    duplicate = yaml.MarkedYAMLError("while constructing a mapping", None, "duplicate key 'a'", mark)
    assert _yaml_problem(duplicate) == "line 5, column 3: not valid YAML: duplicate key 'a'"
