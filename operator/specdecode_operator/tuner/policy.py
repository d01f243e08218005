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

from specdecode_runtime.goodput import CycleCost, expected_tokens, goodput, inter_token_latency_ms

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
    reach: int = 1  # how many unobserved positions past the deepest observed one a switch may draft into
    reach_after_change: int = 2  # the same in the interval a workload change was detected (a new world: climb fast)

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
    rollback_cycle_s: float | None = None  # measured seconds per cycle before the change (coupled rollback test)
    last_direction: int = 0  # +1 / -1: the direction of the last change
    judged_at: float = -math.inf  # when the last change passed its one-clean-interval rollback test
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


@dataclass(frozen=True)
class Aggregate:
    """The deployment around one bucket, at every bucket's current k: tokens per second of decode time over all
    buckets (``rate``) and this bucket's fraction of that decode time (``share``).

    Why: the deployment's throughput is sum(tokens) / sum(time) over all buckets, and each bucket's cycle count is
    set by the traffic, not by k. A millisecond spent in one bucket is therefore worth ``rate`` tokens, not that
    bucket's own tokens/s, so a bucket whose own goodput is far above (or below) the deployment's should run a
    deeper (or shallower) k than its own optimum (Dinkelbach: maximise tokens - rate x time per cycle)."""

    rate: float
    share: float


def coupled_gain(tok_k: float, sec_k: float, tok_cur: float, sec_cur: float, agg: "Aggregate | None") -> float:
    """Relative change of the deployment's throughput when one bucket moves from (tok_cur, sec_cur) per cycle to
    (tok_k, sec_k), the other buckets unchanged, divided by the bucket's time share (so hysteresis and noise margins
    keep meaning "per cent of this bucket's work"). Without ``agg`` (or with the bucket alone) it is exactly the
    bucket's own goodput ratio minus one."""
    if tok_cur <= 0 or sec_cur <= 0 or sec_k <= 0:
        return math.inf if tok_k > 0 else 0.0
    if agg is None or agg.rate <= 0:
        return (tok_k / sec_k) / (tok_cur / sec_cur) - 1.0
    w = min(max(agg.share, 0.0), 1.0)
    g_cur = tok_cur / sec_cur
    if w < 1e-6:  # the limit w -> 0: (delta tokens - rate x delta time) / (rate x time)
        return ((tok_k - tok_cur) - agg.rate * (sec_k - sec_cur)) / (agg.rate * sec_cur)
    wt = w * g_cur / agg.rate  # the bucket's share of tokens
    return ((1.0 + wt * (tok_k / tok_cur - 1.0)) / (1.0 + w * (sec_k / sec_cur - 1.0)) - 1.0) / w


def predict(acc: Acceptance, cost: CycleCost, batch: float, ks: Sequence[int], optimistic: bool = False) -> dict[int, float]:
    alphas = acc.upper if optimistic else acc.alphas
    if optimistic:  # optimism only for unobserved positions; observed ones stay at their estimate
        alphas = acc.alphas[: acc.observed] + acc.upper[acc.observed :]
    return {k: goodput(alphas, cost, k, batch) for k in ks}


def _objective_best(cfg: PolicyConfig, g: dict[int, float], acc: Acceptance, cost: CycleCost, batch: float,
                    score: dict[int, float] | None = None) -> int:
    ks = sorted(g)
    score = score if score is not None else g
    if cfg.objective == "Latency":
        itl = {k: inter_token_latency_ms(acc.alphas, cost, k, batch) for k in ks}
        feasible = [k for k in ks if itl[k] <= cfg.max_itl_ms]
        if not feasible:
            return min(ks, key=lambda k: (itl[k], k))
        ks = feasible
        score = g  # at a fixed batch ITL and goodput rank k alike; the SLO is per bucket
    return max(ks, key=lambda k: (score[k], -k))


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
    aggregate: Aggregate | None = None,
    measured_cycle_s: float | None = None,
) -> Choice:
    cur = state.steps
    for k, until in list(state.blocked.items()):
        if until <= now:
            del state.blocked[k]
    allowed = [k for k in cfg.allowed() if k not in state.blocked or k == cur]
    if samples < cfg.min_samples:
        return Choice(cur, "wait", f"{samples:.0f} cycles in window < minimum {cfg.min_samples:.0f}")
    # Censoring: a k past the deepest observed position + 1 would rest entirely on extrapolation.
    reach = cfg.reach_after_change if workload_changed else cfg.reach
    eligible = [k for k in allowed if k <= acc.observed + reach or k <= cur]
    g = predict(acc, cost, batch, sorted(set(eligible) | {cur}))
    agg = aggregate if cfg.objective == "Throughput" else None

    def tokens(k: int, alphas: Sequence[float]) -> float:
        return batch * (expected_tokens(alphas, k) if k > 0 else 1.0)

    def gain_of(k: int, alphas: Sequence[float] | None = None) -> float:
        a = acc.alphas if alphas is None else alphas
        return coupled_gain(tokens(k, a), cost.cycle_ms(k, batch) / 1000.0, tokens(cur, acc.alphas),
                            cost.cycle_ms(cur, batch) / 1000.0, agg)

    score = {k: gain_of(k) for k in g}

    # A probe has run for an interval: its position is now observed; return unless the model now prefers it.
    if state.probing_from is not None:
        back = state.probing_from
        state.probing_from = None
        best = _objective_best(cfg, g, acc, cost, batch, score)
        if best != cur and best in g:
            state.last_change = now
            state.last_direction = 1 if best > cur else -1
            return Choice(best, "return" if best == back else "switch",
                          f"probe of k={cur} done: model prefers k={best}", score[best], g)
        state.last_direction, state.judged_at = 1, now  # the probe interval was its clean interval
        return Choice(cur, "hold", f"probe of k={cur} confirmed", 0.0, g)

    # Rollback: the first full interval after a change measured worse than before, the workload unchanged.
    if state.pending_rollback is not None and measured_goodput is not None:
        back, before, _ = state.pending_rollback
        sec_before, state.rollback_cycle_s = state.rollback_cycle_s, None
        state.pending_rollback = None
        if agg is not None and sec_before and measured_cycle_s:
            # Judged the way it was chosen: what the measured change did to the deployment's tokens/s.
            change = coupled_gain(measured_goodput * measured_cycle_s, measured_cycle_s, before * sec_before,
                                  sec_before, agg)
        else:
            change = measured_goodput / before - 1.0
        if not workload_changed and change < -cfg.rollback_margin and back in allowed:
            state.blocked[cur] = now + cfg.rollback_block_s
            state.last_change = now
            state.last_direction = 1 if back > cur else -1
            return Choice(back, "rollback",
                          f"measured {measured_goodput:.1f} tok/s after k={cur} vs {before:.1f} before (k={back}): "
                          f"{change:+.1%}", change, g)
        if not workload_changed:
            state.judged_at = now

    best = _objective_best(cfg, g, acc, cost, batch, score)
    if best < cur and cfg.objective == "Throughput":
        # Moving down stops measuring the positions above the new k (k = 0 stops them all), and a censored position
        # keeps its last estimate. So a downward move goes only as far as the data are sure of: a k in between
        # that could be as good as the model's best with its measured positions past ``best`` at their upper 95 %
        # bound is preferred (the best of those by the estimate), so it keeps measuring what decides it.
        # Repeated from each new candidate, so the move stops at the first k no deeper k can plausibly beat.
        while True:
            upper = acc.alphas[:best] + [acc.upper[i] if i < acc.observed else acc.alphas[i]
                                         for i in range(best, len(acc.alphas))]
            near = [k for k in g if best < k <= cur and gain_of(k, upper) >= score[best]]
            if not near:
                break
            best = max(near, key=lambda k: (score[k], -k))
    gain = score[best]
    if cfg.objective == "Latency":
        itl_cur = inter_token_latency_ms(acc.alphas, cost, cur, batch)
        if itl_cur > cfg.max_itl_ms and best != cur:
            gain = max(gain, cfg.hysteresis + 1e-9)  # an SLO violation overrides hysteresis
    # The cooldown exists so a change is judged on one clean interval before the next. Once that judgement is in
    # and passed, a further step in the same direction (a climb towards a deeper optimum, one observed position at
    # a time) need not wait out the rest of it; a reversal still does, which is what keeps noise from flapping k.
    judged = state.judged_at > state.last_change

    def cooling(direction: int) -> bool:
        if now - state.last_change >= cfg.cooldown_s:
            return False
        return not (judged and direction == state.last_direction)

    # The cost model's own doubt about best vs cur (a refined profile knows which parts live timings have pinned
    # down): a predicted gain inside it is not evidence.
    doubt = cost.relative_sd(best, cur, batch) if best != cur and hasattr(cost, "relative_sd") else 0.0
    if best != cur and gain > cfg.hysteresis + doubt:
        # A detected workload change is a new world, not noise: the cooldown does not hold the old choice there.
        if cooling(1 if best > cur else -1) and not workload_changed:
            return Choice(cur, "hold", f"cooldown: k={best} predicted {gain:+.1%} but last change "
                          f"{now - state.last_change:.0f}s ago < {cfg.cooldown_s:.0f}s", gain, g)
        state.pending_rollback = (cur, measured_goodput, acc.alphas[0] if acc.alphas else 0.0) if measured_goodput else None
        state.rollback_cycle_s = measured_cycle_s
        state.last_change = now
        state.last_direction = 1 if best > cur else -1
        return Choice(best, "switch", f"predicted goodput {g[best]:.1f} vs {g[cur]:.1f} tok/s ({gain:+.1%})", gain, g)

    # Exploration: the next captured k above the deepest observed position, if optimism says it could pay.
    above = [k for k in allowed if k > max(cur, acc.observed)]
    if above and now - state.last_probe >= cfg.explore_every_s and not cooling(1):
        nxt = above[0]
        opt = predict(acc, cost, batch, [nxt], optimistic=True)[nxt]
        opt_gain = gain_of(nxt, acc.alphas[: acc.observed] + acc.upper[acc.observed :])
        if opt_gain > cfg.hysteresis:
            state.last_probe = now
            state.probing_from = cur
            return Choice(nxt, "explore", f"position {acc.observed + 1} unobserved: optimistic {opt:.1f} "
                          f"vs {g[cur]:.1f} tok/s, probing one interval", opt_gain, g)
    if best != cur:
        return Choice(cur, "hold", f"k={best} predicted {gain:+.1%} <= hysteresis {cfg.hysteresis:.0%}"
                      + (f" + cost doubt {doubt:.1%}" if doubt else ""), gain, g)
    return Choice(cur, "hold", f"k={cur} is the model's best", 0.0, g)
