"""The metrics contract (docs/metrics.md) as one table: per series its name, type, labels, unit, help, and what the
tuner reads it into.

The runtime's exporter (:class:`specdecode_runtime.metrics.SpecMetrics`, prometheus-client; the simulator runs the
same one) declares every row; the operator's readers iterate the rows a field is named for: the snapshot parser
(``tuner/snapshot.py``) files each sample under its row's field and axis, the estimator takes the interval's change
of every such counter, and the pod client asks Prometheus for the same rows. A counter the tuner reads is therefore
its row here and the code that counts it (a ``SpecMetrics`` call), and a renamed series cannot leave a reader
behind; the chart's rules and dashboard and the docs are checked against the table
(tests/chart/test_chart_monitoring.py).

A row's ``axis`` says how its field is keyed and where it lands (``BucketCounters`` / ``PodSnapshot`` in the tuner):

| axis | labels read | lands in |
|---|---|---|
| ``bucket`` | bucket | one value per batch-size bucket; a counter's change per interval, a gauge's value at its end |
| ``position`` | bucket, position | per bucket and draft position (an integer) |
| ``phase`` | bucket, phase | per bucket and cycle phase (a summary: ``<field>_sum`` and ``<field>_count``) |
| ``pod`` | none | one counter per pod (its change per interval; a decrease is a restart) |
| ``switch`` | kind | per pod and tier change kind (:data:`SWITCH_KINDS`), totals since the pod started |
| ``candidate`` | steps | per pod, the step counts whose info series is above 0 |
| ``probe`` | stage, steps, bucket, batch | the start-up cost probe's points; a bad point is dropped on its own |
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Literal

Kind = Literal["counter", "gauge", "summary"]
Axis = Literal["bucket", "position", "phase", "pod", "switch", "candidate", "probe"]
# prometheus-client's exposition: the sample names each metric type produces
SAMPLE_SUFFIXES: dict[str, tuple[str, ...]] = {"counter": ("_total",), "gauge": ("",), "summary": ("_sum", "_count")}
# the labels each axis reads from a sample (a row carries at least these)
AXIS_LABELS: dict[str, tuple[str, ...]] = {
    "bucket": ("bucket",),
    "position": ("bucket", "position"),
    "phase": ("bucket", "phase"),
    "pod": (),
    "switch": ("kind",),
    "candidate": ("steps",),
    "probe": ("stage", "steps", "bucket", "batch"),
}
BUCKET_AXES = ("bucket", "position", "phase")  # one value per batch-size bucket, keyed further by the axis label
INTERVAL_AXES = (*BUCKET_AXES, "pod")  # what the tuner's estimator takes per interval
INTEGER_LABELS = frozenset({"position", "steps", "batch"})  # label values the tuner reads as integers


@dataclass(frozen=True)
class Metric:
    """One series family of the contract. ``labels`` are the contract's own (the simulator adds ``simulated``).

    ``field`` names what the operator's tuner reads the series into (None: the tuner does not read it) and
    ``axis`` how that field is keyed (the module's table); ``feature`` names the ``runtime.yaml`` section without
    which a pod does not declare the series at all."""

    name: str
    kind: Kind
    labels: tuple[str, ...]
    unit: str
    help: str
    field: str | None = None
    axis: Axis | None = None
    feature: str | None = None

    def __post_init__(self) -> None:
        if (self.field is None) != (self.axis is None):
            raise ValueError(f"{self.name}: a field the tuner reads needs its axis, and an axis its field")
        if self.axis is None:
            return
        missing = set(AXIS_LABELS[self.axis]) - set(self.labels)
        if missing:
            raise ValueError(f"{self.name}: axis {self.axis} reads labels {sorted(missing)} the series lacks")
        if self.kind == "gauge" and self.axis in INTERVAL_AXES and self.axis != "bucket":
            raise ValueError(f"{self.name}: a gauge has no change per interval; axis {self.axis} takes one")

    def sample_names(self) -> tuple[str, ...]:
        return tuple(self.name + suffix for suffix in SAMPLE_SUFFIXES[self.kind])

    def fields(self) -> tuple[str, ...]:
        """The tuner's field of each sample name (a summary's ``_sum`` and ``_count`` feed ``<field>_sum`` and
        ``<field>_count``); empty where the tuner reads nothing."""
        if self.field is None:
            return ()
        if self.kind == "summary":
            return tuple(self.field + suffix for suffix in SAMPLE_SUFFIXES["summary"])
        return (self.field,)


METRICS: dict[str, Metric] = {}


def _metric(
    name: str,
    kind: Kind,
    labels: tuple[str, ...],
    unit: str,
    help: str,
    field: str | None = None,
    axis: Axis | None = None,
    feature: str | None = None,
) -> str:
    METRICS[name] = Metric(name, kind, labels, unit, help, field, axis, feature)
    return name


VERIFY_CYCLES = _metric(
    "specdecode_verify_cycles",
    "counter",
    ("bucket",),
    "cycles",
    "Verify (decode) cycles per batch-size bucket",
    field="cycles",
    axis="bucket",
)
POSITION_ATTEMPTS = _metric(
    "specdecode_position_attempts",
    "counter",
    ("bucket", "position"),
    "requests",
    "Requests whose draft position was attempted (1..min(accepted+1, steps))",
    field="attempts",
    axis="position",
)
POSITION_ACCEPTED = _metric(
    "specdecode_position_accepted",
    "counter",
    ("bucket", "position"),
    "requests",
    "Requests whose draft position was accepted (1..accepted)",
    field="accepted",
    axis="position",
)
CYCLE_SECONDS = _metric(
    "specdecode_cycle_seconds",
    "summary",
    ("bucket", "phase"),
    "seconds",
    "Time per cycle spent in each phase (draft|verify|draft_extend|other)",
    field="phase",
    axis="phase",
)
DRAFT_STEPS = _metric(
    "specdecode_draft_steps",
    "counter",
    ("bucket",),
    "steps",
    "Draft steps run (sum of steps over cycles)",
    field="draft_steps",
    axis="bucket",
)
REQUESTS_VERIFIED = _metric(
    "specdecode_requests_verified",
    "counter",
    ("bucket",),
    "requests",
    "Requests verified (sum of batch size over cycles)",
    field="requests",
    axis="bucket",
)
NUM_STEPS = _metric(
    "specdecode_num_steps",
    "gauge",
    ("bucket",),
    "steps",
    "Active speculative steps for the bucket (0 = no speculation)",
    field="num_steps",
    axis="bucket",
)
CANDIDATE_STEPS = _metric(
    "specdecode_candidate_steps",
    "gauge",
    ("steps",),
    "info",
    "Info: 1 for every captured candidate step count",
    field="candidates",
    axis="candidate",
)
DRAFT_TP = _metric(
    "specdecode_draft_tp", "gauge", (), "ranks", "Tensor-parallel size of the draft model's process group"
)
TOKENS_GENERATED = _metric(
    "specdecode_tokens_generated",
    "counter",
    (),
    "tokens",
    "Tokens emitted by decode cycles (accepted drafts + bonus)",
    field="tokens_total",
    axis="pod",
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
    field="costs",
    axis="probe",
)

STEP_SWITCHES = _metric(
    "specdecode_step_switches",
    "counter",
    ("kind",),
    "switches",
    "Served tier changes between consecutive decode cycles: off (k>0 -> 0), on (0 -> k>0), change (k -> k', both >0)",
    field="switches",
    axis="switch",
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
    feature="capture",
)
CAPTURE_BYTES = _metric(
    "specdecode_capture_bytes",
    "gauge",
    (),
    "bytes",
    "Bytes of this pod's capture files on the capture volume (at most capture.maxBytes)",
    feature="capture",
)
CAPTURE_RESULTS = ("written", "dropped", "sampled_out")
SWITCH_KINDS = ("off", "on", "change")  # STEP_SWITCHES' kind: k>0 -> 0, 0 -> k>0, k -> k' (both > 0)

PHASES = ("draft", "verify", "draft_extend", "other")
PREFILL_PHASE = "prefill"  # the cycle clock's key for prefill work inside a decode cycle (PREFILL_SECONDS)
SIMULATED_LABELS = {"simulated": "true"}
DEFAULT_BUCKETS = (1, 2, 8, 32, 64)  # lower bounds of the batch-size buckets: 1, 2-7, 8-31, 32-63, 64+


def tuner_rows() -> list[Metric]:
    """The rows the operator's tuner reads, in table order (read at call time: the table is the one source)."""
    return [m for m in METRICS.values() if m.field is not None]


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
