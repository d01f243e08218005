"""What ``parse_metrics`` makes of one pod's exposition text: every series of the contract lands in its field, the
start-up cost probe is read (or skipped) point by point, and bad samples are named in ``problems`` or ``error``
instead of raising."""

from __future__ import annotations

import pytest

from specdecode_operator.tuner.snapshot import (
    ACCEPTED,
    ATTEMPTS,
    CANDIDATES,
    COST,
    CYCLES,
    DRAFT_STEPS,
    NUM_STEPS,
    PHASE_COUNT,
    PHASE_SUM,
    REQUESTS,
    TOKENS,
    PodSnapshot,
    down,
    parse_metrics,
)


def text(*lines: str) -> str:
    return "\n".join(lines) + "\n"


def cost_line(stage: str = "verify", steps: str = "0", bucket: str = "1", batch: str = "1", value: str = "0.01") -> str:
    return f'{COST}{{stage="{stage}",steps="{steps}",bucket="{bucket}",batch="{batch}"}} {value}'


TOKENS_5 = f"{TOKENS} 5"


def test_every_contract_series_lands_in_its_bucket_field():
    snap = parse_metrics(
        text(
            f'{CYCLES}{{bucket="2-7"}} 40',
            f'{REQUESTS}{{bucket="2-7"}} 120',
            f'{DRAFT_STEPS}{{bucket="2-7"}} 80',
            f'{ATTEMPTS}{{bucket="2-7",position="1"}} 120',
            f'{ATTEMPTS}{{bucket="2-7",position="2"}} 90',
            f'{ACCEPTED}{{bucket="2-7",position="1"}} 90',
            f'{ACCEPTED}{{bucket="2-7",position="2"}} 60',
            f'{PHASE_SUM}{{bucket="2-7",phase="verify"}} 0.4',
            f'{PHASE_COUNT}{{bucket="2-7",phase="verify"}} 40',
            f'{PHASE_SUM}{{bucket="2-7"}} 0.25',
            f'{NUM_STEPS}{{bucket="2-7"}} 2.0',
            f'{NUM_STEPS}{{bucket="1"}} 3',
            f"{TOKENS} 270",
        ),
        "pod-a",
        12.5,
    )
    assert (snap.pod, snap.time, snap.ok, snap.error, snap.problems, snap.simulated) == (
        "pod-a",
        12.5,
        True,
        None,
        [],
        False,
    )
    assert snap.tokens_total == 270
    b = snap.buckets["2-7"]
    assert (b.cycles, b.requests, b.draft_steps) == (40, 120, 80)
    assert b.attempts == {1: 120, 2: 90} and b.accepted == {1: 90, 2: 60}
    # a phase sample without its label is kept under the empty phase, not dropped and not an error
    assert b.phase_sum == {"verify": 0.4, "": 0.25} and b.phase_count == {"verify": 40}
    assert b.num_steps == 2 and isinstance(b.num_steps, int)
    # a bucket that only publishes its step gauge is still a bucket, with no counts
    only_gauge = snap.buckets["1"]
    assert only_gauge.num_steps == 3 and only_gauge.cycles == 0 and only_gauge.attempts == {}


def test_foreign_series_are_ignored_and_bucketless_contract_samples_add_no_bucket():
    snap = parse_metrics(
        text(
            'process_cpu_seconds_total{bucket="1"} 9',
            'vllm_verify_cycles_total{bucket="1"} 9',
            f"{CYCLES} 7",  # a bucketed series without its bucket label
            TOKENS_5,
        ),
        "p",
        1.0,
    )
    assert snap.ok and snap.buckets == {} and snap.tokens_total == 5


@pytest.mark.parametrize(
    "lines, ok",
    [
        ((TOKENS_5,), True),  # tokens alone: the pod answered with the contract
        ((f'{CYCLES}{{bucket="1"}} 0',), True),  # a bucket counter alone, even at 0
        ((f'{CANDIDATES}{{steps="3"}} 1',), False),  # candidates alone say nothing of traffic
        ((cost_line(),), False),  # the start-up probe alone is not the counters
        ((f"{CYCLES} 3",), False),  # no bucket label: nothing read
        ((f"{TOKENS} NaN",), False),  # the only sample is unusable
    ],
)
def test_a_response_counts_as_the_contract_only_with_counters(lines, ok):
    snap = parse_metrics(text(*lines), "p", 1.0)
    assert snap.ok is ok
    assert snap.error == (None if ok else "no specdecode_* metrics in the response")


def test_unparseable_text_names_the_parser_error():
    snap = parse_metrics("this is { not prometheus\n", "p", 1.0)
    assert not snap.ok and snap.error.startswith("unparseable metrics: ")
    assert len(snap.error) > len("unparseable metrics: ")
    assert snap.buckets == {} and snap.tokens_total is None


def test_nan_and_infinite_samples_are_problems_with_name_and_sorted_labels():
    snap = parse_metrics(
        text(
            f'{CYCLES}{{simulated="true",bucket="1"}} NaN',
            f'{REQUESTS}{{bucket="1"}} +Inf',
            f"{TOKENS} -Inf",
            f'{DRAFT_STEPS}{{bucket="1"}} 4',
        ),
        "p",
        1.0,
    )
    assert snap.problems == [
        f'{CYCLES}{{bucket="1",simulated="true"}} is nan',
        f'{REQUESTS}{{bucket="1"}} is inf',
        f"{TOKENS}{{}} is -inf",
    ]
    # the bad samples leave their fields untouched; the good one is read
    b = snap.buckets["1"]
    assert b.cycles == 0 and b.requests == 0 and b.draft_steps == 4
    assert snap.tokens_total is None and snap.ok


def test_positions_without_an_integer_label_are_problems():
    snap = parse_metrics(
        text(
            f'{ATTEMPTS}{{bucket="1",position="x"}} 3',
            f'{ACCEPTED}{{bucket="1"}} 2',
            f'{ACCEPTED}{{bucket="1",position="1"}} 1',
            TOKENS_5,
        ),
        "p",
        1.0,
    )
    assert snap.problems == [
        f'{ATTEMPTS}{{bucket="1",position="x"}} has no integer position',
        f'{ACCEPTED}{{bucket="1"}} has no integer position',
    ]
    assert snap.buckets["1"].attempts == {} and snap.buckets["1"].accepted == {1: 1}


def test_candidates_are_the_captured_tiers_sorted_once_each():
    snap = parse_metrics(
        text(
            f'{CANDIDATES}{{steps="5"}} 1',
            f'{CANDIDATES}{{steps="0"}} 1',
            f'{CANDIDATES}{{steps="2",replica="b"}} 1',
            f'{CANDIDATES}{{steps="2",replica="a"}} 1',
            f'{CANDIDATES}{{steps="3"}} 0',  # published at 0: not captured
            f'{CANDIDATES}{{steps="4"}} 0.5',
            f'{CANDIDATES}{{steps="many"}} 1',
            f"{CANDIDATES} 1",
            TOKENS_5,
        ),
        "p",
        1.0,
    )
    assert snap.candidates == [0, 2, 4, 5]
    assert snap.problems == [
        f'{CANDIDATES}{{steps="many"}} has no integer steps',
        f"{CANDIDATES}{{}} has no integer steps",
    ]


def test_simulated_only_when_a_contract_sample_says_true():
    assert parse_metrics(text(f'{TOKENS}{{simulated="true"}} 1'), "p", 1.0).simulated
    assert not parse_metrics(text(f'{TOKENS}{{simulated="false"}} 1'), "p", 1.0).simulated
    assert not parse_metrics(text('other_total{simulated="true"} 1', TOKENS_5), "p", 1.0).simulated
    # a cost point carries the label too
    sim_cost = f'{COST}{{stage="verify",steps="0",bucket="1",batch="1",simulated="true"}} 0.01'
    assert parse_metrics(text(sim_cost, TOKENS_5), "p", 1.0).simulated


def test_cost_points_are_read_one_by_one_and_bad_ones_dropped_silently():
    snap = parse_metrics(
        text(
            cost_line("verify", "0", "1", "1", "0.0105"),
            cost_line("draft_step", "2", "2-7", "4", "0"),  # a zero time is a measurement
            cost_line("verify", "1", "1", "1", "-0.001"),  # negative: dropped
            cost_line("verify", "2", "1", "1", "NaN"),
            cost_line("verify", "3", "1", "1", "+Inf"),
            cost_line("verify", "x", "1", "1", "0.02"),  # no integer steps
            cost_line("verify", "4", "1", "b", "0.02"),  # no integer batch
            f'{COST}{{steps="1",bucket="1",batch="1"}} 0.02',  # no stage
            TOKENS_5,
        ),
        "p",
        1.0,
    )
    assert snap.costs == {("verify", 0, "1", 1): 0.0105, ("draft_step", 2, "2-7", 4): 0.0}
    assert snap.problems == [] and snap.ok and snap.buckets == {}


def test_costs_false_skips_the_probe_and_nothing_else():
    body = text(cost_line(), f'{CYCLES}{{bucket="1"}} 4', TOKENS_5)
    assert parse_metrics(body, "p", 1.0).costs == {("verify", 0, "1", 1): 0.01}
    skipped = parse_metrics(body, "p", 1.0, costs=False)
    assert skipped.costs == {} and skipped.ok
    assert skipped.buckets["1"].cycles == 4 and skipped.tokens_total == 5
    # the filter drops whole lines: a malformed cost line no longer reaches the parser
    broken = text(f"{COST}{{stage=", TOKENS_5)
    assert not parse_metrics(broken, "p", 1.0).ok
    assert parse_metrics(broken, "p", 1.0, costs=False).ok


def test_down_is_a_snapshot_that_says_why():
    snap = down("pod-b", 3.0, "GET http://10.0.0.2:30000/metrics failed: timeout")
    assert snap == PodSnapshot(pod="pod-b", time=3.0, error="GET http://10.0.0.2:30000/metrics failed: timeout")
    assert not snap.ok and snap.buckets == {} and snap.tokens_total is None
    assert PodSnapshot("p", 1.0).ok


def test_values_are_kept_as_exported():
    snap = parse_metrics(text(f'{CYCLES}{{bucket="1"}} 1e3', f"{TOKENS} 2.5e3"), "p", 1.0)
    assert snap.buckets["1"].cycles == 1000.0 and snap.tokens_total == 2500.0
