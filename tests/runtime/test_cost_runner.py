"""The SGLang stage runner of the start-up cost probe (``sglang_patch.cost_runner``) and its runtime.yaml switch.

The runner is driven here against an object exposing the ``EAGLEWorkerV2`` attributes it uses (tier states, the
capture-time override, the target's eager runner), to pin what it launches under which tier and that the running
tier is always restored; tests/sglang_e2e/test_cost_probe_cpu.py runs it inside real SGLang."""

from __future__ import annotations

import contextlib

import pytest
from runtime_testlib import RUNTIME_YAML  # noqa: F401  (puts runtime/ on sys.path)

from specdecode_runtime import cost_probe
from specdecode_runtime.contract.config import RuntimeConfig
from specdecode_runtime.contract.input_files import InputError
from specdecode_runtime.engine import EngineRuntime, EngineSettings
from specdecode_runtime.sglang_patch.cost_runner import SGLangStageRunner, StageUnavailable


class _Eager:
    def __init__(self, worker):
        self.worker, self.runs, self.allocs = worker, [], []

    def _alloc_dummy_decode_buffers(self, bs, num_tokens_per_req):
        self.allocs.append((bs, num_tokens_per_req))
        return ("buffers", bs, num_tokens_per_req)

    @contextlib.contextmanager
    def model_context(self):
        yield

    def _dummy_run(self, batch_size, buffers):
        assert buffers[1] == batch_size
        mr = self.worker._target_worker.model_runner
        self.runs.append((self.worker.speculative_num_steps, batch_size, buffers[2], mr.attn_backend))


class _State:
    def __init__(self, k):
        self.speculative_num_steps, self.speculative_num_draft_tokens = k, k + 1
        self.target_attn_backend = f"verify-backend-{k}"


class _Controller:
    def __init__(self, worker, tiers):
        self.worker, self._states = worker, {k: _State(k) for k in tiers}

    def _activate(self, k):  # a full swap: the probe must not use it (it would log and record tier switches)
        raise AssertionError("the probe swapped the running tier")


class _Worker:
    """The attributes of EAGLEWorkerV2 the runner reads (topk 1: k + 1 verify tokens per request)."""

    def __init__(self, running=3, tiers=(1, 3, 5)):
        self.speculative_num_steps = running
        self.adaptive_controller = _Controller(self, tiers)
        runner = type("MR", (), {})()
        runner.device = "cpu"
        runner.attn_backend = f"verify-backend-{running}"
        runner.eager_runner = _Eager(self)
        runner.decode_num_tokens_per_req = lambda: self.speculative_num_steps + 1
        self._target_worker = type("TW", (), {"model_runner": runner})()
        self.overrides = []

    @contextlib.contextmanager
    def _override_worker_state(self, steps, num_draft_tokens):
        prev, self.speculative_num_steps = self.speculative_num_steps, steps
        self.overrides.append((steps, num_draft_tokens))
        try:
            yield
        finally:
            self.speculative_num_steps = prev


def test_verify_runs_the_target_dummy_forward_under_each_tier_and_restores_the_running_one():
    w = _Worker(running=3)
    run = SGLangStageRunner(w)
    for k, b in ((1, 4), (5, 4), (3, 2), (0, 8)):
        run("verify", k, b)
        assert w.speculative_num_steps == 3  # the configured tier serves the first batch
    # (tier active during the forward, batch, tokens per request, the target's attention backend)
    assert w._target_worker.model_runner.eager_runner.runs == [
        (1, 4, 2, "verify-backend-1"),
        (5, 4, 6, "verify-backend-5"),
        (3, 2, 4, "verify-backend-3"),
        (0, 8, 1, "verify-backend-3"),
    ]  # k = 0 is not a captured tier: the one-token verify of steps == 0
    assert w.overrides == [(1, 2), (5, 6), (0, 1)]  # SGLang's capture-time override, restored after each
    assert w._target_worker.model_runner.attn_backend == "verify-backend-3"


def test_buffers_are_allocated_once_per_shape():
    w = _Worker()
    run = SGLangStageRunner(w)
    for _ in range(3):
        run("verify", 1, 4)
    assert w._target_worker.model_runner.eager_runner.allocs == [(4, 2)]


def test_a_tier_error_still_restores_the_running_tier():
    w = _Worker(running=3)

    def boom(batch_size, buffers):
        raise RuntimeError("forward failed")

    w._target_worker.model_runner.eager_runner._dummy_run = boom
    with pytest.raises(RuntimeError, match="forward failed"):
        SGLangStageRunner(w)("verify", 5, 2)
    assert w.speculative_num_steps == 3
    assert w._target_worker.model_runner.attn_backend == "verify-backend-3"


def test_unknown_stages_and_a_broadcast_without_a_split_draft_are_unavailable():
    w = _Worker()
    with pytest.raises(StageUnavailable, match="bogus"):
        SGLangStageRunner(w)("bogus", 1, 1)
    with pytest.raises(StageUnavailable, match="every rank"):
        SGLangStageRunner(w)("broadcast", 1, 1)  # the draft runs on every rank: no proposal broadcast


@pytest.fixture
def split_state():
    """``process_state.split`` of a split draft (restored afterwards): placement over TP ranks 0, 1."""
    import types

    from specdecode_runtime.draft_group.placement import DraftPlacement
    from specdecode_runtime.sglang_patch import process_state

    def make(draft_ranks, rank):
        placement = DraftPlacement(target_ranks=(0, 1), draft_ranks=tuple(draft_ranks))
        groups = types.SimpleNamespace(
            placement=placement, in_draft=placement.contains(rank), is_leader=rank == placement.leader
        )
        process_state.split = types.SimpleNamespace(groups=groups, broadcaster=None, draft_layout=None)

    prev = process_state.split
    yield make
    process_state.split = prev


def test_draft_stages_do_nothing_outside_the_draft_group(split_state):
    split_state(draft_ranks=(0,), rank=1)
    w = _Worker()  # no draft worker at all: touching it would raise
    for stage in ("draft_step", "draft_extend"):
        assert SGLangStageRunner(w)(stage, 3, 2) is None


def test_draft_stages_are_left_out_on_every_rank_when_rank_0_does_not_draft(split_state):
    """TP rank 0 exports; a draft cost timed where no draft runs would read as free drafting."""
    for rank in (0, 1):
        split_state(draft_ranks=(1,), rank=rank)
        for stage in ("draft_step", "draft_extend"):
            with pytest.raises(StageUnavailable, match="rank 0"):
                SGLangStageRunner(_Worker())(stage, 3, 2)


def test_a_point_failing_on_one_rank_keeps_the_sampling_protocol_and_rank_0_decides():
    """The draft runs on S only, so a draft stage can raise on some ranks and not others. The failing rank keeps
    answering ``agree`` once per sample rank 0 takes and then once for the outcome, so the ranks' collectives stay
    paired; rank 0's outcome drops or keeps the point everywhere (a failed rank never keeps a point itself)."""

    def rank_with_tier(fails, rank0_says):
        asked, answers = [], iter(rank0_says)

        def agree(local):
            asked.append(local)
            return next(answers)

        def run_step(stage, k, b):
            if fails and stage == "draft_step":
                raise RuntimeError("draft forward failed")

        return cost_probe.run_probe(run_step, (1,), buckets=(1,), budget_s=0.0, agree=agree), asked

    n_points = len(cost_probe.plan_points((1,), (1,)))
    per_point = [True, True, True, False]  # rank 0 takes 3 samples, then stops
    ok_everywhere = (per_point + [False]) * n_points  # ... and reports no failure
    points, asked = rank_with_tier(True, ok_everywhere)
    assert len(asked) == len(ok_everywhere)  # the same number of collectives as rank 0, failure or not
    assert "draft_step" not in {p.stage for p in points}  # this rank failed: it never keeps the point
    dropped = [True, True, True, False, True]  # rank 0 failed at the draft step
    order = [st for st, *_ in cost_probe.plan_points((1,), (1,))]
    says = [a for st in order for a in (dropped if st == "draft_step" else per_point + [False])]
    points, asked = rank_with_tier(False, says)
    assert len(asked) == len(says)
    assert {p.stage for p in points} == set(order) - {"draft_step"}  # dropped here too, though it ran fine


def test_probe_batches_stop_at_the_largest_batch_the_engine_launches():
    w = _Worker()
    w._target_worker.model_runner.eager_runner._eager_max_bs = 8
    run = SGLangStageRunner(w)
    assert run.max_batch == 8
    points = cost_probe.run_probe(run, (1, 3, 5), buckets=(1, 2, 8, 32, 64), budget_s=0.0)
    assert max(p.batch for p in points) == 8
    assert {p.bucket for p in points} == {"1", "2-7", "8-31", "32-63", "64+"}


def test_runtime_yaml_switch_and_budget():
    on = EngineSettings.from_runtime_config(RuntimeConfig.from_yaml(RUNTIME_YAML))
    assert (on.cost_probe, on.cost_budget_ms) == (True, 2.0)
    off = EngineSettings.from_runtime_config(
        RuntimeConfig.from_yaml(RUNTIME_YAML + "costProbe: {enabled: false, budgetMs: 0.5}\n")
    )
    assert (off.cost_probe, off.cost_budget_ms) == (False, 0.5)
    assert "costProbe" not in RuntimeConfig.from_yaml(RUNTIME_YAML).to_yaml()  # existing files render unchanged


def test_bad_budget_names_the_field():
    with pytest.raises(InputError, match="costProbe.budgetMs"):
        RuntimeConfig.from_yaml(RUNTIME_YAML + "costProbe: {budgetMs: 0}\n")


def test_engine_start_times_with_the_runner_and_keeps_the_points():
    calls = []
    settings = EngineSettings(
        num_steps=3,
        captured=(1, 3),
        live=True,
        buckets=(1, 8),
        draft_tp=1,
        control_port=None,
        token_file=None,
        preflight=False,
        cost_budget_ms=0.1,
    )
    rt = EngineRuntime(settings, cost_runner=lambda st, k, b: calls.append((st, k, b)))
    rt.start(tp_rank=1, tp_size=1, serve=False)
    assert rt.cost_points and {p.stage for p in rt.cost_points} >= {"verify", "draft_step"}
    assert {("verify", 3, 3), ("verify", 3, 11)} <= set(calls)  # bucket middles: sqrt(1*7), sqrt(8*16)


def test_agree_sets_the_sample_count_on_every_rank():
    """A rank with a slower clock would stop sampling earlier than rank 0; with ``agree`` it follows rank 0's
    decision, so a stage holding collectives is launched the same number of times everywhere."""
    ticks = iter(range(10_000))
    slow_clock = lambda: next(ticks) * 0.01  # noqa: E731  every call 10 ms: the 2 ms budget is spent at once
    calls = []
    decisions = iter([True] * 7 + [False])  # rank 0 wants 7 samples
    cost_probe.time_stage(
        lambda: calls.append(1), clock=slow_clock, budget_s=0.002, warmup=1, agree=lambda more: next(decisions)
    )
    assert len(calls) == 1 + 7
    calls.clear()
    cost_probe.time_stage(lambda: calls.append(1), clock=iter(range(10_000)).__next__, budget_s=0.002, warmup=1)
    assert len(calls) == 1 + 3  # alone, the same clock stops at min_samples


def test_a_verify_only_probe_is_no_cycle_profile():
    """The SGLang runner measures verify only; fitting that as a CycleCost would price drafting at zero."""
    verify_only = [cost_probe.ProbePoint("verify", k, "1", 1, 0.001 * (1 + k)) for k in (0, 1, 3)]
    assert cost_probe.fit_profile(verify_only) == {}
    plain = [cost_probe.ProbePoint("verify", 0, "1", 1, 0.001)]  # a pod without speculation: plain decode only
    assert cost_probe.fit_profile(plain)["1"].verify_base == pytest.approx(1.0)
    full = verify_only + [cost_probe.ProbePoint("draft_step", 1, "1", 1, 0.0005)]
    assert cost_probe.fit_profile(full)["1"].draft_base == pytest.approx(0.5)


def test_a_worker_without_the_eagle_layout_serves_without_a_probe(monkeypatch):
    """The worker-ready hook builds the runner; a worker shape it does not know must not stop the pod."""
    import sys
    import types

    started = {}
    rt = EngineRuntime(
        EngineSettings(
            num_steps=3,
            captured=(1, 3),
            live=True,
            buckets=(1,),
            draft_tp=1,
            control_port=None,
            token_file=None,
            preflight=False,
        )
    )
    monkeypatch.setattr(rt, "start", lambda **kw: started.update(kw) or rt)
    fake_parallel = types.SimpleNamespace(
        tp_group=types.SimpleNamespace(cpu_group=None, ranks=[0], device_group=None), tp_rank=0, tp_size=1
    )
    monkeypatch.setitem(
        sys.modules, "sglang.srt.runtime_context", types.SimpleNamespace(get_parallel=lambda: fake_parallel)
    )
    rt.on_worker_ready(object())
    assert started["tp_rank"] == 0 and rt.cost_runner is None


def test_the_runner_drops_its_dummy_inputs_once_the_probe_is_done():
    w = _Worker()
    run = SGLangStageRunner(w)
    cost_probe.probe_at_start(run, (1, 3), (1, 8), sync=lambda: None, budget_s=0.0)
    assert w._target_worker.model_runner.eager_runner.allocs and not run._buffers


def test_the_runner_says_when_its_forwards_are_timed_on_the_host_cpu():
    """SGLang on --device cpu: the probe keeps the fastest call (cost_probe.probe_at_start); on a GPU it does not."""
    w = _Worker()
    assert SGLangStageRunner(w).host_timed is True
    w._target_worker.model_runner.device = "cuda"
    assert SGLangStageRunner(w).host_timed is False
