"""The host side of the trained-model GPU run (bench/gpu/campaigns/host_probe.py, bench/reports/host.py): the sampler
process and its windows, the scheduler's /proc figures, the greedy comparison and the paired interval, against real
processes and the committed raw reports."""

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGNS = ROOT / "bench/gpu/campaigns"
RAW = ROOT / "bench/results/gpu_h200/trained_host"


def _module(name):
    sys.path.insert(0, str(CAMPAIGNS))
    spec = importlib.util.spec_from_file_location(name, CAMPAIGNS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


host_probe = _module("host_probe")
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "runtime")]
from reports import host as host_report  # noqa: E402


def test_sampler_process_times_the_fixed_workload_and_windows_select_by_wall_clock(tmp_path):
    sampler = host_probe.HostSampler(tmp_path / "s.txt", period=0.05).start()
    try:
        t0 = time.time()
        deadline = t0 + 30  # a busy machine may start the interpreter slowly; the samples, not the time, are checked
        while len(sampler.samples()) < 6 and time.time() < deadline:
            time.sleep(0.05)
        t1 = time.time()
    finally:
        sampler.stop()
    rows = sampler.samples()
    assert len(rows) >= 6
    assert sampler.proc.poll() is not None  # stopped, not left behind
    assert all(ms > 0 for _, ms, _ in rows)
    inside = sampler.window(t0, t1)
    assert inside["samples"] == sum(t0 <= t <= t1 for t, _, _ in rows)
    assert inside["workload_ms"] > 0
    assert sampler.window(t1 + 3600, t1 + 7200) == {}  # nothing in a window after the samples


def test_window_reports_steal_per_second_between_first_and_last_sample(tmp_path):
    path = tmp_path / "s.txt"
    path.write_text("100.0 1.0 50\n101.0 3.0 52\n102.0 2.0 56\n200.0 9.0 90\n")
    w = host_probe.HostSampler(path).window(100.0, 102.0)
    assert w == {"workload_ms": 2.0, "samples": 3, "steal_per_s": 3.0}  # (56 - 50) jiffies over 2 s


def test_scheduler_stats_read_a_process_named_as_sglang_names_its_scheduler():
    code = "import setproctitle, time; setproctitle.setproctitle('sglang::scheduler'); time.sleep(30)"
    pytest.importorskip("setproctitle")
    proc = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.time() + 20
        while proc.pid not in host_probe.scheduler_pids() and time.time() < deadline:
            time.sleep(0.05)
        assert proc.pid in host_probe.scheduler_pids()
        stats = host_probe.scheduler_stats()
        assert stats["cpu_s"] >= 0 and stats["involuntary_switches"] >= 0 and len(stats["last_cpu"]) >= 1
        delta = host_probe.stats_delta({"cpu_s": 1.0, "involuntary_switches": 3}, stats)
        assert delta["involuntary_switches"] == stats["involuntary_switches"] - 3
    finally:
        proc.kill()
        proc.wait()


def test_pin_binds_the_scheduler_main_thread_alone_to_the_core_and_the_rest_elsewhere():
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        pytest.skip("needs two cores")
    code = (
        "import setproctitle, threading, time; setproctitle.setproctitle('sglang::scheduler');"
        "threading.Thread(target=time.sleep, args=(30,), daemon=True).start(); time.sleep(30)"
    )
    pytest.importorskip("setproctitle")
    sched = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    mine = os.sched_getaffinity(0)
    try:
        deadline = time.time() + 20
        tasks = Path(f"/proc/{sched.pid}/task")
        while (sched.pid not in host_probe.scheduler_pids() or len(list(tasks.iterdir())) < 2) and (
            time.time() < deadline
        ):
            time.sleep(0.05)
        core = cores[-1]
        got = host_probe.pin(core, os.getpgid(sched.pid), also=(other.pid,))
        assert got["scheduler_pids"] == [sched.pid]
        assert os.sched_getaffinity(sched.pid) == {core}
        helper = [int(t.name) for t in tasks.iterdir() if int(t.name) != sched.pid]
        assert helper and all(core not in os.sched_getaffinity(t) for t in helper)  # its other threads stay free
        assert core not in os.sched_getaffinity(other.pid)
        assert core not in os.sched_getaffinity(0)  # this process too: its client threads stay off the core
    finally:
        os.sched_setaffinity(0, mine)
        for p in (sched, other):
            p.kill()
            p.wait()


def test_greedy_identity_counts_whole_prompts_and_names_each_step_count():
    nospec = [[1, 2, 3], [4, 5, 6]]
    got = host_report.greedy_identity(nospec, {"7": [[1, 2, 3], [4, 5, 7]], "0": [[1, 2, 3], [4, 5, 6]]})
    assert list(got) == ["0", "7"]
    assert got["0"] == {"identical": 2, "prompts": 2, "tokens_each": 3}
    assert got["7"]["identical"] == 1  # one token off makes the prompt differ


def test_median_interval_contains_the_median_and_narrows_with_agreeing_rounds():
    med, lo, hi = host_report.renderer.median_ci([1.0] * 9 + [1.5])
    assert (med, lo, hi) == (1.0, 1.0, 1.0)
    wide = host_report.renderer.median_ci([0.8, 0.9, 1.0, 1.1, 1.2, 0.85, 1.15, 0.95, 1.05, 1.0])
    assert wide[1] <= wide[0] <= wide[2] and wide[2] - wide[1] > 0.05


@pytest.mark.skipif(not RAW.is_dir(), reason="committed raw run")
def test_committed_run_regenerates_its_summary(tmp_path):
    s = host_report.summarize(RAW)
    committed = json.loads((ROOT / "bench/results/gpu_h200_trained_host.json").read_text())
    assert json.loads(json.dumps(s)) == committed
    # what the README and the result say: identical in float32 at every step count, one cycle count per
    # configuration, the b1 table against the best static with its interval
    assert all(v["identical"] == v["prompts"] == 16 for v in s["greedy_float32"].values())
    assert s["repeat_b1"]["unpinned"]["cycles"] == s["repeat_b1"]["pinned"]["cycles"] == [817]
    b1 = s["live_over_best_static"]["1"]
    assert b1["median_ratio_ci95"][0] <= b1["median_ratio"] <= b1["median_ratio_ci95"][1]
    assert b1["cycles"] == {"table": [190], "best_static": [202]}


@pytest.mark.skipif(not RAW.is_dir(), reason="committed raw run")
def test_served_cycles_in_the_start_up_costs_price_the_cycles_they_came_from():
    """With ``costProbe.served`` the pod's start-up costs carry stage ``cycle`` points: the summary prices the
    points with them beside the stage replays alone, which they must not change. Here the committed b1 run's own
    measured static cycles stand in for what a served calibration would have exported."""
    run = json.loads((RAW / "live_b1.json").read_text())
    row = run["batches"]["1"]
    before = host_report.cycle_pricing(run, "1")
    assert not any("calibrated_over_measured" in p for p in before.values())  # no served points in that run
    figs = {k: host_report.decode_figures(row["pod_counters"][k]) for k in ("0", "3", "7")}
    costs = dict(run["probe_costs"])
    for k, fig in figs.items():
        costs[f"specdecode_cost_seconds{{batch=1,bucket=1,stage=cycle,steps={k}}}"] = fig["cycle_ms"] / 1000.0
    after = host_report.cycle_pricing({**run, "probe_costs": costs}, "1")
    assert {n: p["probe_over_measured"] for n, p in after.items()} == {
        n: p["probe_over_measured"] for n, p in before.items()
    }
    assert after["static k0"]["calibrated_over_measured"] == pytest.approx(1.0, abs=1e-3)
    # the host line over two speculative tiers leaves no mean residual at them
    model = [after[f"static k{k}"]["calibrated_over_measured"] * figs[k]["cycle_ms"] for k in ("3", "7")]
    assert sum(model) == pytest.approx(figs["3"]["cycle_ms"] + figs["7"]["cycle_ms"], rel=2e-3)
    summary = host_report.pricing_summary(after)
    assert summary["calibrated_points"] == len(after)
