"""The trained model on one H200, every point on one fixed request set -> bench/results/gpu_h200_trained_replay.{json,md}

    python bench/renderer.py report gpu_h200_trained_replay [--raw bench/results/gpu_h200/trained_replay] [--out bench/results]

Reads what ``live_tune.py --replay N`` wrote (``nospec.json``, ``live_*.json`` split by batch, ``stock_K.json``) and
puts two figures side by side for every point:

* **served** tok/s: what the clients saw, prefill of every request and scheduling included;
* **decode-only** tok/s: what the pod itself counted over the same requests (``specdecode_*`` counters scraped
  before and after the point): tokens emitted by decode cycles over the decode cycles' busy time, with the mean
  cycle time, its phases, the mean batch and the tokens per sequence per cycle.

The planner's prediction for a point is the contract's goodput model with the pod's start-up probe profile (its
``specdecode_cost_seconds`` series, fitted by ``cost_profile``) and the acceptance the pod counted at that point, at
the point's measured mean batch: it prices decode cycles, so it is compared with the decode-only figure first.
"""

from __future__ import annotations

from pathlib import Path

import renderer

from reports.live_runs import greedy_vs_nospec, pod_figures, probe_profile, replay_runs, steps_at, tier0_extends
from specdecode_runtime.contract.goodput import goodput
from specdecode_runtime.contract.metric_names import PHASES, bucket_label
from specdecode_runtime.contract.versions import SGLANG_VERSION

META = "meta.json"  # the run's provenance, next to its raw reports


def summarize(raw: Path) -> dict:
    nospec, lives, stock = replay_runs(raw)
    base = {b: r["tokens_per_s"] for b, r in nospec["batches"].items()}
    points, live_ratio, stock_ratio, speedup, planner, best = {}, {}, {}, {}, {}, {}
    for live in lives:
        profile = probe_profile(live.get("probe_costs") or {}, tier0_extends(live))
        for b, row in live["batches"].items():
            for k, served in row["static"].items():
                fig = pod_figures(row["pod_counters"][k]) or {}
                pt = {"served_tokens_per_s": served, **fig}
                if fig:
                    pt["served_over_decode"] = round(served / fig["decode_tokens_per_s"], 3)
                    cost = profile.get(bucket_label(max(1, round(fig["mean_batch"]))))
                    if cost is not None:
                        pred = goodput(fig["alphas"] or [0.0], cost, int(k), fig["mean_batch"])
                        pt["planner_tokens_per_s"] = round(pred, 1)
                        pt["planner_cycle_ms"] = round(cost.cycle_ms(int(k), fig["mean_batch"]), 3)
                        planner[f"b{b}_k{k}"] = {
                            "over_decode": round(pred / fig["decode_tokens_per_s"], 3),
                            "over_served": round(pred / served, 3),
                        }
                points[f"b{b}_k{k}"] = pt
                speedup[f"b{b}_k{k}"] = round(served / base[b], 3)
            bk = max(row["static"], key=lambda k: row["static"][k])
            best[f"b{b}"] = {"steps": int(bk), "served_tokens_per_s": row["static"][bk]}
            lv = row["live"]
            replay = lv.get("tokens_per_s_replay")
            fig = pod_figures(lv.get("pod_counters_replay") or {}) or {}
            live_ratio[f"b{b}"] = {
                "final_table": lv["final_table"],
                "served_tokens_per_s": replay,
                "decode_tokens_per_s": fig.get("decode_tokens_per_s"),
                "mean_batch": fig.get("mean_batch"),
                "cycle_ms": fig.get("cycle_ms"),
                "over_best_static": round(replay / row["static"][bk], 3) if replay else None,
                "speedup_over_nospec": round(replay / base[b], 3) if replay else None,
                "bucket_steps_at_mean_batch": steps_at(lv["final_table"], fig.get("mean_batch")),
            }
            for k, st in stock.items():
                if str(k) in row["static"] and b in st["batches"]:
                    stock_ratio[f"b{b}_k{k}"] = round(row["static"][str(k)] / st["batches"][b]["tokens_per_s"], 3)
    drift = {}
    for b, lr in live_ratio.items():
        # only where the final table runs one step count at every batch size the load reaches (1..B): there the
        # final table and that static point are the same configuration on the same requests
        reached = {int(k) for lo, k in lr["final_table"] if lo <= int(b.lstrip("b"))}
        k = lr["bucket_steps_at_mean_batch"]
        static = points.get(f"{b}_k{k}")
        if len(reached) == 1 and static and lr["served_tokens_per_s"]:
            drift[b] = {
                "steps": k,
                "static_first_pass": static["served_tokens_per_s"],
                "live_table_later": lr["served_tokens_per_s"],
                "ratio": round(lr["served_tokens_per_s"] / static["served_tokens_per_s"], 3),
                "static_cycle_ms": static.get("cycle_ms"),
                "live_cycle_ms": lr["cycle_ms"],
            }
            if static.get("planner_tokens_per_s") and lr["decode_tokens_per_s"]:
                # the same steps and acceptance, so the same prediction: against the later (warm) measurement
                drift[b]["planner_over_decode_later"] = round(
                    static["planner_tokens_per_s"] / lr["decode_tokens_per_s"], 3
                )
    greedy = {"nospec": nospec["greedy"]}
    greedy.update({f"live_{i}": lv["greedy"] for i, lv in enumerate(lives)})
    greedy.update({f"stock_k{k}": st["greedy"] for k, st in stock.items()})
    identical = greedy_vs_nospec(greedy)
    prov = renderer.provenance(raw / META)
    return {
        "provenance": prov,
        "device": prov["device"],
        "sglang": SGLANG_VERSION,
        "replay_requests_per_client": int(lives[0]["args"]["replay"]),
        "max_new_tokens": int(lives[0]["args"]["max_new_tokens"]),
        "nospec_tokens_per_s": base,
        "points": points,
        "speedup_over_nospec": speedup,
        "best_static": best,
        "live": live_ratio,
        "same_steps_measured_twice": drift,
        "patched_over_stock": stock_ratio,
        "planner_over_measured": planner,
        "greedy_vs_nospec": identical,
        "ready_s": {"nospec": nospec.get("ready_s"), **{f"live_{i}": lv.get("ready_s") for i, lv in enumerate(lives)}},
    }


def findings(s: dict) -> list[str]:
    """The run's conclusions, each figure taken from the summary so a rerun rewrites them."""
    out = []
    b1 = s["live"].get("b1")
    if b1:
        out.append(
            f"- **Batch 1: {b1['speedup_over_nospec']}x no speculation** with the table the operator's tuner chose "
            f"({b1['final_table'][0]}: steps {b1['bucket_steps_at_mean_batch']} at batch 1, the best static step "
            f"count of the first pass, steps {s['best_static']['b1']['steps']})."
        )
    for b, d in s["same_steps_measured_twice"].items():
        out.append(
            f"- **The server drifts more than the effect under test**: at {b} the same configuration (steps "
            f"{d['steps']}, the same requests) ran at {d['static_first_pass']} tok/s in the first pass and "
            f"{d['live_table_later']} tok/s minutes later (x{d['ratio']}; every phase of the cycle slower alike). "
            "Static points measured once in ascending order are therefore not comparable to 3 %, and neither is "
            "the final table against them: `live_over_best_static` of this run is not a tuner figure. "
            "`live_tune.py` now measures the final table against the best static in alternating pairs "
            "(`--pairs`, median of per-round ratios) and records the GPU's clocks per point; not yet run on the GPU."
        )
    over = [(k, v["over_decode"]) for k, v in s["planner_over_measured"].items() if not k.startswith("b1_")]
    if over:
        others = {
            k: p["phase_ms"]["other"] for k, p in s["points"].items() if not k.startswith("b1_") and p.get("phase_ms")
        }
        spec = [v for k, v in others.items() if not k.endswith("_k0")]
        zero = [v for k, v in others.items() if k.endswith("_k0")]
        out.append(
            f"- **The probe misses what speculative cycles cost at batch >= 8**: the planner (probe profile + the "
            f"point's own acceptance) over decode-only is {min(v for _, v in over)}-{max(v for _, v in over)} there. "
            f"The pod's cycles carry {min(spec):.1f}-{max(spec):.1f} ms in the `other` phase with speculation "
            f"against {min(zero):.1f}-{max(zero):.1f} ms at steps 0 (the time between the launches' end and the "
            "results, where the GPU work behind the launches and the prefills between decode cycles land); the "
            "probe times graph replays only. The tuner's online refinement corrects this per bucket from live timings; "
            "a planner for a host-bound target needs a probe stage that times a served cycle."
        )
    k0 = {k: p for k, p in s["points"].items() if k.endswith("_k0")}
    if k0:
        out.append(
            f"- **Steps 0 is not free**: the target-only tier keeps the draft's KV warm (SGLang {SGLANG_VERSION} runs the draft "
            "extend every cycle at tier 0), "
            + ", ".join(
                f"{k}: {p['served_tokens_per_s']} tok/s served against {s['nospec_tokens_per_s'][k[1:].split('_')[0]]} "
                "for stock no speculation"
                for k, p in k0.items()
            )
            + " (first in each pass, so the drift above is in these too). The goodput model prices that extend "
            "(`CycleCost.warm_extend_*`, the probe's draft-extend line at one token per sequence); it priced steps 0 "
            "as plain decoding before this run."
        )
    diffs = {n: g for n, g in s["greedy_vs_nospec"].items() if g["prompts_identical"] < g["prompts"]}
    if diffs:
        out.append(
            "- **Greedy outputs**: "
            + "; ".join(
                f"{n} {g['prompts_identical']}/{g['prompts']} identical (prompt {g['first_difference'][0]['prompt']}, "
                f"token {g['first_difference'][0]['token']})"
                for n, g in diffs.items()
            )
            + ". Stock SGLang's EAGLE-3 differs from no speculation in the same way (one prompt of eight, from one token on): "
            "a bf16 near-tie that a verify over steps + 1 tokens and a one-token decode break "
            "differently, not the runtime's patches; the patched servers agree with each other token for token."
        )
    return out


def markdown(s: dict) -> str:
    out = [
        "# The trained model on one H200: every point on one fixed request set (measured)",
        "",
        f"{s['device']}, SGLang {s['sglang']} (+ the runtime's patches for the Live server), triton attention, "
        f"CUDA graphs (decode batch 1/4/8/16/32), overlap scheduler on. Each point: B client threads each send "
        f"{s['replay_requests_per_client']} greedy requests ({s['max_new_tokens']} output tokens, ignore_eos, "
        "prompts of 240 characters of held-out text) back to back; every point of a batch generates the same "
        "content. **Served** tok/s is what the clients saw (prefill and scheduling included); **decode-only** is "
        "what the pod counted over the same requests (tokens of decode cycles over their busy time).",
        "",
        "## What this run shows",
        "",
        *findings(s),
        "",
        "## Static step counts, served and decode-only",
        "",
        "| point | served tok/s | x no spec (served) | decode-only tok/s | served/decode | mean batch | "
        "tokens/seq/cycle | cycle ms | phases ms (draft/verify/extend/other) | planner tok/s | planner/decode |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for key, p in s["points"].items():
        ph = p.get("phase_ms") or {}
        out.append(
            f"| {key} | {p['served_tokens_per_s']} | {s['speedup_over_nospec'][key]}x | "
            f"{p.get('decode_tokens_per_s')} | {p.get('served_over_decode')} | {p.get('mean_batch')} | "
            f"{p.get('tokens_per_seq_cycle')} | {p.get('cycle_ms')} | "
            f"{'/'.join(str(ph.get(x)) for x in PHASES)} | {p.get('planner_tokens_per_s')} | "
            f"{(s['planner_over_measured'].get(key) or {}).get('over_decode')} |"
        )
    out += [
        "",
        "No speculation (stock `sglang.launch_server`, its own server, same request sets): "
        + ", ".join(f"batch {b}: {v} tok/s" for b, v in s["nospec_tokens_per_s"].items())
        + ".",
        "",
        "## The operator's tuner driving the pod (Live), then its final table on the same request set",
        "",
        "| batch | final table | served tok/s | x no spec | decode-only tok/s | mean batch | steps at that batch |"
        " best static (first pass) | over best static |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for b, lr in s["live"].items():
        bs = s["best_static"][b]
        out.append(
            f"| {b} | {lr['final_table']} | {lr['served_tokens_per_s']} | {lr['speedup_over_nospec']}x | "
            f"{lr['decode_tokens_per_s']} | {lr['mean_batch']} | {lr['bucket_steps_at_mean_batch']} | "
            f"steps {bs['steps']}: {bs['served_tokens_per_s']} | {lr['over_best_static']} |"
        )
    out += ["", "## The same step count measured twice in one server", ""]
    for b, d in s["same_steps_measured_twice"].items():
        out.append(
            f"- {b}, steps {d['steps']}: {d['static_first_pass']} tok/s in the first pass, "
            f"{d['live_table_later']} tok/s minutes later (x{d['ratio']}); mean cycle {d['static_cycle_ms']} ms "
            f"then {d['live_cycle_ms']} ms; the planner over decode-only {s['planner_over_measured'].get(b + '_k' + str(d['steps']), {}).get('over_decode')} "
            f"then {d.get('planner_over_decode_later')}."
        )
    out += ["", "## Greedy outputs against no speculation (8 held-out prompts x 64 tokens, one at a time)", ""]
    for name, g in s["greedy_vs_nospec"].items():
        out.append(
            f"- {name}: {g['prompts_identical']}/{g['prompts']} identical; first differences {g['first_difference']}"
        )
    if s["patched_over_stock"]:
        out += ["", "## Patched runtime over stock SGLang EAGLE-3 (same request set, same steps)", ""]
        out += [f"- {k}: {v}" for k, v in s["patched_over_stock"].items()]
    return "\n".join(out) + "\n\n" + renderer.provenance_md(s["provenance"])
