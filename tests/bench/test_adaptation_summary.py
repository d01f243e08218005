"""The adaptation campaign's summary (bench/reports/adaptation.py) from a synthetic raw folder of the
shape bench/gpu/campaigns/adaptation_campaign.py writes: the issue's keys computed from the raw measurements, each
goal judged, provenance required."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _module():
    for p in (ROOT / "runtime", ROOT / "bench"):
        if str(p) not in sys.path:
            sys.path.insert(0, str(p))
    return importlib.import_module("reports.adaptation")


def _render(args: list[str]) -> int:
    """``python bench/renderer.py report gpu_adaptation ARGS``: the one command that renders the report."""
    _module()
    return importlib.import_module("renderer").cli(["report", "gpu_adaptation", *args])


def _side(tps: float, accepted: float, verified: float, failed: int = 0) -> dict:
    return {"tokens_per_s": tps, "accepted": accepted, "verified": verified, "failed": failed, "tokens": 1024}


def _tick(t: float, attempt, phase: str, served: str = "/w/head_a") -> dict:
    return {"t": t, "attempt": attempt, "adaptation_phase": phase, "draft_phase": "Serving", "served": served}


def raw_run(**over) -> dict:
    cand = "/w/run/claim/adapt/adapt/attempt-1"
    broken = "/w/run/claim/adapt/adapt/attempt-2"
    run = {
        "t_shift": 20.0,
        "t_attempt_1_due": 65.0,
        "t_attempt_2_due": 200.0,
        "t_outcome_2": 230.0,
        "outcome_1": "Promoted",
        "outcome_2": "Refused",
        "config": {"capture_seconds": 45.0, "device": "cuda", "dtype": "float32", "steps": 5, "clients": 8},
        "server": {"restarts": 0, "alive_at_end": True, "ready_s": 70.0},
        "traffic": {"clients": 8, "requests": 900, "completed": 900, "failed": 0},
        "operator": {
            "ticks": [
                _tick(1.0, None, "Capturing"),
                _tick(66.0, 1, "Training"),
                _tick(170.0, 1, "Canary", cand),
                _tick(182.0, 1, "Promoted", cand),
                _tick(201.0, 2, "Training", cand),
                _tick(229.0, 2, "Refused", cand),
            ],
            "errors": [],
        },
        "attempts": [
            {"attempt": 1, "broken": False, "train_exit": 0, "gate_exit": 0, "rendered_train": ["--out", cand]},
            {"attempt": 2, "broken": True, "train_exit": 0, "gate_exit": 3, "rendered_train": ["--out", broken]},
        ],
        # accept lengths pooled over the rounds: stale 1 + 300/200 = 2.5, promoted 1 + 540/200 = 3.7,
        # offline B 1 + 600/200 = 4.0; tok/s promoted/stale per round 1.3, 1.25, 1.4
        "measure": {
            "rounds": [
                {
                    "order": ["stale", "promoted", "offline_b"],
                    "stale": _side(400, 160, 100),
                    "promoted": _side(520, 260, 100),
                    "offline_b": _side(560, 300, 100),
                },
                {
                    "order": ["promoted", "offline_b", "stale"],
                    "stale": _side(480, 140, 100),
                    "promoted": _side(600, 280, 100),
                    "offline_b": _side(640, 300, 100),
                },
                {
                    "order": ["offline_b", "stale", "promoted"],
                    "stale": _side(500, 0, 0),
                    "promoted": _side(700, 0, 0),
                    "offline_b": _side(720, 0, 0),
                },
            ]
        },  # fmt: skip
        "identity": {"identical": True, "failed": 0, "prompts": 4, "tokens": 128, "steps": 5, "dtype": "float32"},
    }
    run.update(over)
    return run


def write_raw(raw: Path, run: dict, meta: bool = True) -> Path:
    raw.mkdir(parents=True, exist_ok=True)
    (raw / "adaptation_run.json").write_text(json.dumps(run))
    if meta:
        (raw / "meta.json").write_text(
            json.dumps(
                {
                    "commit": "abc1234",
                    "device": "1x NVIDIA H100 80GB HBM3",
                    "date": "2026-12-07",
                    "commands": ["adaptation.sh /tmp/ad OUT all"],
                }
            )
        )
    return raw


def test_the_issue_keys_come_from_the_raw_measurements(tmp_path):
    mod = _module()
    s = mod.summarize(write_raw(tmp_path, raw_run()))
    assert s["accept_length_b"] == {"stale": 2.5, "offline_b": 4.0, "promoted": 3.7}
    assert s["gap_recovered"] == pytest.approx((3.7 - 2.5) / (4.0 - 2.5))  # 0.8: against the stale head
    assert s["speedup_over_stale_b1"] == pytest.approx(1.3)  # the median of 1.3, 1.25, 1.4
    assert s["minutes_to_promotion"] == pytest.approx((182.0 - 20.0) / 60.0, abs=1e-3)
    assert s["minutes_to_promotion_full_interval"] == pytest.approx((182.0 - 20.0 + 600 - 45) / 60.0, abs=1e-3)
    assert s["failed_requests"] == 0 and s["broken_candidate_refused"] is True
    assert s["all_goals_met"] is True
    assert s["provenance"]["device"] == "1x NVIDIA H100 80GB HBM3"
    assert mod.default_name(s) == "gpu_h100_adaptation"
    md = mod.markdown(s)
    assert "## The issue's goals" in md and "## Provenance" in md and "| gap_recovered | >= 0.80 | 0.8 | yes |" in md


def test_every_failure_is_counted_and_each_goal_judged(tmp_path):
    mod = _module()
    run = raw_run()
    run["traffic"]["failed"] = 2
    run["measure"]["rounds"][1]["promoted"]["failed"] = 1
    run["measure"]["rounds"][0]["promoted"] = _side(400, 200, 100)  # promoted 1 + 480/200 = 3.4: gap 0.6
    run["identity"]["identical"] = False
    s = mod.summarize(write_raw(tmp_path, run))
    assert s["failed_requests"] == 3 and s["failed_requests_by_part"]["measurements"] == 1
    assert s["gap_recovered"] == pytest.approx(0.6)
    unmet = {g["key"] for g in s["goals"] if not g["met"]}
    assert unmet == {"gap_recovered", "failed_requests", "greedy_identical"}
    assert s["all_goals_met"] is False


def test_a_broken_candidate_that_reached_the_canary_is_not_refused(tmp_path):
    mod = _module()
    run = raw_run()
    broken = "/w/run/claim/adapt/adapt/attempt-2"
    run["operator"]["ticks"][-1:] = [_tick(215.0, 2, "Canary", broken), _tick(229.0, 2, "Refused")]
    s = mod.summarize(write_raw(tmp_path, run))
    assert s["broken_candidate_refused"] is False
    assert any("canary" in p for p in s["broken_refusal_problems"]) and any(
        "served" in p for p in s["broken_refusal_problems"]
    )


def test_no_gap_to_close_is_no_figure(tmp_path):
    mod = _module()
    run = raw_run()
    for r in run["measure"]["rounds"]:
        r["offline_b"] = dict(r["stale"])  # head B no better than head A on B
    s = mod.summarize(write_raw(tmp_path, run))
    assert s["gap_recovered"] is None
    assert not next(g for g in s["goals"] if g["key"] == "gap_recovered")["met"]


def test_a_summary_without_provenance_is_refused(tmp_path, capsys):
    raw = write_raw(tmp_path / "raw", raw_run(), meta=False)
    with pytest.raises(SystemExit) as e:
        _render(["--raw", str(raw), "--out", str(tmp_path / "out")])
    assert e.value.code == 2 and "meta.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit) as e:
        _render(["--raw", str(tmp_path / "nowhere")])
    assert e.value.code == 2 and "nowhere" in capsys.readouterr().err


def test_the_results_are_named_by_the_device(tmp_path):
    raw = write_raw(tmp_path / "raw", raw_run())
    assert _render(["--raw", str(raw), "--out", str(tmp_path / "out")]) == 0
    data = json.loads((tmp_path / "out/gpu_h100_adaptation.json").read_text())
    for key in ("gap_recovered", "minutes_to_promotion", "speedup_over_stale_b1", "failed_requests"):
        assert key in data
    assert data["broken_candidate_refused"] is True
    assert (tmp_path / "out/gpu_h100_adaptation.md").is_file()
