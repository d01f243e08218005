#!/usr/bin/env python3
"""The report of ``bench/gpu/campaigns/nocliff.sh`` (``python bench/renderer.py report gpu_<device>_nocliff``): is the
runtime ever slower than no speculation?

Reads the raw reports of one run (``bench/results/gpu_h200/nocliff/``): the self-test reports ``smoke.json``,
``cycles8b.json``, ``cycles.json`` and live_tune.py's ``live.json``. Writes ``bench/results/gpu_h200_nocliff.{json,md}``:

* ``tier0_over_plain_cycle``: tier 0's served decode cycle over the same engine's without speculation, per model and
  batch. From the self-test's served cycles (``cycles*.json``: the two layouts measured one after the other) and,
  for the trained model where live.json has them, the median of alternating rounds of the Live pod at steps 0
  against the server without speculation running beside it (their tok/s ratio inverted: both emit one token per
  request per cycle). Goal <= 1.05.
* ``live_over_best_of_nospec_and_static``: the tuner's final table against the better of no speculation and the best
  static tier, median of alternating rounds with a 95 % bootstrap interval. Goal >= 0.97.
* ``speedup_over_nospec_b1``: the best of the Live pod's static tiers and its tuned table over no speculation at
  batch 1, same request set. Goal >= 1.5.
* ``prefill_eager_vs_graphs``: the same short load (static tiers and the server without speculation, same request
  set) with eager prefill (``prefill_eager.json``) and with SGLang's prefill CUDA graphs (``prefill_graphs.json``):
  tok/s per point and the prefill's parts per prefill batch, before and after.
* ``greedy_identical_across_switches``: the float32 smoke run (3 -> 0 -> 7 -> 0 -> 3 with requests in flight)
  produced the tokens of the run without speculation, and its self-test passed.

Nothing here is simulated: every figure is a served measurement on the GPU named in the report.
"""

from __future__ import annotations

import json
from pathlib import Path

import renderer
from renderer import median_ci

from specdecode_runtime.contract.versions import SGLANG_VERSION

# live_tune.py's mark that no speculation and tier 0 were measured with nothing else on the GPU
ALONE = "baselines_alone"
GOALS = {"tier0_over_plain_cycle": 1.05, "live_over_best_of_nospec_and_static": 0.97, "speedup_over_nospec_b1": 1.5}


def _selftest(path: Path) -> dict | None:
    if not path.is_file():
        return None
    text = path.read_text(errors="replace")
    start = text.find('{\n  "options"')
    return json.loads(text[start:]) if start >= 0 else None


def served_cycles(report: dict | None) -> dict[str, dict]:
    """Per batch: the served cycle (ms) without speculation and at tier 0, and their ratio."""
    if not report:
        return {}
    by: dict[str, dict[int, dict]] = {}
    for run in report.get("runs", []):
        for row in run.get("served") or []:
            key = "plain" if run["layout"] == "nospec" else f"k{row['steps']}"
            by.setdefault(key, {})[int(row["batch"])] = row
    out = {}
    for b, plain in sorted((by.get("plain") or {}).items()):
        zero = (by.get("k0") or {}).get(b)
        if not zero or not plain.get("served_cycle_ms") or not zero.get("served_cycle_ms"):
            continue
        out[f"b{b}"] = {
            "plain_cycle_ms": plain["served_cycle_ms"],
            "tier0_cycle_ms": zero["served_cycle_ms"],
            "tier0_over_plain_cycle": round(zero["served_cycle_ms"] / plain["served_cycle_ms"], 4),
        }
    return out


def _paired(rounds: list[dict], invert: bool = False) -> dict:
    ratios = [(1.0 / r["ratio"]) if invert else r["ratio"] for r in rounds]
    med, lo, hi = median_ci(ratios)
    return {"median": round(med, 4), "ci95": [round(lo, 4), round(hi, 4)], "rounds": [round(x, 4) for x in ratios]}


def live_figures(live: dict | None) -> dict:
    if not live:
        return {}
    out: dict = {"tier0_pairs": {}, "live_pairs": {}, "static": {}, "nospec": {}, "tables": {}, "baseline": {}}
    for b, row in live.get("batches", {}).items():
        key = f"b{b}"
        # A run without "baselines_alone" measured no speculation and tier 0 while the tuner's background load ran on
        # the pod (live_tune.py before the fix): those figures are kept apart and never taken for the goals.
        alone = row.get(ALONE, live.get(ALONE, False))
        if row.get("tier0_vs_nospec"):  # a = tier 0 tok/s, b = nospec tok/s: the cycle ratio is b / a
            pairs = _paired(row["tier0_vs_nospec"]["rounds"], invert=True)
            out["tier0_pairs" if alone else "tier0_pairs_beside_load"] = {
                **out.get("tier0_pairs" if alone else "tier0_pairs_beside_load", {}),
                key: pairs,
            }
        if row.get("paired"):
            out["live_pairs"][key] = _paired(row["paired"]["rounds"])
        out["static"][key] = row.get("static")
        out["nospec" if alone else "nospec_beside_load"] = {
            **out.get("nospec" if alone else "nospec_beside_load", {}),
            key: row.get("nospec"),
        }
        out["tables"][key] = (row.get("live") or {}).get("final_table")
        out["baseline"][key] = row.get("baseline")
        # the tuner's decisions it had time for: a table from a run shorter than a few intervals is its start
        out.setdefault("tuner_intervals", {})[key] = len((row.get("live") or {}).get("trace") or [])
    return out


def _family(counters: dict[str, float], name: str, **labels: str) -> float:
    """Sum of one family's samples in a point's counter deltas (``name{k=v,...}`` keys), matching ``labels``."""
    total = 0.0
    for key, v in counters.items():
        fam, _, rest = key.partition("{")
        have = dict(kv.split("=", 1) for kv in rest.rstrip("}").split(",") if "=" in kv)
        if fam == name and all(have.get(k) == x for k, x in labels.items()):
            total += v
    return total


def prefill_parts(live: dict | None) -> dict:
    """Per batch and point (static tiers, no speculation): where prefill time went, per prefill batch, beside the
    decode cycles it shared the GPU with and SGLang's own request timings. From each point's counter deltas."""
    out: dict = {}
    for b, row in ((live or {}).get("batches") or {}).items():
        for point, c in (row.get("pod_counters") or {}).items():
            rec: dict = {}
            n = _family(c, "specdecode_prefill_batches_total")
            cycles = _family(c, "specdecode_verify_cycles_total")
            if n:
                rec["prefill_batches"] = int(n)
                rec["requests_per_prefill"] = round(_family(c, "specdecode_prefill_requests_total") / n, 2)
                rec["tokens_per_prefill"] = round(_family(c, "specdecode_prefill_tokens_total") / n, 1)
                for clock, phases in (
                    ("host", ("launch", "target", "draft", "result")),
                    ("device", ("target", "draft")),
                ):
                    for ph in phases:
                        v = _family(c, "specdecode_prefill_phase_seconds_total", phase=ph, clock=clock)
                        if v:
                            rec[f"{clock}_{ph}_ms_per_prefill"] = round(1e3 * v / n, 3)
            if cycles:
                rec["decode_cycles"] = int(cycles)
                rec["mean_batch"] = round(_family(c, "specdecode_requests_verified_total") / cycles, 2)
                rec["prefill_ms_per_cycle"] = round(1e3 * _family(c, "specdecode_prefill_seconds_total") / cycles, 3)
                if n:
                    rec["cycles_per_prefill"] = round(cycles / n, 2)
            for short, fam in (("queue", "sglang:queue_time_seconds"), ("ttft", "sglang:time_to_first_token_seconds")):
                cnt = _family(c, fam + "_count")
                if cnt:
                    rec[f"{short}_ms"] = round(1e3 * _family(c, fam + "_sum") / cnt, 2)
            if rec:
                out.setdefault(f"b{b}", {})["nospec" if point == "nospec" else f"k{point}"] = rec
    return out


PREFILL_COLUMNS = (
    "host_launch_ms_per_prefill",
    "device_target_ms_per_prefill",
    "device_draft_ms_per_prefill",
    "prefill_ms_per_cycle",
    "ttft_ms",
)


def prefill_eager_vs_graphs(raw: Path) -> dict:
    """Per batch and point: tok/s and the prefill's parts, eager (before) and with prefill graphs (after)."""
    runs = {mode: raw / f"prefill_{mode}.json" for mode in ("eager", "graphs")}
    if not all(p.is_file() for p in runs.values()):
        return {}
    reports = {mode: json.loads(p.read_text()) for mode, p in runs.items()}
    out: dict = {}
    for b in reports["eager"].get("batches", {}):
        rows = {mode: r.get("batches", {}).get(b) for mode, r in reports.items()}
        if not all(rows.values()):
            continue
        parts = {mode: prefill_parts({"batches": {b: row}}).get(f"b{b}", {}) for mode, row in rows.items()}
        points: dict = {}
        for mode, row in rows.items():
            tps = {f"k{k}": v for k, v in (row.get("static") or {}).items()}
            if row.get("nospec") is not None:
                tps["nospec"] = row["nospec"]
            for point, v in tps.items():
                rec = points.setdefault(point, {}).setdefault(mode, {"tokens_per_s": v})
                rec.update(
                    {c: parts[mode].get(point, {}).get(c) for c in PREFILL_COLUMNS if c in parts[mode].get(point, {})}
                )
        for modes in points.values():
            if all(m in modes for m in ("eager", "graphs")) and modes["eager"]["tokens_per_s"]:
                modes["graphs_over_eager"] = round(modes["graphs"]["tokens_per_s"] / modes["eager"]["tokens_per_s"], 4)
        out[f"b{b}"] = points
    return out


def greedy(smoke: dict | None) -> dict:
    if not smoke:
        return {"ran": False}
    runs = {r["layout"]: r for r in smoke.get("runs", [])}
    same = runs.get("nospec", {}).get("tokens") == runs.get("sharded", {}).get("tokens") and bool(
        runs.get("nospec", {}).get("tokens")
    )
    sharded = runs.get("sharded", {})
    return {
        "ran": True,
        "selftest_ok": bool(smoke.get("ok")),
        "summary": smoke.get("summary"),
        "tokens_identical": same,
        "switches": sharded.get("puts") and [p.get("steps") for p in sharded["puts"]],
        "failed_checks": [c["name"] for r in runs.values() for c in r.get("checks", []) if not c["ok"]],
    }


def summarize(raw: Path) -> dict:
    prov = renderer.provenance(raw / "meta.json")
    meta = json.loads((raw / "meta.json").read_text())
    cycles8b, cycles = served_cycles(_selftest(raw / "cycles8b.json")), served_cycles(_selftest(raw / "cycles.json"))
    live = None  # live*.json: one report per call (batches split over calls), merged by batch
    for path in sorted(raw.glob("live*.json")):
        part = json.loads(path.read_text())
        for row in part.get("batches", {}).values():  # each batch keeps its own run's mark through the merge
            row.setdefault(ALONE, part.get(ALONE, False))
        if live is None:
            live = part
        else:
            live["batches"].update(part.get("batches", {}))
    lf = live_figures(live)
    tier0 = {
        "trained": {b: v["tier0_over_plain_cycle"] for b, v in cycles.items()},
        "8b": {b: v["tier0_over_plain_cycle"] for b, v in cycles8b.items()},
    }
    if lf.get("tier0_pairs"):
        tier0["trained_paired"] = {b: v["median"] for b, v in lf["tier0_pairs"].items()}
    speed = None
    b1 = (live or {}).get("batches", {}).get("1")
    if b1 and b1.get("nospec") and b1.get(ALONE):
        best = max(list((b1.get("static") or {}).values()) + [(b1.get("live") or {}).get("tokens_per_s_replay") or 0])
        speed = round(best / b1["nospec"], 4)
    smoke = greedy(_selftest(raw / "smoke.json"))
    return {
        "provenance": prov,
        "tier0_over_plain_cycle": tier0,
        "live_over_best_of_nospec_and_static": {b: v for b, v in lf.get("live_pairs", {}).items()},
        # batches whose "no speculation" side was measured beside the tuner's load: their baseline is the best static
        "baseline_without_nospec": sorted(
            f"b{b}" for b, r in ((live or {}).get("batches") or {}).items() if not r.get(ALONE)
        ),
        "speedup_over_nospec_b1": speed,
        "greedy_identical_across_switches": smoke.get("tokens_identical") if smoke.get("ran") else None,
        "selftest_cuda": smoke,
        "served_cycles": {"trained": cycles, "8b": cycles8b},
        "live": lf,
        "plain_graphs": (live or {}).get("plain_graphs"),
        "prefill_parts": prefill_parts(live),
        "prefill_eager_vs_graphs": prefill_eager_vs_graphs(raw),
        "goals": GOALS,
        "notes": meta.get("notes", []),
    }


def _fmt(v) -> str:
    return "not run" if v is None or v == {} else json.dumps(v)


def markdown(s: dict) -> str:
    p = s["provenance"]
    lines = [
        "# Never slower than no speculation: tier 0 as plain decoding, the tuner against the better baseline",
        "",
        f"Device: {p['device']}. Commit {p['commit']}, {p['date']}. SGLang {SGLANG_VERSION} + the runtime's patches; "
        "measured, not simulated.",
        "",
        "| figure | goal | measured |",
        "|---|---|---|",
        f"| tier 0 cycle / plain cycle, trained (self-test served cycle) | <= 1.05 | "
        f"{_fmt(s['tier0_over_plain_cycle'].get('trained'))} |",
        f"| tier 0 cycle / plain cycle, trained (paired rounds, median) | <= 1.05 | "
        f"{_fmt(s['tier0_over_plain_cycle'].get('trained_paired'))} |",
        f"| tier 0 cycle / plain cycle, Llama-3-8B shape | <= 1.05 | {_fmt(s['tier0_over_plain_cycle'].get('8b'))} |",
        "| Live table / best of (no speculation, best static), median [95 % CI] | >= 0.97 | "
        + (
            ", ".join(
                f"{b}: {v['median']} [{v['ci95'][0]}, {v['ci95'][1]}]"
                for b, v in s["live_over_best_of_nospec_and_static"].items()
            )
            or "not run"
        )
        + " |",
        f"| best static or tuned / no speculation, batch 1 | >= 1.5 | {_fmt(s['speedup_over_nospec_b1'])} |",
        f"| greedy tokens identical across 3 -> 0 -> 7 -> 0 -> 3 (float32) | true | "
        f"{_fmt(s['greedy_identical_across_switches'])} |",
        f"| `selftest --device cuda` | passes | {_fmt(s['selftest_cuda'].get('summary'))} |",
        "",
        "## Served cycles (self-test, ms)",
        "",
        "| model | batch | plain | tier 0 | ratio |",
        "|---|---|---|---|---|",
    ]
    for model, rows in s["served_cycles"].items():
        for b, v in rows.items():
            lines.append(
                f"| {model} | {b} | {v['plain_cycle_ms']} | {v['tier0_cycle_ms']} | {v['tier0_over_plain_cycle']} |"
            )
    live = s.get("live") or {}
    if live.get("static"):
        lines += ["", "## Trained model under load (tok/s, same request set per batch)", ""]
        lines += [
            "| batch | no speculation | static tiers | tuner's table (intervals it ran) | paired baseline |",
            "|---|---|---|---|---|",
        ]
        for b in live["static"]:
            nospec = live["nospec"].get(b)
            if b in live.get("nospec_beside_load", {}):
                nospec = f"({live['nospec_beside_load'][b]}, beside the tuner's load: not a baseline)"
            lines.append(
                f"| {b} | {nospec} | {json.dumps(live['static'][b])} | {live['tables'].get(b)} "
                f"({live.get('tuner_intervals', {}).get(b)}) | {live['baseline'].get(b)} |"
            )
        if live.get("tier0_pairs_beside_load"):
            lines += [
                "",
                "Tier 0 against no speculation measured while the tuner's background load also ran on the pod and shared "
                "the GPU with the server without speculation (live_tune.py before `baselines_alone`), cycle ratio, median "
                "of rounds; not a tier-0 figure and not counted for the goal: "
                + ", ".join(f"{b}: {v['median']}" for b, v in live["tier0_pairs_beside_load"].items())
                + ".",
            ]
        if s.get("baseline_without_nospec"):
            lines += [
                "",
                "Batches whose Live table is paired against the best static tier only (their no-speculation point ran "
                f"beside the tuner's load): {', '.join(s['baseline_without_nospec'])}.",
            ]
    if s.get("prefill_parts"):
        cols = [
            "prefill_batches",
            "requests_per_prefill",
            "tokens_per_prefill",
            "host_launch_ms_per_prefill",
            "host_target_ms_per_prefill",
            "host_draft_ms_per_prefill",
            "host_result_ms_per_prefill",
            "device_target_ms_per_prefill",
            "device_draft_ms_per_prefill",
            "cycles_per_prefill",
            "mean_batch",
            "prefill_ms_per_cycle",
            "queue_ms",
            "ttft_ms",
        ]
        lines += ["", "## Prefill under speculation (per prefill batch; the pod's and SGLang's counters)", ""]
        lines += ["| batch | point | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
        for b, points in s["prefill_parts"].items():
            for point, rec in points.items():
                lines.append(f"| {b} | {point} | " + " | ".join(str(rec.get(c, "")) for c in cols) + " |")
    if s.get("prefill_eager_vs_graphs"):
        lines += [
            "",
            "## Prefill: eager against SGLang's prefill CUDA graphs (same lease, same request set)",
            "",
            "| batch | point | mode | tok/s | " + " | ".join(PREFILL_COLUMNS) + " |",
            "|---|---|---|---|" + "---|" * len(PREFILL_COLUMNS),
        ]
        for b, points in s["prefill_eager_vs_graphs"].items():
            for point, modes in points.items():
                for mode in ("eager", "graphs"):
                    rec = modes.get(mode) or {}
                    lines.append(
                        f"| {b} | {point} | {mode} | {rec.get('tokens_per_s', '')} | "
                        + " | ".join(str(rec.get(c, "")) for c in PREFILL_COLUMNS)
                        + " |"
                    )
                if "graphs_over_eager" in modes:
                    lines.append(
                        f"| {b} | {point} | graphs / eager | {modes['graphs_over_eager']} |"
                        + " |" * len(PREFILL_COLUMNS)
                    )
    if s.get("plain_graphs"):
        lines += ["", f"Tier 0's plain decode graphs (the pod's `/metrics`): {json.dumps(s['plain_graphs'])}"]
    if s.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in s["notes"]]
    return "\n".join(lines) + "\n\n" + renderer.provenance_md(p)
