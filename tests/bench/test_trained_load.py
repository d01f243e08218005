"""The load harness and summary of the trained-model GPU run (bench/gpu/campaigns/live_tune.py, bench/reports/load.py):
the arithmetic its figures rest on, against a loopback HTTP server and the committed raw reports."""

import importlib.util
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGNS = ROOT / "bench/gpu/campaigns"
RAW = ROOT / "bench/results/gpu_h200/trained_live"


def _module(name):
    spec = importlib.util.spec_from_file_location(name, CAMPAIGNS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


live_tune = _module("live_tune")
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "runtime")]
from reports import live_runs  # noqa: E402
from reports import load as load_report  # noqa: E402
from reports import paired as paired_report  # noqa: E402
from reports import replay as replay_report  # noqa: E402
from reports import tp1 as tp1_report  # noqa: E402


@pytest.fixture
def server():
    """/generate answers max_new_tokens ids after 20 ms; a prompt "fail" gets a 500."""

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if body.get("text") == "fail":
                self.send_response(500)
                self.end_headers()
                return
            n = body["sampling_params"]["max_new_tokens"]
            time.sleep(0.02)
            out = json.dumps({"output_ids": list(range(n)), "meta_info": {"completion_tokens": n}}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_window_tokens_are_counted_pro_rata_over_each_requests_lifetime():
    load = live_tune.Load("http://unused", ["x"], 1, 10)
    load.records = [(0.0, 2.0, 100), (1.0, 3.0, 40), (5.0, 6.0, 10)]
    # window [1, 3]: half of the first request (50) + all of the second (40), over 2 s
    assert load.tokens_per_s(1.0, 3.0) == pytest.approx(45.0)
    assert load.tokens_per_s(3.0, 5.0) == 0.0
    assert load.tokens_per_s(0.0, 6.0) == pytest.approx(150 / 6)


def test_replay_sends_the_fixed_set_and_counts_every_token(server):
    tps = live_tune.replay(server, ["a", "b", "c"], batch=3, per_thread=4, max_new_tokens=50)
    # 12 requests of 50 tokens, 3 at a time, each >= 20 ms: at most 3 * 50 / 0.02 tok/s
    assert 0 < tps <= 3 * 50 / 0.02


def test_replay_refuses_to_report_a_figure_when_requests_failed(server):
    with pytest.raises(RuntimeError, match="requests failed"):
        live_tune.replay(server, ["fail"], batch=2, per_thread=1, max_new_tokens=5)


def test_interval_noise_uses_the_longest_unchanged_run_without_its_first_interval():
    trace = [{"table": [[1, 3]], "tokens_per_s": 999.0}]  # the start of the load: left out
    trace += [{"table": [[1, 4]], "tokens_per_s": x} for x in (50.0, 100.0, 100.0, 100.0, 100.0)]
    trace += [{"table": [[1, 5]], "tokens_per_s": x} for x in (10.0, 20.0)]
    got = load_report.interval_noise(trace)
    assert got == {"intervals": 4, "mean_tokens_per_s": 100.0, "cv": 0.0}  # the 50 is the interval it landed in


def test_the_committed_run_summarizes_to_the_figures_the_readme_quotes():
    s = load_report.summarize(RAW)
    live = json.loads((RAW / "live.json").read_text())
    nospec = json.loads((RAW / "nospec.json").read_text())
    b1 = live["batches"]["1"]["static"]
    assert s["speedup_over_nospec"]["b1_k7"] == round(b1["7"] / nospec["batches"]["1"]["tokens_per_s"], 3)
    assert s["best_static"]["b1"]["steps"] == int(max(b1, key=b1.get))
    assert all(s["tokens_identical"].values())
    assert set(s["live_over_best_static"]) == {"b1", "b8", "b32"}
    assert s["planner_over_measured"]["min"] <= s["planner_over_measured"]["max"]
    md = load_report.markdown(s)
    assert f"**Batch 1: {s['best_static']['b1']['speedup_over_nospec']}x no speculation**" in md
    committed = json.loads((ROOT / "bench/results/gpu_h200_trained_load.json").read_text())
    assert committed["speedup_over_nospec"] == s["speedup_over_nospec"]


def test_paired_rounds_cancel_a_drifting_server():
    """A server that gets 2 % faster every measurement: one pass in a fixed order (A then B) reports A 2 % slow
    every round; alternating the order and taking the median ratio recovers A == B."""
    clock = {"n": 0, "cfg": None}

    def measure():
        clock["n"] += 1
        return 1000.0 * (1.02 ** clock["n"])  # the same configuration's speed keeps rising

    def set_a():
        clock["cfg"] = "a"

    def set_b():
        clock["cfg"] = "b"

    out = live_tune.paired(measure, set_a, set_b, pairs=4)
    assert [list(r) for r in out["rounds"]] == [["a", "b", "ratio"]] * 4
    assert out["rounds"][0]["ratio"] == pytest.approx(1 / 1.02, abs=1e-3)  # A first: looks slower
    assert out["rounds"][1]["ratio"] == pytest.approx(1.02, abs=1e-3)  # B first: looks faster
    assert out["median_ratio"] == pytest.approx(1.0, abs=2e-3)


def test_counters_delta_keeps_what_changed_in_counters_and_summaries_only():
    before = {"specdecode_tokens_generated_total{}": 10.0, "specdecode_num_steps{bucket=1}": 3.0}
    after = {
        "specdecode_tokens_generated_total{}": 25.0,
        "specdecode_num_steps{bucket=1}": 7.0,  # a gauge: not a count over the point
        "specdecode_cycle_seconds_sum{bucket=1,phase=verify}": 0.5,  # new since before
        "specdecode_verify_cycles_total{bucket=2-7}": 0.0,  # unchanged
    }
    assert live_tune.counters_delta(before, after) == {
        "specdecode_tokens_generated_total{}": 15.0,
        "specdecode_cycle_seconds_sum{bucket=1,phase=verify}": 0.5,
    }


REPLAY_RAW = ROOT / "bench/results/gpu_h200/trained_replay"


def test_decode_only_figures_from_the_pods_counters():
    counters = {
        "specdecode_verify_cycles_total{bucket=1}": 100.0,
        "specdecode_requests_verified_total{bucket=1}": 100.0,
        "specdecode_tokens_generated_total{}": 300.0,
        "specdecode_cycle_seconds_sum{bucket=1,phase=draft}": 0.1,
        "specdecode_cycle_seconds_sum{bucket=1,phase=verify}": 0.2,
        "specdecode_cycle_seconds_sum{bucket=1,phase=draft_extend}": 0.05,
        "specdecode_cycle_seconds_sum{bucket=1,phase=other}": 0.15,
        "specdecode_position_attempts_total{bucket=1,position=1}": 100.0,
        "specdecode_position_accepted_total{bucket=1,position=1}": 80.0,
        "specdecode_position_attempts_total{bucket=1,position=2}": 80.0,
        "specdecode_position_accepted_total{bucket=1,position=2}": 40.0,
    }
    fig = live_runs.pod_figures(counters)
    assert fig["cycle_ms"] == pytest.approx(5.0)  # 0.5 s over 100 cycles
    assert fig["decode_tokens_per_s"] == pytest.approx(600.0)  # 300 tokens in 0.5 s
    assert fig["tokens_per_seq_cycle"] == pytest.approx(3.0)
    assert fig["alphas"] == [0.8, 0.5]
    assert live_runs.pod_figures({}) is None


@pytest.mark.skipif(not REPLAY_RAW.is_dir(), reason="no committed replay run")
def test_the_committed_replay_summary_is_what_its_raw_reports_say(tmp_path):
    s = replay_report.summarize(REPLAY_RAW)
    committed = json.loads((ROOT / "bench/results/gpu_h200_trained_replay.json").read_text())
    assert json.loads(json.dumps(s)) == committed
    for key, p in s["points"].items():
        # the pod's own decode time never exceeds the clients' wall time for the same requests
        assert p["served_tokens_per_s"] <= p["decode_tokens_per_s"], key
        if key.endswith("_k0"):
            assert p["tokens_per_seq_cycle"] == 1.0  # steps 0: one token per sequence per cycle


def test_the_trained_scenario_holds_the_replay_runs_probe_costs_and_acceptance():
    """bench/scenarios/h200-trained-measured.yaml is derived from the committed raw run, not typed in: its costs are
    the pod's start-up probe fitted to the scenario's linear form, its acceptance the pod's count at b1, steps 7."""
    import dataclasses

    import yaml

    live = json.loads((ROOT / "bench/results/gpu_h200/trained_replay/live_b1.json").read_text())
    profile = live_runs.probe_profile(live["probe_costs"])
    costs = tp1_report.scenario_costs({k: dataclasses.asdict(v) for k, v in profile.items()})
    scenario = yaml.safe_load((ROOT / "bench/scenarios/h200-trained-measured.yaml").read_text())
    assert scenario["cost"] == costs
    summary = json.loads((ROOT / "bench/results/gpu_h200_trained_replay.json").read_text())
    assert scenario["phases"][0]["acceptance"] == summary["points"]["b1_k7"]["alphas"]


PAIRED_RAW = ROOT / "bench/results/gpu_h200/trained_paired"


def test_paired_order_is_the_order_paired_measures_in():
    """reports/paired.py reads the measurements back in the order paired() took them: a swapped order would
    attribute the best static's figures to the tuner's table."""
    seen = []

    def setter(name):
        return lambda: seen.append(name)

    live_tune.paired(lambda: 1.0, setter("a"), setter("b"), pairs=4)
    assert live_runs.pair_order(4) == seen


def test_decode_figures_leave_prefill_out_of_the_cycle_and_report_it_apart():
    counters = {
        "specdecode_verify_cycles_total{bucket=8-31}": 100.0,
        "specdecode_requests_verified_total{bucket=8-31}": 800.0,
        "specdecode_tokens_generated_total{}": 2400.0,
        "specdecode_cycle_seconds_sum{bucket=8-31,phase=draft}": 0.1,
        "specdecode_cycle_seconds_sum{bucket=8-31,phase=verify}": 0.1,
        "specdecode_cycle_seconds_sum{bucket=8-31,phase=draft_extend}": 0.1,
        "specdecode_cycle_seconds_sum{bucket=8-31,phase=other}": 0.1,
        "specdecode_prefill_seconds_total{bucket=8-31}": 0.3,
    }
    fig = live_runs.decode_figures(counters)
    assert fig["cycle_ms"] == pytest.approx(4.0)  # the four decode phases only
    assert fig["launch_ms"] == pytest.approx(3.0)
    assert fig["prefill_ms_per_cycle"] == pytest.approx(3.0)
    assert fig["decode_tokens_per_s"] == pytest.approx(2400 / 0.4)


@pytest.mark.skipif(not PAIRED_RAW.is_dir(), reason="no committed paired run")
def test_the_committed_paired_summary_is_what_its_raw_reports_say():
    s = paired_report.summarize(PAIRED_RAW)
    committed = json.loads((ROOT / "bench/results/gpu_h200_trained_paired.json").read_text())
    assert json.loads(json.dumps(s)) == committed
    for b, e in s["live"].items():
        # every measurement of the paired rounds kept its own counters: as many per side as rounds
        assert len(e["final_table_measurements"]) == len(e["best_static_measurements"]) == len(e["rounds"]), b
        for r, a in zip(e["rounds"], e["final_table_measurements"][:1]):
            assert a["served_tokens_per_s"] == r["a"]  # the first measurement of round 0 is the table's
    for key, p in s["points"].items():
        assert p["served_tokens_per_s"] <= p["decode_tokens_per_s"], key
