"""Counter snapshots of one pod: the runtime's metrics contract, parsed (the tuner's only input from pods).

The tuner only ever looks at *differences* between two snapshots of monotonically increasing counters, so a
snapshot keeps raw counter values and says plainly when it cannot be trusted (endpoint down, NaN, garbage);
deciding what a bad snapshot means is the estimator's and the tuner's job, never a crash here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

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


class NamedField:
    """Named access to one field of :class:`Counts` for the tuner's formulas (the table names every field; these
    are the ones code reads by name)."""

    def __init__(self, field: str) -> None:
        self.field = field


class CountField(NamedField):
    """A counter keyed by the bucket alone (axis ``bucket``): 0 until the series appears."""

    def __get__(self, obj: Counts, owner: type | None = None) -> float:
        return obj.values.get(self.field, 0.0)

    def __set__(self, obj: Counts, value: float) -> None:
        obj.values[self.field] = value


class KeyedField(NamedField):
    """A counter keyed by one more label (axis ``position`` or ``phase``): the live dict, made on first use."""

    def __get__(self, obj: Counts, owner: type | None = None) -> dict[Any, float]:
        return obj.keyed.setdefault(self.field, {})

    def __set__(self, obj: Counts, value: dict[Any, float]) -> None:
        obj.keyed[self.field] = value


class GaugeField(NamedField):
    """A gauge keyed by the bucket alone, as an integer: None while the pod does not publish it."""

    def __get__(self, obj: Counts, owner: type | None = None) -> int | None:
        value = obj.gauges.get(self.field)
        return None if value is None else int(value)

    def __set__(self, obj: Counts, value: float | None) -> None:
        if value is None:
            obj.gauges.pop(self.field, None)
        else:
            obj.gauges[self.field] = value


class Counts:
    """Values of one bucket by the metric table's field names (``Metric.fields``): ``values`` for counters of axis
    ``bucket``, ``gauges`` for its gauges, ``keyed[field][key]`` for the axes with one more label (an integer
    position, a phase). Every row of the table lands here without a change to this class; the attributes below
    name the fields the tuner's formulas read (keyword arguments of the constructor too)."""

    cycles = CountField("cycles")
    requests = CountField("requests")  # sum of batch sizes over cycles
    draft_steps = CountField("draft_steps")  # sum of steps over cycles
    attempts = KeyedField("attempts")
    accepted = KeyedField("accepted")
    phase_sum = KeyedField("phase_sum")
    phase_count = KeyedField("phase_count")

    def __init__(self, **named: Any) -> None:
        self.values: dict[str, float] = {}
        self.gauges: dict[str, float] = {}
        self.keyed: dict[str, dict[Any, float]] = {}
        for name, value in named.items():
            if not any(isinstance(vars(k).get(name), NamedField) for k in type(self).__mro__):
                raise TypeError(f"{type(self).__name__} has no named field {name!r}")
            setattr(self, name, value)

    def _state(self) -> tuple[dict[str, float], dict[str, float], dict[str, dict[Any, float]]]:
        """What equality compares: an absent counter equals 0, an absent keyed field an empty one."""
        return (
            {k: v for k, v in self.values.items() if v},
            dict(self.gauges),
            {k: v for k, v in self.keyed.items() if v},
        )

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and isinstance(other, Counts) and self._state() == other._state()

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        values, gauges, keyed = self._state()
        return f"{type(self).__name__}(values={values}, gauges={gauges}, keyed={keyed})"


class BucketCounters(Counts):
    """Raw counter values of one batch-size bucket, as one scrape read them."""

    num_steps = GaugeField("num_steps")


@dataclass
class PodSnapshot:
    """Everything one scrape of one pod said, at one time (seconds, any monotonic clock shared by all scrapes)."""

    pod: str
    time: float
    buckets: dict[str, BucketCounters] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)  # the pod-wide counters (axis pod) by field
    candidates: list[int] = field(default_factory=list)  # step counts the pod has captured
    # The pod's start-up cost probe: (stage, steps, bucket, batch) -> seconds (specdecode_cost_seconds).
    costs: dict[tuple[str, int, str, int], float] = field(default_factory=dict)
    # served tier changes since the pod started, by kind: off (k>0 -> 0), on (0 -> k>0), change
    # (specdecode_step_switches)
    switches: dict[str, float] = field(default_factory=dict)
    simulated: bool = False
    error: str | None = None  # the pod could not be read at all
    problems: list[str] = field(default_factory=list)  # samples that were dropped (NaN, bad labels)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def tokens_total(self) -> float | None:
        """Tokens the pod's decode cycles emitted (None until the series appears)."""
        return self.values.get("tokens_total")


Route = tuple[contract.Metric, str]


def routes() -> dict[str, Route]:
    """Sample name -> (its row, the field it feeds), for every row of the table the tuner reads."""
    return {
        sample: (row, name) for row in contract.tuner_rows() for sample, name in zip(row.sample_names(), row.fields())
    }


def parse_metrics(text: str, pod: str, time: float, costs: bool = True) -> PodSnapshot:
    """Parse Prometheus exposition text; never raises on bad content (it comes from a pod, not from us).

    Each sample of a row the tuner reads lands in the row's field as the row's axis says (the table in
    :mod:`specdecode_runtime.contract.metric_names`). ``costs=False`` drops the start-up cost probe's series before
    parsing: they do not change while the pod lives, the tuner needs them once per pod (``Tuner.wants_costs``), and
    they are a third of the text the parser would otherwise walk every interval."""
    snap = PodSnapshot(pod=pod, time=time)
    table = routes()
    if not costs:
        probes = [name for name, (row, _) in table.items() if row.axis == "probe"]
        text = "\n".join(line for line in text.split("\n") if not any(p in line for p in probes))
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
            route = table.get(name)
            if route is not None and route[0].axis == "probe":
                _probe_point(snap, route[1], labels, value)
                continue
            if value is None or math.isnan(value) or math.isinf(value):
                snap.problems.append(f"{name}{_fmt(labels)} is {value}")
                continue
            if route is None:
                # Another series of the contract: a bucket label still says the pod serves that bucket.
                if "bucket" in labels:
                    snap.buckets.setdefault(labels["bucket"], BucketCounters())
                    seen = True
                continue
            seen = _read(snap, route, name, labels, value) or seen
    if not seen and snap.error is None:
        snap.error = "no specdecode_* metrics in the response"
    snap.candidates = sorted(set(snap.candidates))
    return snap


def _probe_point(snap: PodSnapshot, name: str, labels: dict[str, str], value: float | None) -> None:
    """A start-up measurement, not a counter: a bad point is dropped on its own (the tuner falls back to the other
    points or to live timings); it does not make the pod's counters unusable."""
    try:
        key = tuple(
            int(labels[k]) if k in contract.INTEGER_LABELS else labels[k] for k in contract.AXIS_LABELS["probe"]
        )
    except (KeyError, ValueError):
        return
    if value is not None and math.isfinite(value) and value >= 0:
        getattr(snap, name)[key] = value


def _read(snap: PodSnapshot, route: Route, name: str, labels: dict[str, str], value: float) -> bool:
    """File one finite sample under its row's field and axis; True when it is one of the pod's counters (what
    makes a response the contract's)."""
    row, field_name = route
    axis = row.axis
    if axis == "pod":
        snap.values[field_name] = value
        return True
    if axis == "switch":
        kind = labels.get("kind")
        if kind in contract.SWITCH_KINDS and value >= 0:
            getattr(snap, field_name)[kind] = value
        return False
    if axis == "candidate":
        try:
            if value > 0:
                getattr(snap, field_name).append(int(labels["steps"]))
        except (KeyError, ValueError):
            snap.problems.append(f"{name}{_fmt(labels)} has no integer steps")
        return False
    bucket = labels.get("bucket")
    if bucket is None:
        return False
    b = snap.buckets.setdefault(bucket, BucketCounters())
    if axis == "bucket":
        (b.gauges if row.kind == "gauge" else b.values)[field_name] = value
        return True
    assert axis is not None
    raw = labels.get(axis, "")
    key: int | str = raw
    if axis in contract.INTEGER_LABELS:
        try:
            key = int(raw)
        except ValueError:
            snap.problems.append(f"{name}{_fmt(labels)} has no integer {axis}")
            return True
    b.keyed.setdefault(field_name, {})[key] = value
    return True


def _fmt(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def down(pod: str, time: float, why: str) -> PodSnapshot:
    """The snapshot of a pod that could not be read at all (the reader says ``why``)."""
    return PodSnapshot(pod=pod, time=time, error=why)
