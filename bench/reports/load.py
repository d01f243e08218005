"""The trained model served under a steady load on one H200 -> bench/results/gpu_h200_trained_load.{json,md}

    python bench/renderer.py report gpu_h200_trained_load [--raw bench/results/gpu_h200/trained_live] [--out bench/results]

Reads what ``bench/gpu/campaigns/trained_live.sh`` wrote (nospec.json, live.json, stock_K.json from ``live_tune.py``,
plus the training reports) and writes: ``speedup_over_nospec`` per batch and static step count (patched runtime, Live
tiers set by one-tier tables), ``live_over_best_static`` per batch (the operator's tuner driving the pod),
``patched_over_stock`` per batch at the step counts stock SGLang ran, ``accept_length`` (the tuner's live
acceptance curve and the head's offline curve), ``planner_over_measured`` (the tuner's goodput model, with its
online-refined costs and live acceptance, over each measured static point) and ``tokens_identical``.
"""

from __future__ import annotations

import json
from pathlib import Path

import renderer

from reports.live_runs import stock_runs
from specdecode_runtime.contract.goodput import expected_tokens
from specdecode_runtime.contract.versions import SGLANG_VERSION

META = "meta.json"  # the run's provenance, next to its raw reports


def _load(raw: Path, name: str) -> dict | None:
    p = raw / name
    return json.loads(p.read_text()) if p.is_file() else None


def interval_noise(trace: list[dict]) -> dict | None:
    """Relative spread of tok/s over the tuner's intervals in the longest run with an unchanged step table: the
    noise any one window of this load carries (the content of the requests in flight changes acceptance)."""
    runs, cur = [], []
    for t in trace[1:]:  # the first interval includes the start of the load
        if cur and t["table"] != cur[-1]["table"]:
            runs.append(cur)
            cur = []
        cur.append(t)
    runs.append(cur)
    run = max(runs, key=len)
    xs = [t["tokens_per_s"] for t in run[1:]]  # the interval a change lands in mixes two tables
    if len(xs) < 3:
        return None
    mean = sum(xs) / len(xs)
    sd = (sum((x - mean) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5
    return {"intervals": len(xs), "mean_tokens_per_s": round(mean, 1), "cv": round(sd / mean, 3)}


def summarize(raw: Path) -> dict:
    nospec, live = _load(raw, "nospec.json"), _load(raw, "live.json")
    if nospec is None or live is None:
        raise renderer.RawError(
            f"{raw}: nospec.json and live.json are required (bench/gpu/campaigns/trained_live.sh writes them)"
        )
    stock = stock_runs(raw)
    train, head, acc = _load(raw, "train_report.json"), _load(raw, "head_report.json"), _load(raw, "acceptance.json")
    base = {b: r["tokens_per_s"] for b, r in nospec["batches"].items()}
    speedup, live_ratio, planner, best, accept, refused, noise, rollbacks = {}, {}, {}, {}, {}, {}, {}, {}
    for b, row in live["batches"].items():
        for k, tps in row["static"].items():
            speedup[f"b{b}_k{k}"] = round(tps / base[b], 3)
            pred = row["live"]["predicted_tokens_per_s"].get(k)
            if pred:
                planner[f"b{b}_k{k}"] = round(pred / tps, 3)
        refused.update({f"b{b}_k{k}": why for k, why in (row.get("refused") or {}).items()})
        bk = row["best_static"]
        best[f"b{b}"] = {
            "steps": bk["steps"],
            "tokens_per_s": bk["tokens_per_s"],
            "speedup_over_nospec": round(bk["tokens_per_s"] / base[b], 3),
        }
        lv = row["live"]
        live_ratio[f"b{b}"] = {
            "last_window": round(lv["tokens_per_s_last"] / bk["tokens_per_s"], 3),
            "whole_run": round(lv["tokens_per_s_whole"] / bk["tokens_per_s"], 3),
            "final_table": lv["final_table"],
        }
        noise[f"b{b}"] = interval_noise(lv["trace"])
        rollbacks[f"b{b}"] = [r for t in lv["trace"] for r in t["reasons"].values() if r.startswith("rollback")]
        accept[f"b{b}_live_alphas"] = lv["alphas"]
        if lv["alphas"]:
            accept[f"b{b}_live_accept_length_k7"] = round(expected_tokens(lv["alphas"], 7) - 1.0, 3)
    patched_over_stock = {}
    for k, rep in stock.items():
        for b, row in rep["batches"].items():
            tps = live["batches"].get(b, {}).get("static", {}).get(str(k))
            if tps and row.get("tokens_per_s"):
                patched_over_stock[f"b{b}_k{k}"] = round(tps / row["tokens_per_s"], 3)
    ref = nospec.get("greedy") or []
    identical = {
        name: (rep.get("greedy") == ref)
        for name, rep in [("patched_live_steps3", live)] + [(f"stock_k{k}", r) for k, r in stock.items()]
    }
    windows = {
        "static_window_s": float(live["args"]["window"]),
        "settle_s": float(live["args"]["settle"]),
        "nospec_window_s": 2 * float(nospec["args"]["window"]),
        "tuner_interval_s": float(live["args"]["interval"]),
        "live_seconds": float(live["args"]["live_seconds"]),
        "max_new_tokens": int(live["args"]["max_new_tokens"]),
        "prompt_chars": int(live["args"]["prompt_chars"]),
    }
    prov = renderer.provenance(raw / META)
    return {
        "provenance": prov,
        "device": f"{prov['device']}, SGLang {SGLANG_VERSION} (+ the runtime's patches for "
        "the Live server), triton attention, CUDA graphs (batch 1/4/8/16/32), overlap scheduler on",
        "load": "B client threads sending greedy requests back to back (ignore_eos, fixed output length) with prompts "
        "cut from held-out text; tok/s counts each request's output tokens pro rata over its time inside the "
        "window (prefill of new requests included)",
        "windows": windows,
        "target": None
        if train is None
        else {
            "params": train["params"],
            "heldout_ppl": train["heldout_ppl"],
            "train_s": (train.get("wall_s") or {}).get("train"),
        },
        "head": None if head is None else {"aux_layer_ids": head["aux_layer_ids"], "steps": head["steps"]},
        "tokens_identical": identical,
        "nospec_tokens_per_s": {f"b{b}": v for b, v in base.items()},
        "speedup_over_nospec": speedup,
        "best_static": best,
        "live_over_best_static": live_ratio,
        "patched_over_stock": patched_over_stock,
        "accept_length": {
            "offline_conditional": None if acc is None else acc["conditional_acceptance"],
            "offline_accept_length_k7": None if acc is None else acc["accept_length"],
            **accept,
        },
        "planner_over_measured": {
            **planner,
            "min": min(planner.values(), default=None),
            "max": max(planner.values(), default=None),
        },
        "refused": refused,
        "interval_noise": noise,
        "rollbacks": {b: len(v) for b, v in rollbacks.items()},
        "rollback_reasons": rollbacks,
        "ready_s": {
            "nospec": nospec.get("ready_s"),
            "live": live.get("ready_s"),
            **{f"stock_k{k}": r.get("ready_s") for k, r in stock.items()},
        },
    }


def headline(s: dict) -> str:
    b1 = s["best_static"].get("b1")
    over = sorted(k.split("_k")[1] for k, v in s["speedup_over_nospec"].items() if k.startswith("b1_") and v >= 1.5)
    live = s["live_over_best_static"]
    return (
        (
            f"**Batch 1: {b1['speedup_over_nospec']}x no speculation** (steps {b1['steps']}; steps {', '.join(over)} "
            f"all >= 1.5x). Live tuning / best static: "
            + ", ".join(f"batch {b[1:]} {v['whole_run']} over the whole run" for b, v in live.items())
            + "; the tuner's model / measured: "
            f"{s['planner_over_measured']['min']}-"
            f"{s['planner_over_measured']['max']}. Single windows carry the noise stated below."
        )
        if b1
        else ""
    )


def markdown(s: dict) -> str:
    batches = [k[1:] for k in s["nospec_tokens_per_s"]]
    steps = sorted({int(k.split("_k")[1]) for k in s["speedup_over_nospec"]})
    w = s["windows"]
    out = [
        "# The trained model under a steady load on one H200: static steps, the operator's tuner, stock SGLang "
        "(measured)",
        "",
        s["device"] + ".",
        "",
        f"Load: {s['load']}. Static points: {w['settle_s']:g} s settle + {w['static_window_s']:g} s window each; "
        f"no speculation: {w['nospec_window_s']:g} s; Live: the tuner every {w['tuner_interval_s']:g} s for "
        f"{w['live_seconds']:g} s; {w['max_new_tokens']} output tokens per request, prompts of "
        f"{w['prompt_chars']} characters.",
        "",
        headline(s),
        "",
        "Greedy outputs (8 held-out prompts x 64 tokens, one request at a time) identical to no speculation: "
        + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in s["tokens_identical"].items())
        + ".",
        "",
        "## Speedup over no speculation (patched runtime, one-tier step tables)",
        "",
        "| batch | no spec tok/s | " + " | ".join(f"steps {k}" for k in steps) + " |",
        "|---|---|" + "---|" * len(steps),
    ]
    for b in batches:
        cells = [f"{s['speedup_over_nospec'].get(f'b{b}_k{k}', '-')}" for k in steps]
        out.append(
            f"| {b} | {s['nospec_tokens_per_s'][f'b{b}']} | "
            + " | ".join(f"{c}x" if c != "-" else c for c in cells)
            + " |"
        )
    if s["refused"]:
        steps_refused = sorted({k.split("_k")[1] for k in s["refused"]})
        out += [
            "",
            f"Not measured: steps {', '.join(steps_refused)}, refused by the pod "
            f"({next(iter(s['refused'].values()))[:160]}): the run's runtime.yaml listed the tiers 1..7 without the "
            "steps-0 tier the operator renders for Live; `live_tune.py` now takes the tiers from the contract.",
        ]
    out += [
        "",
        "## The operator's tuner driving the pod (Live) vs the best static step count",
        "",
        "| batch | best static | Live / best static (last window) | Live / best static (whole run) | final table |",
        "|---|---|---|---|---|",
    ]
    for b in batches:
        bs, lv = s["best_static"][f"b{b}"], s["live_over_best_static"][f"b{b}"]
        out.append(
            f"| {b} | steps {bs['steps']}: {bs['tokens_per_s']} tok/s ({bs['speedup_over_nospec']}x) | "
            f"{lv['last_window']} | {lv['whole_run']} | {lv['final_table']} |"
        )
    out += [
        "",
        "Noise of one window under this load (coefficient of variation of tok/s over the tuner's intervals in "
        "its longest run with an unchanged table): "
        + ", ".join(
            f"batch {b[1:]}: {v['cv']:.0%} over {v['intervals']} intervals" for b, v in s["interval_noise"].items() if v
        )
        + ". Every ratio above rests on single windows and carries about that much noise each way.",
    ]
    out += [
        "",
        f"## Patched runtime over stock SGLang {SGLANG_VERSION} EAGLE-3 (same load, same step count)",
        "",
        "| point | patched / stock |",
        "|---|---|",
    ]
    out += [f"| {k} | {v} |" for k, v in s["patched_over_stock"].items()]
    p = s["planner_over_measured"]
    per_b = {b: [v for k, v in p.items() if k.startswith(f"b{b}_")] for b in batches}
    out += [
        "",
        "## The tuner's goodput model over the measured static points",
        "",
        f"Predicted / measured: {p['min']} to {p['max']}; per batch: "
        + ", ".join(f"batch {b} {min(v)}-{max(v)}" for b, v in per_b.items() if v)
        + ". The model is the tuner's own: "
        "the start-up probe's costs refined online from the pod's decode-cycle timings, and the live acceptance "
        "curve. It prices decode cycles only; under this load every request also pays a prefill (eager: "
        "`--disable-prefill-cuda-graph`) and its scheduling, a share of the GPU's time that grows with the request "
        "rate, so served throughput falls below the decode goodput as the batch grows (no speculation at batch 32: "
        f"{s['nospec_tokens_per_s'].get('b32')} tok/s here against 32 tokens per decode cycle).",
        "",
        "## Rollbacks the tuner made",
        "",
        "Interval-by-interval decisions are in the JSON (`live.json` raw trace). "
        + "; ".join(f"batch {b[1:]}: {n}" for b, n in s["rollbacks"].items())
        + ". A rollback compares the interval after a "
        "change with the one before it; with the window noise above, that comparison is dominated by what was "
        "being generated, which is why the rollback test now compares the step counts on the same interval's "
        "content (tuner/policy.py `content_factor`; not yet measured on the GPU).",
        "",
    ]
    return "\n".join(out) + "\n" + renderer.provenance_md(s["provenance"])
