"""The trained model on one H200, the tuner's table paired with the best static -> bench/results/gpu_h200_trained_paired.{json,md}

    python bench/renderer.py report gpu_h200_trained_paired [--raw bench/results/gpu_h200/trained_paired] [--out bench/results]

Reads what ``live_tune.py --replay N`` wrote for one freshly trained target and head (``nospec.json``,
``live_*.json`` split by batch, ``stock_K.json``) and reports:

* every static point **served** (what the clients saw) and **decode-only** (the pod's own counters over the same
  requests: decode cycles over their busy time, the prefill work the overlap scheduler runs inside those cycles
  counted apart by ``specdecode_prefill_seconds`` and left out);
* the tuner's final table against the best static step count in **alternating rounds** (``paired``: the median of
  per-round ratios), with every measurement's own cycle phases, GPU clock and host load;
* the planner (the contract's goodput model) against decode-only: priced by the pod's start-up probe alone, and by
  the tuner's refined costs at the end of its Live run;
* patched over stock SGLang at the same steps, greedy outputs against no speculation.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import renderer

from reports.live_runs import (
    decode_figures,
    greedy_vs_nospec,
    pair_order,
    probe_profile,
    replay_runs,
    steps_at,
    tier0_extends,
)
from specdecode_runtime.contract.goodput import goodput
from specdecode_runtime.contract.metric_names import bucket_label
from specdecode_runtime.contract.versions import SGLANG_VERSION

META = "meta.json"  # the run's provenance, next to its raw reports


def _spread(values: list[float]) -> float | None:
    return round(max(values) / min(values), 3) if values and min(values) > 0 else None


def summarize(raw: Path) -> dict:
    nospec, lives, stock = replay_runs(raw)
    base = {b: r["tokens_per_s"] for b, r in nospec["batches"].items()}
    points, speedup, planner, live, stock_ratio, host = {}, {}, {}, {}, {}, {}
    for run in lives:
        profile = probe_profile(run.get("probe_costs") or {}, tier0_extends(run))
        for b, row in run["batches"].items():
            for k, served in row["static"].items():
                fig = decode_figures(row["pod_counters"][k])
                key = f"b{b}_k{k}"
                points[key] = {"served_tokens_per_s": served, **fig, "gpu": row.get("gpu", {}).get(k)}
                speedup[key] = round(served / base[b], 3)
                cost = profile.get(bucket_label(max(1, round(fig["mean_batch"])))) if fig else None
                if cost is not None:
                    pred = goodput(fig["alphas"] or [0.0], cost, int(k), fig["mean_batch"])
                    points[key]["probe_planner_tokens_per_s"] = round(pred, 1)
                    planner[key] = round(pred / fig["decode_tokens_per_s"], 3)
                for sk, st in stock.items():
                    if int(k) == sk and b in st["batches"]:
                        stock_ratio[key] = round(served / st["batches"][b]["tokens_per_s"], 3)
            lv, pr = row["live"], row.get("paired")
            best = row["best_static"]
            entry: dict = {
                "final_table": lv["final_table"],
                "best_static_first_pass": best,
                "trace_tables": [t["table"] for t in lv["trace"]],
                "cost_source": lv.get("cost_source"),
            }
            if pr:
                sides = {"a": [], "b": []}
                for side, m in zip(pair_order(len(pr["rounds"])), pr["measurements"]):
                    fig = decode_figures(m["pod_counters"])
                    sides[side].append(
                        {
                            "served_tokens_per_s": m["tokens_per_s"],
                            "decode_tokens_per_s": fig.get("decode_tokens_per_s"),
                            "cycle_ms": fig.get("cycle_ms"),
                            "launch_ms": fig.get("launch_ms"),
                            "prefill_ms_per_cycle": fig.get("prefill_ms_per_cycle"),
                            "mean_batch": fig.get("mean_batch"),
                            "sm_mhz": (m.get("gpu") or {}).get("sm_mhz"),
                            "host_load1": m.get("host_load1"),
                        }
                    )
                final_steps = steps_at(lv["final_table"], statistics.median(x["mean_batch"] for x in sides["a"]))
                entry.update(
                    {
                        "rounds": pr["rounds"],
                        "median_ratio": pr["median_ratio"],
                        "ratio_spread": pr["spread"],
                        "final_table_steps_at_mean_batch": final_steps,
                        "same_configuration": final_steps == best["steps"],
                        "final_table_measurements": sides["a"],
                        "best_static_measurements": sides["b"],
                    }
                )
                # the tuner's own prediction at the end of its run (refined costs, live acceptance) for the step
                # count its table serves, against the decode-only count of every later measurement of that table
                pred = (lv.get("predicted_tokens_per_s") or {}).get(str(final_steps))
                dec = [x["decode_tokens_per_s"] for x in sides["a"] if x["decode_tokens_per_s"]]
                if pred and dec:
                    entry["refined_prediction_tokens_per_s"] = pred
                    entry["refined_over_decode_median"] = round(pred / statistics.median(dec), 3)
                    entry["refined_over_decode_range"] = [round(pred / max(dec), 3), round(pred / min(dec), 3)]
                if entry["same_configuration"]:
                    every = sides["a"] + sides["b"]
                    host[f"b{b}"] = {
                        "steps": final_steps,
                        "measurements": len(every),
                        "served_max_over_min": _spread([x["served_tokens_per_s"] for x in every]),
                        "launch_ms_max_over_min": _spread([x["launch_ms"] for x in every]),
                        "sm_mhz": sorted({x["sm_mhz"] for x in every}),
                        "host_load1": [min(x["host_load1"] for x in every), max(x["host_load1"] for x in every)],
                    }
            live[f"b{b}"] = entry
    greedy = {"nospec": nospec["greedy"]}
    greedy.update({f"live_{i}": lv["greedy"] for i, lv in enumerate(lives)})
    greedy.update({f"stock_k{k}": st["greedy"] for k, st in stock.items()})
    identical = greedy_vs_nospec(greedy)
    # the patched server against stock SGLang at the step count it started with: token for token
    initial = int(lives[0]["args"]["initial_steps"])
    if initial in stock:
        identical["live_0_vs_stock_same_steps"] = {
            "steps": initial,
            "prompts_identical": sum(a == c for a, c in zip(lives[0]["greedy"], stock[initial]["greedy"])),
            "prompts": len(stock[initial]["greedy"]),
        }
    acceptance = json.loads((raw / "acceptance.json").read_text()) if (raw / "acceptance.json").exists() else {}
    prov = renderer.provenance(raw / META)
    return {
        "provenance": prov,
        "device": prov["device"],
        "sglang": SGLANG_VERSION,
        "max_new_tokens": int(lives[0]["args"]["max_new_tokens"]),
        "replay_requests_per_client": {b: int(r["args"]["replay"]) for r in lives for b in r["batches"]},
        "nospec_tokens_per_s": base,
        "accept_length": {
            "offline_heldout": acceptance.get("accept_length_by_steps"),
            "served": {k: p.get("tokens_per_seq_cycle") for k, p in points.items() if not k.endswith("_k0")},
        },
        "points": points,
        "speedup_over_nospec": speedup,
        "live": live,
        "live_over_best_static": {b: e.get("median_ratio") for b, e in live.items()},
        "host_speed_same_configuration": host,
        "planner_over_measured": {
            "probe_only": planner,
            "refined": {b: e.get("refined_over_decode_median") for b, e in live.items()},
        },
        "patched_over_stock": stock_ratio,
        "stock_tokens_per_s": {k: {b: r["tokens_per_s"] for b, r in st["batches"].items()} for k, st in stock.items()},
        "greedy_vs_nospec": identical,
    }


def findings(s: dict) -> list[str]:
    out = []
    sp = s["speedup_over_nospec"]
    b1 = {k: v for k, v in sp.items() if k.startswith("b1_")}
    if b1:
        kbest = max(b1, key=b1.get)
        out.append(
            f"- **Batch 1: {b1[kbest]}x no speculation served** ({s['points'][kbest]['served_tokens_per_s']} vs "
            f"{s['nospec_tokens_per_s']['1']} tok/s, {kbest}); every step count >= 2 is >= "
            f"{min(v for k, v in b1.items() if int(k.split('_k')[1]) >= 2)}x."
        )
    for b, e in s["live"].items():
        if "median_ratio" not in e:
            continue
        same = (
            "the same step count as the best static (the rounds measure the server's noise, not the tuner)"
            if e["same_configuration"]
            else f"steps {e['final_table_steps_at_mean_batch']} against the first pass's best static, steps "
            f"{e['best_static_first_pass']['steps']}"
        )
        out.append(
            f"- **{b}: the tuner's table over the best static, {len(e['rounds'])} alternating rounds: median "
            f"{e['median_ratio']}** (per-round ratios {', '.join(str(r['ratio']) for r in e['rounds'])}); its table "
            f"serves {same}."
        )
    host = s["host_speed_same_configuration"]
    if host:
        out.append(
            "- **The host, not the GPU, moves**: one configuration measured again and again in a row ran "
            + "; ".join(
                f"at {b} (steps {h['steps']}, {h['measurements']} times) {h['served_max_over_min']}x apart served "
                f"and {h['launch_ms_max_over_min']}x apart in host launch time per cycle"
                for b, h in host.items()
            )
            + f", with the GPU's SM clock at {sorted({m for h in host.values() for m in h['sm_mhz']})} MHz throughout "
            f"and the host's load average {min(h['host_load1'][0] for h in host.values())}-"
            f"{max(h['host_load1'][1] for h in host.values())}. The launch phases (draft + verify + extend) are pure "
            "CPU work and this target is host-bound at small batch, so the lent machine's CPU speed sets its pace "
            "from minute to minute: a 3 % comparison needs many more rounds than this run had (see each batch's "
            "spread)."
        )
    pre = {k: p["prefill_ms_per_cycle"] for k, p in s["points"].items() if p.get("prefill_ms_per_cycle") is not None}
    big = {k: v for k, v in pre.items() if k.startswith("b32_") and not k.endswith("_k0")}
    if big:
        k0 = s["points"].get("b32_k0", {})
        out.append(
            f"- **Prefill, not decode, bounds batch 32 with these short requests**: speculative cycles there carry "
            f"{min(big.values())}-{max(big.values())} ms of prefill work each (new requests' prefills, target and "
            f"draft, eager), against {k0.get('prefill_ms_per_cycle')} ms at steps 0 (a request ends every few "
            "cycles when each cycle emits 3-4 tokens per sequence). Counted apart, decode-only is "
            + ", ".join(f"{k}: {p['decode_tokens_per_s']}" for k, p in s["points"].items() if k.startswith("b32_"))
            + " tok/s: speculation decodes faster at batch 32, and the served figure does not show it because "
            "prefills fill the time it saves (mean batch "
            + ", ".join(f"{k}: {p['mean_batch']}" for k, p in s["points"].items() if k.startswith("b32_"))
            + ")."
        )
    probe = s["planner_over_measured"]["probe_only"]
    refined = {b: v for b, v in s["planner_over_measured"]["refined"].items() if v is not None}
    if probe:
        out.append(
            f"- **Planner against decode-only**: priced by the start-up probe alone, {min(probe.values())}-"
            f"{max(probe.values())} over the static points (the probe times graph replays on the GPU; at small batch "
            "this target's cycle is the host's launch work, which the probe does not time); priced by the tuner's "
            "refined costs at the end of its Live run, "
            + ", ".join(f"{b}: {v}" for b, v in refined.items())
            + " of the median decode-only count of its table's later measurements."
        )
    vs_stock = s["greedy_vs_nospec"].get("live_0_vs_stock_same_steps")
    greedy = {n: g for n, g in s["greedy_vs_nospec"].items() if "first_difference" in g}
    diffs = {n: g for n, g in greedy.items() if g["prompts_identical"] < g["prompts"]}
    same = [n for n, g in greedy.items() if g["prompts_identical"] == g["prompts"]]
    out.append(
        "- **Greedy outputs against no speculation**: "
        + (f"identical for {', '.join(same)}" if same else "")
        + ("; " if same and diffs else "")
        + "; ".join(
            f"{n} {g['prompts_identical']}/{g['prompts']} (prompt {g['first_difference'][0]['prompt']}, token "
            f"{g['first_difference'][0]['token']})"
            for n, g in diffs.items()
        )
        + "."
        + (
            f" The patched server and stock SGLang at the steps it started with ({vs_stock['steps']}) agree token "
            f"for token on {vs_stock['prompts_identical']}/{vs_stock['prompts']} prompts: where either differs from "
            "no speculation, it is bf16 near-ties that a verify over steps + 1 tokens and a one-token decode break "
            "differently, in SGLang itself."
            if vs_stock
            else ""
        )
    )
    return out


def markdown(s: dict) -> str:
    out = [
        "# The trained model on one H200: the tuner's table paired with the best static (measured)",
        "",
        f"{s['device']}, SGLang {s['sglang']} (+ the runtime's patches for the Live server), triton attention, CUDA "
        "graphs (decode batch 1/4/8/16/32), overlap scheduler on; a freshly trained 304M code LM and EAGLE-3 head. "
        f"Each point: B client threads each send N greedy requests ({s['max_new_tokens']} output tokens, "
        f"ignore_eos, 240-character held-out prompts) back to back (N per batch: {s['replay_requests_per_client']}; "
        f"no speculation and stock: 16 and 8). **Served** tok/s is what the clients saw; **decode-only** is what the "
        "pod counted: decode cycles over their busy time, with the prefill work run inside those cycles counted "
        "apart.",
        "",
        "## What this run shows",
        "",
        *findings(s),
        "",
        "## Static step counts",
        "",
        "| point | served tok/s | x no spec | decode-only tok/s | mean batch | tokens/seq/cycle | cycle ms | "
        "launch ms | prefill ms/cycle | probe planner tok/s | probe planner / decode | patched / stock |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, p in s["points"].items():
        out.append(
            f"| {key} | {p['served_tokens_per_s']} | {s['speedup_over_nospec'][key]}x | "
            f"{p.get('decode_tokens_per_s')} | {p.get('mean_batch')} | {p.get('tokens_per_seq_cycle')} | "
            f"{p.get('cycle_ms')} | {p.get('launch_ms')} | {p.get('prefill_ms_per_cycle')} | "
            f"{p.get('probe_planner_tokens_per_s')} | {s['planner_over_measured']['probe_only'].get(key)} | "
            f"{s['patched_over_stock'].get(key, '')} |"
        )
    out += [
        "",
        "No speculation (stock `sglang.launch_server`): "
        + ", ".join(f"batch {b}: {v} tok/s" for b, v in s["nospec_tokens_per_s"].items())
        + ". Stock SGLang EAGLE-3: "
        + "; ".join(
            f"steps {k}: " + ", ".join(f"b{b} {v}" for b, v in r.items()) for k, r in s["stock_tokens_per_s"].items()
        )
        + ".",
        "",
        "## The tuner's table against the best static, alternating rounds",
        "",
    ]
    for b, e in s["live"].items():
        out.append(
            f"### {b}: final table {e['final_table']}, best static of the first pass "
            f"steps {e['best_static_first_pass']['steps']} ({e['best_static_first_pass']['tokens_per_s']} tok/s)"
        )
        out.append("")
        if "rounds" not in e:
            continue
        out.append(f"Median ratio {e['median_ratio']}, per-round ratios spread {e['ratio_spread']}.")
        out.append("")
        out.append(
            "| side | served tok/s | decode-only tok/s | cycle ms | launch ms | prefill ms/cycle | mean batch | SM MHz | host load |"
        )
        out.append("|---|---|---|---|---|---|---|---|---|")
        for side, rows in (("table", e["final_table_measurements"]), ("best static", e["best_static_measurements"])):
            for x in rows:
                out.append(
                    f"| {side} | {x['served_tokens_per_s']} | {x['decode_tokens_per_s']} | {x['cycle_ms']} | "
                    f"{x['launch_ms']} | {x['prefill_ms_per_cycle']} | {x['mean_batch']} | {x['sm_mhz']} | "
                    f"{x['host_load1']} |"
                )
        if "refined_prediction_tokens_per_s" in e:
            out += [
                "",
                f"The tuner's prediction for its table (refined costs, live acceptance): "
                f"{e['refined_prediction_tokens_per_s']} tok/s; over the decode-only count: median "
                f"{e['refined_over_decode_median']}, range {e['refined_over_decode_range']}.",
            ]
        out.append("")
    out += ["## Greedy outputs against no speculation (8 held-out prompts x 64 tokens, one at a time)", ""]
    for name, g in s["greedy_vs_nospec"].items():
        out.append(
            f"- {name}: {g['prompts_identical']}/{g['prompts']} identical"
            + (f"; first differences {g['first_difference']}" if "first_difference" in g else "")
        )
    out += [
        "",
        "## Acceptance",
        "",
        f"- offline, held-out (accept length by steps): {s['accept_length']['offline_heldout']}",
    ]
    return "\n".join(out) + "\n\n" + renderer.provenance_md(s["provenance"])
