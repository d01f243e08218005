"""The start-up cost probe's points and their fit into the goodput model's cycle cost.

Shared by the runtime (``cost_probe``, which times the points and exports them as ``specdecode_cost_seconds``) and
the operator's tuner (which scrapes them and fits the same profile), so both read one definition of a point and
one fit. Pure: no clock, no device.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from typing import Iterable, Mapping, Sequence

from .goodput import CycleCost

STAGES = ("draft_step", "draft", "verify", "draft_extend", "overhead", "broadcast", "cycle")
SERVED = "cycle"  # a whole decode cycle as served (the start-up served calibration), not a stage replay


@dataclass(frozen=True)
class ProbePoint:
    """Median seconds of one stage at one tier and batch size."""

    stage: str
    steps: int
    bucket: str
    batch: int
    seconds: float


def _line(xs: Sequence[float], ys: Sequence[float], clamp: bool = True) -> tuple[float, float]:
    """Least-squares (intercept, slope), both clamped at >= 0 unless ``clamp`` is false (then only the slope);
    one distinct x gives slope 0."""
    n = len(xs)
    if n == 0:
        return 0.0, 0.0
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx <= 0:
        return (max(my, 0.0) if clamp else my), 0.0
    slope = max(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx, 0.0)
    base = my - slope * mx
    return (max(base, 0.0) if clamp else base), slope


def fit_bucket(points: Iterable[ProbePoint], tier0_extends: bool = False) -> CycleCost | None:
    """One bucket's ``CycleCost`` in milliseconds from its points. The verify and draft-extend per-token costs come
    from how the time grows with the tier at the probed batch (``batch * (steps + 1)`` tokens), the draft step is
    the measured forward at that batch. None without a plain-decode verify point (nothing to anchor k = 0), and None
    when speculative tiers were probed without a draft step (a runner that measures only the verify: the tuner then
    keeps its per-cycle phase averages rather than a profile with free drafting). ``tier0_extends``: the engine's
    steps 0 still extends the draft every cycle (SGLang's own tier 0, as the runtime served it before tier 0 became
    plain decoding; the recorded runs of that time are priced with it)."""
    pts = list(points)
    by = {st: [p for p in pts if p.stage == st] for st in STAGES}
    if not by["verify"]:
        return None
    if not by["draft_step"] and not by["draft"] and any(p.steps > 0 for p in by["verify"]):
        return None  # verify alone would price drafting at zero and push the tuner to its largest k

    def ms(p: ProbePoint) -> float:
        return 1000.0 * p.seconds

    vb, vpt = _line([p.batch * (p.steps + 1) for p in by["verify"]], [ms(p) for p in by["verify"]])
    eb, ept = _line([p.batch * (p.steps + 1) for p in by["draft_extend"]], [ms(p) for p in by["draft_extend"]])
    # steps 0 is plain decoding (sglang_patch.plain_decode): the target's decode and the overhead, no draft extend;
    # the draft's catch-up after it runs inside the next speculative cycle, which its served cost carries. An engine
    # whose steps 0 extends the draft pays the extend's line at batch * 1 tokens (before the draft's intercept is
    # folded into the speculative cycles' base below)
    warm_base, warm_per_seq = (eb, ept) if tier0_extends and by["draft_extend"] else (0.0, 0.0)
    draft = statistics.median(ms(p) for p in by["draft_step"]) if by["draft_step"] else 0.0
    if by["draft"]:
        # A tier's whole draft phase D(k) = a + b*k: b is the cost of one draft step; a (negative when the first
        # proposal comes from the draft-extend, as in SGLang's EAGLE, whose tier 1 runs no draft forward) is paid
        # once per speculative cycle, as the extend is, so it joins the extend's base cost.
        da, draft = _line([p.steps for p in by["draft"]], [ms(p) for p in by["draft"]], clamp=False)
        eb = max(eb + da, 0.0)
    overhead = statistics.median(ms(p) for p in by["overhead"]) if by["overhead"] else 0.0
    bcast = statistics.median(ms(p) for p in by["broadcast"]) if by["broadcast"] else 0.0
    replayed = CycleCost(
        verify_base=vb,
        verify_per_token=vpt,
        draft_base=draft,
        draft_per_seq=0.0,
        extend_base=eb,
        extend_per_token=ept,
        overhead=overhead,
        broadcast=bcast,
        warm_extend_base=warm_base,
        warm_extend_per_seq=warm_per_seq,
    )
    return calibrate(replayed, by[SERVED]) if by[SERVED] else replayed


def calibrate(cost: CycleCost, served: Iterable[ProbePoint]) -> CycleCost:
    """``cost`` (fitted from stage replays) corrected by whole served cycles of the same bucket: what the scheduler's
    host work adds to a cycle, which no replay of a captured stage sees.

    The plain cycles (steps 0) set ``overhead`` (the median residual added, kept >= 0); the speculative ones set the
    host terms from their residuals over the corrected cost, a line over the step count (``host_base`` may be
    negative where the replays over-price a cycle; the slope is kept >= 0, as every fitted per-step cost is). The
    replayed stages keep their split, so the draft's and the verify's shares (which the draft-TP planner scales)
    are not blurred by host work."""
    pts = [p for p in served if p.stage == SERVED and p.seconds > 0 and p.batch > 0]
    plain = [1000.0 * p.seconds - cost.cycle_ms(0, p.batch) for p in pts if p.steps == 0]
    if plain:
        cost = replace(cost, overhead=max(cost.overhead + statistics.median(plain), 0.0))
    spec = [p for p in pts if p.steps > 0]
    if spec:
        base, per_step = _line(
            [p.steps for p in spec], [1000.0 * p.seconds - cost.cycle_ms(p.steps, p.batch) for p in spec], clamp=False
        )
        cost = replace(cost, host_base=base, host_per_step=per_step)
    return cost


def fit_profile(points: Iterable[ProbePoint], tier0_extends: bool = False) -> dict[str, CycleCost]:
    """Per-bucket costs (bucket label -> ``CycleCost``) from the points of one or more pods (``tier0_extends``: see
    :func:`fit_bucket`)."""
    by_bucket: dict[str, list[ProbePoint]] = {}
    for p in points:
        by_bucket.setdefault(p.bucket, []).append(p)
    out = {}
    for label, pts in by_bucket.items():
        cost = fit_bucket(pts, tier0_extends)
        if cost is not None:
            out[label] = cost
    return out


def points_from_samples(samples: Mapping[tuple[str, int, str, int], float]) -> list[ProbePoint]:
    """``ProbePoint``s from scraped ``(stage, steps, bucket, batch) -> seconds`` (the tuner's side of the metric)."""
    return [
        ProbePoint(st, k, bucket, b, sec)
        for (st, k, bucket, b), sec in samples.items()
        if st in STAGES and sec >= 0 and sec == sec
    ]
