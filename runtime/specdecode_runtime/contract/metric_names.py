"""The metrics contract (docs/metrics.md) as one table: name, type, labels, unit and help of every series.

The runtime's exporter (:class:`specdecode_runtime.metrics.SpecMetrics`, prometheus-client; the simulator runs the
same one) declares each metric from its row, and every reader (the tuner's snapshot parser, the operator's pod
client, the benchmarks) takes the sample names from here, so a renamed series cannot leave a reader behind; the
chart's rules and dashboard and the docs are checked against the table (tests/chart/test_chart_monitoring.py).
Adding a metric the tuner reads: a row here, its series in ``metrics.py``, its reader in ``tuner/snapshot.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

Kind = Literal["counter", "gauge", "summary"]
# prometheus-client's exposition: the sample names each metric type produces
SAMPLE_SUFFIXES: dict[str, tuple[str, ...]] = {"counter": ("_total",), "gauge": ("",), "summary": ("_sum", "_count")}


@dataclass(frozen=True)
class Metric:
    """One series family of the contract. ``labels`` are the contract's own (the simulator adds ``simulated``)."""

    name: str
    kind: Kind
    labels: tuple[str, ...]
    unit: str
    help: str

    def sample_names(self) -> tuple[str, ...]:
        return tuple(self.name + suffix for suffix in SAMPLE_SUFFIXES[self.kind])


METRICS: dict[str, Metric] = {}


def _metric(name: str, kind: Kind, labels: tuple[str, ...], unit: str, help: str) -> str:
    METRICS[name] = Metric(name, kind, labels, unit, help)
    return name


VERIFY_CYCLES = _metric(
    "specdecode_verify_cycles", "counter", ("bucket",), "cycles", "Verify (decode) cycles per batch-size bucket"
)
POSITION_ATTEMPTS = _metric(
    "specdecode_position_attempts",
    "counter",
    ("bucket", "position"),
    "requests",
    "Requests whose draft position was attempted (1..min(accepted+1, steps))",
)
POSITION_ACCEPTED = _metric(
    "specdecode_position_accepted",
    "counter",
    ("bucket", "position"),
    "requests",
    "Requests whose draft position was accepted (1..accepted)",
)
CYCLE_SECONDS = _metric(
    "specdecode_cycle_seconds",
    "summary",
    ("bucket", "phase"),
    "seconds",
    "Time per cycle spent in each phase (draft|verify|draft_extend|other)",
)
DRAFT_STEPS = _metric(
    "specdecode_draft_steps", "counter", ("bucket",), "steps", "Draft steps run (sum of steps over cycles)"
)
REQUESTS_VERIFIED = _metric(
    "specdecode_requests_verified",
    "counter",
    ("bucket",),
    "requests",
    "Requests verified (sum of batch size over cycles)",
)
NUM_STEPS = _metric(
    "specdecode_num_steps",
    "gauge",
    ("bucket",),
    "steps",
    "Active speculative steps for the bucket (0 = no speculation)",
)
CANDIDATE_STEPS = _metric(
    "specdecode_candidate_steps", "gauge", ("steps",), "info", "Info: 1 for every captured candidate step count"
)
DRAFT_TP = _metric(
    "specdecode_draft_tp", "gauge", (), "ranks", "Tensor-parallel size of the draft model's process group"
)
TOKENS_GENERATED = _metric(
    "specdecode_tokens_generated", "counter", (), "tokens", "Tokens emitted by decode cycles (accepted drafts + bonus)"
)
PREFILL_SECONDS = _metric(
    "specdecode_prefill_seconds",
    "counter",
    ("bucket",),
    "seconds",
    "Host time of prefill batches that ran inside decode cycles (bucket of the cycle); specdecode_cycle_seconds "
    "leaves it out, so its phases price decode cycles alone",
)
NCCL_LATENCY = _metric(
    "specdecode_nccl_latency_seconds",
    "gauge",
    ("op", "bytes"),
    "seconds",
    "Startup preflight: mean latency of one collective on the TP group",
)
COST_SECONDS = _metric(
    "specdecode_cost_seconds",
    "gauge",
    ("stage", "steps", "bucket", "batch"),
    "seconds",
    "Start-up cost probe: median seconds of one stage (draft_step|draft|verify|draft_extend|overhead|"
    "broadcast) at a step tier and batch size, timed on dummy inputs after graph capture; stage cycle: a whole "
    "decode cycle as served before the pod reported healthy (costProbe.served)",
)

STEP_SWITCHES = _metric(
    "specdecode_step_switches",
    "counter",
    ("kind",),
    "switches",
    "Served tier changes between consecutive decode cycles: off (k>0 -> 0), on (0 -> k>0), change (k -> k', both >0)",
)
CATCH_UP_TOKENS = _metric(
    "specdecode_catch_up_tokens",
    "counter",
    (),
    "positions",
    "Positions decoded while speculation was off that the draft's catch-up extend wrote into its KV on the way back",
)
CATCH_UP_SECONDS = _metric(
    "specdecode_catch_up_seconds",
    "counter",
    (),
    "seconds",
    "Host time of the catch-up extends (what switching speculation back on cost; inside the cycles' draft phase)",
)
PREFILL_PHASE_SECONDS = _metric(
    "specdecode_prefill_phase_seconds",
    "counter",
    ("phase", "clock"),
    "seconds",
    "Prefill batches split into parts: clock=host for launch (the scheduler's whole run_batch), target (the "
    "target's extend), draft (the draft's extend over the prompt) and result (processing its result); clock=device "
    "for target and draft (CUDA events, GPU pods only)",
)
PREFILL_BATCHES = _metric(
    "specdecode_prefill_batches", "counter", (), "batches", "Prefill batches the prefill parts were counted over"
)
PREFILL_REQUESTS = _metric(
    "specdecode_prefill_requests", "counter", (), "requests", "Requests in those prefill batches"
)
PREFILL_TOKENS = _metric(
    "specdecode_prefill_tokens", "counter", (), "tokens", "Prompt tokens those prefill batches extended"
)
PLAIN_GRAPHS = _metric(
    "specdecode_plain_decode_graphs",
    "gauge",
    ("unit",),
    "seconds|bytes",
    "The target's plain decode CUDA graphs captured for tier 0 at start-up: capture seconds and device bytes",
)
DRAFT_INFO = _metric(
    "specdecode_draft_info",
    "gauge",
    ("source", "digest"),
    "info",
    "Info: 1 for the draft checkpoint served now (its directory and content digest), 0 for one served earlier in "
    "the pod's life",
)
DRAFT_SWAPS = _metric(
    "specdecode_draft_swaps",
    "counter",
    ("result",),
    "swaps",
    "Draft swaps that reached the ranks (POST /specdecode/v1/draft): result=ok loaded in place, refused left the "
    "old draft serving",
)
DRAFT_SWAP_SECONDS = _metric(
    "specdecode_draft_swap_seconds",
    "summary",
    ("result",),
    "seconds",
    "Seconds from a draft swap reaching the ranks to its outcome (the checkpoint is read while serving goes on)",
)
CAPTURE_RECORDS = _metric(
    "specdecode_capture_records",
    "counter",
    ("result",),
    "records",
    "Finished requests seen by the traffic capture (TP rank 0): result=written appended to a capture file, "
    "dropped lost (queue full, or one record larger than the byte budget), sampled_out left out by sampleRatio",
)
CAPTURE_BYTES = _metric(
    "specdecode_capture_bytes",
    "gauge",
    (),
    "bytes",
    "Bytes of this pod's capture files on the capture volume (at most capture.maxBytes)",
)
CAPTURE_RESULTS = ("written", "dropped", "sampled_out")

PHASES = ("draft", "verify", "draft_extend", "other")
PREFILL_PHASE = "prefill"  # the cycle clock's key for prefill work inside a decode cycle (PREFILL_SECONDS)
SIMULATED_LABELS = {"simulated": "true"}
DEFAULT_BUCKETS = (1, 2, 8, 32, 64)  # lower bounds of the batch-size buckets: 1, 2-7, 8-31, 32-63, 64+


def sample_names() -> set[str]:
    """Every sample name the contract's exporter produces."""
    return {s for m in METRICS.values() for s in m.sample_names()}


def exposed_name(name: str) -> str:
    """The sample name a scraper reads for a counter or gauge of the table (prometheus-client appends ``_total`` to
    counters); a summary's are ``<name>_sum`` and ``<name>_count``."""
    samples = METRICS[name].sample_names()
    if len(samples) != 1:
        raise ValueError(f"{name} is a {METRICS[name].kind}: its samples are {samples}")
    return samples[0]


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
