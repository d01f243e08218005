"""Per-bucket choice of the speculative step count from the goodput model.

The model (runtime goodput.py) says which k *should* be best; the policy adds what a controller acting on noisy,
delayed, censored data needs so it does not chase noise: a minimum sample size, hysteresis on the predicted gain,
a cooldown between changes, no jump past the deepest observed position (censoring), bounded exploration of the
next position, and a rollback when the measured goodput after a change is worse than before beyond noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

from specdecode_runtime.goodput import CycleCost, goodput, inter_token_latency_ms

from .estimator import Acceptance


@dataclass(frozen=True)
class PolicyConfig:
    min_steps: int = 1
    max_steps: int = 7
    candidates: tuple[int, ...] | None = None  # captured step counts; None: every k in bounds
    allow_zero: bool = True  # k = 0 (no speculation) is always allowed as the escape when drafting loses
    objective: Literal["Throughput", "Latency"] = "Throughput"
    max_itl_ms: float | None = None
    hysteresis: float = 0.02  # required relative predicted gain before a change
    min_samples: float = 50.0  # cycles in the window before any decision
    cooldown_s: float = 20.0
    rollback_margin: float = 0.03  # minimum relative drop treated as real (the noise floor)
    rollback_block_s: float = 300.0
    explore_every_s: float = 120.0  # at most one probe of a censored position per bucket per this period

    def __post_init__(self) -> None:
        if self.min_steps < 0 or self.max_steps < self.min_steps:
            raise ValueError(f"minSteps/maxSteps must satisfy 0 <= minSteps <= maxSteps, got {self.min_steps}..{self.max_steps}")
        if self.objective == "Latency" and not self.max_itl_ms:
            raise ValueError("objective Latency needs maxInterTokenLatencyMs > 0")

    def allowed(self) -> list[int]:
        pool = self.candidates if self.candidates is not None else range(0, self.max_steps + 1)
        return sorted({k for k in pool if (k == 0 and self.allow_zero) or self.min_steps <= k <= self.max_steps})


@dataclass
class BucketState:
    steps: int
    last_change: float = -math.inf
    last_probe: float = -math.inf
    probing_from: int | None = None  # set while a probe interval runs: the k to return to
    pending_rollback: tuple[int, float, float] | None = None  # (from_steps, measured goodput before, acceptance@1)
    blocked: dict[int, float] = field(default_factory=dict)  # k -> blocked until


@dataclass
class Choice:
    steps: int
    kind: Literal["hold", "switch", "explore", "rollback", "return", "wait"]
    reason: str
    predicted_gain: float | None = None
    goodput: dict[int, float] = field(default_factory=dict)

    @property
    def changed_from(self) -> bool:
        return self.kind in ("switch", "explore", "rollback", "return")


def predict(acc: Acceptance, cost: CycleCost, batch: float, ks: Sequence[int], optimistic: bool = False) -> dict[int, float]:
    alphas = acc.upper if optimistic else acc.alphas
    if optimistic:  # optimism only for unobserved positions; observed ones stay at their estimate
        alphas = acc.alphas[: acc.observed] + acc.upper[acc.observed :]
    return {k: goodput(alphas, cost, k, batch) for k in ks}


def _objective_best(cfg: PolicyConfig, g: dict[int, float], acc: Acceptance, cost: CycleCost, batch: float) -> int:
    ks = sorted(g)
    if cfg.objective == "Latency":
        itl = {k: inter_token_latency_ms(acc.alphas, cost, k, batch) for k in ks}
        feasible = [k for k in ks if itl[k] <= cfg.max_itl_ms]
        if not feasible:
            return min(ks, key=lambda k: (itl[k], k))
        ks = feasible
    return max(ks, key=lambda k: (g[k], -k))


def choose(
    cfg: PolicyConfig,
    state: BucketState,
    acc: Acceptance,
    cost: CycleCost,
    batch: float,
    samples: float,
    now: float,
    measured_goodput: float | None = None,
    workload_changed: bool = False,
) -> Choice:
    cur = state.steps
    for k, until in list(state.blocked.items()):
        if until <= now:
            del state.blocked[k]
    allowed = [k for k in cfg.allowed() if k not in state.blocked or k == cur]
    if samples < cfg.min_samples:
        return Choice(cur, "wait", f"{samples:.0f} cycles in window < minimum {cfg.min_samples:.0f}")
    # Censoring: a k past the deepest observed position + 1 would rest entirely on extrapolation.
    eligible = [k for k in allowed if k <= acc.observed + 1 or k <= cur]
    g = predict(acc, cost, batch, sorted(set(eligible) | {cur}))

    # A probe has run for an interval: its position is now observed; return unless the model now prefers it.
    if state.probing_from is not None:
        back = state.probing_from
        state.probing_from = None
        best = _objective_best(cfg, g, acc, cost, batch)
        if best != cur and best in g:
            state.last_change = now
            return Choice(best, "return" if best == back else "switch",
                          f"probe of k={cur} done: model prefers k={best}", g[best] / g[cur] - 1.0, g)
        return Choice(cur, "hold", f"probe of k={cur} confirmed", 0.0, g)

    # Rollback: the first full interval after a change measured worse than before, the workload unchanged.
    if state.pending_rollback is not None and measured_goodput is not None:
        back, before, _ = state.pending_rollback
        state.pending_rollback = None
        if not workload_changed and measured_goodput < before * (1.0 - cfg.rollback_margin) and back in allowed:
            state.blocked[cur] = now + cfg.rollback_block_s
            state.last_change = now
            return Choice(back, "rollback",
                          f"measured {measured_goodput:.1f} tok/s after k={cur} < {before:.1f} before (k={back})",
                          measured_goodput / before - 1.0, g)

    best = _objective_best(cfg, g, acc, cost, batch)
    gain = g[best] / g[cur] - 1.0 if g.get(cur) else math.inf
    if cfg.objective == "Latency":
        itl_cur = inter_token_latency_ms(acc.alphas, cost, cur, batch)
        if itl_cur > cfg.max_itl_ms and best != cur:
            gain = max(gain, cfg.hysteresis + 1e-9)  # an SLO violation overrides hysteresis
    if best != cur and gain > cfg.hysteresis:
        # A detected workload change is a new world, not noise: the cooldown does not hold the old choice there.
        if now - state.last_change < cfg.cooldown_s and not workload_changed:
            return Choice(cur, "hold", f"cooldown: k={best} predicted {gain:+.1%} but last change "
                          f"{now - state.last_change:.0f}s ago < {cfg.cooldown_s:.0f}s", gain, g)
        state.pending_rollback = (cur, measured_goodput, acc.alphas[0] if acc.alphas else 0.0) if measured_goodput else None
        state.last_change = now
        return Choice(best, "switch", f"predicted goodput {g[best]:.1f} vs {g[cur]:.1f} tok/s ({gain:+.1%})", gain, g)

    # Exploration: the next captured k above the deepest observed position, if optimism says it could pay.
    above = [k for k in allowed if k > max(cur, acc.observed)]
    if above and now - state.last_probe >= cfg.explore_every_s and now - state.last_change >= cfg.cooldown_s:
        nxt = above[0]
        opt = predict(acc, cost, batch, [nxt], optimistic=True)[nxt]
        if opt > g[cur] * (1.0 + cfg.hysteresis):
            state.last_probe = now
            state.probing_from = cur
            return Choice(nxt, "explore", f"position {acc.observed + 1} unobserved: optimistic {opt:.1f} "
                          f"vs {g[cur]:.1f} tok/s, probing one interval", opt / g[cur] - 1.0, g)
    if best != cur:
        return Choice(cur, "hold", f"k={best} predicted {gain:+.1%} <= hysteresis {cfg.hysteresis:.0%}", gain, g)
    return Choice(cur, "hold", f"k={cur} is the model's best", 0.0, g)
