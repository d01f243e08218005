"""The simulated pod's start-up cost probe: the runtime's own ``cost_probe`` run against a simulated clock.

Why not export the scenario's cost block: that is the simulator's ground truth, which no pod in a cluster knows.
A real probe times dummy inputs right after graph capture, and that differs from the live workload (context
lengths, KV-cache occupancy, contention): each stage carries a systematic error, the same for every point of the
stage on one pod, plus per-sample noise. The simulated probe draws that error per stage and per pod (uniform in
``1 +- bias``) and the noise per timed sample (log-normal, ``noise`` relative standard deviation), then runs the same
``cost_probe.run_probe`` timing code over it, so the tuner meets the kind of profile a cluster would give it.
"""

from __future__ import annotations

import numpy as np

from ..contract.goodput import CycleCost
from ..cost_probe import STAGES, ProbePoint, run_probe

DEFAULT_BIAS = 0.15
DEFAULT_NOISE = 0.05


class SimulatedStages:
    """A ``run_step`` callable and a clock: running a stage advances the clock by its biased, noisy duration."""

    def __init__(
        self, cost: CycleCost, rng: np.random.Generator, bias: float = DEFAULT_BIAS, noise: float = DEFAULT_NOISE
    ) -> None:
        if not 0 <= bias < 1:
            raise ValueError(f"bias must be within 0..1 (relative systematic error per stage), got {bias}")
        if noise < 0:
            raise ValueError(f"noise must be >= 0 (relative standard deviation per sample), got {noise}")
        self.cost = cost
        self.rng = rng
        self.factor = {st: float(rng.uniform(1 - bias, 1 + bias)) for st in STAGES}
        self.noise = noise
        self.t = 0.0

    def true_ms(self, stage: str, steps: int, batch: int) -> float:
        c = self.cost
        if stage == "verify":
            return c.verify_ms(steps, batch)
        if stage == "draft_step":
            return c.draft_step_ms(batch)
        if stage == "draft_extend":
            return c.extend_ms(steps, batch)
        if stage == "overhead":
            return c.overhead
        if stage == "broadcast":
            return c.broadcast
        raise ValueError(f"unknown stage {stage!r}; allowed: {list(STAGES)}")

    def run(self, stage: str, steps: int, batch: int) -> None:
        jitter = float(np.exp(self.rng.normal(0.0, self.noise))) if self.noise else 1.0
        self.t += self.true_ms(stage, steps, batch) * self.factor[stage] * jitter / 1000.0

    def clock(self) -> float:
        return self.t


def simulated_probe(
    cost: CycleCost, captured, buckets, seed: int, bias: float = DEFAULT_BIAS, noise: float = DEFAULT_NOISE
) -> list[ProbePoint]:
    """The points a pod with this true cost would measure at start-up (its own error drawn from ``seed``)."""
    stages = SimulatedStages(cost, np.random.default_rng(seed), bias, noise)
    return run_probe(stages.run, captured, buckets, split_draft=cost.broadcast > 0, clock=stages.clock, budget_s=0.0)
