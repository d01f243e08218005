"""bench/results/draft_swap.{json,md}'s GPU half is what bench/gpu/campaigns/summarize_draft_swap.py makes of the raw report it
names: a hand-edited or stale figure fails here."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "gpu" / "campaigns"))
import summarize_draft_swap as sds  # noqa: E402

RAW = ROOT / "bench" / "results" / "gpu_h100" / "draft_swap"


def test_the_committed_gpu_half_regenerates_from_its_raw_report(tmp_path, monkeypatch):
    for name in ("draft_swap.json", "draft_swap.md"):
        shutil.copy(ROOT / "bench" / "results" / name, tmp_path / name)
    monkeypatch.setattr(sds, "RESULTS", tmp_path)
    assert sds.main(["--raw", str(RAW)]) == 0
    for name in ("draft_swap.json", "draft_swap.md"):
        assert (tmp_path / name).read_text() == (ROOT / "bench" / "results" / name).read_text(), name


def test_the_gpu_keys_are_the_ones_promised_and_read_from_the_raw_run():
    raw = json.loads((RAW / "draft_swap_gpu.json").read_text())
    gpu = json.loads((ROOT / "bench" / "results" / "draft_swap.json").read_text())["gpu"]
    assert {"swap_ms", "failed_requests", "accept_length_before", "accept_length_after", "target_restarts"} <= set(gpu)
    assert gpu["swap_ms"] == [round(1000 * s["seconds"], 1) for s in raw["swaps"]]
    assert gpu["accept_length_after"] == next(s["accept_length"] for s in raw["stretches"] if s["draft"] == "brief")


def test_a_missing_raw_report_is_a_clear_error(tmp_path, capsys):
    assert sds.main(["--raw", str(tmp_path)]) == 2
    assert "draft_swap_gpu.json" in capsys.readouterr().err
