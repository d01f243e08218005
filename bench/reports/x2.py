"""The split draft on two H200s: the reports of ``bench/gpu/campaigns/split_x2.sh`` -> bench/results/gpu_h200x2_split.*

    python bench/renderer.py report gpu_h200x2_split --raw DIR

Keys: ``tokens_identical`` (per run), ``split_over_sharded_accept`` (accepted drafts of split over sharded, per run
with both), ``served_cycle_ms`` (per layout and point), ``plan_over_measured`` (the planner's cycle for the same
layout and point over the served one, and ``max_abs_error``), ``mem_gb_per_rank`` (per layout).
"""

from __future__ import annotations

import json
from pathlib import Path

import renderer


def summarize(raw: Path) -> dict:
    out: dict = {
        "provenance": renderer.provenance(raw / "meta.json"),
        "tokens_identical": {},
        "split_over_sharded_accept": {},
        "served_cycle_ms": {},
        "plan_over_measured": {},
        "mem_gb_per_rank": {},
        "checks_failed": {},
    }
    for f in sorted(raw.glob("x2_*.json")):
        phase = f.stem[3:]
        rep = json.loads(f.read_text())
        runs = {r["layout"]: r for r in rep["runs"]}
        for name, r in runs.items():
            key = f"{phase}/{name}"
            out["tokens_identical"][key] = bool(r["tokens_equal_reference"])
            failed = [c["name"] for c in r["checks"] if not c["ok"]] + ([r["error"]] if r.get("error") else [])
            if failed:
                out["checks_failed"][key] = failed
            if r.get("memory_gb"):
                out["mem_gb_per_rank"][key] = r["memory_gb"]
            for row in r.get("served") or []:
                point = f"b{row['batch']}_k{row['steps']}"
                out["served_cycle_ms"].setdefault(key, {})[point] = row["served_cycle_ms"]
                if row.get("probe_over_served") is not None:
                    out["plan_over_measured"].setdefault(key, {})[point] = row["probe_over_served"]
        sh, sp = runs.get("sharded"), runs.get("split")
        if sh and sp and sh["acceptance"].get("engine") and sp["acceptance"].get("engine"):
            a, b = sh["acceptance"]["engine"]["correct_drafts"], sp["acceptance"]["engine"]["correct_drafts"]
            out["split_over_sharded_accept"][phase] = round(b / a, 4) if a else None
    errs = [abs(v - 1.0) for per in out["plan_over_measured"].values() for v in per.values()]
    out["plan_over_measured"]["max_abs_error"] = round(max(errs), 4) if errs else None
    return out


def markdown(s: dict) -> str:
    rows = [(k, json.dumps(v)) for k, v in s["served_cycle_ms"].items()]
    lines = [
        "# The split draft on two H200s (measured)",
        "",
        f"Greedy tokens identical to the reference: {json.dumps(s['tokens_identical'])}.",
        f"Split over sharded accepted drafts: {json.dumps(s['split_over_sharded_accept'])}.",
        f"Planner over measured cycle, largest error: {s['plan_over_measured'].get('max_abs_error')}.",
        f"Failed checks: {json.dumps(s['checks_failed']) if s['checks_failed'] else 'none'}.",
        "",
        *renderer.table(("run", "served cycle ms by point"), rows),
        "",
    ]
    return "\n".join(lines) + "\n" + renderer.provenance_md(s["provenance"])
