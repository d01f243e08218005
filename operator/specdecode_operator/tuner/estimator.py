"""Turn successive counter snapshots into the goodput model's inputs: per-position acceptance and per-phase costs.

Why windowed deltas and not lifetime ratios: the workload moves (phases, load), and a lifetime average would keep
the tuner anchored to the past. Why conditional per-position rates: positions beyond the running step count are
never attempted (censored), so E(steps) for a larger step count must come from a fitted decay plus exploration, not
from data that cannot exist. Why scale the calibrated profile instead of replacing it: a running pod only shows the
cost of the step count it runs, while the policy needs the cost of every candidate.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from specdecode_runtime.contract import metric_names as contract
from specdecode_runtime.contract.goodput import CycleCost, expected_tokens

from .snapshot import BucketCounters, Counts, GaugeField, PodSnapshot

Z95 = 1.959964


class BucketDelta(Counts):
    """Counts of one bucket over one scrape interval, summed over pods: every counter of the table's bucket axes by
    its field (``Counts``), gauges as read at the interval's end."""

    steps = GaugeField("num_steps")  # step count that ran during the interval (the gauge at its end)

    def add(self, other: BucketDelta) -> None:
        for name, v in other.values.items():
            self.values[name] = self.values.get(name, 0.0) + v
        for name, src in other.keyed.items():
            dst = self.keyed.setdefault(name, {})
            for key, v in src.items():
                dst[key] = dst.get(key, 0.0) + v
        self.gauges.update(other.gauges)

    @property
    def tokens(self) -> float:
        """Tokens emitted: one bonus token per request plus every accepted draft."""
        return self.requests + sum(self.accepted.values())

    @property
    def busy_s(self) -> float:
        return sum(self.phase_sum.values())


def bucket_delta(prev: BucketCounters | None, cur: BucketCounters) -> BucketDelta | None:
    """Difference of two scrapes of one bucket, field by field of the table's bucket axes; None when any counter
    went backwards (a restarted process)."""
    prev = prev or BucketCounters()
    d = BucketDelta()
    for row in contract.tuner_rows():
        if row.axis not in contract.BUCKET_AXES:
            continue
        for name in row.fields():
            if row.kind == "gauge":
                if name in cur.gauges:
                    d.gauges[name] = cur.gauges[name]
            elif row.axis == "bucket":
                diff = cur.values.get(name, 0.0) - prev.values.get(name, 0.0)
                if diff < 0:
                    return None
                d.values[name] = diff
            else:
                src_cur, src_prev = cur.keyed.get(name, {}), prev.keyed.get(name, {})
                dst: dict[Any, float] = {}
                for key in set(src_cur) | set(src_prev):
                    diff = src_cur.get(key, 0.0) - src_prev.get(key, 0.0)
                    if diff < 0:
                        return None
                    if diff:
                        dst[key] = diff
                if dst:
                    d.keyed[name] = dst
    return d


def wilson(successes: float, trials: float, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval: honest at small counts and at rates near 0 or 1, where the normal one is not."""
    if trials <= 0:
        return 0.0, 1.0
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Acceptance:
    """Conditional acceptance per position (index 0 = position 1) with 95 % intervals.

    ``observed`` is the deepest position with enough attempts; deeper values are extrapolated from the fitted
    decay and carry the widest interval the data allows.
    """

    alphas: list[float]
    lower: list[float]
    upper: list[float]
    attempts: list[float]
    observed: int

    @property
    def accept_length(self) -> float:
        return expected_tokens(self.alphas, max(self.observed, 0))


@dataclass
class ObserveReport:
    """What one interval's scrape contributed, and what was wrong with it."""

    interval_s: float | None = None
    pods_used: list[str] = field(default_factory=list)
    down: dict[str, str] = field(default_factory=dict)
    resets: list[str] = field(default_factory=list)
    invalid: dict[str, list[str]] = field(default_factory=dict)
    changed_buckets: list[str] = field(default_factory=list)
    tokens_per_s: float | None = None
    pod_counts: dict[str, float] = field(default_factory=dict)  # the pod-wide counters' change, summed over pods
    bucket_cycles: dict[str, float] = field(default_factory=dict)  # cycles per bucket in this interval

    @property
    def usable(self) -> bool:
        return bool(self.pods_used)


class Estimator:
    """Holds the last snapshot per pod and a short window of interval deltas per bucket."""

    def __init__(
        self,
        window_intervals: int = 6,
        min_attempts: float = 200.0,
        change_z: float = 4.0,
        prior_weight_cycles: float = 200.0,
        memory_decay: float = 0.5,
        flip_intervals: int = 2,
    ) -> None:
        self.window_intervals = window_intervals
        self.min_attempts = min_attempts
        self.change_z = change_z
        self.prior_weight_cycles = prior_weight_cycles
        self._last: dict[str, PodSnapshot] = {}
        self.windows: dict[str, deque[BucketDelta]] = {}
        self.last_interval: dict[str, BucketDelta] = {}
        self.last_seen: dict[str, float] = {}
        # Deep positions go unattempted once the step count drops below them; their last estimate is kept (halved
        # in weight per interval in which they are attempted, dropped on a detected workload change) so the policy
        # does not forget a measured cliff and walk back into it as soon as the window slides past the data.
        self.position_memory: dict[str, dict[int, list[float]]] = {}
        self.memory_decay = memory_decay
        # Workload changes closer together than this many intervals are a mixture, not a sequence of phases: the
        # window then keeps averaging (a controller one interval behind a workload that flips every interval or two
        # would run the wrong step count half the time; the mixture's best step count is the better bet).
        self.flip_intervals = flip_intervals
        self._seen: dict[str, int] = {}  # intervals observed per bucket
        self._last_change: dict[str, int] = {}

    # -- ingest ---------------------------------------------------------------------------------------------------
    def observe(self, snapshots: list[PodSnapshot]) -> ObserveReport:
        report = ObserveReport()
        interval: dict[str, BucketDelta] = {}
        spans = []
        for snap in snapshots:
            if not snap.ok:
                report.down[snap.pod] = snap.error or "down"
                continue
            if snap.problems:
                # A NaN counter cannot be differenced; the whole pod sits this interval out rather than skew it.
                report.invalid[snap.pod] = list(snap.problems)
                continue
            prev = self._last.get(snap.pod)
            self._last[snap.pod] = snap
            if prev is None or snap.time <= prev.time:
                continue
            deltas = {}
            for label, cur in snap.buckets.items():
                d = bucket_delta(prev.buckets.get(label), cur)
                if d is None:
                    break
                deltas[label] = d
            else:
                # a counter series appears on its first increment: absent before counts as 0
                pod_counts = {name: v - prev.values.get(name, 0.0) for name, v in snap.values.items()}
                if any(v < 0 for v in pod_counts.values()):
                    report.resets.append(snap.pod)
                    continue
                for name, v in pod_counts.items():
                    report.pod_counts[name] = report.pod_counts.get(name, 0.0) + v
                spans.append(snap.time - prev.time)
                report.pods_used.append(snap.pod)
                for label, d in deltas.items():
                    interval.setdefault(label, BucketDelta()).add(d)
                continue
            report.resets.append(snap.pod)
        if spans:
            report.interval_s = sum(spans) / len(spans)
            tokens = report.pod_counts.get("tokens_total", 0.0)
            report.tokens_per_s = tokens / report.interval_s if report.interval_s > 0 else None
        now = max((s.time for s in snapshots if s.ok), default=None)
        for label, d in interval.items():
            if d.cycles <= 0:
                continue
            window = self.windows.setdefault(label, deque(maxlen=self.window_intervals))
            memory = self.position_memory.setdefault(label, {})
            seen = self._seen[label] = self._seen.get(label, 0) + 1
            if window and self._changed(window, d):
                last = self._last_change.get(label)
                self._last_change[label] = seen
                if last is None or seen - last > self.flip_intervals:
                    window.clear()
                    memory.clear()
                    report.changed_buckets.append(label)
            window.append(d)
            report.bucket_cycles[label] = d.cycles
            for pos, att in d.attempts.items():
                m = memory.setdefault(pos, [0.0, 0.0])
                m[0] = m[0] * self.memory_decay + d.accepted.get(pos, 0.0)
                m[1] = m[1] * self.memory_decay + att
            self.last_interval[label] = d
            if now is not None:
                self.last_seen[label] = now
        return report

    def _changed(self, window: deque[BucketDelta], new: BucketDelta) -> bool:
        """Two-proportion z-test per position against the window: a workload phase change empties the window so
        the estimate follows the new phase at once instead of averaging two worlds."""
        old = _sum(window)
        for pos, att_new in new.attempts.items():
            att_old = old.attempts.get(pos, 0.0)
            if att_new < self.min_attempts / 4 or att_old < self.min_attempts / 4:
                continue
            p1, p2 = new.accepted.get(pos, 0.0) / att_new, old.accepted.get(pos, 0.0) / att_old
            pooled = (new.accepted.get(pos, 0.0) + old.accepted.get(pos, 0.0)) / (att_new + att_old)
            se = math.sqrt(max(pooled * (1 - pooled), 1e-9) * (1 / att_new + 1 / att_old))
            if abs(p1 - p2) / se > self.change_z:
                return True
        b_new = new.requests / new.cycles
        b_old = old.requests / old.cycles if old.cycles else b_new
        return abs(b_new - b_old) > 0.5 * max(b_old, 1.0)

    # -- queries --------------------------------------------------------------------------------------------------
    def buckets(self) -> list[str]:
        return list(self.windows)

    def window(self, label: str) -> BucketDelta:
        return _sum(self.windows.get(label, ()))

    def samples(self, label: str) -> float:
        return self.window(label).cycles

    def batch_mean(self, label: str) -> float | None:
        w = self.window(label)
        return w.requests / w.cycles if w.cycles > 0 else None

    def acceptance(self, label: str, positions: int) -> Acceptance:
        w = self.window(label)
        alphas, lower, upper, attempts = [], [], [], []
        observed = 0
        memory = self.position_memory.get(label, {})
        for pos in range(1, positions + 1):
            att, acc = w.attempts.get(pos, 0.0), w.accepted.get(pos, 0.0)
            if att < self.min_attempts and pos in memory and memory[pos][1] > att:
                acc, att = memory[pos]
            attempts.append(att)
            if att >= self.min_attempts and observed == pos - 1:
                observed = pos
            # Beta(1, 1) posterior mean: defined (0.5) with no data and close to acc/att with plenty.
            alphas.append((acc + 1.0) / (att + 2.0))
            lo, hi = wilson(acc, att)
            lower.append(lo)
            upper.append(hi)
        if observed < positions:
            fitted = decay_extrapolate(alphas[:observed], attempts[:observed], positions)
            for i in range(observed, positions):
                # Extrapolated positions: the fitted decay as the estimate, the data-free bound as the optimism.
                alphas[i] = fitted[i] if observed else alphas[i]
                lower[i] = min(lower[i], alphas[i])
                upper[i] = max(upper[i], alphas[i])
        return Acceptance(alphas, lower, upper, attempts, observed)

    def latest_alphas(self, label: str, fallback: Sequence[float]) -> list[float]:
        """Conditional acceptance per position in the bucket's latest interval alone, ``fallback`` (the window's
        estimate) where that interval attempted a position fewer than ``min_attempts`` times. Why: acceptance depends
        on what is being generated, and one interval's content can differ from the next by more than a step change
        does (measured on a trained model at batch 1: intervals at one step count varying by +-12 %), so a rollback
        test compares the step counts on the same interval's content (policy ``judge_rollback``)."""
        d = self.last_interval.get(label)
        out = list(fallback)
        if d is None:
            return out
        for pos in range(1, len(out) + 1):
            att = d.attempts.get(pos, 0.0)
            if att >= self.min_attempts:
                out[pos - 1] = d.accepted.get(pos, 0.0) / att
        return out

    def phase_ms(self, label: str) -> dict[str, float]:
        """Mean milliseconds per cycle in each phase; 'draft_step' is per draft step."""
        w = self.window(label)
        if w.cycles <= 0:
            return {}
        out = {p: 1000.0 * s / w.cycles for p, s in w.phase_sum.items()}
        if w.draft_steps > 0:
            out["draft_step"] = 1000.0 * w.phase_sum.get("draft", 0.0) / w.draft_steps
        return out

    def measured_cycle_s(self, label: str) -> float | None:
        """Seconds of decode time per cycle in the bucket's latest interval."""
        d = self.last_interval.get(label)
        return d.busy_s / d.cycles if d is not None and d.cycles > 0 and d.busy_s > 0 else None

    def measured_goodput(self, label: str, latest_only: bool = False) -> float | None:
        """Tokens per second of decode busy time in this bucket (what the goodput model predicts)."""
        w = self.last_interval.get(label) if latest_only else self.window(label)
        if w is None or w.busy_s <= 0:
            return None
        return w.tokens / w.busy_s

    def cost(self, label: str, profile: CycleCost | None) -> tuple[CycleCost | None, str]:
        """Cycle cost for every step count: the calibrated profile scaled phase by phase to what was measured, the scale
        weighted by how many cycles back it (profile alone with none); measured constants when no profile."""
        window = list(self.windows.get(label, ()))
        w = _sum(window)
        if w.cycles <= 0:
            return profile, "profile" if profile else "none"
        if profile is None:
            if sum(w.phase_sum.values()) <= 0:
                return None, "none"  # pods that count cycles but time none of them: no cost to decide on
            spec_cycles = sum(d.cycles for d in window if (d.steps or 0) > 0)
            return (
                CycleCost(
                    verify_base=1000.0 * w.phase_sum.get("verify", 0.0) / w.cycles,
                    verify_per_token=0.0,
                    draft_base=1000.0 * w.phase_sum.get("draft", 0.0) / w.draft_steps if w.draft_steps else 0.0,
                    draft_per_seq=0.0,
                    extend_base=1000.0 * w.phase_sum.get("draft_extend", 0.0) / spec_cycles if spec_cycles else 0.0,
                    extend_per_token=0.0,
                    overhead=1000.0 * w.phase_sum.get("other", 0.0) / w.cycles,
                ),
                "measured",
            )
        pred = {"verify": 0.0, "draft": 0.0, "draft_extend": 0.0, "other": 0.0}
        for d in window:
            if d.cycles <= 0:
                continue
            steps, b = d.steps or 0, d.requests / d.cycles
            pred["verify"] += d.cycles * profile.verify_ms(steps, b)  # steps 0: one token per sequence
            pred["draft"] += d.draft_steps * profile.draft_step_ms(b)
            pred["draft_extend"] += d.cycles * (profile.extend_ms(steps, b) if steps else profile.warm_extend_ms(b))
            pred["other"] += d.cycles * (
                profile.overhead + (profile.broadcast + profile.host_ms(steps) if steps else 0.0)
            )
        weight = w.cycles / (w.cycles + self.prior_weight_cycles)
        scale = {}
        for phase, p in pred.items():
            m = 1000.0 * w.phase_sum.get(phase, 0.0)
            scale[phase] = 1.0 + weight * (m / p - 1.0) if p > 1e-12 else 1.0
        return (
            CycleCost(
                verify_base=profile.verify_base * scale["verify"],
                verify_per_token=profile.verify_per_token * scale["verify"],
                draft_base=profile.draft_base * scale["draft"],
                draft_per_seq=profile.draft_per_seq * scale["draft"],
                extend_base=profile.extend_base * scale["draft_extend"],
                extend_per_token=profile.extend_per_token * scale["draft_extend"],
                overhead=profile.overhead * scale["other"],
                broadcast=profile.broadcast * scale["other"],
                warm_extend_base=profile.warm_extend_base * scale["draft_extend"],
                warm_extend_per_seq=profile.warm_extend_per_seq * scale["draft_extend"],
                host_base=profile.host_base * scale["other"],  # the scheduler's host work lands in "other"
                host_per_step=profile.host_per_step * scale["other"],
            ),
            "profile-scaled",
        )


def _sum(deltas: Iterable[BucketDelta]) -> BucketDelta:
    total = BucketDelta()
    for d in deltas:
        total.add(d)
    return total


def decay_extrapolate(alphas: list[float], weights: list[float], positions: int) -> list[float]:
    """Extend observed conditional acceptance over ``positions`` draft positions with a geometric decay fitted by weighted
    least squares on log(alpha) vs position; the slope is capped at 0 (deeper drafts are not easier to accept)."""
    n = len(alphas)
    out = list(alphas) + [0.0] * (positions - n)
    if n == 0:
        return [0.5] * positions
    if n == 1:
        slope = 0.0
    else:
        xs = list(range(1, n + 1))
        ys = [math.log(max(a, 1e-6)) for a in alphas]
        ws = [max(w, 1e-9) for w in weights]
        sw = sum(ws)
        mx = sum(w * x for w, x in zip(ws, xs)) / sw
        my = sum(w * y for w, y in zip(ws, ys)) / sw
        sxx = sum(w * (x - mx) ** 2 for w, x in zip(ws, xs))
        sxy = sum(w * (x - mx) * (y - my) for w, x, y in zip(ws, xs, ys))
        slope = min(0.0, sxy / sxx) if sxx > 0 else 0.0
    last = alphas[-1]
    for i in range(n, positions):
        out[i] = min(1.0, last * math.exp(slope * (i + 1 - n)))
    return out
