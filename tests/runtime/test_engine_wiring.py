"""Engine-side wiring: the Live launcher (adaptive config), metrics per verify, step control across ranks.

Tests that need sglang use the real wheel of the pin (CPU, torchvision stubbed); the multi-rank test runs the real
wrapper functions in 3 gloo processes against a fake worker exposing the attributes SGLang's code uses."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import textwrap
import time
import types
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from runtime_testlib import RUNTIME, RUNTIME_YAML, sglang_or_skip

from specdecode_runtime.contract.metric_names import NCCL_LATENCY
from specdecode_runtime.contract.versions import SGLANG_VERSION

LIVE_YAML = RUNTIME_YAML.replace("candidateSteps: [1, 3, 5]}", "candidateSteps: [1, 3, 5], autotune: {mode: Live}}")
TESTS = Path(__file__).resolve().parent


# ---------------------------------------------------------------------------------------------------- launcher
def test_live_plan_adds_adaptive_flags_and_config(runtime_yaml, tmp_path):
    from specdecode_runtime.launch import NEVER, format_plan, plan_launch

    plan = plan_launch(
        runtime_yaml(LIVE_YAML), environ={"SPECDECODE_STATE_DIR": str(tmp_path / "st")}, sglang_version=SGLANG_VERSION
    )
    assert plan.reasons == []
    path = str(tmp_path / "st" / "adaptive-config.json")
    assert plan.args[-3:] == ["--speculative-adaptive", "--speculative-adaptive-config", path]
    assert plan.args.count("--speculative-adaptive") == 1
    assert json.loads(plan.files[path]) == {
        "1": {"candidate_steps": [1, 3, 5], "warmup_batches": NEVER, "update_interval": 1}
    }
    assert plan.captured == [1, 3, 5]
    assert plan.env["PROMETHEUS_MULTIPROC_DIR"] == "/tmp/specdecode-metrics"
    text = format_plan(plan)
    assert f"# file written at launch (not by --dry-run): {path}" in text
    assert '"candidate_steps": [' in text and "[1, 3, 5] (autotune Live" in text
    assert not Path(path).exists()  # planning never writes


def test_off_and_rollout_capture_only_num_steps(runtime_yaml):
    from specdecode_runtime.launch import plan_launch

    for mode in ("Off", "Rollout"):
        yaml = RUNTIME_YAML.replace(
            "candidateSteps: [1, 3, 5]}", f"candidateSteps: [1, 3, 5], autotune: {{mode: '{mode}'}}}}"
        )
        plan = plan_launch(runtime_yaml(yaml), sglang_version=SGLANG_VERSION)
        assert plan.reasons == [] and plan.files == {} and plan.captured == [3]
        assert "--speculative-adaptive" not in plan.args


def test_dry_run_writes_nothing_and_is_truthful(runtime_yaml, tmp_path, monkeypatch, capsys):
    from specdecode_runtime import launch

    monkeypatch.setenv("SPECDECODE_STATE_DIR", str(tmp_path / "st"))
    import specdecode_runtime.sglang_patch as sp

    monkeypatch.setattr(sp, "installed_sglang_version", lambda: SGLANG_VERSION)
    assert launch.launch(runtime_yaml(LIVE_YAML), dry_run=True) == 0
    out = capsys.readouterr().out
    assert "--speculative-adaptive --speculative-adaptive-config" in out
    assert "adaptive-config.json" in out and not (tmp_path / "st").exists()


@pytest.mark.parametrize(
    "change, extra, needle",
    [
        ({"eagleTopK: 1": "eagleTopK: 2"}, [], "eagleTopK 1 only"),
        ({"numSteps: 3": "numSteps: 4"}, [], "numSteps 4 is not in candidateSteps"),
        ({}, ["--enable-two-batch-overlap"], "--enable-two-batch-overlap with autotune Live"),
        ({}, ["--enable-dp-attention"], "--enable-dp-attention with autotune Live"),
    ],
)
def test_live_refusals(runtime_yaml, change, extra, needle):
    from specdecode_runtime.launch import plan_launch

    plan = plan_launch(runtime_yaml(LIVE_YAML, **change), extra, sglang_version=SGLANG_VERSION)
    assert any(needle in r for r in plan.reasons), plan.reasons


def test_user_adaptive_flags_refused_in_every_mode(runtime_yaml):
    from specdecode_runtime.launch import plan_launch

    for yaml in (RUNTIME_YAML, LIVE_YAML):
        for extra in (["--speculative-adaptive"], ["--speculative-adaptive-config", "/x.json"]):
            plan = plan_launch(runtime_yaml(yaml), extra, sglang_version=SGLANG_VERSION)
            assert any("writes SGLang's adaptive config itself" in r for r in plan.reasons), (extra, plan.reasons)


def test_metrics_dir_is_created_and_only_db_files_removed(tmp_path):
    from specdecode_runtime.launch import LaunchPlan, prepare_metrics_dir, write_launch_files

    d = tmp_path / "m"
    assert prepare_metrics_dir(d) == 0 and d.is_dir()
    (d / "counter_12.db").write_text("x")
    (d / "gauge_mostrecent_12.db").write_text("x")
    (d / "keep.txt").write_text("x")
    (d / "sub").mkdir()
    assert prepare_metrics_dir(d) == 2
    assert sorted(p.name for p in d.iterdir()) == ["keep.txt", "sub"]
    cfg = tmp_path / "st" / "adaptive-config.json"
    write_launch_files(LaunchPlan("c", [], {"PROMETHEUS_MULTIPROC_DIR": str(d)}, False, None, files={str(cfg): "{}\n"}))
    assert cfg.read_text() == "{}\n"


# ---------------------------------------------------------------------------------------------------- engine (no sglang)
def test_cycle_clock_busy_intervals_never_overlap():
    from specdecode_runtime.sglang_patch.cycle_clock import CycleClock, CycleStamp

    clock = CycleClock()
    # first cycle: launched at 0, verify 0.001-0.003, returned 0.004, results on host at 0.020
    p1 = clock.phases(CycleStamp(0.0, 0.001, 0.003, 0.004, steps=3), done=0.020)
    assert p1 == pytest.approx({"draft": 0.001, "verify": 0.002, "draft_extend": 0.001, "other": 0.016})
    # overlapped second cycle: launched at 0.010 (before the first completed), done at 0.035
    p2 = clock.phases(CycleStamp(0.010, 0.011, 0.012, 0.013, steps=3), done=0.035)
    assert sum(p2.values()) == pytest.approx(0.015)  # 0.035 - max(0.010, 0.020): the interval since the last one
    assert p2["other"] == pytest.approx(0.012)
    # CPU-bound: launch longer than the busy interval -> phases sum to the launch time, other = 0
    p3 = clock.phases(CycleStamp(0.030, 0.040, 0.050, 0.060), done=0.061)
    assert p3["other"] == 0 and sum(p3.values()) == pytest.approx(0.030)
    assert clock.phases(None, done=0.07) == {}  # no stamp: nothing invented


def test_cycle_clock_reports_prefill_inside_a_cycle_apart_from_its_phases():
    """The overlap scheduler launches a prefill (and processes its result) between a decode cycle's launch and its
    result: that host time is the cycle's ``prefill``, not its ``other``; a prefill before the interval counts in
    no cycle, and one straddling the interval's start counts only from it."""
    from specdecode_runtime.sglang_patch.cycle_clock import CycleClock, CycleStamp

    clock = CycleClock()
    clock.prefill(-0.5, -0.4)  # before the first cycle's launch: outside every busy interval
    clock.prefill(0.005, 0.015)  # launched between the decode launch (0..0.004) and its results (0.030)
    p1 = clock.phases(CycleStamp(0.0, 0.001, 0.003, 0.004, steps=3), done=0.030)
    assert p1 == pytest.approx(
        {"draft": 0.001, "verify": 0.002, "draft_extend": 0.001, "other": 0.016, "prefill": 0.010}
    )
    clock.prefill(0.025, 0.040)  # straddles the next interval's start (0.030): 0.010 of it is inside
    p2 = clock.phases(CycleStamp(0.028, 0.029, 0.031, 0.032, steps=3), done=0.050)
    assert p2["prefill"] == pytest.approx(0.010) and p2["other"] == pytest.approx(0.020 - 0.004 - 0.010)
    assert sum(p2.values()) == pytest.approx(0.050 - 0.030)
    # a prefill longer than what the launch phases leave: prefill takes the rest, never a negative other
    clock.prefill(0.050, 0.100)
    p3 = clock.phases(CycleStamp(0.051, 0.052, 0.060, 0.061, steps=1), done=0.070)
    assert p3["other"] == 0 and p3["prefill"] == pytest.approx(0.070 - 0.051 - 0.010)
    # spans are consumed: the next cycle without prefill has none
    assert "prefill" not in clock.phases(CycleStamp(0.071, 0.072, 0.073, 0.074, steps=1), done=0.080)


def test_prefill_seconds_go_to_their_own_counter_not_the_cycle_phases():
    from prometheus_client import CollectorRegistry

    from specdecode_runtime.metrics import SpecMetrics

    reg = CollectorRegistry()
    m = SpecMetrics(registry=reg)
    phases = {"draft": 0.001, "verify": 0.002, "draft_extend": 0.001, "other": 0.003, "prefill": 0.010}
    m.record_cycle(8, 3, [1, 2, 3, 0, 0, 0, 0, 0], phases)
    m.record_cycle(8, 3, [1, 2, 3, 0, 0, 0, 0, 0], {k: v for k, v in phases.items() if k != "prefill"})
    assert reg.get_sample_value("specdecode_prefill_seconds_total", {"bucket": "8-31"}) == pytest.approx(0.010)
    total = sum(
        reg.get_sample_value("specdecode_cycle_seconds_sum", {"bucket": "8-31", "phase": p})
        for p in ("draft", "verify", "draft_extend", "other")
    )
    assert total == pytest.approx(2 * 0.007)  # the decode phases alone
    with pytest.raises(ValueError, match="allowed: .*prefill"):
        m.record_cycle(8, 3, [0] * 8, {"prefil": 0.1})


def _settings(**kw):
    from specdecode_runtime.engine import EngineSettings

    base = dict(
        num_steps=3,
        captured=(1, 3, 5),
        live=True,
        buckets=(1, 2, 8, 32, 64),
        draft_tp=1,
        control_port=0,
        token_file=None,
        preflight=True,
        host="127.0.0.1",
    )
    base.update(kw)
    return EngineSettings(**base)


def test_settings_from_runtime_config():
    from specdecode_runtime.contract.config import RuntimeConfig
    from specdecode_runtime.engine import EngineSettings

    s = EngineSettings.from_runtime_config(RuntimeConfig.from_yaml(LIVE_YAML))
    assert (s.num_steps, s.captured, s.live, s.draft_tp, s.control_port, s.preflight) == (
        3,
        (1, 3, 5),
        True,
        1,
        30001,
        True,
    )
    off = EngineSettings.from_runtime_config(
        RuntimeConfig.from_yaml(
            RUNTIME_YAML.replace("env: {NCCL_DEBUG: WARN}}", "env: {NCCL_DEBUG: WARN}, preflight: false}")
        )
    )
    assert (off.captured, off.live, off.preflight) == ((3,), False, False)
    assert "preflight" not in RuntimeConfig.from_yaml(RUNTIME_YAML).to_yaml()  # rendered files unchanged


def _req(url, method="GET", token=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    if token:
        r.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(r, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_single_rank_engine_serves_control_and_publishes_steps(tmp_path):
    """tp_size 1: no preflight, the channel agrees locally, rank 0 serves the endpoint; the table reaches the
    metrics (specdecode_num_steps) at the next exchange."""
    from prometheus_client import CollectorRegistry

    from specdecode_runtime.engine import EngineRuntime

    token = tmp_path / "token"
    token.write_text("s3cret\n")
    reg = CollectorRegistry()
    eng = EngineRuntime(_settings(token_file=str(token), exchange_every=2)).start(tp_rank=0, tp_size=1, registry=reg)
    try:
        assert eng.preflight_results == []
        url = f"http://127.0.0.1:{eng.server.bound_port}/specdecode/v1/steps"
        assert _req(url)[0] == 401
        assert _req(url, "PUT", "s3cret", {"table": [{"minBatch": 1, "steps": 7}]})[0] == 422  # not captured
        code, body = _req(url, "PUT", "s3cret", {"table": [{"minBatch": 1, "steps": 5}, {"minBatch": 8, "steps": 1}]})
        assert code == 200 and body["candidates"] == [1, 3, 5]
        assert eng.steps_for_batch(16) == 3  # not yet exchanged
        eng.on_iteration()  # iteration 1: no exchange at every=2
        assert eng.steps_for_batch(16) == 3
        eng.on_iteration()  # iteration 2: exchanged and applied (lead 0)
        assert (eng.steps_for_batch(1), eng.steps_for_batch(16)) == (5, 1)
        assert reg.get_sample_value("specdecode_num_steps", {"bucket": "8-31"}) == 1
        assert reg.get_sample_value("specdecode_num_steps", {"bucket": "1"}) == 5
        assert reg.get_sample_value("specdecode_candidate_steps", {"steps": "5"}) == 1
        assert reg.get_sample_value("specdecode_draft_tp") == 1
    finally:
        eng.stop()


# ---------------------------------------------------------------------------------------------------- sglang contract
@pytest.fixture
def sglang():
    sglang_or_skip()


@pytest.mark.engine  # SGLang's worker stack
def test_new_wrapped_symbols_exist_with_expected_signatures(sglang):
    from specdecode_runtime.sglang_patch import PATCH_POINTS, check_patch_points

    new = (
        "EAGLEWorkerV2.forward_batch_generation",
        "EAGLEWorkerV2.verify",
        "EAGLEWorkerV2.init_cuda_graphs",
        "Scheduler.ingest_requests",
        "SchedulerBatchResultProcessor._resolve_spec_v2_tokens",
        "AdaptiveController._activate",
        "_load_adaptive_config",
        "add_prometheus_middleware",
    )
    results = {r.point.target: r for r in check_patch_points()}
    for name in new:
        hits = [t for t in results if t.endswith(name)]
        assert hits, name
        assert all(results[t].ok and "static" not in results[t].detail for t in hits), [results[t].detail for t in hits]
    wrapped = {
        p.target.rsplit(".", 2)[-2] + "." + p.target.rsplit(".", 1)[-1] for p in PATCH_POINTS if p.role == "wrap"
    }
    assert {"Scheduler.ingest_requests", "EAGLEWorkerV2.verify", "EAGLEWorkerV2.init_cuda_graphs"} <= wrapped
    from sglang.srt.managers.utils import GenerationBatchResult

    assert not hasattr(GenerationBatchResult, "__slots__")  # the cycle stamp rides on it


@pytest.mark.engine  # SGLang's worker stack
def test_sglang_accepts_the_adaptive_config(sglang, runtime_yaml, tmp_path):
    """SGLang's own loader, policy and CLI parser accept what the launcher writes; every tier is captured for every
    graph batch size, and SGLang's EMA never decides."""
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.speculative.adaptive_spec_params import (
        AdaptiveSpeculativeParams,
        _load_adaptive_config,
        resolve_candidate_steps_from_config,
    )

    from specdecode_runtime.launch import plan_launch, write_launch_files

    plan = plan_launch(runtime_yaml(LIVE_YAML), environ={"SPECDECODE_STATE_DIR": str(tmp_path)})
    assert plan.reasons == []
    write_launch_files(_with_metrics_dir(plan, tmp_path))
    (path,) = plan.files
    _, slots = _load_adaptive_config(path)
    assert list(slots) == [1]
    assert resolve_candidate_steps_from_config(path) == [1, 3, 5]
    params = AdaptiveSpeculativeParams(initial_steps=3, cfg_path=path)
    graph_bs = [1, 2, 4, 8, 16, 32, 64]
    params.set_cuda_graph_bs(graph_bs)
    assert all(params.cuda_graph_bs_for_step(k) == graph_bs for k in (1, 3, 5))
    for _ in range(2000):  # perfect acceptance would make the stock controller climb within 15 batches
        assert params.on_verify_complete([3, 3, 3], batch_size=3) is None
    assert params.get_steps_for_batch(1) == 3
    sa = prepare_server_args(plan.args)
    assert sa.speculative_adaptive is True  # not silently disabled by adaptive_unsupported_reason
    assert sa.speculative_adaptive_config == path and sa.speculative_num_steps == 3


def _with_metrics_dir(plan, tmp_path):  # the test's own metrics dir, never /tmp/specdecode-metrics
    plan.env = {**plan.env, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "metrics")}
    return plan


@pytest.mark.engine  # SGLang's worker stack
def test_verify_callback_records_positions_and_launch_tier(sglang, monkeypatch):
    """The real wrappers around fake originals shaped like SGLang's: forward -> verify -> result; later SGLang's
    result processor calls on_verify_complete_cpu. Counts [0, 2, 3] at 3 steps -> attempts [3, 2, 2],
    accepted [2, 2, 1]; the tier is the launch's even if the worker switched since; SGLang's EMA is never fed."""
    import sglang.srt.speculative.eagle_worker_v2 as ew2
    from prometheus_client import CollectorRegistry
    from sglang.srt.managers.scheduler_components import batch_result_processor as brp

    from specdecode_runtime import sglang_patch as sp
    from specdecode_runtime.engine import EngineRuntime

    W, P = ew2.EAGLEWorkerV2, brp.SchedulerBatchResultProcessor

    def fake_forward(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        time.sleep(0.01)  # "draft"
        W.verify(self, batch)
        time.sleep(0.005)  # "draft extend"
        return types.SimpleNamespace(tokens="out")

    def fake_verify(self, batch, pp_proxy_tensors=None, grammar_barrier=None):
        time.sleep(0.02)

    def fake_resolve(self, result, batch):  # what SGLang's _resolve_spec_v2_tokens does with the worker
        self.model_worker.on_verify_complete_cpu(result.counts, batch_size=len(batch.reqs))
        return []

    monkeypatch.setattr(W, "forward_batch_generation", fake_forward)
    monkeypatch.setattr(W, "verify", fake_verify)
    monkeypatch.setattr(P, "_resolve_spec_v2_tokens", fake_resolve)
    fed = []
    worker = types.SimpleNamespace(
        speculative_num_steps=3,
        adaptive_controller=types.SimpleNamespace(on_verify_complete=lambda *a, **k: fed.append(a)),
    )
    worker.on_verify_complete_cpu = lambda counts, batch_size=0: W.on_verify_complete_cpu(worker, counts, batch_size)
    worker.activate_step_by_batch = lambda bs: W.activate_step_by_batch(worker, bs)  # the table says 3: no switch
    batch = types.SimpleNamespace(
        forward_mode=types.SimpleNamespace(is_extend=lambda: False, is_idle=lambda: False),
        is_extend_in_batch=False,
        reqs=[1, 2, 3],
        seq_lens=types.SimpleNamespace(shape=(3,)),
    )
    reg = CollectorRegistry()
    with sp.patched():
        eng = EngineRuntime(_settings(control_port=0)).start(tp_rank=0, tp_size=1, registry=reg, serve=False)
        eng.install()
        result = W.forward_batch_generation(worker, batch)
        assert result.specdecode_cycle.steps == 3
        worker.speculative_num_steps = 5  # the overlap scheduler launched the next batch on another tier
        result.counts = [0, 2, 3]
        P._resolve_spec_v2_tokens(types.SimpleNamespace(model_worker=worker), result, batch)
    b = {"bucket": "2-7"}
    assert [
        reg.get_sample_value("specdecode_position_attempts_total", {**b, "position": str(j)}) for j in (1, 2, 3)
    ] == [3, 2, 2]
    assert [
        reg.get_sample_value("specdecode_position_accepted_total", {**b, "position": str(j)}) for j in (1, 2, 3)
    ] == [2, 2, 1]
    assert reg.get_sample_value("specdecode_draft_steps_total", b) == 3  # the launch tier, not 5
    assert reg.get_sample_value("specdecode_tokens_generated_total") == 8
    verify = reg.get_sample_value("specdecode_cycle_seconds_sum", {**b, "phase": "verify"})
    draft = reg.get_sample_value("specdecode_cycle_seconds_sum", {**b, "phase": "draft"})
    ext = reg.get_sample_value("specdecode_cycle_seconds_sum", {**b, "phase": "draft_extend"})
    assert 0.02 <= verify < 0.5 and 0.01 <= draft < 0.5 and 0.005 <= ext < 0.5
    assert fed == []
    assert sp.process_state.verify_cb is None and sp.process_state.step_cb is None  # removal clears the hooks


@pytest.mark.engine  # SGLang's worker stack
def test_patches_apply_and_remove_with_new_wrappers(sglang):
    import sglang.srt.speculative.eagle_worker_v2 as ew2
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.managers.scheduler_components.batch_result_processor import SchedulerBatchResultProcessor as P

    from specdecode_runtime import sglang_patch as sp

    W = ew2.EAGLEWorkerV2
    names = [
        (W, "forward_batch_generation"),
        (W, "verify"),
        (W, "init_cuda_graphs"),
        (W, "on_verify_complete_cpu"),
        (W, "activate_step_by_batch"),
        (Scheduler, "ingest_requests"),
        (P, "_resolve_spec_v2_tokens"),
    ]
    before = [vars(c)[n] for c, n in names]
    sp.apply_patches(None)
    try:
        during = [vars(c)[n] for c, n in names]
        assert all(d is not b and d.__specdecode_original__ is b for d, b in zip(during, before))
    finally:
        sp.remove_patches()
    assert [vars(c)[n] for c, n in names] == before


@pytest.mark.engine  # SGLang's worker stack
def test_sglang_metrics_endpoint_serves_our_series(sglang, tmp_path):
    """Our scheduler-side series, written by another process into PROMETHEUS_MULTIPROC_DIR, appear on the
    /metrics app SGLang builds (its own add_prometheus_middleware)."""
    d = tmp_path / "prom"
    d.mkdir()
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(d), "PYTHONPATH": str(RUNTIME)}
    writer = textwrap.dedent("""
        from prometheus_client import CollectorRegistry
        from specdecode_runtime.metrics import SpecMetrics
        m = SpecMetrics(registry=CollectorRegistry())
        m.record_cycle(4, 3, [0, 2, 3, 1], {"verify": 0.01})
        m.set_steps(lambda b: 3)
    """)
    subprocess.run([sys.executable, "-c", writer], env=env, check=True, timeout=120)
    reader = textwrap.dedent("""
        from specdecode_runtime.cpu.torchvision_stub import install; install()
        from starlette.applications import Starlette
        from starlette.testclient import TestClient
        from sglang.srt.utils.common import add_prometheus_middleware
        app = Starlette(); add_prometheus_middleware(app)
        print(TestClient(app).get("/metrics").text)
    """)
    out = subprocess.run(
        [sys.executable, "-c", reader], env=env, check=True, timeout=300, capture_output=True, text=True
    ).stdout
    assert 'specdecode_verify_cycles_total{bucket="2-7"} 1.0' in out
    assert 'specdecode_position_attempts_total{bucket="2-7",position="1"} 4.0' in out
    assert 'specdecode_num_steps{bucket="64+"} 3.0' in out


# ---------------------------------------------------------------------------------------------------- gloo, 3 ranks
WORLD = 3
PUT_AFTER = 5  # rank 0 PUTs over HTTP after iteration 5; exchange every 2 -> in force from iteration 6
ITERS = 14


def _rank(rank: int, port: int, token: str, queue) -> None:
    try:
        _rank_body(rank, port, token, queue)
    except BaseException:  # the parent reports it: a bare exit code says nothing
        import traceback

        queue.put((rank, "error", traceback.format_exc()))
        raise


def _rank_body(rank: int, port: int, token: str, queue) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    preloaded = "sglang.srt.speculative.eagle_worker_v2" in sys.modules
    from specdecode_runtime.cpu.torchvision_stub import install

    install()  # a no-op when the forkserver preloaded sglang
    import sglang.srt.speculative.eagle_worker_v2 as ew2
    import torch.distributed as dist
    from sglang.srt.managers.scheduler import Scheduler

    from specdecode_runtime import sglang_patch as sp
    from specdecode_runtime.engine import EngineRuntime, EngineSettings

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    Scheduler.ingest_requests = lambda self, stop_at_pause=False: []  # the original loop body is not under test
    try:
        sp.apply_patches(None)
        eng = EngineRuntime(
            EngineSettings(
                num_steps=3,
                captured=(1, 3, 5),
                live=True,
                buckets=(1, 2, 8, 32, 64),
                draft_tp=1,
                control_port=0,
                token_file=token,
                exchange_every=2,
                preflight_iterations=5,
                host="127.0.0.1",
            )
        )
        eng.install()
        switches = []

        class Worker:  # the attributes SGLang's activate/verify code touches
            speculative_num_steps = 3

            def __init__(self):
                self.adaptive_controller = types.SimpleNamespace(_activate=self._activate)

            def _activate(self, steps):  # AdaptiveController._activate -> apply_runtime_state
                switches.append((it, self.speculative_num_steps, steps))
                self.speculative_num_steps = steps

        worker = Worker()
        it = 0
        eng.start(tp_rank=rank, tp_size=WORLD, cpu_group=None, src=0, device_group=None, device=None, serve=rank == 0)
        codes = []
        for it in range(1, ITERS + 1):
            Scheduler.ingest_requests(object())
            bs = 4 if it % 3 else 16  # the same batch sizes on every rank, as SGLang's schedules are
            ew2.EAGLEWorkerV2.activate_step_by_batch(worker, bs)
            time.sleep(0.002 * rank)  # ranks drift in wall-clock time, never in iterations
            if rank == 0 and it == PUT_AFTER:
                url = f"http://127.0.0.1:{eng.server.bound_port}/specdecode/v1/steps"
                codes.append(
                    _req(url, "PUT", "tok", {"table": [{"minBatch": 1, "steps": 5}, {"minBatch": 8, "steps": 1}]})[0]
                )
                codes.append(_req(url, "PUT", None, {"table": [{"minBatch": 1, "steps": 1}]})[0])
        nccl = sorted(eng.metrics.series[NCCL_LATENCY]._metrics) if eng.metrics is not None else None
        queue.put((rank, switches, codes, eng.server is not None, len(eng.preflight_results), nccl, preloaded))
        eng.stop()
    finally:
        sp.remove_patches()
        dist.destroy_process_group()


@pytest.mark.engine  # SGLang's wrappers on 3 gloo processes
def test_step_control_switches_on_the_same_iteration_on_every_rank(sglang, tmp_path, monkeypatch):
    token = tmp_path / "token"
    token.write_text("tok")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("forkserver")
    # sglang imported once, in the server. Python 3.11's forkserver ignores the parent's sys.path, so the preload
    # module is found through PYTHONPATH; if a forkserver is already running (another test started it), the
    # children import sglang themselves (slower, same result).
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), str(RUNTIME), os.environ.get("PYTHONPATH", "")]))
    ctx.set_forkserver_preload(["_sglang_preload"])
    queue = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, port, str(token), queue)) for r in range(WORLD)]
    for p in procs:
        p.start()
    out = {}
    deadline = time.monotonic() + 600
    try:
        while len(out) < WORLD:
            try:
                rank, *rest = queue.get(timeout=2)
                assert rest[0] != "error", f"rank {rank} failed:\n{rest[1]}"
                out[rank] = rest
            except Exception:  # queue.Empty: fail fast if a rank died instead of waiting out the deadline
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                assert not dead and time.monotonic() < deadline, f"rank exit codes {[p.exitcode for p in procs]}"
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    switches = {r: v[0] for r, v in out.items()}
    # iteration 6 (first exchange after the PUT): bs 16 -> 1 step; 7: bs 4 -> 5; 9: 16 -> 1; 10: 4 -> 5; ...
    expected = [(6, 3, 1), (7, 1, 5), (9, 5, 1), (10, 1, 5), (12, 5, 1), (13, 1, 5)]
    assert switches[0] == expected
    assert switches[1] == switches[0] and switches[2] == switches[0]
    assert out[0][1] == [200, 401]  # the token is required
    assert [out[r][2] for r in range(WORLD)] == [True, False, False]  # only rank 0 serves PUTs
    assert [out[r][3] for r in range(WORLD)] == [4, 4, 4]  # preflight ran on every rank (3 all-reduces + bcast)
    assert out[0][4] and out[1][4] is None  # exported on rank 0 only
    print("sglang preloaded by the forkserver:", [out[r][5] for r in range(WORLD)])
