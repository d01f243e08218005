"""Host-side timing of one decode cycle, split into the metrics contract's phases without a CUDA synchronize."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from ..contract.metric_names import PREFILL_PHASE as PREFILL


@dataclass
class CycleStamp:
    """Host timestamps of one decode cycle's launch, taken by the patched ``forward_batch_generation`` (start, end)
    and ``verify`` (its start and end); ``steps`` is the tier the verify ran with."""

    t_start: float
    t_verify_start: float | None = None
    t_verify_end: float | None = None
    t_end: float | None = None
    steps: int | None = None


@dataclass
class CycleClock:
    """Turns a :class:`CycleStamp` and the host time its results arrived into the contract's four phases.

    * ``draft``: host time from ``forward_batch_generation`` entry to ``verify`` entry (tier activation, draft
      launch, proposal broadcast on a split draft, verify-input build);
    * ``verify``: host time inside ``verify`` (target forward launch);
    * ``draft_extend``: host time from ``verify`` return to ``forward_batch_generation`` return;
    * ``other``: the rest of the cycle's busy interval, up to the moment SGLang hands the accepted counts to
      ``on_verify_complete_cpu`` (results on the host).

    The busy interval of a cycle starts at ``max(launch start, previous decode completion)`` and ends at its
    completion, so consecutive intervals never overlap and their sum is the decode wall time. Under the overlap
    scheduler with CUDA graphs the three launch phases are CPU launch costs (the GPU runs them asynchronously) and
    the GPU time lands in ``other``; when the CPU is the bottleneck the launch phases dominate.

    Prefill batches interleave with decoding: the overlap scheduler launches a new request's prefill (and processes
    its result) between a decode cycle's launch and that cycle's result, so without care their host time lands in
    ``other``. With short requests at a large batch that is most of a cycle (a prefill every couple of cycles), and
    a cost model fitted to it would price decode cycles at what prefills cost. The scheduler's hooks report each
    prefill launch and result processing as a host interval (:meth:`prefill`); the part of them inside a cycle's
    busy interval is returned under :data:`PREFILL` and left out of ``other``. The four decode phases then sum to
    ``max(busy interval - prefill, launch time)``; what a prefill costs on the GPU beyond its host time still lands
    in ``other`` (small for the eager, launch-bound prefill of a served model)."""

    now: Callable[[], float] = time.perf_counter
    prev_done: float | None = None
    prefill_spans: list[tuple[float, float]] = field(default_factory=list)

    def prefill(self, t0: float, t1: float) -> None:
        """One prefill batch's host interval (its launch, or its result's processing)."""
        if t1 > t0:
            self.prefill_spans.append((t0, t1))

    def phases(self, stamp: CycleStamp | None, done: float | None = None) -> dict[str, float]:
        done = self.now() if done is None else done
        prev, self.prev_done = self.prev_done, done
        spans, self.prefill_spans = self.prefill_spans, []
        if stamp is None or stamp.t_end is None:
            return {}
        vs = stamp.t_verify_start if stamp.t_verify_start is not None else stamp.t_end
        ve = stamp.t_verify_end if stamp.t_verify_end is not None else vs
        launch = {
            "draft": max(vs - stamp.t_start, 0.0),
            "verify": max(ve - vs, 0.0),
            "draft_extend": max(stamp.t_end - ve, 0.0),
        }
        start = stamp.t_start if prev is None else max(stamp.t_start, prev)
        busy = done - start
        rest = max(busy - sum(launch.values()), 0.0)
        inside = sum(max(0.0, min(t1, done) - max(t0, start)) for t0, t1 in spans)
        prefill = min(inside, rest)
        launch["other"] = rest - prefill
        if prefill > 0.0:
            launch[PREFILL] = prefill
        return launch
