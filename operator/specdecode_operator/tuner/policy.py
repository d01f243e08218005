"""Per-bucket choice of the speculative step count from the goodput model.

The model (runtime goodput.py) says which step count *should* be best; the policy adds what a controller acting on
noisy, delayed, censored data needs so it does not chase noise: a minimum sample size, hysteresis on the predicted
gain, a cooldown between changes, no jump past the deepest observed position (censoring), bounded exploration of the
next position, and a rollback when the measured goodput after a change is worse than before beyond noise.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

from specdecode_runtime.contract.goodput import CostModel, expected_tokens, goodput, inter_token_latency_ms

from .estimator import Acceptance


@dataclass(frozen=True)
class PolicyConfig:
    min_steps: int = 1
    max_steps: int = 7
    candidates: tuple[int, ...] | None = None  # captured step counts; None: every step count in bounds
    allow_zero: bool = True  # steps = 0 (no speculation) is always allowed as the escape when drafting loses
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
            raise ValueError(
                f"minSteps/maxSteps must satisfy 0 <= minSteps <= maxSteps, got {self.min_steps}..{self.max_steps}"
            )
        if self.objective == "Latency" and not self.max_itl_ms:
            raise ValueError("objective Latency needs maxInterTokenLatencyMs > 0")

    def allowed(self) -> list[int]:
        pool = self.candidates if self.candidates is not None else range(0, self.max_steps + 1)
        return sorted(
            {steps for steps in pool if (steps == 0 and self.allow_zero) or self.min_steps <= steps <= self.max_steps}
        )


@dataclass
class BucketState:
    steps: int
    last_change: float = -math.inf
    last_probe: float = -math.inf
    probing_from: int | None = None  # set while a probe interval runs: the step count to return to
    pending_rollback: tuple[int, float, float] | None = None  # (from_steps, measured goodput before, acceptance@1)
    rollback_cycle_s: float | None = None  # measured seconds per cycle before the change (coupled rollback test)
    rollback_content: tuple[float, ...] | None = None  # acceptance per position in the interval before the change
    last_direction: int = 0  # +1 / -1: the direction of the last change
    judged_at: float = -math.inf  # when the last change passed its one-clean-interval rollback test
    blocked: dict[int, float] = field(default_factory=dict)  # steps -> blocked until


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
    """The deployment around one bucket, at every bucket's current step count: tokens per second of decode time over
    all buckets (``rate``) and this bucket's fraction of that decode time (``share``).

    Why: the deployment's throughput is sum(tokens) / sum(time) over all buckets, and each bucket's cycle count is
    set by the traffic, not by the step count. A millisecond spent in one bucket is therefore worth ``rate`` tokens,
    not that bucket's own tokens/s, so a bucket whose own goodput is far above (or below) the deployment's should run
    a deeper (or shallower) step count than its own optimum (Dinkelbach: maximise tokens - rate x time per cycle)."""

    rate: float
    share: float


def coupled_gain(tok_new: float, sec_new: float, tok_cur: float, sec_cur: float, agg: Aggregate | None) -> float:
    """Relative change of the deployment's throughput when one bucket moves from (tok_cur, sec_cur) per cycle to
    (tok_new, sec_new), the other buckets unchanged, divided by the bucket's time share (so hysteresis and noise margins
    keep meaning "per cent of this bucket's work"). Without ``agg`` (or with the bucket alone) it is exactly the
    bucket's own goodput ratio minus one."""
    if tok_cur <= 0 or sec_cur <= 0 or sec_new <= 0:
        return math.inf if tok_new > 0 else 0.0
    if agg is None or agg.rate <= 0:
        return (tok_new / sec_new) / (tok_cur / sec_cur) - 1.0
    w = min(max(agg.share, 0.0), 1.0)
    g_cur = tok_cur / sec_cur
    if w < 1e-6:  # the limit w -> 0: (delta tokens - rate x delta time) / (rate x time)
        return ((tok_new - tok_cur) - agg.rate * (sec_new - sec_cur)) / (agg.rate * sec_cur)
    wt = w * g_cur / agg.rate  # the bucket's share of tokens
    return ((1.0 + wt * (tok_new / tok_cur - 1.0)) / (1.0 + w * (sec_new / sec_cur - 1.0)) - 1.0) / w


def predict(
    acc: Acceptance, cost: CostModel, batch: float, candidates: Sequence[int], optimistic: bool = False
) -> dict[int, float]:
    alphas = acc.upper if optimistic else acc.alphas
    if optimistic:  # optimism only for unobserved positions; observed ones stay at their estimate
        alphas = acc.alphas[: acc.observed] + acc.upper[acc.observed :]
    return {steps: goodput(alphas, cost, steps, batch) for steps in candidates}


def _objective_best(
    cfg: PolicyConfig,
    g: dict[int, float],
    acc: Acceptance,
    cost: CostModel,
    batch: float,
    score: dict[int, float] | None = None,
) -> int:
    candidates = sorted(g)
    score = score if score is not None else g
    if cfg.objective == "Latency":
        itl = {steps: inter_token_latency_ms(acc.alphas, cost, steps, batch) for steps in candidates}
        limit = cfg.max_itl_ms if cfg.max_itl_ms is not None else math.inf
        feasible = [steps for steps in candidates if itl[steps] <= limit]
        if not feasible:
            return min(candidates, key=lambda steps: (itl[steps], steps))
        candidates = feasible
        score = g  # at a fixed batch ITL and goodput rank step counts alike; the SLO is per bucket
    return max(candidates, key=lambda steps: (score[steps], -steps))


def choose(
    cfg: PolicyConfig,
    state: BucketState,
    acc: Acceptance,
    cost: CostModel,
    batch: float,
    samples: float,
    now: float,
    measured_goodput: float | None = None,
    workload_changed: bool = False,
    aggregate: Aggregate | None = None,
    measured_cycle_s: float | None = None,
    latest_alphas: Sequence[float] | None = None,
) -> Choice:
    """One bucket's step count for the next interval. The stages, in order, each either decide or pass on: enough
    data? -> a probe that just ran -> the rollback test of the last change -> a switch to the model's best
    (cautious downwards, held by hysteresis, cost doubt and cooldown) -> a probe of the next unobserved position
    -> hold. ``state`` is updated in place. ``latest_alphas``: acceptance per position in the latest interval
    alone (estimator ``latest_alphas``), which lets the rollback test tell the step change from the content."""
    cur = state.steps
    expire_blocks(state, now)
    allowed = [steps for steps in cfg.allowed() if steps not in state.blocked or steps == cur]
    if samples < cfg.min_samples:
        return Choice(cur, "wait", f"{samples:.0f} cycles in window < minimum {cfg.min_samples:.0f}")
    r = Round.of(cfg, state, acc, cost, batch, now, allowed, workload_changed, aggregate)
    r.latest = tuple(latest_alphas) if latest_alphas else None
    choice = after_probe(r)
    if choice is None:
        choice = judge_rollback(r, measured_goodput, measured_cycle_s)
    if choice is not None:
        return choice
    best = cautious_best(r)
    gain, doubt = r.gain_and_doubt(best)
    return switch(r, best, gain, doubt, measured_goodput, measured_cycle_s) or explore(r) or hold(r, best, gain, doubt)


@dataclass
class Round:
    """What every stage of one choice reads: the inputs, the allowed and eligible step counts, the model's
    goodput ``g`` of each eligible step count and its ``score`` (coupled gain over the current one)."""

    cfg: PolicyConfig
    state: BucketState
    acc: Acceptance
    cost: CostModel
    batch: float
    now: float
    allowed: list[int]
    workload_changed: bool
    agg: Aggregate | None
    g: dict[int, float] = field(default_factory=dict)
    score: dict[int, float] = field(default_factory=dict)
    latest: tuple[float, ...] | None = None  # acceptance per position in the latest interval alone

    @classmethod
    def of(
        cls,
        cfg: PolicyConfig,
        state: BucketState,
        acc: Acceptance,
        cost: CostModel,
        batch: float,
        now: float,
        allowed: list[int],
        workload_changed: bool,
        aggregate: Aggregate | None,
    ) -> Round:
        cur = state.steps
        # Censoring: a step count past the deepest observed position + 1 would rest entirely on extrapolation.
        reach = cfg.reach_after_change if workload_changed else cfg.reach
        eligible = [steps for steps in allowed if steps <= acc.observed + reach or steps <= cur]
        r = cls(
            cfg,
            state,
            acc,
            cost,
            batch,
            now,
            allowed,
            workload_changed,
            aggregate if cfg.objective == "Throughput" else None,
        )
        r.g = predict(acc, cost, batch, sorted(set(eligible) | {cur}))
        r.score = {steps: r.gain_of(steps) for steps in r.g}
        return r

    @property
    def cur(self) -> int:
        return self.state.steps

    def tokens(self, steps: int, alphas: Sequence[float]) -> float:
        return self.batch * (expected_tokens(alphas, steps) if steps > 0 else 1.0)

    def gain_of(self, steps: int, alphas: Sequence[float] | None = None) -> float:
        a = self.acc.alphas if alphas is None else alphas
        return coupled_gain(
            self.tokens(steps, a),
            self.cost.cycle_ms(steps, self.batch) / 1000.0,
            self.tokens(self.cur, self.acc.alphas),
            self.cost.cycle_ms(self.cur, self.batch) / 1000.0,
            self.agg,
        )

    def best(self) -> int:
        return _objective_best(self.cfg, self.g, self.acc, self.cost, self.batch, self.score)

    def gain_and_doubt(self, best: int) -> tuple[float, float]:
        """The predicted gain of ``best`` over the current step count (an SLO violation overrides hysteresis), and the
        cost model's own doubt about it (a refined profile knows which parts live timings have pinned down): a
        predicted gain inside the doubt is not evidence."""
        cfg, cur = self.cfg, self.cur
        gain = self.score[best]
        if cfg.objective == "Latency":
            itl_cur = inter_token_latency_ms(self.acc.alphas, self.cost, cur, self.batch)
            if cfg.max_itl_ms is not None and itl_cur > cfg.max_itl_ms and best != cur:
                gain = max(gain, cfg.hysteresis + 1e-9)
        doubt = (
            self.cost.relative_sd(best, cur, self.batch) if best != cur and hasattr(self.cost, "relative_sd") else 0.0
        )
        return gain, doubt

    def cooling(self, direction: int) -> bool:
        """The cooldown exists so a change is judged on one clean interval before the next. Once that judgement is
        in and passed, a further step in the same direction (a climb towards a deeper optimum, one observed
        position at a time) need not wait out the rest of it; a reversal still does, which is what keeps noise
        from flapping the step count."""
        state = self.state
        if self.now - state.last_change >= self.cfg.cooldown_s:
            return False
        judged = state.judged_at > state.last_change
        return not (judged and direction == state.last_direction)

    def changed_to(self, steps: int) -> None:
        self.state.last_change = self.now
        self.state.last_direction = 1 if steps > self.cur else -1


def expire_blocks(state: BucketState, now: float) -> None:
    """Step counts blocked by a rollback become eligible again when their block runs out."""
    for steps, until in list(state.blocked.items()):
        if until <= now:
            del state.blocked[steps]


def after_probe(r: Round) -> Choice | None:
    """A probe has run for an interval: its position is now observed; return unless the model now prefers it."""
    state, cur = r.state, r.cur
    if state.probing_from is None:
        return None
    back = state.probing_from
    state.probing_from = None
    best = r.best()
    if best != cur and best in r.g:
        r.changed_to(best)
        return Choice(
            best,
            "return" if best == back else "switch",
            f"probe of steps={cur} done: model prefers steps={best}",
            r.score[best],
            r.g,
        )
    state.last_direction, state.judged_at = 1, r.now  # the probe interval was its clean interval
    return Choice(cur, "hold", f"probe of steps={cur} confirmed", 0.0, r.g)


def judge_rollback(r: Round, measured_goodput: float | None, measured_cycle_s: float | None) -> Choice | None:
    """The first full interval after a change measured worse than before, the workload unchanged: go back and
    block the step count that lost. A change that passes is judged (``cooling`` lets a further step the same way go)."""
    state, cur, cfg = r.state, r.cur, r.cfg
    if state.pending_rollback is None or measured_goodput is None:
        return None
    back, before, _ = state.pending_rollback
    sec_before, state.rollback_cycle_s = state.rollback_cycle_s, None
    content_before, state.rollback_content = state.rollback_content, None
    state.pending_rollback = None
    before = before * content_factor(back, content_before, r.latest)
    if r.agg is not None and sec_before and measured_cycle_s:
        # Judged the way it was chosen: what the measured change did to the deployment's tokens/s.
        change = coupled_gain(
            measured_goodput * measured_cycle_s, measured_cycle_s, before * sec_before, sec_before, r.agg
        )
    else:
        change = measured_goodput / before - 1.0
    if r.workload_changed:
        return None
    if change < -cfg.rollback_margin and back in r.allowed:
        state.blocked[cur] = r.now + cfg.rollback_block_s
        r.changed_to(back)
        return Choice(
            back,
            "rollback",
            f"measured {measured_goodput:.1f} tok/s after steps={cur} vs {before:.1f} before (steps={back}): "
            f"{change:+.1%}",
            change,
            r.g,
        )
    state.judged_at = r.now
    return None


def content_factor(steps: int, before: Sequence[float] | None, after: Sequence[float] | None) -> float:
    """How much more (or less) the step count ``steps`` would have emitted per cycle on the content of the interval
    after a change than on that before it: E(after, steps) / E(before, steps), 1 without both curves. The goodput
    measured before the change is scaled by it, so the rollback test compares the two step counts on the same
    content and a harder stretch of text is not taken for a worse step count (nor an easier one for a better)."""
    if not before or not after or steps <= 0:
        return 1.0
    e_before = expected_tokens(before, steps)
    return expected_tokens(after, steps) / e_before if e_before > 0 else 1.0


def cautious_best(r: Round) -> int:
    """The model's best step count; downwards (Throughput) only as far as the data are sure of.

    Moving down stops measuring the positions above the new step count (0 stops them all), and a censored position
    keeps its last estimate. So a step count in between that could be as good as the model's best with its measured
    positions past ``best`` at their upper 95 % bound is preferred (the best of those by the estimate), so it keeps
    measuring what decides it. Repeated from each new candidate, so the move stops at the first step count no deeper
    one can plausibly beat."""
    acc, cur = r.acc, r.cur
    best = r.best()
    if best >= cur or r.cfg.objective != "Throughput":
        return best
    while True:
        upper = acc.alphas[:best] + [
            acc.upper[i] if i < acc.observed else acc.alphas[i] for i in range(best, len(acc.alphas))
        ]
        near = [steps for steps in r.g if best < steps <= cur and r.gain_of(steps, upper) >= r.score[best]]
        if not near:
            return best
        best = max(near, key=lambda steps: (r.score[steps], -steps))


def switch(
    r: Round, best: int, gain: float, doubt: float, measured_goodput: float | None, measured_cycle_s: float | None
) -> Choice | None:
    """Change to ``best`` when its gain clears hysteresis plus the cost doubt and no cooldown holds it (a detected
    workload change is a new world, not noise: the cooldown does not hold the old choice there). The change is
    armed for the rollback test of the next interval."""
    state, cur, cfg, g = r.state, r.cur, r.cfg, r.g
    if best == cur or gain <= cfg.hysteresis + doubt:
        return None
    if r.cooling(1 if best > cur else -1) and not r.workload_changed:
        return Choice(
            cur,
            "hold",
            f"cooldown: steps={best} predicted {gain:+.1%} but last change "
            f"{r.now - state.last_change:.0f}s ago < {cfg.cooldown_s:.0f}s",
            gain,
            g,
        )
    state.pending_rollback = (
        (cur, measured_goodput, r.acc.alphas[0] if r.acc.alphas else 0.0) if measured_goodput else None
    )
    state.rollback_cycle_s = measured_cycle_s
    state.rollback_content = r.latest
    r.changed_to(best)
    return Choice(best, "switch", f"predicted goodput {g[best]:.1f} vs {g[cur]:.1f} tok/s ({gain:+.1%})", gain, g)


def explore(r: Round) -> Choice | None:
    """Probe the next allowed step count above the deepest observed position for one interval, at most every
    ``explore_every_s``, if optimism (unobserved positions at their upper bound) says it could pay."""
    acc, cur, state = r.acc, r.cur, r.state
    above = [steps for steps in r.allowed if steps > max(cur, acc.observed)]
    if not above or r.now - state.last_probe < r.cfg.explore_every_s or r.cooling(1):
        return None
    nxt = above[0]
    opt = predict(acc, r.cost, r.batch, [nxt], optimistic=True)[nxt]
    opt_gain = r.gain_of(nxt, acc.alphas[: acc.observed] + acc.upper[acc.observed :])
    if opt_gain <= r.cfg.hysteresis:
        return None
    state.last_probe = r.now
    state.probing_from = cur
    return Choice(
        nxt,
        "explore",
        f"position {acc.observed + 1} unobserved: optimistic {opt:.1f} vs {r.g[cur]:.1f} tok/s, probing one interval",
        opt_gain,
        r.g,
    )


def choose_prior(
    cfg: PolicyConfig,
    state: BucketState,
    acc: Acceptance,
    cost: CostModel,
    batch: float,
    now: float,
    source: str,
    floor: int = 0,
) -> Choice:
    """A step count for a bucket that has never had traffic of its own, from another bucket's acceptance (``acc``,
    observed in bucket ``source``) and this bucket's own ``cost`` at its nominal ``batch``. Why: acceptance belongs to
    the workload and the draft, not to the batch size, while cost is per bucket; without a prior such a bucket keeps
    the rendered start value, and every lull that drops the batch into it would run that value however far from this
    bucket's optimum it is. The usual rules still bind: only allowed step counts, censoring against the source's
    observed positions (never deeper than ``observed + reach``), hysteresis plus the cost model's doubt, and the
    cooldown. Nothing here is measured in the bucket, so no rollback test is armed and no probe is run; once the
    bucket has traffic of its own, ``choose`` takes over from whatever this left.

    ``floor``: the prior lowers a bucket no further than this (the tuner passes the rendered start value). Why: the
    two ways of being wrong do not cost the same. A bucket whose first traffic runs too deep a step count measures
    every position up to it and ``choose`` drops it within an interval; one that runs too shallow measures nothing
    past its step count (nothing at all at 0) and climbs back one censored position per interval. The source's
    acceptance is also a guess about traffic that has not come yet, and the content moves: in the simulator's
    ``fresh-pcie-tp8-ramp`` a lull of low-acceptance chat set bucket 8-31 to 0 just before code traffic reached it,
    and without a floor that scenario fell from 0.979 to 0.937 of the oracle (0.961 with a floor of 1)."""
    allowed = [
        steps
        for steps in cfg.allowed()
        if (steps not in state.blocked and steps >= min(floor, state.steps)) or steps == state.steps
    ]
    r = Round.of(cfg, state, acc, cost, batch, now, allowed, False, None)
    cur, best = r.cur, r.best()
    gain, doubt = r.gain_and_doubt(best)
    what = f"prior from bucket {source} (no traffic here yet; its acceptance at this bucket's cost, batch {batch:g})"
    if best == cur:
        return Choice(cur, "hold", f"{what}: steps={cur} is the model's best", 0.0, r.g)
    if gain <= cfg.hysteresis + doubt:
        return Choice(
            cur,
            "hold",
            f"{what}: steps={best} predicted {gain:+.1%} <= hysteresis {cfg.hysteresis:.0%}"
            + (f" + cost doubt {doubt:.1%}" if doubt else ""),
            gain,
            r.g,
        )
    if r.cooling(1 if best > cur else -1):
        return Choice(cur, "hold", f"{what}: steps={best} predicted {gain:+.1%} but in cooldown", gain, r.g)
    r.changed_to(best)
    return Choice(
        best, "switch", f"{what}: predicted goodput {r.g[best]:.1f} vs {r.g[cur]:.1f} tok/s ({gain:+.1%})", gain, r.g
    )


def hold(r: Round, best: int, gain: float, doubt: float) -> Choice:
    cur = r.cur
    if best != cur:
        return Choice(
            cur,
            "hold",
            f"steps={best} predicted {gain:+.1%} <= hysteresis {r.cfg.hysteresis:.0%}"
            + (f" + cost doubt {doubt:.1%}" if doubt else ""),
            gain,
            r.g,
        )
    return Choice(cur, "hold", f"steps={cur} is the model's best", 0.0, r.g)
