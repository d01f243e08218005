"""bench/operator/plan_vs_measured.py: the planner's split-vs-sharded choice checked against a committed GPU measurement.

Why: the planner recommends a draft layout per cluster; the only ground truth is a measured run. The committed
2 x H200 NVLink run must keep agreeing with the planner's choice at every (batch, k), and the comparison itself must
be able to say NO when the measurement disagrees (a run where the split cycle is clearly faster).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "operator"))

import plan_vs_measured as pvm  # noqa: E402

from specdecode_runtime.contract.scenario import load_scenario  # noqa: E402

MEASURED = ROOT / "bench" / "results" / "multigpu_draft_h200x2.json"
SCENARIO = ROOT / "bench" / "scenarios" / "h200-nvlink.yaml"


def test_planner_picks_the_faster_measured_layout_on_nvlink():
    measured = json.loads(MEASURED.read_text())
    _, rows = pvm.compare(measured, load_scenario(SCENARIO), "nvlink")
    assert len(rows) == 28  # k = 1..7 x batch 1, 8, 32, 64
    assert all(r.matches for r in rows), [r for r in rows if not r.matches]


def test_a_measurement_where_split_wins_is_reported_as_a_mismatch():
    measured = copy.deepcopy(json.loads(MEASURED.read_text()))
    layouts = measured["profiles"]["nvlink"]["cycles"]["3"]["64"]
    for key in ("median_ms", "p10_ms", "p90_ms"):  # split cycle 20 % faster than sharded, spreads apart
        layouts["split1"][key] = layouts["full"][key] * 0.8
    _, rows = pvm.compare(measured, load_scenario(SCENARIO), "nvlink")
    bad = [r for r in rows if not r.matches]
    assert [(r.batch, r.steps, r.measured_pick, r.planner_pick) for r in bad] == [(64, 3, "on 1", "sharded")]


def test_cli_exits_2_on_unknown_profile(tmp_path, capsys):
    assert pvm.main(["--measured", str(MEASURED), "--scenario", str(SCENARIO), "--profile", "infiniband"]) == 2
    assert "--profile infiniband" in capsys.readouterr().err
