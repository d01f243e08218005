"""Host-side timing of one decode cycle, split into the metrics contract's phases without a CUDA synchronize."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable


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
    the GPU time lands in ``other``; when the CPU is the bottleneck the launch phases dominate. Phases sum to
    ``max(busy interval, launch time)``."""

    now: Callable[[], float] = time.perf_counter
    prev_done: float | None = None

    def phases(self, stamp: CycleStamp | None, done: float | None = None) -> dict[str, float]:
        done = self.now() if done is None else done
        prev, self.prev_done = self.prev_done, done
        if stamp is None or stamp.t_end is None:
            return {}
        vs = stamp.t_verify_start if stamp.t_verify_start is not None else stamp.t_end
        ve = stamp.t_verify_end if stamp.t_verify_end is not None else vs
        launch = {
            "draft": max(vs - stamp.t_start, 0.0),
            "verify": max(ve - vs, 0.0),
            "draft_extend": max(stamp.t_end - ve, 0.0),
        }
        busy = done - (stamp.t_start if prev is None else max(stamp.t_start, prev))
        launch["other"] = max(busy - sum(launch.values()), 0.0)
        return launch
