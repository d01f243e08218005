"""Shared builders for the tuner tests: counters produced by the real metrics contract (SpecMetrics)."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry

from specdecode_operator.tuner.estimator import Acceptance
from specdecode_operator.tuner.snapshot import parse_metrics
from specdecode_runtime.contract.goodput import CycleCost
from specdecode_runtime.contract.metric_names import SIMULATED_LABELS
from specdecode_runtime.contract.scenario import parse_scenario
from specdecode_runtime.metrics import SpecMetrics


class FakePod:
    """A pod whose counters come from SpecMetrics.record_cycle fed with sampled acceptance."""

    def __init__(self, name: str = "pod-0", seed: int = 0) -> None:
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.registry = CollectorRegistry()
        self.metrics = SpecMetrics(self.registry, const_labels=SIMULATED_LABELS)
        self.metrics.set_steps(lambda b: 0)  # the runtime publishes its table at start, before any traffic

    def run(self, cycles: int, batch: int, steps: int, alphas: list[float], phase_ms: dict | None = None) -> None:
        phase_ms = phase_ms or {
            "verify": 10.0,
            "draft": 1.0 * steps,
            "draft_extend": 1.0 if steps else 0.0,
            "other": 0.5,
        }
        self.metrics.set_steps(lambda b: steps)
        for _ in range(cycles):
            accepted = []
            for _ in range(batch):
                c = 0
                while c < steps and self.rng.random() < alphas[min(c, len(alphas) - 1)]:
                    c += 1
                accepted.append(c)
            self.metrics.record_cycle(batch, steps, accepted, {p: v / 1000.0 for p, v in phase_ms.items()})

    def text(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()

    def snapshot(self, t: float):
        return parse_metrics(self.text(), self.name, t)


def scenario(phases, cost=None, **extra):
    data = {
        "name": "test",
        "cost": cost
        or {
            "verify": {"base": 10, "perToken": 0.05},
            "draftStep": {"base": 1.0},
            "draftExtend": {"base": 1.0},
            "overhead": 0.5,
        },
        "phases": phases,
        **extra,
    }
    return parse_scenario(data)


# The policy tests' cycle cost (ms): a 10 ms verify, 0.5 ms per draft step, per extend and of overhead.
COST = CycleCost(10, 0.0, 0.5, 0, 0.5, 0, 0.5)


def acc(alphas, observed=None, spread=0.02) -> Acceptance:
    """An acceptance curve with a +-``spread`` interval, 10^4 samples per position, ``observed`` positions seen."""
    n = len(alphas)
    return Acceptance(
        list(alphas),
        [a - spread for a in alphas],
        [min(1, a + spread) for a in alphas],
        [1e4] * n,
        n if observed is None else observed,
    )


HIGH = acc([0.95] * 8)
LOW = acc([0.05] * 8)


# The cost refinement tests' true cycle cost (ms): every term non-zero, a split draft's broadcast included.
REFINE_COST = CycleCost(
    verify_base=8.0,
    verify_per_token=0.04,
    draft_base=0.6,
    draft_per_seq=0.002,
    extend_base=0.67,
    extend_per_token=0.0017,
    overhead=0.3,
    broadcast=0.05,
)
