"""Every CPU stand-in agrees with SGLang 0.5.23's own kernel (run by Triton's CPU interpreter) or SGLang's own
torch reference, on seeded random inputs (``cpu_kernel_oracle.py``, one process for all checks)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from runtime_testlib import sglang_or_skip

ORACLE = Path(__file__).with_name("cpu_kernel_oracle.py")
CHECKS = ("assign_req_to_token_pool", "copy_all_layer_kv_cache", "assign_draft_cache_locs_contiguous",
          "assign_extend_cache_locs", "fill_front_out_cache_loc", "fill_bonus_tokens", "fill_accept_out_cache_loc",
          "build_tree_kernel_efficient", "verify_tree_greedy", "draft_decode_kv_rows", "rotary_embedding",
          "verify_mask_slices")


@pytest.fixture(scope="module")
def oracle():
    sglang_or_skip()
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.run([sys.executable, str(ORACLE)], capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("check", CHECKS)
def test_stand_in_matches_sglang(oracle, check):
    result = oracle[check]
    assert result["cases"] >= 12
    assert result["mismatches"] == []


def test_install_refuses_other_devices():
    from specdecode_runtime import cpu

    assert cpu.install("cuda") is False


def test_draft_step_rows_layout():
    torch = pytest.importorskip("torch")
    from specdecode_runtime.cpu.attention import draft_step_rows

    req_to_token = torch.arange(100, dtype=torch.int32).view(2, 50)
    rows = draft_step_rows(req_to_token, torch.tensor([1]), torch.tensor([3]), topk=2, num_steps=3, step=1)
    # prefix 50..52, then branch b's slots 53+3b .. 53+3b+1
    assert [r.tolist() for r in rows] == [[50, 51, 52, 53, 54], [50, 51, 52, 56, 57]]


def test_thread_binding_round_robin():
    from specdecode_runtime.cpu.engine import cpu_thread_binding

    assert cpu_thread_binding(4, cores=[0, 1]) == "0|1|0|1"
    assert cpu_thread_binding(1, cores=[3, 2]) == "2"
