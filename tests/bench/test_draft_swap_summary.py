"""bench/results/draft_swap.{json,md}'s GPU half is what the renderer's draft_swap report (bench/reports/draft_swap.py)
makes of the raw report it names: a hand-edited or stale figure fails here (and in test_lab's regeneration)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "runtime")]
import renderer  # noqa: E402

RAW = ROOT / "bench" / "results" / "gpu_h100" / "draft_swap"


def test_the_committed_gpu_half_regenerates_from_its_raw_report(tmp_path):
    for name in ("draft_swap.json", "draft_swap.md"):
        shutil.copy(ROOT / "bench" / "results" / name, tmp_path / name)
    assert renderer.cli(["report", "draft_swap", "--raw", str(RAW), "--out", str(tmp_path)]) == 0
    for name in ("draft_swap.json", "draft_swap.md"):
        assert (tmp_path / name).read_text() == (ROOT / "bench" / "results" / name).read_text(), name


def test_the_gpu_keys_are_the_ones_promised_and_read_from_the_raw_run():
    raw = json.loads((RAW / "draft_swap_gpu.json").read_text())
    gpu = json.loads((ROOT / "bench" / "results" / "draft_swap.json").read_text())["gpu"]
    assert {"swap_ms", "failed_requests", "accept_length_before", "accept_length_after", "target_restarts"} <= set(gpu)
    assert gpu["swap_ms"] == [round(1000 * s["seconds"], 1) for s in raw["swaps"]]
    assert gpu["accept_length_after"] == next(s["accept_length"] for s in raw["stretches"] if s["draft"] == "brief")


def test_a_missing_raw_report_is_a_clear_error(tmp_path, capsys):
    try:
        renderer.cli(["report", "draft_swap", "--raw", str(tmp_path), "--out", str(tmp_path)])
    except SystemExit as exc:
        assert exc.code == 2
    assert "draft_swap_gpu.json" in capsys.readouterr().err
