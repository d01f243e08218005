"""The reports the renderer (``bench/renderer.py``) makes from raw GPU runs: one module per report, each a pure
``summarize(raw_dir) -> dict`` (what the run measured, read from its raw files through the extractors of
:mod:`reports.live_runs` where the run is ``live_tune.py``'s) and ``markdown(dict) -> str`` (the view: which
tables, which columns, which findings), registered here with the folder of its committed raw files and the results
file it writes. ``python bench/renderer.py report NAME`` renders one; ``python bench/renderer.py check`` regenerates
every committed one and compares.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Report:
    name: str  # bench/results/NAME.{json,md}
    module: str  # reports.MODULE holds summarize and markdown
    raw: str  # the committed raw folder, from the repository root
    show: tuple[str, ...]  # the keys printed after rendering
    indent: int = 2  # of the JSON file
    section: tuple[str, str] | None = None  # (heading, title): one section of a results file several commands fill
    campaign: str | None = None  # live_tune.py runs: the campaign and model shape their points record
    shape: str | None = None
    committed: bool = True  # a committed summary regenerates from its raw folder (tests/bench)


TRAINED = "trained-304m"
NOCLIFF_SHOW = (
    "tier0_over_plain_cycle",
    "live_over_best_of_nospec_and_static",
    "speedup_over_nospec_b1",
)  # the project's trained 304M code LM (bench/gpu/trained)
REPORTS = {
    r.name: r
    for r in (
        Report(
            "gpu_h200_tp1",
            "tp1",
            "bench/results/gpu_h200",
            ("probe_over_served", "patched_over_stock", "scenario_costs"),
        ),
        Report(
            "gpu_h200_trained",
            "trained",
            "bench/results/gpu_h200",
            ("speedup_over_nospec", "planner_over_measured", "best_speedup_per_batch"),
        ),
        Report(
            "gpu_h200_trained_load",
            "load",
            "bench/results/gpu_h200/trained_live",
            ("best_static", "live_over_best_static", "patched_over_stock"),
            campaign="trained-load",
            shape=TRAINED,
        ),
        Report(
            "gpu_h200_trained_replay",
            "replay",
            "bench/results/gpu_h200/trained_replay",
            ("nospec_tokens_per_s", "best_static", "live", "same_steps_measured_twice"),
            campaign="trained-replay",
            shape=TRAINED,
        ),
        Report(
            "gpu_h200_trained_paired",
            "paired",
            "bench/results/gpu_h200/trained_paired",
            ("nospec_tokens_per_s", "live_over_best_static", "planner_over_measured", "host_speed_same_configuration"),
            campaign="trained-paired",
            shape=TRAINED,
        ),
        Report(
            "gpu_h200_trained_host",
            "host",
            "bench/results/gpu_h200/trained_host",
            ("greedy_float32", "live_over_best_static"),
            indent=1,
            campaign="trained-host",
            shape=TRAINED,
        ),
        Report(
            "draft_swap",
            "draft_swap",
            "bench/results/gpu_h100/draft_swap",
            ("gpu",),
            section=("## GPU", "Draft swap: the operator's canary against real pods"),
        ),
        *(
            Report(name, "nocliff", raw, NOCLIFF_SHOW)
            for name, raw in (
                ("gpu_h200_nocliff", "bench/results/gpu_h200/nocliff"),
                ("gpu_h100_nocliff", "bench/results/gpu_h100/nocliff"),
                ("gpu_h100_nocliff_smoke", "bench/results/gpu_h100/nocliff_smoke"),
                ("gpu_h100_nocliff_trained", "bench/results/gpu_h100/nocliff_trained"),
            )
        ),
        Report(
            "gpu_adaptation",  # written as gpu_<device>_adaptation (reports/adaptation.py: default_name)
            "adaptation",
            "bench/results/gpu_h200/adaptation",
            ("gap_recovered", "minutes_to_promotion", "speedup_over_stale_b1", "failed_requests", "all_goals_met"),
            committed=False,  # no GPU run committed yet
        ),
        Report(
            "gpu_h200x2_split",
            "x2",
            "bench/results/gpu_h200x2/split",
            ("tokens_identical", "split_over_sharded_accept", "plan_over_measured"),
            committed=False,  # no two-GPU run committed yet
        ),
    )
}
