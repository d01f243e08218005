"""The no-cliff GPU summary (bench/reports/nocliff.py) from raw reports of the shapes its runs write: the
self-test's served cycles and live_tune.py's paired rounds, turned into the figures the issue names."""

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
    return importlib.import_module("reports.nocliff")


def _meta(raw: Path, **drop: bool) -> None:
    meta = {"commit": "abc1234", "device": "1x test GPU", "date": "2026-12-06", "commands": ["nocliff.sh OUT smoke"]}
    (raw / "meta.json").write_text(json.dumps({k: v for k, v in meta.items() if k not in drop}))


def _selftest(runs: list[dict], ok: bool = True) -> str:
    return "log line\n" + json.dumps(
        {"options": {}, "runs": runs, "ok": ok, "summary": "PASS" if ok else "FAIL"}, indent=2
    )


def _served(steps: int, rows: dict[int, float]) -> list[dict]:
    return [{"steps": steps, "batch": b, "served_cycle_ms": ms} for b, ms in rows.items()]


def test_the_figures_come_from_the_raw_reports(tmp_path):
    s_mod = _module()
    (tmp_path / "cycles.json").write_text(
        _selftest(
            [
                {"layout": "nospec", "served": _served(0, {1: 2.0, 8: 2.5})},
                {"layout": "sharded", "served": _served(0, {1: 2.1, 8: 2.4}) + _served(3, {1: 4.0, 8: 5.0})},
            ]
        )
    )
    (tmp_path / "smoke.json").write_text(
        _selftest(
            [
                {"layout": "nospec", "tokens": [[1, 2]], "checks": []},
                {"layout": "sharded", "tokens": [[1, 2]], "puts": [{"steps": 0}, {"steps": 7}], "checks": []},
            ]
        )
    )
    rounds = [{"a": 100.0, "b": 95.0, "ratio": 100 / 95}, {"a": 100.0, "b": 100.0, "ratio": 1.0}]
    live = {
        "batches": {
            "1": {
                "nospec": 400.0,
                "static": {"0": 390.0, "7": 760.0},
                "live": {"final_table": [[1, 7]], "tokens_per_s_replay": 740.0},
                "paired": {"rounds": [{"ratio": 0.99}, {"ratio": 1.01}, {"ratio": 1.0}]},
                "tier0_vs_nospec": {"rounds": rounds},
                "baseline": "static:7",
            }
        },
        "baselines_alone": True,
    }
    (tmp_path / "live.json").write_text(json.dumps(live))
    _meta(tmp_path)
    s = s_mod.summarize(tmp_path)
    assert s["tier0_over_plain_cycle"]["trained"] == {"b1": 1.05, "b8": 0.96}
    assert s["tier0_over_plain_cycle"]["8b"] == {}  # not run: no cycles8b.json
    # tier 0 tok/s over nospec tok/s, inverted into a cycle ratio, median over the rounds
    assert s["tier0_over_plain_cycle"]["trained_paired"]["b1"] == pytest.approx((0.95 + 1.0) / 2, abs=1e-3)
    assert s["live_over_best_of_nospec_and_static"]["b1"]["median"] == 1.0
    assert s["speedup_over_nospec_b1"] == pytest.approx(760 / 400)
    assert s["greedy_identical_across_switches"] is True
    assert "| tier 0 cycle / plain cycle, trained" in s_mod.markdown(s)


def _live_row(nospec: float, tier0: float) -> dict:
    return {
        "nospec": nospec,
        "static": {"0": tier0, "7": 2 * tier0},
        "live": {"final_table": [[1, 7]]},
        "paired": {"rounds": [{"ratio": 1.0}]},
        "tier0_vs_nospec": {"rounds": [{"a": tier0, "b": nospec, "ratio": tier0 / nospec}]},
        "baseline": "static:7",
    }


def test_baselines_measured_beside_the_tuners_load_are_never_taken_for_the_goals(tmp_path):
    """live_tune.py once measured no speculation and tier 0's rounds while the tuner's load ran on the pod: such a
    run (no ``baselines_alone``) keeps those figures apart, a marked run in the same folder counts, batch by batch."""
    s_mod = _module()
    (tmp_path / "live_1.json").write_text(
        json.dumps({"batches": {"1": _live_row(400.0, 400.0)}, "baselines_alone": True})
    )
    (tmp_path / "live_2.json").write_text(json.dumps({"batches": {"64": _live_row(10000.0, 4500.0)}}))
    _meta(tmp_path)
    s = s_mod.summarize(tmp_path)
    assert s["tier0_over_plain_cycle"]["trained_paired"] == {"b1": 1.0}
    assert s["live"]["tier0_pairs_beside_load"]["b64"]["median"] == pytest.approx(10000 / 4500, abs=1e-3)
    assert s["live"]["nospec"] == {"b1": 400.0} and s["live"]["nospec_beside_load"] == {"b64": 10000.0}
    assert s["speedup_over_nospec_b1"] == pytest.approx(800 / 400)
    assert s["baseline_without_nospec"] == ["b64"]
    md = s_mod.markdown(s)
    assert "(10000.0, beside the tuner's load: not a baseline)" in md and "b64: 2.2222" in md
    # a batch-1 row from an unmarked run gives no speedup over no speculation
    (tmp_path / "live_1.json").write_text(json.dumps({"batches": {"1": _live_row(400.0, 400.0)}}))
    s = s_mod.summarize(tmp_path)
    assert s["speedup_over_nospec_b1"] is None and "trained_paired" not in s["tier0_over_plain_cycle"]


def test_tokens_that_differ_are_reported_as_such(tmp_path):
    s_mod = _module()
    (tmp_path / "smoke.json").write_text(
        _selftest([{"layout": "nospec", "tokens": [[1, 2]]}, {"layout": "sharded", "tokens": [[1, 3]]}], ok=False)
    )
    _meta(tmp_path)
    s = s_mod.summarize(tmp_path)
    assert s["greedy_identical_across_switches"] is False
    assert s["selftest_cuda"]["selftest_ok"] is False
    assert s["speedup_over_nospec_b1"] is None


RAW = ROOT / "bench/results/gpu_h200/nocliff"


@pytest.mark.skipif(not RAW.is_dir(), reason="no committed no-cliff run")
def test_the_committed_summary_is_what_its_raw_reports_say():
    s = _module().summarize(RAW)
    assert json.loads(json.dumps(s)) == json.loads((ROOT / "bench/results/gpu_h200_nocliff.json").read_text())
    assert (ROOT / "bench/results/gpu_h200_nocliff.md").read_text() == _module().markdown(s)
    assert s["greedy_identical_across_switches"] is True and s["selftest_cuda"]["selftest_ok"]


def test_prefill_parts_per_prefill_batch_from_the_counter_deltas(tmp_path):
    s_mod = _module()
    spec = {
        "specdecode_prefill_batches_total{}": 4.0,
        "specdecode_prefill_requests_total{}": 8.0,
        "specdecode_prefill_tokens_total{}": 480.0,
        "specdecode_prefill_phase_seconds_total{clock=host,phase=launch}": 0.020,
        "specdecode_prefill_phase_seconds_total{clock=host,phase=target}": 0.012,
        "specdecode_prefill_phase_seconds_total{clock=host,phase=draft}": 0.004,
        "specdecode_prefill_phase_seconds_total{clock=device,phase=draft}": 0.002,
        "specdecode_verify_cycles_total{bucket=32-63}": 10.0,
        "specdecode_verify_cycles_total{bucket=8-31}": 10.0,
        "specdecode_requests_verified_total{bucket=32-63}": 400.0,
        "specdecode_requests_verified_total{bucket=8-31}": 200.0,
        "specdecode_prefill_seconds_total{bucket=32-63}": 0.010,
        "sglang:queue_time_seconds_sum{engine_type=unified}": 0.5,
        "sglang:queue_time_seconds_count{engine_type=unified}": 10.0,
    }
    plain = {"sglang:queue_time_seconds_sum{x=y}": 0.1, "sglang:queue_time_seconds_count{x=y}": 10.0}
    live = {"batches": {"32": {"pod_counters": {"3": spec, "nospec": plain}}}}
    (tmp_path / "live.json").write_text(json.dumps(live))
    _meta(tmp_path)
    s = s_mod.summarize(tmp_path)
    k3 = s["prefill_parts"]["b32"]["k3"]
    assert k3["prefill_batches"] == 4 and k3["requests_per_prefill"] == 2 and k3["tokens_per_prefill"] == 120
    assert k3["host_launch_ms_per_prefill"] == 5.0 and k3["host_target_ms_per_prefill"] == 3.0
    assert k3["device_draft_ms_per_prefill"] == 0.5 and "device_target_ms_per_prefill" not in k3
    assert k3["mean_batch"] == 30.0 and k3["cycles_per_prefill"] == 5.0 and k3["prefill_ms_per_cycle"] == 0.5
    assert k3["queue_ms"] == 50.0
    assert s["prefill_parts"]["b32"]["nospec"] == {"queue_ms": 10.0}
    assert "## Prefill under speculation" in s_mod.markdown(s)


RAW_H100 = ROOT / "bench/results/gpu_h100/nocliff"


def test_the_committed_h100_summary_is_what_its_raw_reports_say():
    """The H100 run that found tier 0's per-cycle device read: its summary, regression included, is its raw files'."""
    s = _module().summarize(RAW_H100)
    assert json.loads(json.dumps(s)) == json.loads((ROOT / "bench/results/gpu_h100_nocliff.json").read_text())
    assert (ROOT / "bench/results/gpu_h100_nocliff.md").read_text() == _module().markdown(s)
    assert s["tier0_over_plain_cycle"]["trained"]["b1"] > 2.0  # the regression as measured, not a goal met


def test_prefill_before_and_after_graphs_side_by_side(tmp_path):
    """The prefill phase's two reports (eager, then SGLang's prefill graphs, same request set) become one table per
    batch and point: tok/s, the prefill's parts per prefill batch, and graphs over eager."""
    s_mod = _module()

    def report(k3_tps: float, nospec: float, launch_s: float) -> dict:
        counters = {
            "specdecode_prefill_batches_total{}": 10.0,
            "specdecode_prefill_phase_seconds_total{clock=host,phase=launch}": launch_s,
            "specdecode_prefill_phase_seconds_total{clock=device,phase=target}": launch_s / 2,
            "specdecode_verify_cycles_total{bucket=32-63}": 100.0,
            "specdecode_requests_verified_total{bucket=32-63}": 3200.0,
            "specdecode_prefill_seconds_total{bucket=32-63}": launch_s,
        }
        return {"batches": {"32": {"static": {"3": k3_tps}, "nospec": nospec, "pod_counters": {"3": counters}}}}

    (tmp_path / "prefill_eager.json").write_text(json.dumps(report(9000.0, 8000.0, 0.25)))
    (tmp_path / "prefill_graphs.json").write_text(json.dumps(report(11000.0, 8400.0, 0.05)))
    _meta(tmp_path)
    s = s_mod.summarize(tmp_path)
    k3 = s["prefill_eager_vs_graphs"]["b32"]["k3"]
    assert k3["eager"]["host_launch_ms_per_prefill"] == 25.0 and k3["graphs"]["host_launch_ms_per_prefill"] == 5.0
    assert k3["eager"]["prefill_ms_per_cycle"] == 2.5 and k3["graphs"]["device_target_ms_per_prefill"] == 2.5
    assert k3["graphs_over_eager"] == pytest.approx(11000 / 9000, abs=1e-4)
    assert s["prefill_eager_vs_graphs"]["b32"]["nospec"]["graphs_over_eager"] == pytest.approx(1.05)
    assert "## Prefill: eager against SGLang's prefill CUDA graphs" in s_mod.markdown(s)
    (tmp_path / "prefill_graphs.json").unlink()  # one side missing: no comparison, not a half table
    assert s_mod.summarize(tmp_path)["prefill_eager_vs_graphs"] == {}


@pytest.mark.parametrize("key", ["commit", "device", "date", "commands"])
def test_a_run_without_its_provenance_is_refused_naming_the_key(tmp_path, key):
    renderer = pytest.importorskip("renderer")  # on sys.path once the module is loaded
    s_mod = _module()
    _meta(tmp_path, **{key: True})
    with pytest.raises(renderer.ProvenanceError, match=repr(key)):
        s_mod.summarize(tmp_path)
    with pytest.raises(renderer.ProvenanceError, match="commit, device"):
        renderer.write(tmp_path, "x", {"provenance": {}}, "")


def test_the_committed_h100_trained_summary_is_what_its_raw_reports_say():
    raw = ROOT / "bench/results/gpu_h100/nocliff_trained"
    s = _module().summarize(raw)
    assert json.loads(json.dumps(s)) == json.loads((ROOT / "bench/results/gpu_h100_nocliff_trained.json").read_text())
    assert (ROOT / "bench/results/gpu_h100_nocliff_trained.md").read_text() == _module().markdown(s)
    assert s["tier0_over_plain_cycle"]["8b"]["b1"] <= 1.05 and s["baseline_without_nospec"]


def test_the_committed_h100_smoke_summary_is_what_its_raw_report_says():
    """The smoke call on the current tier-0 code: greedy identity across live switches and every self-test check,
    tier 0's 'no draft forward and no draft extend' among them, on an H100."""
    raw = ROOT / "bench/results/gpu_h100/nocliff_smoke"
    s = _module().summarize(raw)
    assert json.loads(json.dumps(s)) == json.loads((ROOT / "bench/results/gpu_h100_nocliff_smoke.json").read_text())
    assert (ROOT / "bench/results/gpu_h100_nocliff_smoke.md").read_text() == _module().markdown(s)
    assert s["greedy_identical_across_switches"] is True and s["selftest_cuda"]["selftest_ok"]
    assert s["selftest_cuda"]["switches"] == [0, 7, 0, 3] and not s["selftest_cuda"]["failed_checks"]
