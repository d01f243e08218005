"""Online refinement of a bucket's cycle cost from the live cycle timings at the step counts it actually runs.

Why: the start-up probe (runtime ``cost_probe``) times dummy inputs, which is not the live workload; each stage can
be off by a systematic error of tens of per cent, and a wrong slope (what one more draft step costs) moves the best
step count. The live counters give, every interval and per bucket, the mean decode time per cycle at the step count
that ran (and at any step count a probe explores). The goodput model's cycle time is linear in three parts of the
start profile at the bucket's batch ``b``:

    T(0, b)     = rv * T0(b)                                   plain decode (verify at one token, overhead)
    T(steps, b) = rv * T0(b) + rs * S(b) + rd * D(b) * steps   speculative cycle of ``steps`` draft steps

with ``T0`` the plain cycle (verify of the bonus token, overhead), ``S`` the fixed extra of a speculative cycle
(draft-extend base and bonus token, broadcast) and ``D`` what each step adds (draft step plus the verify and extend tokens of that step). The three
factors get a Gaussian prior at 1 (the profile is right up to its error) and a weighted least-squares update from the
observed intervals (Bayesian linear regression, closed form), older intervals fading geometrically so the fit
follows a workload whose context lengths drift. With data at one step count only the prior splits the correction
between intercept and slope; each further step count (a climb, a probe) pins the slope down.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from specdecode_runtime.contract.goodput import CycleCost

PRIOR_SD_MEASURED = 0.15  # relative error of a start-up probe per part (its dummy inputs are not the workload)
PRIOR_SD_OVERRIDE = 0.05  # a hand-supplied profile is trusted more, but still checked against live timings
PRIOR_SD_PHASE_AVERAGES = 0.5  # per-cycle phase averages of one step count: their split into parts is barely known
OBS_SD = 0.02  # relative error of one interval's mean cycle time at a known step count (context drift, batch mix)
FORGET = 0.97  # weight kept per interval by older observations (~33 intervals of memory)
MAX_OBS = 120


def parts(base: CycleCost, batch: float) -> tuple[float, float, float]:
    """(T0, S, D) of ``base`` at ``batch``: the plain cycle, the fixed extra of a speculative cycle, the per-step
    slope (milliseconds)."""
    t0 = base.cycle_ms(0, batch)
    t1, t2 = base.cycle_ms(1, batch), base.cycle_ms(2, batch)
    d = t2 - t1
    return t0, t1 - d - t0, d


def features(base: CycleCost, steps: float, batch: float) -> np.ndarray:
    t0, s, d = parts(base, batch)
    return np.array([t0, s if steps > 0 else 0.0, d * steps])


@dataclass(frozen=True)
class RefinedCost:
    """A ``CycleCost`` stand-in (the policy and the goodput model only call ``cycle_ms``): the base profile with
    its three parts scaled by the fitted factors, and the factors' posterior covariance ``cov``."""

    base: CycleCost
    rv: float = 1.0
    rs: float = 1.0
    rd: float = 1.0
    cov: tuple[tuple[float, ...], ...] | None = None

    def cycle_ms(self, steps: int, batch: float) -> float:
        t0, s, d = parts(self.base, batch)
        if steps <= 0:
            return self.rv * t0
        return self.rv * t0 + self.rs * s + self.rd * d * steps

    def relative_sd(self, steps: int, cur: int, batch: float) -> float:
        """Standard deviation of ``cycle_ms(steps) - cycle_ms(cur)`` relative to ``cycle_ms(cur)``: how far the
        model can be trusted to compare a step count with the one running. Near 0 between step counts whose timings
        were seen (or that the data pin down), about the prior's error for a part never exercised (steps = 0 seen
        only from speculative cycles: the plain cycle and the speculative extra are told apart by nothing but the
        prior)."""
        if self.cov is None or steps == cur:
            return 0.0
        g = features(self.base, steps, batch) - features(self.base, cur, batch)
        var = float(g @ np.asarray(self.cov) @ g)
        return float(np.sqrt(max(var, 0.0))) / max(self.cycle_ms(cur, batch), 1e-9)

    def step_ms(self, batch: float) -> float:
        """What one more draft step adds to a cycle."""
        return self.rd * parts(self.base, batch)[2]


@dataclass(frozen=True)
class Observation:
    batch: float  # mean batch of the interval
    steps: float  # mean steps per cycle (draft steps / cycles)
    spec_fraction: float  # fraction of cycles that drafted
    cycle_ms: float  # measured decode milliseconds per cycle
    cycles: float


class CostRefiner:
    """One bucket's observations; ``refine(base)`` fits the factors against whichever base profile is in use."""

    def __init__(
        self,
        prior_sd: float = PRIOR_SD_MEASURED,
        obs_sd: float = OBS_SD,
        forget: float = FORGET,
        min_cycles: float = 20.0,
    ) -> None:
        self.prior_sd, self.obs_sd, self.forget, self.min_cycles = prior_sd, obs_sd, forget, min_cycles
        self.observations: deque[Observation] = deque(maxlen=MAX_OBS)

    def add(self, batch: float, steps: float, spec_fraction: float, cycle_ms: float, cycles: float) -> None:
        if cycles < self.min_cycles or cycle_ms <= 0 or batch <= 0:
            return
        self.observations.append(Observation(batch, steps, spec_fraction, cycle_ms, cycles))

    def reset(self) -> None:
        self.observations.clear()

    def steps_seen(self) -> list[int]:
        return sorted({round(o.steps) for o in self.observations})

    def refine(self, base: CycleCost, prior_sd: float | None = None) -> RefinedCost:
        """Posterior mean of (rv, rs, rd) given the observations (prior mean 1 each)."""
        sd = self.prior_sd if prior_sd is None else prior_sd
        prec = np.eye(3) / (sd * sd)
        rhs = prec @ np.ones(3)
        n = len(self.observations)
        if n:
            obs = np.array([(o.batch, o.steps, o.spec_fraction, o.cycle_ms) for o in self.observations])
            b, steps, f, y = obs.T
            c = base
            # parts() over all observations at once (the cost model is linear in the batch)
            warm = c.warm_extend_base + c.warm_extend_per_seq * b  # steps 0's draft extend, in T0 (not in S)
            t0 = c.verify_base + c.verify_per_token * b + c.overhead + warm
            s = c.extend_base + c.extend_per_token * b + c.broadcast - warm
            d = c.verify_per_token * b + c.draft_base + c.draft_per_seq * b + c.extend_per_token * b
            x = np.stack([t0, f * s, d * steps], axis=1)
            w = self.forget ** np.arange(n - 1, -1, -1) / (self.obs_sd * y) ** 2
            prec += (x * w[:, None]).T @ x
            rhs += (x * (w * y)[:, None]).sum(axis=0)
        try:
            cov = np.linalg.inv(prec)
        except np.linalg.LinAlgError:
            return RefinedCost(base)
        rv, rs, rd = (float(max(v, 0.05)) for v in cov @ rhs)
        return RefinedCost(base, rv, rs, rd, tuple(tuple(float(x) for x in row) for row in cov))
