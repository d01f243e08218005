"""Metric names, label values and batch-size buckets of the metrics contract (docs/metrics.md).

The exporter (:class:`specdecode_runtime.metrics.SpecMetrics`, prometheus-client) and every reader (the tuner's
scraper, the simulator, the benchmarks) take the names from here, so a renamed series cannot leave a reader behind.
"""

from __future__ import annotations

from typing import Iterable

VERIFY_CYCLES = "specdecode_verify_cycles"  # exposed as ..._total
POSITION_ATTEMPTS = "specdecode_position_attempts"
POSITION_ACCEPTED = "specdecode_position_accepted"
CYCLE_SECONDS = "specdecode_cycle_seconds"  # summary: ..._sum / ..._count
DRAFT_STEPS = "specdecode_draft_steps"
REQUESTS_VERIFIED = "specdecode_requests_verified"
NUM_STEPS = "specdecode_num_steps"
CANDIDATE_STEPS = "specdecode_candidate_steps"
DRAFT_TP = "specdecode_draft_tp"
TOKENS_GENERATED = "specdecode_tokens_generated"
NCCL_LATENCY = "specdecode_nccl_latency_seconds"
COST_SECONDS = "specdecode_cost_seconds"  # start-up cost probe (cost_probe.py): {stage,steps,bucket,batch}

PHASES = ("draft", "verify", "draft_extend", "other")
SIMULATED_LABELS = {"simulated": "true"}
DEFAULT_BUCKETS = (1, 2, 8, 32, 64)  # lower bounds of the batch-size buckets: 1, 2-7, 8-31, 32-63, 64+


def exposed_name(name: str, kind: str) -> str:
    """The sample name a scraper sees: prometheus-client appends ``_total`` to counters."""
    return f"{name}_total" if kind == "counter" else name


def bucket_label(batch: int, bounds: tuple[int, ...] | list[int] = DEFAULT_BUCKETS) -> str:
    """Batch-size bucket label: bounds (1, 2, 8, 32, 64) -> 1, 2-7, 8-31, 32-63, 64+."""
    bounds = sorted(bounds)
    for i, lo in enumerate(bounds):
        hi = bounds[i + 1] - 1 if i + 1 < len(bounds) else None
        if hi is None:
            if batch >= lo:
                return f"{lo}+"
        elif lo <= batch <= hi:
            return str(lo) if lo == hi else f"{lo}-{hi}"
    return str(bounds[0])


def bucket_labels(bounds: tuple[int, ...] | list[int] = DEFAULT_BUCKETS) -> list[str]:
    bounds = sorted(bounds)
    return [bucket_label(b, bounds) for b in bounds]


def position_counts(steps: int, accepted_per_req: Iterable[int]) -> tuple[list[int], list[int]]:
    """Attempts and acceptances per position (index 0 = position 1) for one verify of ``steps`` steps."""
    attempts = [0] * steps
    accepted = [0] * steps
    for c in accepted_per_req:
        c = int(c)
        if c < 0 or c > steps:
            raise ValueError(f"accepted drafts per request must be within 0..{steps} (steps), got {c}")
        for j in range(min(c + 1, steps)):
            attempts[j] += 1
        for j in range(c):
            accepted[j] += 1
    return attempts, accepted
