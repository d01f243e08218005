"""Every CPU stand-in agrees with the pinned SGLang's own kernel (run by Triton's CPU interpreter) or SGLang's own
torch reference, on seeded random inputs (``cpu_kernel_oracle.py``, one process for all checks)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from runtime_testlib import sglang_or_skip

ORACLE = Path(__file__).with_name("cpu_kernel_oracle.py")
CHECKS = (
    "assign_req_to_token_pool",
    "copy_all_layer_kv_cache",
    "assign_draft_cache_locs_contiguous",
    "assign_extend_cache_locs",
    "fill_front_out_cache_loc",
    "fill_bonus_tokens",
    "fill_accept_out_cache_loc",
    "build_tree_kernel_efficient",
    "verify_tree_greedy",
    "draft_decode_kv_rows",
    "rotary_embedding",
    "verify_mask_slices",
)


@pytest.fixture(scope="module")
def oracle():
    sglang_or_skip()
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(ORACLE)], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.engine  # SGLang's kernels under Triton's CPU interpreter
@pytest.mark.slow
@pytest.mark.parametrize("check", CHECKS)
def test_stand_in_matches_sglang(oracle, check):
    result = oracle[check]
    assert result["cases"] >= 12
    assert result["mismatches"] == []


def test_install_refuses_other_devices():
    from specdecode_runtime import cpu

    assert cpu.install("cuda") is False


@pytest.mark.engine  # SGLang's worker stack
def test_draft_step_rows_layout():
    sglang_or_skip()
    import torch

    from specdecode_runtime.cpu.attention import draft_step_rows

    req_to_token = torch.arange(100, dtype=torch.int32).view(2, 50)
    rows = draft_step_rows(req_to_token, torch.tensor([1]), torch.tensor([3]), topk=2, num_steps=3, step=1)
    # prefix 50..52, then branch b's slots 53+3b .. 53+3b+1
    assert [r.tolist() for r in rows] == [[50, 51, 52, 53, 54], [50, 51, 52, 56, 57]]


def test_thread_binding_round_robin():
    from specdecode_runtime.cpu.engine import cpu_thread_binding

    assert cpu_thread_binding(4, cores=[0, 1]) == "0|1|0|1"
    assert cpu_thread_binding(1, cores=[3, 2]) == "2"


@pytest.mark.parametrize(
    "text, message",
    [
        ("not json", "invalid input"),
        ('{"runs": {}}', "runs must be a list"),
        ('{"runs": [{"name": "a"}]}', "at least name and model_dir"),
        ('{"runs": [{"name": "a", "model_dir": "/m", "tpp": 2}]}', "unknown keys ['tpp']"),
    ],
)
def test_host_refuses_bad_input(text, message):
    import io

    from specdecode_runtime.cpu import host

    err = io.StringIO()
    out = io.StringIO()
    old, sys.stderr = sys.stderr, err
    try:
        assert host.main(io.StringIO(text), out) == 2
    finally:
        sys.stderr = old
    assert message in err.getvalue()
    assert out.getvalue() == ""


@pytest.mark.parametrize(
    "shape, message",
    [
        ({"hidden_size": 0}, "hidden_size must be a positive integer"),
        ({"hidden_sise": 64}, "unknown model-config key 'hidden_sise'"),
        ({"hidden_size": 60, "num_attention_heads": 8}, "divisible by num_attention_heads"),
        ({"num_attention_heads": 4, "num_key_value_heads": 3}, "divisible by num_key_value_heads"),
        ({"vocab_size": 5}, "vocab_size must be at least"),
    ],
)
def test_tiny_model_shape_errors_name_the_key(shape, message):
    from specdecode_runtime.cpu.tiny_models import ShapeError, validate_shape

    with pytest.raises(ShapeError, match=message.replace("(", r"\(").replace("[", r"\[")):
        validate_shape(shape)


def test_tiny_models_are_deterministic_and_small(tmp_path):
    pytest.importorskip("transformers")
    from safetensors.torch import load_file

    from specdecode_runtime.cpu.tiny_models import make_tiny_models

    a = make_tiny_models(tmp_path / "a", {"num_hidden_layers": 1}, seed=3)
    b = make_tiny_models(tmp_path / "b", {"num_hidden_layers": 1}, seed=3)
    wa, wb = load_file(f"{a.target}/model.safetensors"), load_file(f"{b.target}/model.safetensors")
    assert wa.keys() == wb.keys() and all((wa[k] == wb[k]).all() for k in wa)
    total = sum(p.stat().st_size for p in (tmp_path / "a").rglob("*") if p.is_file())
    assert total < 8 << 20
    # the agreeing EAGLE draft is the target's layers and shares its embedding
    draft = load_file(f"{a.eagle_agree}/model.safetensors")
    assert (draft["layers.0.self_attn.q_proj.weight"] == wa["model.layers.0.self_attn.q_proj.weight"]).all()
    assert (draft["embed_tokens.weight"] == wa["model.embed_tokens.weight"]).all()
