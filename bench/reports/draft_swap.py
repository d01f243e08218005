"""The GPU half of ``bench/results/draft_swap.{json,md}`` from the raw report of ``bench/gpu/campaigns/draft_swap.sh``
(``draft_swap_gpu.json`` and the run's ``meta.json`` under ``--raw``); the CPU half is ``bench/operator/draft_canary_cpu.py``'s.

Usage: python bench/renderer.py report draft_swap [--raw bench/results/gpu_h100/draft_swap]
"""

from __future__ import annotations

from pathlib import Path

import renderer

from reports.live_runs import read_json

SECTION = "## GPU"  # the heading reports.REPORTS["draft_swap"] fills


def summary(raw: dict) -> dict:
    """The keys the results file promises: swap time on the pod, failed requests, accept length before and after
    (the trained head's stretch before the swap, the brief head's after it), target restarts."""
    swaps, stretches = raw["swaps"], {s["draft"]: s for s in raw["stretches"]}
    return {
        "swap_ms": [round(1000 * s["seconds"], 1) for s in swaps if "seconds" in s],
        "pause_ms": [round(1000 * s["pauseSeconds"], 1) for s in swaps if "pauseSeconds" in s],
        "swap_status": [s.get("status") for s in swaps],
        "failed_requests": raw["failed_requests"],
        "completed_requests": raw["completed_requests"],
        "accept_length_before": stretches["full"]["accept_length"],
        "accept_length_after": stretches["brief"]["accept_length"],
        "accept_length_restored": stretches["full_again"]["accept_length"],
        "tokens_per_s": {k: v["tokens_per_s"] for k, v in stretches.items()},
        "target_restarts": raw["target_restarts"],
        "greedy_identical": raw["greedy_identical"],
        "batch": raw["batch"],
        "steps": raw["steps"],
    }


def section(gpu: dict, meta: dict) -> str:
    cmds = "; ".join(f"`{c}`" for c in meta["commands"])
    notes = "\n".join(f"- {n}" for n in meta.get("notes", []))
    tps = gpu["tokens_per_s"]
    return f"""{SECTION}

{meta["device"]}, {meta["date"]}, commit {meta["commit"]}. Commands: {cmds}.

The trained 304M code LM served by the patched runtime (one rank, bf16, CUDA graphs, {gpu["steps"]} steps) under
{gpu["batch"]} client threads; its trained EAGLE-3 head swapped in place for a briefly trained one, then back.

| | trained head | -> brief head | -> trained head again |
|---|---|---|---|
| swap answered | | {gpu["swap_status"][0]} in {gpu["swap_ms"][0]} ms (loop paused {gpu["pause_ms"][0]} ms) | {gpu["swap_status"][1]} in {gpu["swap_ms"][1]} ms (loop paused {gpu["pause_ms"][1]} ms) |
| accept length (tokens per request per cycle, the pod's counters) | {gpu["accept_length_before"]} | {gpu["accept_length_after"]} | {gpu["accept_length_restored"]} |
| served tok/s over the stretch | {tps["full"]} | {tps["brief"]} | {tps["full_again"]} |

Failed requests: {gpu["failed_requests"]} of {gpu["completed_requests"]}; target restarts: {gpu["target_restarts"]}; greedy
outputs before and after the two swaps identical: {gpu["greedy_identical"]}. Swap time is the pod's own: from every
rank learning of the swap to its outcome, during which the pod keeps serving; the pause is the scheduler loop's
(verdicts gathered, the copy, its agreement).

{notes}
"""


def summarize(raw: Path) -> dict:
    """The GPU keys of the results file and the run's meta (its provenance named, or the missing key)."""
    report = read_json(raw, "draft_swap_gpu.json")
    renderer.provenance(raw / "meta.json")  # commit, device, date and commands, or the missing one named
    return {"gpu": summary(report), "gpu_meta": read_json(raw, "meta.json")}


def markdown(s: dict) -> str:
    return section(s["gpu"], s["gpu_meta"])
