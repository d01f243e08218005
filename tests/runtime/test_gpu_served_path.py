"""The GPU test bed's CPU-checkable parts: the cost probe's graph mode (plan, fit, replay selection), the
self-test's SGLang pass-through flags, the dead-child watch and the served-cycle bookkeeping.

What needs a GPU (graph replays timed with CUDA events, the served cycle of a real engine) runs in
``bench/gpu/campaigns/tp1.sh``; these tests hold the arithmetic and the selection that run there."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest
from runtime_testlib import sglang_or_skip

from specdecode_runtime import cost_probe
from specdecode_runtime.contract.goodput import CycleCost
from specdecode_runtime.cost_probe import ProbePoint


# ---- plan and fit in graph mode --------------------------------------------------------------------------------
def test_graph_plan_times_each_tiers_whole_draft_phase_and_no_single_step():
    pts = cost_probe.plan_points([1, 3, 5], buckets=(1, 8), mode=cost_probe.GRAPH)
    stages = {(st, k) for st, k, label, b in pts if label == "1-7"}
    assert {("draft", 1), ("draft", 3), ("draft", 5)} <= stages
    assert not any(st == "draft_step" for st, *_ in pts)
    assert {("verify", 0), ("verify", 1), ("verify", 3), ("verify", 5)} <= stages
    eager = cost_probe.plan_points([1, 3, 5], buckets=(1, 8))
    assert any(st == "draft_step" for st, *_ in eager) and not any(st == "draft" for st, *_ in eager)


def _served_cycle(steps: int, batch: int) -> dict[str, float]:
    """Per-stage milliseconds of a served cycle in SGLang's EAGLE: tier k drafts k-1 forwards of 0.6 ms (its
    first proposal comes from the previous extend), verify and extend grow with the tokens verified."""
    return {
        "draft": 0.6 * (steps - 1),
        "verify": 4.0 + 0.01 * batch * (steps + 1),
        "draft_extend": 0.7 + 0.002 * batch * (steps + 1),
        "overhead": 0.3,
    }


def test_graph_fit_reproduces_every_tiers_cycle_from_its_stages():
    """A tier whose draft phase is a - b + b*k (tier 1 drafts no forward) must still be priced right at every k:
    the intercept belongs to the cycle (it is folded into the extend's base), not dropped by a clamp at zero."""
    batch = 8
    pts = [ProbePoint("overhead", 0, "8-31", batch, 0.3e-3)]
    for k in (1, 3, 5):
        c = _served_cycle(k, batch)
        pts += [
            ProbePoint("draft", k, "8-31", batch, c["draft"] / 1000),
            ProbePoint("verify", k, "8-31", batch, c["verify"] / 1000),
            ProbePoint("draft_extend", k, "8-31", batch, c["draft_extend"] / 1000),
        ]
    cost = cost_probe.fit_bucket(pts)
    assert cost is not None
    assert cost.draft_base == pytest.approx(0.6, rel=1e-6)
    for k in (1, 3, 5):
        assert cost.cycle_ms(k, batch) == pytest.approx(sum(_served_cycle(k, batch).values()), rel=1e-6)


def test_graph_fit_without_any_draft_point_refuses_free_drafting():
    pts = [ProbePoint("verify", k, "1", 1, 0.004) for k in (0, 1, 3)]
    assert cost_probe.fit_bucket(pts) is None


def test_time_stage_uses_the_given_timer_for_every_sample():
    seen = []
    sec = cost_probe.time_stage(
        lambda: seen.append("run"), timer=lambda run: (run(), 0.002)[1], min_samples=5, budget_s=0.0, warmup=3
    )
    assert sec == pytest.approx(0.002)
    assert len(seen) == 3 + 5


# ---- replay selection over SGLang's own ShapeKey -----------------------------------------------------------------
class _Graph:
    def __init__(self) -> None:
        self.replays = 0


class _Backend:
    """SGLang's FullCudaGraphBackend shape: ``_graphs`` keyed by ShapeKey, ``replay(key, fb)``."""

    def __init__(self, sizes, **variant) -> None:
        sglang_or_skip()
        from sglang.srt.model_executor.runner.shape_key import ShapeKey

        self._graphs = {ShapeKey(size=s): _Graph() for s in sizes}
        self._graphs.update({ShapeKey(size=s, **variant): _Graph() for s in sizes} if variant else {})
        self.replayed: list = []

    def replay(self, key, static_forward_batch):
        self.replayed.append(key)
        self._graphs[key].replays += 1


class _Runner:
    def __init__(self, sizes, ragged: bool = False) -> None:
        self.backend = _Backend(sizes, variant_label="lora")
        self.ragged_verify_mode = ragged


def _stage_runner():
    from specdecode_runtime.sglang_patch.cost_runner import SGLangStageRunner

    return SGLangStageRunner.__new__(SGLangStageRunner)  # selection needs no engine


@pytest.mark.engine  # SGLang's ShapeKey
def test_replay_picks_the_smallest_captured_size_holding_the_batch():
    from specdecode_runtime.sglang_patch.cost_runner import StageUnavailable, _graph_sizes

    r = _Runner([1, 4, 8, 16, 32])
    assert _graph_sizes(r) == [1, 4, 8, 16, 32]  # the LoRA variant is not what a plain decode replays
    runner = _stage_runner()
    for batch, size in ((1, 1), (3, 4), (8, 8), (9, 16), (32, 32)):
        runner._replay(r, "verify", batch)
        assert r.backend.replayed[-1].size == size and r.backend.replayed[-1].variant_label is None
    with pytest.raises(StageUnavailable, match="no verify graph holds batch 33"):
        runner._replay(r, "verify", 33)


@pytest.mark.engine  # SGLang's ShapeKey
def test_ragged_verify_graphs_are_keyed_by_tokens():
    r = _Runner([4, 16, 64], ragged=True)
    _stage_runner()._replay(r, "verify", 3, tokens_per_req=4)  # 12 tokens -> the 16-token graph
    assert r.backend.replayed[-1].size == 16


# ---- selftest flags -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "item, needle",
    [
        ("cuda-graph-max-bs=32", "did you mean --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill"),
        ("tp-size=2", "set by the self-test"),
        ("--speculative-num-steps=4", "set by the self-test"),  # KEY may keep its dashes (--sglang-arg=--KEY=V)
        ("tensor-parallel-size=2", "set by the self-test"),  # another spelling of --tp-size
        ("model=/x", "set by the self-test"),
        ("disable-cuda-graph=1", "is a switch and takes no value"),
        ("attention-backend", "takes a value"),
        ("=x", "expected KEY[=VALUE]"),
    ],
)
@pytest.mark.engine  # SGLang's argument parser
def test_sglang_arg_refusals_name_the_flag(item, needle, capsys):
    from specdecode_runtime.selftest import main

    sglang_or_skip()
    assert main([f"--sglang-arg={item}"]) == 2
    assert needle in capsys.readouterr().err


@pytest.mark.engine  # SGLang's argument parser
def test_sglang_args_reach_every_engine_in_sglang_spelling():
    import argparse

    from specdecode_runtime.selftest import options
    from specdecode_runtime.selftest.runner import device_args

    sglang_or_skip()
    ap = argparse.ArgumentParser()
    options.add_arguments(ap)
    opts = options.from_namespace(
        ap.parse_args(
            [
                "--device",
                "cuda",
                "--tp",
                "1",
                "--layouts",
                "nospec,sharded",
                "--sglang-arg",
                "attention-backend=triton",
                "--sglang-arg=--cuda-graph-bs-decode=1,8,32",
                "--sglang-arg",
                "disable-prefill-cuda-graph",
                "--load-format",
                "dummy",
                "--measure-cycles",
                "32,1,8",
            ]
        )
    )
    args = device_args(opts)
    assert args[args.index("--attention-backend") + 1] == "triton" and "--disable-prefill-cuda-graph" in args
    i = args.index("--cuda-graph-bs-decode")
    assert args[i + 1 : i + 4] == ["1", "8", "32"]
    assert args[args.index("--load-format") + 1] == "dummy"
    assert opts.measure_batches == (1, 8, 32)
    from sglang.srt.server_args import prepare_server_args

    sa = prepare_server_args(["--model-path", "/m", *args])  # SGLang's own parser accepts what the self-test passes
    assert sa.attention_backend == "triton" and sa.load_format == "dummy"


def test_production_shapes_need_dummy_weights(tmp_path, capsys):
    from specdecode_runtime.selftest import main

    cfg = tmp_path / "shape.yaml"
    cfg.write_text("vocab_size: 128256\nhidden_size: 4096\nnum_attention_heads: 32\nnum_key_value_heads: 8\n")
    assert main(["--model-config", str(cfg), "--tp", "1", "--layouts", "nospec,sharded"]) == 2
    assert "vocab_size must be at most 65536 for a tiny model" in capsys.readouterr().err


def test_dummy_shape_writes_configs_only(tmp_path):
    from specdecode_runtime.cpu.tiny_models import make_tiny_models

    shape = {
        "vocab_size": 100000,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "intermediate_size": 512,
    }
    models = make_tiny_models(tmp_path, shape, weights=False)
    for path in (models.target, models.eagle3):
        assert (Path(path) / "config.json").exists() and (Path(path) / "tokenizer.json").exists()
        assert not list(Path(path).glob("*.safetensors"))


# ---- a dead child is reported at once -------------------------------------------------------------------------------
def _die(code: int) -> None:
    time.sleep(0.3)
    raise SystemExit(code)


def test_a_child_that_dies_is_reported_with_its_exit_code_and_last_log_lines(tmp_path):
    from specdecode_runtime.selftest.children import POLL_S, ChildWatch

    (tmp_path / "rank0.log").write_text("".join(f"line {i}\n" for i in range(40)) + "ModuleNotFoundError: cutlass\n")
    reports: list[str] = []
    ctx = multiprocessing.get_context("spawn")
    watch = ChildWatch(tmp_path, reports.append).start()  # as the self-test does: the watch first, then the engine
    child = ctx.Process(target=_die, args=(3,), name="scheduler_TP0")
    child.start()
    # Timed from the child's death, not from its start: a spawned child first imports this module in a fresh
    # interpreter, which takes seconds on a busy machine and is not what the watch is answerable for.
    died = reported = None
    deadline = time.monotonic() + 120.0
    while reported is None and time.monotonic() < deadline:
        if died is None and child.exitcode is not None:
            died = time.monotonic()
        if reports:
            reported = time.monotonic()
        time.sleep(0.01)
    watch.stop()
    assert reports and died is not None, "the child never died or was never reported"
    limit = 10 * POLL_S + 1.0  # ten polls, 1 s slack for a busy machine
    assert reported - died <= limit, f"reported {reported - died:.2f} s after the child died (limit {limit} s)"
    assert "scheduler_TP0" in reports[0] and "exited with code 3" in reports[0]
    assert "ModuleNotFoundError: cutlass" in reports[0] and "line 39" in reports[0] and "line 10\n" not in reports[0]


def test_a_child_that_dies_before_the_first_poll_is_still_reported(tmp_path):
    """A scheduler that fails on an import dies well within one poll period of the watch's start."""
    from specdecode_runtime.selftest.children import ChildWatch

    reports: list[str] = []
    watch = ChildWatch(tmp_path, reports.append, poll_s=2.0).start()  # first poll 2 s after start; death at ~0.3 s
    child = multiprocessing.get_context("fork").Process(target=_die, args=(5,), name="scheduler_TP1")
    child.start()
    deadline = time.monotonic() + 2.0 + 5.0  # one poll period, 5 s slack for a busy machine
    while not reports and time.monotonic() < deadline:
        time.sleep(0.05)
    watch.stop()
    assert reports and "scheduler_TP1" in reports[0] and "exited with code 5" in reports[0]


def test_children_alive_before_the_watch_started_are_not_reported(tmp_path):
    """A previous engine's children, still shutting down when the next layout starts, are not this engine's."""
    from specdecode_runtime.selftest.children import ChildWatch

    old = multiprocessing.get_context("fork").Process(target=_die, args=(9,), name="previous_engine")
    old.start()
    reports: list[str] = []
    watch = ChildWatch(tmp_path, reports.append, poll_s=0.05).start()
    while old.exitcode is None:
        time.sleep(0.02)
    time.sleep(0.3)  # six polls after its death
    watch.stop()
    assert reports == []


def test_a_stopped_watch_stays_quiet(tmp_path):
    from specdecode_runtime.selftest.children import ChildWatch

    reports: list[str] = []
    ctx = multiprocessing.get_context("spawn")
    child = ctx.Process(target=_die, args=(0,))
    child.start()
    watch = ChildWatch(tmp_path, reports.append, poll_s=0.05).start()
    time.sleep(0.2)
    watch.stop()
    child.join()
    time.sleep(0.2)
    assert reports == []


# ---- served-cycle bookkeeping ---------------------------------------------------------------------------------------
def test_served_cycle_is_the_difference_of_two_generations_over_their_verify_cycles(tmp_path):
    """A fake engine on a fake clock: each generation pays a fixed 30 ms (prefill, scheduling), then 2 ms per verify
    cycle that emits 2 tokens per request. The measurement must find 2 ms per cycle, whatever the fixed part."""
    from specdecode_runtime.selftest import served

    now = [100.0]

    def generate(ids, n):
        cycles = (n + 1) // 2
        now[0] += 0.030 + 0.002 * cycles
        return [{"output_ids": [0] * n, "meta_info": {"spec_verify_ct": cycles}} for _ in ids]

    profile = {
        "1": {
            "verify_base": 1.0,
            "verify_per_token": 0.0,
            "draft_base": 0.25,
            "draft_per_seq": 0.0,
            "extend_base": 0.2,
            "extend_per_token": 0.0,
            "overhead": 0.05,
            "broadcast": 0.0,
        }
    }
    rows = served.measure(
        generate,
        tiers=[3],
        batches=(1,),
        measure_tokens=200,
        vocab=64,
        speculative=True,
        initial_steps=3,
        control=None,
        rank_dir=tmp_path,
        profile=profile,
        clock=lambda: now[0],
    )
    (row,) = rows
    assert row["cycles"] == 100 and row["accept_length"] == 2.0
    assert row["served_cycle_ms"] == pytest.approx(2.0, rel=1e-6)
    assert row["tokens_per_s"] == pytest.approx(200 / 0.2, rel=1e-6)
    expected = CycleCost(**profile["1"]).cycle_ms(3, 1)
    assert row["predicted_cycle_ms"] == pytest.approx(expected, rel=1e-3)
    assert row["probe_over_served"] == pytest.approx(expected / 2.0, rel=1e-3)
    assert not (tmp_path / "quiet").exists()  # per-cycle records resume after the measurement


def test_repeated_timings_report_their_median_and_keep_every_sample(tmp_path):
    """A host that slows down for one timing (3x here) moves one sample, not the row."""
    from specdecode_runtime.selftest import served

    now, calls = [0.0], [0]
    per_cycle = [0.002, 0.006, 0.002]  # the second timing's host is 3x slower

    def generate(ids, n):
        calls[0] += 1
        rep = max(0, (calls[0] - 2) // 2)  # the warm-up, then two generations per repeat
        now[0] += 0.030 + per_cycle[min(rep, 2)] * n
        return [{"output_ids": [0] * n, "meta_info": {"spec_verify_ct": n}} for _ in ids]

    kw = dict(tiers=[0], batches=(1,), measure_tokens=100, vocab=64, speculative=False, initial_steps=None)
    (row,) = served.measure(
        generate, **kw, control=None, rank_dir=tmp_path, profile={}, clock=lambda: now[0], repeats=3
    )
    assert row["served_cycle_ms"] == pytest.approx(2.0, rel=1e-6)
    assert row["served_cycle_ms_samples"] == pytest.approx([2.0, 2.0, 6.0], rel=1e-6)


def test_a_bucket_is_probed_at_a_captured_graph_size_inside_it():
    """Serving pads a batch to the next captured size: probing between two sizes would time the larger graph."""
    bounds = (1, 2, 8, 32, 64)
    sizes = (1, 8, 32)
    assert [cost_probe.probe_batch(bounds, i, 32, sizes) for i in range(5)] == [1, 4, 8, 32, 32]
    dense = (1, 2, 4, 8, 12, 16, 24, 32)
    assert [cost_probe.probe_batch(bounds, i, 32, dense) for i in range(5)] == [1, 4, 16, 32, 32]
    assert [cost_probe.probe_batch(bounds, i, 32) for i in range(5)] == [1, 4, 16, 32, 32]  # no graphs: the middle
