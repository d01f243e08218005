"""CPU path of bench/gpu/micro/multigpu_draft.py: 2 gloo processes, toy shapes, every part once.

Why: the script's real run happens on a lent 2-GPU machine with a few minutes of budget, so everything except the
NCCL/CUDA-graph specifics must be proven here first: the group creation order, the split ranks joining only the
broadcast, the collective deadline agreement, and the JSON/markdown it writes.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "gpu" / "micro" / "multigpu_draft.py"
sys.path.insert(0, str(SCRIPT.parent))

import multigpu_draft as mgd  # noqa: E402


def test_profiles_keep_multicast_off_and_emulate_pcie():
    for name in mgd.PROFILES:
        env = mgd.profile_environment(name)
        assert env["NCCL_NVLS_ENABLE"] == "0"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
        assert env["NVSHMEM_DISABLE_NVLS"] == "1"
    pcie = mgd.profile_environment("pcie-emulated")
    assert pcie["NCCL_P2P_DISABLE"] == "1" and pcie["NCCL_PROTO"] == "^LL128"
    assert "NCCL_P2P_DISABLE" not in mgd.profile_environment("nvlink")


def test_derive_fits_tp1_and_collective_cost():
    st = lambda ms: {"median_ms": ms, "p10_ms": ms, "p90_ms": ms}  # noqa: E731
    steps = {
        str(b): {
            "split1_step": st(0.5 + 0.03 * b),
            "full": st((0.5 + 0.03 * b) / 2 + 3 * 0.030),
            "full_embed_ar": st((0.5 + 0.03 * b) / 2 + 4 * 0.030),
            "split1_bcast_k1": st(0.012),
        }
        for b in (1, 8, 32, 64)
    }
    d = mgd.derive({"profiles": {"nvlink": {"world": 2, "draft_step": steps}}})["nvlink"]
    assert d["tp1_compute_ms"]["base"] == pytest.approx(0.5)
    assert d["tp1_compute_ms"]["perSeq"] == pytest.approx(0.03)
    assert d["effective_collective_us_full"]["mean"] == pytest.approx(30.0)
    assert d["effective_collective_us_full_embed_ar"]["mean"] == pytest.approx(30.0)
    assert d["broadcast_us_median"] == pytest.approx(12.0)


@pytest.mark.engine  # 2 gloo processes
@pytest.mark.slow
def test_cpu_run_writes_every_part(tmp_path):
    cmd = [
        sys.executable,
        str(SCRIPT),
        "--cpu",
        "--tiny",
        "--world",
        "2",
        "--profiles",
        "nvlink",
        "--batches",
        "1,2",
        "--ks",
        "1,2",
        "--reps",
        "1",
        "--samples",
        "2",
        "--time-limit",
        "200",
        "--out",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "multigpu_draft_cpu.json").read_text())
    p = report["profiles"]["nvlink"]
    assert p["status"] == "ok", p["status"]
    assert p["parts_done"] == ["allreduce", "draft_step", "cycles"]
    assert set(p["allreduce"]) == {"4096", "16384"}
    for bs in ("1", "2"):
        row = p["draft_step"][bs]
        assert {"full", "full_embed_ar", "split1_step", "split1_bcast_k1"} <= set(row)
        assert row["split1_bcast_k1"]["bytes"] == int(bs) * 8
    assert set(p["cycles"]) == {"1", "2"} and set(p["cycles"]["2"]["2"]) == {"full", "split1", "split1_nobcast"}
    assert set(p["decode"]) == {"1", "2"} and p["verify_layers"] >= 1
    md = (tmp_path / "multigpu_draft_cpu.md").read_text()
    assert "Split draft" in md and "| 2 |" in md
