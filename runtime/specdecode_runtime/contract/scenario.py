"""Scenario files for the simulated runtime (documented in docs/scenarios.md).

A scenario is the world a tuning decision is judged in: the cycle-cost model of one box and a timeline of workload
phases (batch size, per-position acceptance). Its costs become a ``goodput.CycleCost`` so the simulator, the tuner
and the planner use the same arithmetic. The optional ``draftTp`` block says how the draft step cost depends on the
draft's tensor-parallel size, so "draft on all 8 ranks" and "draft on rank 0" can be compared on one scenario.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .goodput import CycleCost
from .input_files import InputError, load_single, validate_model
from .metric_names import DEFAULT_BUCKETS

__all__ = ["Scenario", "ScenarioError", "load_scenario", "parse_scenario", "cost_for_draft_tp", "allowed_draft_tps"]

# Bounds that keep the arithmetic meaningful: a cost above a minute per forward, a phase longer than a year or a
# batch above a million sequences describes no real box, and would overflow the simulator's counters.
MAX_COST_MS = 60_000.0
MAX_SECONDS = 365 * 24 * 3600.0
MAX_BATCH = 1_000_000
MAX_STEPS = 64
# A simulation runs one cycle after another (vectorised, about two million a second on one core): a scenario whose
# timeline holds more decode steps than this would keep `simulate --offline`, the benchmark or the demo busy for
# minutes, so it is refused with the arithmetic.
MAX_CYCLES = 100_000_000


class ScenarioError(InputError):
    """A scenario that cannot be used; ``errors`` are ``field.path: what is wrong`` lines."""


class _Model(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid", frozen=True, allow_inf_nan=False)


class LinearCost(_Model):
    base: float = Field(ge=0, le=MAX_COST_MS, description="milliseconds")
    per_token: float = Field(default=0.0, ge=0, le=MAX_COST_MS, alias="perToken", description="milliseconds per token")


class DraftStepCost(_Model):
    base: float = Field(ge=0, le=MAX_COST_MS)
    per_seq: float = Field(default=0.0, ge=0, le=MAX_COST_MS, alias="perSeq")


class HostCost(_Model):
    """The scheduler's host work a speculative cycle adds beyond its stages (``base + perStep * steps``), as the
    served calibration measures it (``goodput.CycleCost.host_*``); 0 for a cost timed by stage replays alone. The
    target's scheduler does it, so a draft TP does not change it."""

    base: float = Field(default=0.0, ge=0, le=MAX_COST_MS, description="milliseconds per speculative cycle")
    per_step: float = Field(default=0.0, ge=0, le=MAX_COST_MS, alias="perStep", description="milliseconds per step")


class CostModel(_Model):
    verify: LinearCost
    draft_step: DraftStepCost = Field(alias="draftStep")
    draft_extend: LinearCost = Field(alias="draftExtend")
    overhead: float = Field(default=0.0, ge=0, le=MAX_COST_MS)
    broadcast: float = Field(
        default=0.0, ge=0, le=MAX_COST_MS, description="proposal broadcast per cycle (draft on a subset)"
    )
    host: HostCost = Field(default_factory=HostCost)


class DraftTpModel(_Model):
    """How one draft forward's cost depends on the draft's TP size n: ``compute/n`` (weight reads split across n
    GPUs) plus ``collectivesPerStep * allReduceUs[n]`` for n > 1, plus ``broadcastUs`` per cycle when the draft runs
    on fewer ranks than the target. ``allReduceUs`` is the *effective* cost of one collective in the draft path
    (launch and synchronisation included), which is what the seed's profile measured, not an nccl-tests figure."""

    current: int = Field(ge=1, le=1024)
    target_tp: int = Field(ge=1, le=1024, alias="targetTp")
    compute_ms: DraftStepCost = Field(alias="computeMs")
    extend_ms: LinearCost | None = Field(
        default=None,
        alias="extendMs",
        description="draft-extend forward at TP1 (base, perToken); defaults to computeMs",
    )
    collectives_per_step: int = Field(ge=0, le=1024, alias="collectivesPerStep")
    all_reduce_us: dict[int, float] = Field(default_factory=dict, alias="allReduceUs")
    broadcast_us: float = Field(default=0.0, ge=0, le=MAX_COST_MS * 1000, alias="broadcastUs")

    @field_validator("all_reduce_us")
    @classmethod
    def positive_float(cls, v: dict[int, float]) -> dict[int, float]:
        for n, us in v.items():
            if n < 2:
                raise ValueError(f"keys are draft TP sizes >= 2, got {n}")
            if not 0 <= us <= MAX_COST_MS * 1000:
                raise ValueError(f"latency for TP {n} must be within 0..{MAX_COST_MS * 1000:g} microseconds, got {us}")
        return v

    @model_validator(mode="after")
    def _current_known(self) -> DraftTpModel:
        if self.current > self.target_tp:
            raise ValueError(f"current ({self.current}) must be <= targetTp ({self.target_tp})")
        if self.current > 1 and self.current not in self.all_reduce_us:
            raise ValueError(f"allReduceUs needs an entry for current draft TP {self.current}")
        return self


class Phase(_Model):
    seconds: float = Field(gt=0, le=MAX_SECONDS)
    batch_size: int | dict[int, float] = Field(alias="batchSize")
    acceptance: list[float] = Field(min_length=1, max_length=MAX_STEPS)
    name: str | None = None

    @field_validator("batch_size", mode="before")
    @classmethod
    def _batch_sizes_in_range(cls, v: Any) -> Any:
        """Range-check sizes before the int-or-mapping union runs, so ``1e30`` gets one message with the bound
        instead of one per union branch."""

        def size(b: Any) -> Any:
            if isinstance(b, bool) or not isinstance(b, (int, float)):
                return b  # the type check below reports it
            if not (math.isfinite(b) and float(b).is_integer() and 1 <= b <= MAX_BATCH):
                raise ValueError(f"batch sizes must be whole numbers within 1..{MAX_BATCH}, got {b:g}")
            return int(b)

        if isinstance(v, dict):
            return {size(b): p for b, p in v.items()}
        return size(v)

    @field_validator("batch_size")
    @classmethod
    def _batch(cls, v: int | dict[int, float]) -> int | dict[int, float]:
        if isinstance(v, int):
            if not 1 <= v <= MAX_BATCH:
                raise ValueError(f"batch size must be within 1..{MAX_BATCH}, got {v}")
            return v
        if not v:
            raise ValueError("a batch-size distribution needs at least one entry, e.g. {1: 0.5, 8: 0.5}")
        for b, p in v.items():
            if not 1 <= b <= MAX_BATCH:
                raise ValueError(f"batch sizes must be within 1..{MAX_BATCH}, got {b}")
            if not 0 <= p <= 1:
                raise ValueError(f"probability of batch {b} must be within 0..1, got {p}")
        total = sum(v.values())
        if abs(total - 1.0) > 1e-6:
            raise ValueError(f"probabilities must sum to 1, got {total:g}")
        return v

    @field_validator("acceptance")
    @classmethod
    def _rates(cls, v: list[float]) -> list[float]:
        for i, a in enumerate(v):
            if not 0.0 <= a <= 1.0:
                raise ValueError(f"acceptance[{i}] must be within 0..1 (a conditional probability), got {a}")
        return v

    def batch_distribution(self) -> tuple[list[int], list[float]]:
        if isinstance(self.batch_size, int):
            return [self.batch_size], [1.0]
        items = sorted(self.batch_size.items())
        return [b for b, _ in items], [p for _, p in items]

    def mean_batch(self) -> float:
        sizes, probs = self.batch_distribution()
        return sum(b * p for b, p in zip(sizes, probs))


class Provenance(_Model):
    """Whether a cost input was measured on the box, derived from measurements elsewhere, fitted to a measured
    outcome, or assumed; ``how`` shows the arithmetic or the source."""

    kind: Literal["measured", "derived", "fitted", "assumed"]
    how: str = Field(default="", max_length=500)


class Scenario(_Model):
    name: str = Field(min_length=1)
    description: str | None = None
    cost: CostModel
    draft_tp: DraftTpModel | None = Field(default=None, alias="draftTp")
    interconnect: Literal["PCIe", "NVLink"] | None = Field(
        default=None, description="the box's GPU interconnect; `specdecode plan` refuses a deployment that differs"
    )
    restart_seconds: float = Field(default=300.0, ge=0, le=MAX_SECONDS, alias="restartSeconds")
    replicas: int = Field(default=1, ge=1, le=10_000)
    phases: list[Phase] = Field(min_length=1, max_length=10_000)
    seed: int = Field(default=0, ge=0, lt=2**63)
    buckets: list[int] = Field(default=list(DEFAULT_BUCKETS), min_length=1, max_length=64)
    provenance: dict[str, Provenance] = Field(
        default_factory=dict,
        max_length=64,
        description="what each input rests on, keyed by its path (e.g. draftTp.computeMs); `specdecode plan` prints it",
    )

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, v: list[int]) -> list[int]:
        if sorted(set(v)) != v or v[0] != 1:
            raise ValueError(f"bucket lower bounds must be strictly increasing and start at 1, got {v}")
        return v

    @model_validator(mode="after")
    def _cost_matches_draft_tp(self) -> Scenario:
        """The cost block and the draftTp block describe the same box; if they disagree, a planner comparison and a
        plain simulation would silently live in different worlds."""
        if self.draft_tp is None:
            return self
        derived = cost_for_draft_tp(self, self.draft_tp.current)
        given = self.cycle_cost()
        for field, a, b in (
            ("cost.draftStep.base", given.draft_base, derived.draft_base),
            ("cost.draftStep.perSeq", given.draft_per_seq, derived.draft_per_seq),
            ("cost.draftExtend.base", given.extend_base, derived.extend_base),
            ("cost.draftExtend.perToken", given.extend_per_token, derived.extend_per_token),
            ("cost.broadcast", given.broadcast, derived.broadcast),
        ):
            if abs(a - b) > 0.02 * max(abs(b), 1e-3) + 1e-6:
                raise ValueError(
                    f"{field} = {a:g} disagrees with draftTp (current {self.draft_tp.current}) which gives {b:.4g}; "
                    "make them agree within 2 %"
                )
        return self

    @model_validator(mode="after")
    def _bounded_work(self) -> Scenario:
        """Every decode step takes time, and the timeline holds a bounded number of them."""
        plain = self.plain_step_ms()
        if plain <= 0:
            raise ValueError("cost: verify.base + verify.perToken + overhead must be > 0 ms (a decode step takes time)")
        cycles = self.duration * 1000.0 / plain
        if cycles > MAX_CYCLES:
            raise ValueError(
                f"phases: {self.duration:g} simulated seconds at {plain:g} ms per decode step is about "
                f"{cycles:.2g} cycles, more than the {MAX_CYCLES:.0e} a simulation may run; shorten the "
                "phases"
            )
        return self

    def plain_step_ms(self) -> float:
        """Milliseconds of one decode step without speculation at batch 1: the shortest cycle there is."""
        c = self.cost
        return c.verify.base + c.verify.per_token + c.overhead

    def max_simulated_seconds(self) -> float:
        """The longest simulation of this scenario that stays within MAX_CYCLES."""
        return MAX_CYCLES * self.plain_step_ms() / 1000.0

    @property
    def duration(self) -> float:
        return sum(p.seconds for p in self.phases)

    def cycle_cost(self) -> CycleCost:
        c = self.cost
        return CycleCost(
            verify_base=c.verify.base,
            verify_per_token=c.verify.per_token,
            draft_base=c.draft_step.base,
            draft_per_seq=c.draft_step.per_seq,
            extend_base=c.draft_extend.base,
            extend_per_token=c.draft_extend.per_token,
            overhead=c.overhead,
            broadcast=c.broadcast,
            host_base=c.host.base,
            host_per_step=c.host.per_step,
        )

    def phase_at(self, t: float) -> tuple[int, Phase]:
        """The phase running at simulated time ``t``; the last phase continues after the timeline ends."""
        end = 0.0
        for i, p in enumerate(self.phases):
            end += p.seconds
            if t < end:
                return i, p
        return len(self.phases) - 1, self.phases[-1]


def allowed_draft_tps(scenario: Scenario) -> list[int]:
    if scenario.draft_tp is None:
        return []
    d = scenario.draft_tp
    return sorted({1, *(n for n in d.all_reduce_us if n <= d.target_tp)})


def cost_for_draft_tp(scenario: Scenario, n: int) -> CycleCost:
    """The scenario's cycle cost with the draft on ``n`` ranks: verify, overhead and host work are the target's and
    do not change; a draft forward (each step, and the draft-extend) costs ``compute/n + collectives * allReduce[n]``; a
    proposal broadcast is paid once per cycle when ``n < targetTp``."""
    d = scenario.draft_tp
    if d is None:
        raise ValueError(f"scenario {scenario.name!r} has no draftTp block; cannot derive a cost for draft TP {n}")
    allowed = allowed_draft_tps(scenario)
    if n not in allowed:
        raise ValueError(f"draft TP {n} is not described by scenario {scenario.name!r}; allowed: {allowed}")
    comm_ms = d.collectives_per_step * d.all_reduce_us[n] / 1000.0 if n > 1 else 0.0
    ext = d.extend_ms or LinearCost(base=d.compute_ms.base, per_token=d.compute_ms.per_seq)
    c = scenario.cost
    return CycleCost(
        verify_base=c.verify.base,
        verify_per_token=c.verify.per_token,
        draft_base=d.compute_ms.base / n + comm_ms,
        draft_per_seq=d.compute_ms.per_seq / n,
        extend_base=ext.base / n + comm_ms,
        extend_per_token=ext.per_token / n,
        overhead=c.overhead,
        broadcast=d.broadcast_us / 1000.0 if n < d.target_tp else 0.0,
        host_base=c.host.base,
        host_per_step=c.host.per_step,
    )


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    return validate_model(Scenario, data, source, what="scenario", error=ScenarioError)


def load_scenario(path: str | Path) -> Scenario:
    """A scenario file through the bounded reader (size, UTF-8, depth, duplicate keys), then the model."""
    try:
        data = load_single(str(path), what="scenario")
    except ScenarioError:
        raise
    except InputError as err:
        raise ScenarioError(err.source, err.errors) from None
    return parse_scenario(data, str(path))
