"""Contract tests against the real sglang wheel of the pin on CPU (torchvision stubbed).

Skipped only when sglang is missing and SPECDECODE_REQUIRE_SGLANG is unset (CI sets it, so they run there).
"""

from __future__ import annotations

import types

import pytest
import torch
from runtime_testlib import RUNTIME_YAML, sglang_or_skip


@pytest.fixture(scope="module", autouse=True)
def _sglang():
    sglang_or_skip()


def test_every_patch_point_matches():
    from specdecode_runtime.sglang_patch import PATCH_POINTS, check_patch_points

    results = check_patch_points()
    bad = [f"{r.point.target}: {r.detail}" for r in results if not r.ok]
    assert not bad, "\n".join(bad)
    assert len(results) == len(PATCH_POINTS)
    wrapped = {p.target for p in PATCH_POINTS if p.role in ("wrap", "rebind", "hook")}
    assert "sglang.srt.speculative.eagle_worker_v2.build_eagle_verify_input" in wrapped


def _bindings():
    import sglang.srt.speculative.eagle_worker_v2 as ew2
    import sglang.srt.utils.common as common

    W, D = ew2.EAGLEWorkerV2, ew2.EagleDraftWorker
    return {
        "W.__init__": vars(W).get("__init__"),
        "W.init_cuda_graphs": vars(W).get("init_cuda_graphs"),
        "W.on_verify_complete_cpu": vars(W).get("on_verify_complete_cpu"),
        "W.activate_step_by_batch": vars(W).get("activate_step_by_batch"),
        "D.__init__": vars(D).get("__init__"),
        "D.init_cuda_graphs": vars(D).get("init_cuda_graphs"),
        "D._resolve_shared_embed_and_head": vars(D).get("_resolve_shared_embed_and_head"),
        "ew2.layout": ew2.resolve_draft_parallel_layout,
        "ew2.build": ew2.build_eagle_verify_input,
        "ew2.EagleDraftWorker": ew2.EagleDraftWorker,
        "common.mem": common.get_available_gpu_memory,
        "ew2.mem": ew2.get_available_gpu_memory,
    }


def test_patches_apply_and_remove_cleanly():
    from specdecode_runtime import sglang_patch as sp

    before = _bindings()
    ps = sp.apply_patches(sp.SplitConfig(draft_tp=1), {"NCCL_PROTO": "^LL128"})
    try:
        assert sp.apply_patches() is ps  # idempotent
        during = _bindings()
        for key in before:
            if key == "ew2.EagleDraftWorker":
                assert during[key] is before[key]  # swapped only during EAGLEWorkerV2.__init__
            else:
                assert during[key] is not before[key], key
        # Every wrapper names what it wraps.
        assert during["ew2.build"].__specdecode_original__ is before["ew2.build"]
        assert during["ew2.mem"] is during["common.mem"]  # re-bound in every importing module
    finally:
        sp.remove_patches()
    assert _bindings() == before
    assert sp.active_patches() is None


def test_parser_accepts_translated_args():
    from sglang.srt.server_args import prepare_server_args

    from specdecode_runtime.contract.config import RuntimeConfig
    from specdecode_runtime.contract.server_args import expand_env_refs, sglang_cli_args

    cfg = RuntimeConfig.from_yaml(RUNTIME_YAML.replace("nodes: 1", "nodes: 2"))
    args = expand_env_refs(
        sglang_cli_args(cfg, ["--mem-fraction-static", "0.8"]),
        {"SPECDECODE_NODE_RANK": "1", "SPECDECODE_DIST_INIT_ADDR": "sd-0.sd:5000"},
    )
    sa = prepare_server_args(args)
    assert (sa.model_path, sa.tp_size, sa.quantization, sa.context_length) == ("/models/llama-70b", 8, "fp8", 8192)
    assert (sa.speculative_algorithm, sa.speculative_draft_model_path) == ("EAGLE3", "/models/eagle3")
    assert (sa.speculative_num_steps, sa.speculative_eagle_topk, sa.speculative_num_draft_tokens) == (3, 1, 4)
    assert (sa.host, sa.port, sa.enable_metrics) == ("0.0.0.0", 30000, True)
    assert (sa.nnodes, sa.node_rank, sa.dist_init_addr) == (2, 1, "sd-0.sd:5000")


def test_refused_flags_are_real_sglang_flags(runtime_yaml):
    """The launcher refuses flags SGLang itself accepts: the refusal is ours, with our message."""
    from sglang.srt.server_args import prepare_server_args

    from specdecode_runtime.launch import plan_launch

    path = runtime_yaml()
    for flag in ("--speculative-use-rejection-sampling", "--enable-dp-attention", "--enable-multi-layer-eagle"):
        plan = plan_launch(path, [flag])
        prepare_server_args(plan.args)  # SGLang parses it
        assert any(flag in r for r in plan.reasons), (flag, plan.reasons)


def test_hooks_reach_callbacks():
    import sglang.srt.speculative.eagle_worker_v2 as ew2

    from specdecode_runtime import sglang_patch as sp

    seen, activated = [], []
    fake = types.SimpleNamespace(
        speculative_num_steps=3,
        adaptive_controller=types.SimpleNamespace(_activate=activated.append, on_verify_complete=lambda *a, **k: None),
    )
    with sp.patched():
        sp.set_verify_callback(lambda counts, bs, steps, phases: seen.append((counts, bs, steps, phases)))
        sp.set_step_control(lambda bs: 5 if bs >= 8 else None)
        try:
            ew2.EAGLEWorkerV2.on_verify_complete_cpu(fake, [0, 2, 3], 3)
            ew2.EAGLEWorkerV2.activate_step_by_batch(fake, 4)
            ew2.EAGLEWorkerV2.activate_step_by_batch(fake, 16)
        finally:
            sp.set_verify_callback(None)
            sp.set_step_control(None)
    assert seen == [([0, 2, 3], 3, 3, {})]  # no launch stamp on a bare call: no phase times invented
    assert activated == [5]


def test_layout_third_case_and_proposal_broadcast_on_s(monkeypatch):
    """On S the layout names the draft group; build_eagle_verify_input receives the broadcast tokens."""
    import sglang.srt.speculative.eagle_worker_v2 as ew2
    from sglang.srt.configs.draft_parallel import DraftParallelLayout

    from specdecode_runtime import sglang_patch as sp

    calls = []

    def fake_build(batch, draft_input, parent_list, top_scores_index, draft_tokens, draft_probs, **kw):
        calls.append((parent_list, top_scores_index, draft_tokens.clone(), draft_probs))
        return "verify-input"

    monkeypatch.setattr(ew2, "build_eagle_verify_input", fake_build)
    sent = torch.tensor([[7, 8, 9], [4, 5, 6]])

    class FakeBcaster:
        def broadcast(self, bs, draft_tokens=None, parent_list=None, top_scores_index=None, layout=None):
            assert layout.token_cols == 3 and bs == 2
            return sent, None, None

    group = types.SimpleNamespace(world_size=2)
    with sp.patched(sp.SplitConfig(draft_tp=2)):
        sp.process_state.split = sp._SplitState(
            groups=types.SimpleNamespace(in_draft=True, draft_group=group), broadcaster=FakeBcaster(), hidden=(8, None)
        )
        layout = ew2.resolve_draft_parallel_layout(types.SimpleNamespace(tp_execution=None))
        assert isinstance(layout, DraftParallelLayout) and layout.tp_group is group and layout.attn_tp_size == 2
        batch = types.SimpleNamespace(
            seq_lens=torch.zeros(2), forward_mode=types.SimpleNamespace(is_idle=lambda: False)
        )
        out = ew2.build_eagle_verify_input(
            batch,
            None,
            "P",
            "S",
            torch.zeros(2, 3, dtype=torch.long),
            "probs",
            target_worker=None,
            topk=1,
            num_steps=3,
            num_draft_tokens=4,
            tree_mask_mode=None,
            device="cpu",
        )
    assert out == "verify-input"
    parents, scores, tokens, probs = calls[0]
    assert (parents, scores, probs) == ("P", "S", None) and torch.equal(tokens, sent)


def test_draft_only_guard_answers_memory_probe_locally():
    import sglang.srt.utils.common as common

    from specdecode_runtime import sglang_patch as sp
    from specdecode_runtime.draft_group import draft_only_scope

    recorded = {}

    def fake(device, gpu_id, distributed=False, empty_cache=True, cpu_group=None):
        recorded["distributed"] = distributed
        return 1.0

    wrapped = sp.draft_layout.local_memory_probe(fake)
    with draft_only_scope([0], "test"):
        wrapped("cuda", 0, distributed=True)
    assert recorded["distributed"] is False
    wrapped("cuda", 0, distributed=True)
    assert recorded["distributed"] is True
    assert callable(common.get_available_gpu_memory)


def test_check_sglang_cli():
    from specdecode_runtime import cli

    assert cli.main(["check-sglang", "--apply"]) == 0
