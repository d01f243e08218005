"""The trained-model run on one H200 -> bench/results/gpu_h200_trained.{json,md}

    python bench/renderer.py report gpu_h200_trained [--raw bench/results/gpu_h200] [--out bench/results]

Reads what ``bench/gpu/campaigns/trained_serve.sh`` wrote (trained_train_report.json, trained_head_report.json,
trained_acceptance.json, trained_serve.json) and writes the issue's keys: ``speedup_over_nospec`` per batch and
steps, ``accept_length`` (served, per point, and the head's offline curve), ``planner_over_measured`` (the goodput
model fed only what a pod has: the start-up probe's profile and the offline acceptance), and the two keys this run
did not measure (``live_over_best_static``, ``patched_over_stock``) as null with the reason.
"""

from __future__ import annotations

import json
from pathlib import Path

import renderer

from specdecode_runtime.contract.goodput import CycleCost, goodput
from specdecode_runtime.contract.metric_names import bucket_label
from specdecode_runtime.contract.versions import SGLANG_VERSION

META = "trained_meta.json"  # the run's provenance, next to its raw reports


def summarize(raw: Path) -> dict:
    train = json.loads((raw / "trained_train_report.json").read_text())
    head = json.loads((raw / "trained_head_report.json").read_text())
    acc = json.loads((raw / "trained_acceptance.json").read_text())
    rep = json.loads((raw / "trained_serve.json").read_text())
    runs = {r["layout"]: r for r in rep["runs"]}
    nospec = {r["batch"]: r for r in runs["nospec"]["served"]}
    spec = runs["sharded"]
    alphas = acc["conditional_acceptance"]
    speedup, accept, planner, cycles = {}, {}, {}, {}
    for r in spec["served"]:
        b, k = r["batch"], r["steps"]
        key = f"b{b}_k{k}"
        speedup[key] = round(r["tokens_per_s"] / nospec[b]["tokens_per_s"], 3)
        accept[key] = r["accept_length"]
        cycles[key] = {"served_ms": r["served_cycle_ms"], "probe_ms": r.get("predicted_cycle_ms")}
        cost = spec["cost_profile"].get(bucket_label(b))
        if cost:
            planner[key] = round(goodput(alphas, CycleCost(**cost), k, b) / r["tokens_per_s"], 3)
    best = {b: max((v, k) for k, v in speedup.items() if k.startswith(f"b{b}_")) for b in nospec}
    prov = renderer.provenance(raw / META)
    return {
        "provenance": prov,
        "device": f"{prov['device']}, SGLang {SGLANG_VERSION} + the runtime's patches, "
        "triton attention, CUDA graphs (batch 1/4/8/16/32), overlap scheduler on",
        "target": {
            "params": train["params"],
            "shape": train["shape"],
            "tokens_seen": train["tokens_seen"],
            "train_tokens_per_s": train["tokens_per_s"],
            "heldout_loss": train["heldout_loss"],
            "heldout_ppl": train["heldout_ppl"],
            "train_s": train["wall_s"]["train"],
        },
        "head": {
            "aux_layer_ids": head["aux_layer_ids"],
            "draft_vocab_size": head["draft_vocab_size"],
            "steps": head["steps"],
            "tokens_seen": head["tokens_seen"],
            "final_top1_per_step": head["final_top1_per_step"],
        },
        "offline_acceptance": {
            "conditional": alphas,
            "accept_length_k7": acc["accept_length"],
            "distinct_generated_share": acc["distinct_generated_share"],
        },
        "tokens_identical": bool(spec["tokens_equal_reference"]),
        "nospec_tokens_per_s": {f"b{b}": r["tokens_per_s"] for b, r in nospec.items()},
        "nospec_cycle_ms": {f"b{b}": r["served_cycle_ms"] for b, r in nospec.items()},
        "speedup_over_nospec": speedup,
        "best_speedup_per_batch": {f"b{b}": {"speedup": v, "point": k} for b, (v, k) in best.items()},
        "accept_length": accept,
        "cycle_ms": cycles,
        "planner_over_measured": {**planner, "min": min(planner.values()), "max": max(planner.values())},
        "live_over_best_static": None,
        "live_over_best_static_reason": "not run: the Live tiers were set by step-table PUTs; the operator's "
        "autotuner did not drive this pod (no device time left for the run)",
        "patched_over_stock": None,
        "patched_over_stock_reason": "not run on this model (measured at the Llama-3-8B shape: "
        "bench/results/gpu_h200_tp1.md)",
    }


def markdown(s: dict) -> str:
    t, h = s["target"], s["head"]
    lines = [
        "# A trained target and EAGLE-3 head on one H200 (measured)",
        "",
        s["device"] + ".",
        "",
        f"Target: a Llama-architecture code LM, {t['params'] / 1e6:.0f}M parameters ({t['shape']}), trained "
        f"{t['train_s']:.0f} s on the GPU machine's own Python sources ({t['tokens_seen'] / 1e6:.1f}M tokens, "
        f"{t['train_tokens_per_s'] / 1e3:.0f}k tok/s); held-out loss {t['heldout_loss']} (perplexity "
        f"{t['heldout_ppl']}), on files never trained on.",
        f"EAGLE-3 head: aux layers {h['aux_layer_ids']}, full vocabulary, {h['steps']} steps over "
        f"{h['tokens_seen'] / 1e6:.1f}M tokens; top-1 agreement per unrolled step {h['final_top1_per_step']}.",
        f"Offline acceptance (64 held-out prompts, greedy chains of 7): conditional "
        f"{s['offline_acceptance']['conditional']}, accept length {s['offline_acceptance']['accept_length_k7']} "
        f"at 7 steps. The target's greedy continuations repeat a lot (distinct share "
        f"{s['offline_acceptance']['distinct_generated_share']}), which flatters acceptance.",
        "",
        f"Greedy tokens with speculation identical to no speculation: **{s['tokens_identical']}**.",
        "",
        "## Served tok/s: EAGLE-3 (Live tiers set per point) over no speculation",
        "",
        "| batch | no spec tok/s (cycle ms) | steps 1 | steps 3 | steps 5 | steps 7 |",
        "|---|---|---|---|---|---|",
    ]
    for b in (1, 8, 32):
        row = [
            f"{s['speedup_over_nospec'].get(f'b{b}_k{k}')}x (acc {s['accept_length'].get(f'b{b}_k{k}')})"
            for k in (1, 3, 5, 7)
        ]
        lines.append(
            f"| {b} | {s['nospec_tokens_per_s'][f'b{b}']} ({s['nospec_cycle_ms'][f'b{b}']}) | " + " | ".join(row) + " |"
        )
    p = s["planner_over_measured"]
    lines += [
        "",
        "## Why not 1.5x at batch 1, and what would reach it",
        "",
        f"Best at batch 1: {s['best_speedup_per_batch']['b1']['speedup']}x "
        f"({s['best_speedup_per_batch']['b1']['point']}). This target is host-bound: a plain decode cycle is "
        f"{s['nospec_cycle_ms']['b1']} ms whatever the batch (1 to 32), while a speculative cycle costs "
        f"{s['cycle_ms']['b1_k5']['served_ms']} ms at steps 5 — about 3.8 ms of draft, verify-tree and "
        "scheduling work per cycle that a 304M target cannot hide. With the served accept length A and that "
        "extra per-cycle cost D, the speedup is A * C0 / (C0 + D) for a plain cycle C0: 1.5x at A = 3.84, "
        "D = 3.8 ms needs a plain decode cycle C0 >= 2.4 ms if D stays as it is (the Llama-3-8B shape's probe prices its decode at about 6.7 ms: 3.84 * 6.7 / 9.7 = 2.65x at the "
        "same acceptance — derived from measured costs, not a measured speedup).",
        "",
        "## Planner vs measured",
        "",
        f"The goodput model fed only the start-up probe's profile and the offline acceptance predicts "
        f"{p['min']}-{p['max']}x the measured tok/s: on this host-bound target the probe's graph replays see "
        "the GPU work only (verify 2.4 ms, draft step 0.15 ms), not the scheduler's per-cycle host work, so it "
        "over-predicts. At the 8B shape, where the GPU work dominates, the same probe is within 0.95-1.09 of "
        "the served cycle (bench/results/gpu_h200_tp1.md). The probe needs a host-overhead stage before its "
        "figures can plan a launch-bound target.",
        "",
        "Not measured in this run: Live autotuning by the operator's tuner (`live_over_best_static`), stock "
        "SGLang on this model (`patched_over_stock`).",
        "",
    ]
    return "\n".join(lines) + "\n" + renderer.provenance_md(s["provenance"])
