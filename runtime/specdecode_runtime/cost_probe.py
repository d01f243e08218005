"""Start-up cost probe: time every captured step tier per batch bucket and fit the goodput model's cycle cost.

Why the runtime measures its own costs: the tuner needs the cost of step counts the pod is not running (is k+1
worth its extra draft step and its longer verify?), and a running pod only shows the cost of the k it runs. Right
after graph capture every tier can be replayed on dummy inputs for a few hundred microseconds to milliseconds per
point, which gives a complete profile of this box before the first request. A warm-up on dummy data is not the live
workload (context lengths, KV-cache occupancy, contention differ), so the tuner treats the result as a prior and
refines it online from live cycle timings (operator ``tuner/cost_refine.py``).

The fit (points -> ``CycleCost``, also the tuner's) is :mod:`.contract.cost_profile`. Everything here is pure over
a ``run_step(stage, steps, batch)`` callable that launches one replay of the named stage, a ``sync()`` that waits
for the device and a clock, so the same code runs on a GPU after capture, on CPU with torch in the tests, and in
the simulator with a simulated clock.

Stages (label ``stage`` of ``specdecode_cost_seconds{stage,steps,bucket,batch}``):

* ``draft_step``  one draft forward, one token per sequence (``steps`` = 1) (eager probe);
* ``draft``       the whole draft phase of tier k (``steps`` = k): the captured multi-step draft graph SGLang
  replays each cycle (graph probe; a tier that drafts no forward of its own times as near zero);
* ``verify``      the target's verify forward over ``batch * (steps + 1)`` tokens (``steps`` = 0: plain decode);
* ``draft_extend`` the draft's KV catch-up over ``batch * (steps + 1)`` tokens;
* ``overhead``    the fixed host work of one cycle (sampling, scheduling) (``steps`` = 0);
* ``broadcast``   the proposal broadcast of a split draft (``steps`` = k), absent when the draft runs on every rank.
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
import time
from typing import Callable, Iterable, Sequence

from .contract.cost_profile import STAGES, ProbePoint, fit_bucket, fit_profile, points_from_samples
from .contract.metric_names import DEFAULT_BUCKETS, bucket_label

# The points and their fit are the contract's (the tuner fits the scraped points with the same code).
__all__ = [
    "GRAPH",
    "EAGER",
    "RunStep",
    "STAGES",
    "ProbePoint",
    "fit_bucket",
    "fit_profile",
    "points_from_samples",
    "probe_batch",
    "plan_points",
    "run_probe",
    "export",
    "summary",
    "probe_at_start",
    "cuda_event_timer",
    "time_stage",
]

log = logging.getLogger("specdecode.cost_probe")

GRAPH, EAGER = "graph", "eager"  # how a runner launches a stage: replaying captured CUDA graphs, or eager forwards
RunStep = Callable[[str, int, int], None]  # (stage, steps, batch): launch one replay of that stage
HOST_ROUNDS = 3  # rounds over the whole plan when host-timed (CPU forwards): see ``probe_at_start``


def probe_batch(
    bounds: Sequence[int], index: int, max_batch: int | None = None, graph_sizes: Sequence[int] = ()
) -> int:
    """The batch size a bucket is probed at: the geometric middle of its bounds (the open top bucket: twice its
    lower bound), capped at the largest captured batch. Why the middle: the tuner evaluates the cost at the
    bucket's live mean batch, and a per-token cost fitted across tiers at a middle batch errs least over it.

    With captured graph sizes, the captured size inside the bucket nearest that middle (in ratio) instead: serving
    pads a batch to the next captured size, so a probe between two sizes would time the larger graph and price the
    whole bucket at it."""
    lo = bounds[index]
    hi = bounds[index + 1] - 1 if index + 1 < len(bounds) else 2 * lo
    b = max(lo, round((lo * hi) ** 0.5))
    b = max(1, min(b, max_batch)) if max_batch else b
    inside = [int(g) for g in graph_sizes if lo <= int(g) <= hi and (not max_batch or int(g) <= max_batch)]
    if inside:
        b = min(inside, key=lambda g: (abs(math.log(g / b)), g))
    return b


def time_stage(
    run: Callable[[], None],
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    budget_s: float = 0.002,
    min_samples: int = 3,
    max_samples: int = 50,
    warmup: int = 1,
    agree: Callable[[bool], bool] | None = None,
    give_up: Callable[[], bool] = lambda: False,
    timer: Callable[[Callable[[], None]], float] | None = None,
    reduce: Callable[[list[float]], float] = statistics.median,
) -> float:
    """Median (or ``reduce``) seconds of one ``run()``: ``warmup`` untimed calls, then timed calls (each between two ``sync``) until
    ``budget_s`` is spent, at least ``min_samples`` and at most ``max_samples``. The median, not the mean: one
    stray context switch or allocator call must not set a cost the tuner acts on for the pod's whole life.

    ``agree(more) -> more`` makes every TP rank take the same number of calls (a stage with collectives deadlocks
    when one rank stops sampling earlier): the engine passes rank 0's decision, broadcast over the TP group.
    ``give_up()`` true stops sampling early (a stage that failed on this rank); NaN when nothing was timed.
    ``timer(run) -> seconds`` replaces the host clock around ``run(); sync()`` (CUDA events on a GPU)."""
    for _ in range(warmup):
        run()
    sync()
    samples: list[float] = []
    spent = 0.0
    while True:
        more = len(samples) < max_samples and (len(samples) < min_samples or spent < budget_s) and not give_up()
        if not (agree(more) if agree is not None else more):
            break
        if timer is not None:
            dt = timer(run)
        else:
            t0 = clock()
            run()
            sync()
            dt = clock() - t0
        samples.append(dt)
        spent += dt
    return reduce(samples) if samples else float("nan")


def plan_points(
    captured: Iterable[int],
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    split_draft: bool = False,
    max_batch: int | None = None,
    mode: str = EAGER,
    graph_sizes: Sequence[int] = (),
) -> list[tuple[str, int, str, int]]:
    """(stage, steps, bucket, batch) for every point the probe times: per bucket, verify at k = 0 and every captured
    k, draft-extend at every captured k > 0, the draft (eager: one draft step; graph: each tier's whole draft
    phase, since SGLang captures a tier's draft steps as one graph), the cycle overhead and (split draft) the
    broadcast."""
    bounds = sorted(buckets)
    ks = sorted({int(k) for k in captured if int(k) > 0})
    points = []
    for i, lo in enumerate(bounds):
        label, b = bucket_label(lo, bounds), probe_batch(bounds, i, max_batch, graph_sizes)
        points.append(("overhead", 0, label, b))
        points.append(("verify", 0, label, b))
        if not ks:
            continue
        if mode != GRAPH:
            points.append(("draft_step", 1, label, b))
        for k in ks:
            if mode == GRAPH:
                points.append(("draft", k, label, b))
            points.append(("verify", k, label, b))
            points.append(("draft_extend", k, label, b))
            if split_draft:
                points.append(("broadcast", k, label, b))
    return points


def run_probe(
    run_step: RunStep,
    captured: Iterable[int],
    buckets: Sequence[int] = DEFAULT_BUCKETS,
    split_draft: bool = False,
    sync: Callable[[], None] = lambda: None,
    clock: Callable[[], float] = time.perf_counter,
    budget_s: float = 0.002,
    max_batch: int | None = None,
    agree: Callable[[bool], bool] | None = None,
    timer: Callable[[Callable[[], None]], float] | None = None,
    warmup: int = 1,
    min_samples: int = 3,
    reduce: Callable[[list[float]], float] = statistics.median,
    rounds: int = 1,
) -> list[ProbePoint]:
    """Time every planned point; a stage the runner cannot run (it raises) is left out with a log line, so a partial
    profile is still served (the tuner falls back per stage).

    ``rounds`` > 1 times the whole plan that many times over and keeps ``reduce`` of each point's per-round values:
    a point's calls are then spread over the probe's whole run instead of one short stretch of it, so a spell of
    load on a shared machine slows one round of a point, not every call of it, and every point sees the same mix of
    quiet and busy moments. Every round runs every point on every rank (a point dropped in an earlier round too), so
    the ranks' collectives stay in step.

    A failing stage does not leave the sampling protocol: its remaining calls are skipped, ``agree`` still runs once
    per sample, and with ``agree`` rank 0's outcome decides on every rank whether the point is kept, so a stage
    that raises on some ranks only (the draft runs on S alone) cannot shift the ranks' collectives against each
    other. ``max_batch`` defaults to the runner's own ``max_batch`` attribute (the largest batch it can launch), the
    plan's mode to its ``mode`` attribute (``graph`` or ``eager``)."""
    if max_batch is None:
        max_batch = getattr(run_step, "max_batch", None)
    mode = getattr(run_step, "mode", EAGER)
    sizes = getattr(run_step, "graph_sizes", ()) if mode == GRAPH else ()
    plan = plan_points(captured, buckets, split_draft, max_batch, mode=mode, graph_sizes=sizes)
    timed: dict[tuple[str, int, str, int], list[float]] = {point: [] for point in plan}
    dropped: set[tuple[str, int, str, int]] = set()
    for point in (p for _ in range(max(1, rounds)) for p in plan):
        stage, steps, label, batch = point
        failure: list[BaseException] = []

        def run(
            stage: str = stage, steps: int = steps, batch: int = batch, failure: list[BaseException] = failure
        ) -> None:
            if failure:
                return
            try:
                run_step(stage, steps, batch)
            except Exception as exc:  # a missing tier or stage must not stop the pod from serving
                failure.append(exc)

        sec = time_stage(
            run,
            sync=sync,
            clock=clock,
            budget_s=budget_s,
            agree=agree,
            give_up=functools.partial(bool, failure),
            timer=timer,
            warmup=warmup,
            min_samples=min_samples,
            reduce=reduce,
        )
        local = bool(failure) or not sec == sec
        failed = agree(local) if agree is not None else local  # rank 0 decides, as for the sample count
        if failed or local:
            if point not in dropped:
                why = failure[0] if failure else "failed on TP rank 0"
                log.warning("specdecode: cost probe %s k=%d batch=%d skipped: %s", stage, steps, batch, why)
            dropped.add(point)
            continue
        timed[point].append(sec)
    return [ProbePoint(*point, reduce(timed[point])) for point in plan if point not in dropped]


def export(points: Iterable[ProbePoint], metrics) -> None:
    """Publish the points as ``specdecode_cost_seconds{stage,steps,bucket,batch}`` on a ``SpecMetrics``."""
    for p in points:
        metrics.set_cost(p.stage, p.steps, p.bucket, p.batch, p.seconds)


def summary(points: Iterable[ProbePoint]) -> str:
    """One start-up log line: per bucket, ms per stage (verify and draft-extend as k=0..max)."""
    rows: dict[str, dict[str, list[str]]] = {}
    for p in sorted(points, key=lambda p: (p.batch, p.stage, p.steps)):
        rows.setdefault(f"{p.bucket}@b{p.batch}", {}).setdefault(p.stage, []).append(f"{1000 * p.seconds:.3f}")
    return "; ".join(
        f"{b}: " + " ".join(f"{st}={'/'.join(v)}" for st, v in stages.items()) for b, stages in rows.items()
    )


def probe_at_start(
    run_step: RunStep,
    captured: Iterable[int],
    buckets: Sequence[int],
    metrics=None,
    split_draft: bool = False,
    sync: Callable[[], None] | None = None,
    budget_s: float = 0.002,
    agree: Callable[[bool], bool] | None = None,
) -> list[ProbePoint]:
    """The runtime's start-up hook: probe every captured tier on every TP rank in the same order (stage replays may
    hold collectives), export on the rank that owns the metrics, and log one summary line.

    A runner that replays captured graphs (``mode == "graph"``) is timed with its own ``timer`` (CUDA events),
    three warm-up replays and at least five samples per point: a replay costs milliseconds, so this stays within a
    few seconds for every tier, and the median of five is steady to a few per cent on a GPU.

    A runner whose forwards run on the host CPU (``host_timed``: SGLang on ``--device cpu``) is timed by the host
    clock on cores it shares with every other process: a preempted call is slower, never faster, and a busy
    machine preempts whole runs of calls, which moves a median of three by several times. There a call is timed
    by the CPU time the process spent on it (``time.process_time``: the forward runs in this process, on one
    thread in the tests), not by the wall clock, so the time other processes held the cores is not counted; the
    probe keeps the fastest of at least five calls (timeit's rule), the forward's own cost, and takes those calls
    in ``HOST_ROUNDS`` rounds over the whole plan: what CPU time still feels of a busy machine (caches and memory
    bandwidth shared with it) comes in spells, and the five calls of one round follow each other within a few
    tens of milliseconds. A CPU forward of the tiny test models costs milliseconds, so the rounds add seconds; a
    GPU probe keeps one round of replays timed by CUDA events."""
    if sync is None:
        sync = _device_sync()
    graph = getattr(run_step, "mode", EAGER) == GRAPH
    host = bool(getattr(run_step, "host_timed", False)) and not graph
    try:
        points = run_probe(
            run_step,
            captured,
            buckets,
            split_draft=split_draft,
            sync=sync,
            budget_s=budget_s,
            agree=agree,
            timer=getattr(run_step, "timer", None),
            warmup=3 if graph else 1,
            min_samples=5 if graph or host else 3,
            reduce=min if host else statistics.median,
            rounds=HOST_ROUNDS if host else 1,
            clock=time.process_time if host else time.perf_counter,
        )
    finally:
        close = getattr(run_step, "close", None)
        if callable(close):
            close()  # a runner's dummy inputs are not kept for the pod's life
    if metrics is not None:
        export(points, metrics)
        log.info("specdecode: cost probe (ms): %s", summary(points))
    return points


def cuda_event_timer(run: Callable[[], None]) -> float:
    """Seconds of ``run()``'s device work between two CUDA events on the current stream (host launch time
    included while the device waits for it, as it does when serving)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1000.0


def _device_sync() -> Callable[[], None]:
    """``torch.cuda.synchronize`` when a GPU is present (stage replays are asynchronous), else nothing."""
    try:
        import torch
    except ImportError:
        return lambda: None
    return torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
