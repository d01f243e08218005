"""Counter snapshots of one pod: the runtime's metrics contract, parsed (the tuner's only input from pods).

The tuner only ever looks at *differences* between two snapshots of monotonically increasing counters, so a
snapshot keeps raw counter values and says plainly when it cannot be trusted (endpoint down, NaN, garbage);
deciding what a bad snapshot means is the estimator's and the tuner's job, never a crash here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.contract import metric_names as contract

# Sample names as a scraper sees them, from the contract's metric table (specdecode_runtime.contract.metric_names).
CYCLES = contract.exposed_name(contract.VERIFY_CYCLES)
ATTEMPTS = contract.exposed_name(contract.POSITION_ATTEMPTS)
ACCEPTED = contract.exposed_name(contract.POSITION_ACCEPTED)
PHASE_SUM, PHASE_COUNT = contract.METRICS[contract.CYCLE_SECONDS].sample_names()
DRAFT_STEPS = contract.exposed_name(contract.DRAFT_STEPS)
REQUESTS = contract.exposed_name(contract.REQUESTS_VERIFIED)
NUM_STEPS = contract.exposed_name(contract.NUM_STEPS)
CANDIDATES = contract.exposed_name(contract.CANDIDATE_STEPS)
TOKENS = contract.exposed_name(contract.TOKENS_GENERATED)
COST = contract.exposed_name(contract.COST_SECONDS)
SWITCHES = contract.exposed_name(contract.STEP_SWITCHES)


@dataclass
class BucketCounters:
    """Raw counter values of one batch-size bucket."""

    cycles: float = 0.0
    requests: float = 0.0  # sum of batch sizes over cycles
    draft_steps: float = 0.0  # sum of steps over cycles
    attempts: dict[int, float] = field(default_factory=dict)
    accepted: dict[int, float] = field(default_factory=dict)
    phase_sum: dict[str, float] = field(default_factory=dict)
    phase_count: dict[str, float] = field(default_factory=dict)
    num_steps: int | None = None


@dataclass
class PodSnapshot:
    """Everything one scrape of one pod said, at one time (seconds, any monotonic clock shared by all scrapes)."""

    pod: str
    time: float
    buckets: dict[str, BucketCounters] = field(default_factory=dict)
    tokens_total: float | None = None
    candidates: list[int] = field(default_factory=list)  # step counts the pod has captured
    # The pod's start-up cost probe: (stage, steps, bucket, batch) -> seconds (specdecode_cost_seconds).
    costs: dict[tuple[str, int, str, int], float] = field(default_factory=dict)
    # served tier changes since the pod started, by kind: off (k>0 -> 0), on (0 -> k>0), change (specdecode_step_switches)
    switches: dict[str, float] = field(default_factory=dict)
    simulated: bool = False
    error: str | None = None  # the pod could not be read at all
    problems: list[str] = field(default_factory=list)  # samples that were dropped (NaN, bad labels)

    @property
    def ok(self) -> bool:
        return self.error is None


def parse_metrics(text: str, pod: str, time: float, costs: bool = True) -> PodSnapshot:
    """Parse Prometheus exposition text; never raises on bad content (it comes from a pod, not from us).

    ``costs=False`` drops the start-up cost probe's series before parsing: they do not change while the pod lives,
    the tuner needs them once per pod (``Tuner.wants_costs``), and they are a third of the text the parser would
    otherwise walk every interval."""
    snap = PodSnapshot(pod=pod, time=time)
    if not costs:
        text = "\n".join(line for line in text.split("\n") if COST not in line)
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # the parser raises ValueError and friends on malformed text
        snap.error = f"unparseable metrics: {exc}"
        return snap
    seen = False
    for family in families:
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if not name.startswith("specdecode_"):
                continue
            if labels.get("simulated") == "true":
                snap.simulated = True
            if name == COST:
                # A start-up measurement, not a counter: a bad point is dropped on its own (the tuner falls back to
                # the other points or to live timings); it does not make the pod's counters unusable.
                try:
                    key = (labels["stage"], int(labels["steps"]), labels["bucket"], int(labels["batch"]))
                except (KeyError, ValueError):
                    continue
                if value is not None and math.isfinite(value) and value >= 0:
                    snap.costs[key] = value
                continue
            if value is None or math.isnan(value) or math.isinf(value):
                snap.problems.append(f"{name}{_fmt(labels)} is {value}")
                continue
            if name == TOKENS:
                snap.tokens_total = value
                seen = True
                continue
            if name == SWITCHES:
                kind = labels.get("kind")
                if kind in ("off", "on", "change") and value >= 0:
                    snap.switches[kind] = value
                continue
            if name == CANDIDATES:
                try:
                    if value > 0:
                        snap.candidates.append(int(labels["steps"]))
                except (KeyError, ValueError):
                    snap.problems.append(f"{name}{_fmt(labels)} has no integer steps")
                continue
            bucket = labels.get("bucket")
            if bucket is None:
                continue
            b = snap.buckets.setdefault(bucket, BucketCounters())
            seen = True
            if name == CYCLES:
                b.cycles = value
            elif name == REQUESTS:
                b.requests = value
            elif name == DRAFT_STEPS:
                b.draft_steps = value
            elif name in (ATTEMPTS, ACCEPTED):
                try:
                    pos = int(labels["position"])
                except (KeyError, ValueError):
                    snap.problems.append(f"{name}{_fmt(labels)} has no integer position")
                    continue
                (b.attempts if name == ATTEMPTS else b.accepted)[pos] = value
            elif name in (PHASE_SUM, PHASE_COUNT):
                phase = labels.get("phase", "")
                (b.phase_sum if name == PHASE_SUM else b.phase_count)[phase] = value
            elif name == NUM_STEPS:
                b.num_steps = int(value)
    if not seen and snap.error is None:
        snap.error = "no specdecode_* metrics in the response"
    snap.candidates = sorted(set(snap.candidates))
    return snap


def _fmt(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def down(pod: str, time: float, why: str) -> PodSnapshot:
    """The snapshot of a pod that could not be read at all (the reader says ``why``)."""
    return PodSnapshot(pod=pod, time=time, error=why)
