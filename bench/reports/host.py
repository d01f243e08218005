"""Greedy identity in float32 and the host's part in the paired comparison -> bench/results/gpu_h200_trained_host.{json,md}

    python bench/renderer.py report gpu_h200_trained_host [--raw bench/results/gpu_h200/trained_host] [--out bench/results]

Reads what ``live_tune.py`` wrote for a freshly trained target and head on one H200:

* ``greedy32_nospec.json`` / ``greedy32_live.json`` (``--dtype float32 --greedy-only``): the patched runtime's greedy
  outputs at each step count against no speculation, token for token, without bf16's near-ties;
* ``live_b1.json`` (``--repeat 7:8 --pin-core 3 --pairs 16 --pair-replay 4``) and ``live_b8.json`` (``--pairs 10
  --pair-replay 2``): one configuration measured again and again (unpinned, then with the scheduler's main thread
  bound to a core of its own), each measurement with the pod's cycle counts and phases, the scheduler process's CPU
  time and involuntary switches, steal time and a fixed workload timed in a process of its own; and the tuner's
  final table against the best static of the first pass in short alternating rounds.

Greedy requests over a fixed request set take the same number of decode cycles every time (the pod counts them),
so a slower measurement of one configuration is a slower cycle, never more work: the spread of cycle time is the
host's. The paired figure is the median of per-round ratios with a bootstrap interval over the rounds.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import renderer

from reports.live_runs import decode_figures, pair_order, probe_profile, read_json, steps_at, tier0_extends
from specdecode_runtime.contract.cost_profile import SERVED
from specdecode_runtime.contract.metric_names import bucket_label
from specdecode_runtime.contract.versions import SGLANG_VERSION

META = "meta.json"  # the run's provenance, next to its raw reports


def greedy_identity(nospec: list[list[int]], by_steps: dict[str, list[list[int]]]) -> dict:
    out = {}
    for steps, outs in sorted(by_steps.items(), key=lambda kv: int(kv[0])):
        same = sum(a == b for a, b in zip(outs, nospec))
        out[steps] = {"identical": same, "prompts": len(nospec), "tokens_each": len(nospec[0]) if nospec else 0}
    return out


def _measurement(m: dict) -> dict:
    fig = decode_figures(m["pod_counters"])
    sched = m.get("scheduler") or {}
    return {
        "served_tokens_per_s": m["tokens_per_s"],
        "cycles": fig.get("cycles"),
        "cycle_ms": fig.get("cycle_ms"),
        "phase_ms": fig.get("phase_ms"),
        "scheduler_cpu_over_wall": round(sched["cpu_s"] / m["wall_s"], 3) if sched and m.get("wall_s") else None,
        "involuntary_switches": sched.get("involuntary_switches"),
        "steal_per_s": (m.get("host_cpu") or {}).get("steal_per_s"),
        "workload_ms": (m.get("host_cpu") or {}).get("workload_ms"),
    }


def _spread(values: list[float]) -> float:
    return round(max(values) / min(values), 3)


def _pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3 or statistics.pstdev(xs) == 0 or statistics.pstdev(ys) == 0:
        return None
    return round(statistics.correlation(xs, ys), 3)


def repeat_summary(rep: dict) -> dict:
    out: dict = {"steps": rep["steps"]}
    for side in ("unpinned", "pinned"):
        ms = [_measurement(m) for m in rep.get(side, [])]
        if not ms:
            continue
        tps = [m["served_tokens_per_s"] for m in ms]
        cyc = [m["cycle_ms"] for m in ms]
        out[side] = {
            "served_tokens_per_s": tps,
            "served_spread": _spread(tps),
            "cycles": sorted({m["cycles"] for m in ms}),
            "cycle_ms": cyc,
            "cycle_ms_spread": _spread(cyc),
            "scheduler_cpu_over_wall": [m["scheduler_cpu_over_wall"] for m in ms],
            "involuntary_switches": [m["involuntary_switches"] for m in ms],
            "steal_per_s_max": max(m["steal_per_s"] or 0.0 for m in ms),
            "workload_ms": [m["workload_ms"] for m in ms],
            "cycle_ms_vs_workload_ms_correlation": _pearson(cyc, [m["workload_ms"] or 0.0 for m in ms]),
        }
    return out


def paired_summary(row: dict) -> dict:
    pr, lv = row["paired"], row["live"]
    sides: dict[str, list[dict]] = {"a": [], "b": []}
    for side, m in zip(pair_order(len(pr["rounds"])), pr["measurements"]):
        sides[side].append(_measurement(m))
    ratios = [r["ratio"] for r in pr["rounds"]]
    med, lo, hi = renderer.median_ci(ratios)
    mean_batch = statistics.median(decode_figures(m["pod_counters"]).get("mean_batch", 1.0) for m in pr["measurements"])
    table_steps = steps_at(lv["final_table"], mean_batch)
    best = row["best_static"]
    tps = {s: [m["served_tokens_per_s"] for m in v] for s, v in sides.items()}
    return {
        "final_table": lv["final_table"],
        "table_steps_at_mean_batch": table_steps,
        "best_static_first_pass": best,
        "rounds": len(ratios),
        "median_ratio": round(med, 4),
        "median_ratio_ci95": [round(lo, 4), round(hi, 4)],
        "ratio_of_medians": round(statistics.median(tps["a"]) / statistics.median(tps["b"]), 4),
        "ratio_of_best": round(max(tps["a"]) / max(tps["b"]), 4),
        "cycles": {
            "table": sorted({m["cycles"] for m in sides["a"]}),
            "best_static": sorted({m["cycles"] for m in sides["b"]}),
        },
        "served_spread": {"table": _spread(tps["a"]), "best_static": _spread(tps["b"])},
        "static_first_pass": row["static"],
    }


def cycle_pricing(run: dict, b: str) -> dict:
    """The goodput model's cycle time against the measured decode cycle, per point: priced by the start-up probe
    alone (GPU graph replays and sampling) and by the tuner's refined costs at the end of its Live run (the pod's
    served phases, host work included). Cycle time, not tok/s: the model's tokens per cycle come from the
    acceptance it is given, and the content of a measurement (which prompts) moves acceptance, not cost. The
    refined cost is known at the bucket's batch only, so it is compared where the measured mean batch is within
    10 % of it."""
    row = run["batches"][b]
    costs = run.get("probe_costs") or {}
    ext = tier0_extends(run)
    profile = probe_profile({k: v for k, v in costs.items() if f"stage={SERVED}," not in k}, ext)  # replays alone
    calibrated = probe_profile(costs, ext) if any(f"stage={SERVED}," in k for k in costs) else {}
    refined = row["live"].get("refined_cost_ms") or {}
    points = [(f"static k{k}", int(k), row["pod_counters"][k]) for k in row["static"]]
    order = pair_order(len(row["paired"]["rounds"]))
    steps = {"a": steps_at(row["live"]["final_table"], float(b)), "b": row["best_static"]["steps"]}
    points += [
        (f"paired {i} ({'table' if s == 'a' else 'static'})", steps[s], m["pod_counters"])
        for i, (s, m) in enumerate(zip(order, row["paired"]["measurements"]))
    ]
    out = {}
    for name, k, counters in points:
        fig = decode_figures(counters)
        cost = profile.get(bucket_label(max(1, round(fig["mean_batch"]))))
        entry = {"steps": k, "mean_batch": fig["mean_batch"], "measured_cycle_ms": fig["cycle_ms"]}
        if cost is not None:
            entry["probe_over_measured"] = round(cost.cycle_ms(k, fig["mean_batch"]) / fig["cycle_ms"], 3)
        served = calibrated.get(bucket_label(max(1, round(fig["mean_batch"]))))
        if served is not None:  # the start-up profile with the served calibration (costProbe.served)
            entry["calibrated_over_measured"] = round(served.cycle_ms(k, fig["mean_batch"]) / fig["cycle_ms"], 3)
        if str(k) in refined and abs(fig["mean_batch"] - int(b)) <= 0.1 * int(b):
            entry["refined_over_measured"] = round(refined[str(k)] / fig["cycle_ms"], 3)
        out[name] = entry
    return out


def _range(values: list[float]) -> list[float] | None:
    return [min(values), max(values)] if values else None


def pricing_summary(points: dict) -> dict:
    probe = [p["probe_over_measured"] for p in points.values() if "probe_over_measured" in p]
    refined = [p["refined_over_measured"] for p in points.values() if "refined_over_measured" in p]
    calibrated = [p["calibrated_over_measured"] for p in points.values() if "calibrated_over_measured" in p]
    served = (
        {
            "calibrated_over_measured_range": _range(calibrated),
            "calibrated_over_measured_median": round(statistics.median(calibrated), 3),
            "calibrated_within_10pct": sum(abs(r - 1.0) <= 0.10 for r in calibrated),
            "calibrated_points": len(calibrated),
        }
        if calibrated
        else {}
    )
    return {
        **served,
        "points": points,
        "probe_over_measured_range": _range(probe),
        "refined_over_measured_range": _range(refined),
        "refined_over_measured_median": round(statistics.median(refined), 3) if refined else None,
        "refined_within_10pct": sum(abs(r - 1.0) <= 0.10 for r in refined),
        "refined_points": len(refined),
        "refined_outside_10pct": [
            f"{n} ({p['refined_over_measured']})"
            for n, p in points.items()
            if "refined_over_measured" in p and abs(p["refined_over_measured"] - 1.0) > 0.10
        ],
    }


def summarize(raw: Path) -> dict:
    nospec = read_json(raw, "greedy32_nospec.json")["greedy"]
    live32 = read_json(raw, "greedy32_live.json")
    by_steps = {str(json.loads(live32["args"]["initial_steps"])): live32["greedy"], **live32.get("greedy_by_steps", {})}
    b1, b8 = read_json(raw, "live_b1.json"), read_json(raw, "live_b8.json")
    prov = renderer.provenance(raw / META)
    return {
        "provenance": prov,
        "device": prov["device"],
        "greedy_float32": greedy_identity(nospec, by_steps),
        "pinned": b1.get("pinned"),
        "repeat_b1": repeat_summary(b1["batches"]["1"]["repeat"]),
        "live_over_best_static": {"1": paired_summary(b1["batches"]["1"]), "8": paired_summary(b8["batches"]["8"])},
        "cycle_pricing": {"1": pricing_summary(cycle_pricing(b1, "1")), "8": pricing_summary(cycle_pricing(b8, "8"))},
    }


def findings(s: dict) -> list[str]:
    g = s["greedy_float32"]
    out = [
        "**Greedy outputs in float32: identical to no speculation at every step count** ("
        + ", ".join(f"steps {k}: {v['identical']}/{v['prompts']}" for k, v in g.items())
        + f" prompts x {next(iter(g.values()))['tokens_each']} tokens). The bf16 differences of the earlier runs "
        "(2 of 8 prompts, in stock SGLang as well) are rounding near-ties, not the patches."
    ]
    r = s["repeat_b1"]
    for side in ("unpinned", "pinned"):
        if side in r:
            x = r[side]
            out.append(
                f"**b1 steps {r['steps']}, {side}, {len(x['served_tokens_per_s'])} times in a row**: served "
                f"{min(x['served_tokens_per_s'])}-{max(x['served_tokens_per_s'])} tok/s ({x['served_spread']}x), "
                f"always {x['cycles']} decode cycles, cycle time {x['cycle_ms_spread']}x apart; the scheduler used "
                f"{min(x['scheduler_cpu_over_wall'])}-{max(x['scheduler_cpu_over_wall'])} of a core, "
                f"{min(x['involuntary_switches'])}-{max(x['involuntary_switches'])} involuntary switches, steal at most "
                f"{x['steal_per_s_max']} jiffies/s; cycle time against the side workload's time: correlation "
                f"{x['cycle_ms_vs_workload_ms_correlation']}."
            )
    if "unpinned" in r and "pinned" in r:
        out.append(
            "**So the core itself runs slower at times**: the same work (a fixed number of cycles) takes up to "
            f"{max(r['unpinned']['cycle_ms_spread'], r['pinned']['cycle_ms_spread'])}x longer with the scheduler "
            "never preempted, no steal time and the GPU clock fixed, and binding it to a core of its own does not "
            "remove it; a workload timed on another core does not move with it. This is the lent virtual machine's "
            "per-core speed, which a pod cannot control (a Guaranteed pod with whole CPUs only keeps other pods off "
            "its cores). What holds against it: short alternating rounds and an interval over them."
        )
    for b, p in s["live_over_best_static"].items():
        same = p["table_steps_at_mean_batch"] == p["best_static_first_pass"]["steps"]
        out.append(
            f"**b{b}: the tuner's table (steps {p['table_steps_at_mean_batch']}) over the first pass's best static "
            f"(steps {p['best_static_first_pass']['steps']}), {p['rounds']} short alternating rounds: median "
            f"{p['median_ratio']} (95 % bootstrap interval {p['median_ratio_ci95'][0]}-{p['median_ratio_ci95'][1]}); "
            f"ratio of medians {p['ratio_of_medians']}, of the fastest rounds {p['ratio_of_best']}**"
            + (
                "; the same step count on both sides, so this measures the server's noise"
                if same
                else f"; decode cycles per round: table {p['cycles']['table']}, static {p['cycles']['best_static']}"
            )
            + "."
        )
    for b, c in s["cycle_pricing"].items():
        out.append(
            f"**b{b}, the model's cycle time over the measured decode cycle**: priced by the start-up probe alone "
            f"{c['probe_over_measured_range'][0]}-{c['probe_over_measured_range'][1]} (it times the GPU's graph "
            "replays, not the host's work per cycle); priced by the tuner's refined costs (the served phases) "
            + (
                f"{c['refined_over_measured_range'][0]}-{c['refined_over_measured_range'][1]}, median "
                f"{c['refined_over_measured_median']}, {c['refined_within_10pct']} of {c['refined_points']} points "
                "within 10 %"
                + (f"; outside: {', '.join(c['refined_outside_10pct'])}" if c["refined_outside_10pct"] else "")
                if c["refined_points"]
                else "not comparable here (no point at the bucket's batch)"
            )
            + (
                f"; priced by the start-up profile with the served calibration "
                f"{c['calibrated_over_measured_range'][0]}-{c['calibrated_over_measured_range'][1]}, median "
                f"{c['calibrated_over_measured_median']}, {c['calibrated_within_10pct']} of "
                f"{c['calibrated_points']} points within 10 %"
                if c.get("calibrated_points")
                else ""
            )
            + "."
        )
    return out


def markdown(s: dict) -> str:
    lines = [
        "# The trained model on one H200: greedy identity in float32, and the host's part in the paired comparison",
        "",
        f"{s['device']}, SGLang {SGLANG_VERSION} + the runtime's patches (Live tiers 0-7), triton attention, CUDA graphs, "
        "overlap scheduler; a freshly trained 304M code LM and EAGLE-3 head (b8 on a second training of the same "
        "recipe: the lent machine was released between calls). Raw: `bench/results/gpu_h200/trained_host/`.",
        "",
        "## What this run shows",
        "",
        *[f"- {f}" for f in findings(s)],
        "",
    ]
    return "\n".join(lines) + "\n" + renderer.provenance_md(s["provenance"])
