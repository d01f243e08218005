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

Plain Python, not numpy: the fit is a 3 x 3 system over at most ``MAX_OBS`` rows (microseconds either way), and
numpy was the only reason the operator process loaded it (about 10 MB of its resident memory at start).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

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


def features(base: CycleCost, steps: float, batch: float) -> list[float]:
    t0, s, d = parts(base, batch)
    return [t0, s if steps > 0 else 0.0, d * steps]


class SingularMatrix(ArithmeticError):
    pass


def inverse3(m: list[list[float]]) -> list[list[float]]:
    """The inverse of a 3 x 3 matrix: Gauss-Jordan elimination with partial pivoting (as LAPACK's LU does)."""
    a = [list(row) + [1.0 if i == j else 0.0 for j in range(3)] for i, row in enumerate(m)]
    for col in range(3):
        pivot = max(range(col, 3), key=lambda r: abs(a[r][col]))
        if a[pivot][col] == 0.0:
            raise SingularMatrix
        a[col], a[pivot] = a[pivot], a[col]
        p = a[col][col]
        a[col] = [v / p for v in a[col]]
        for r in range(3):
            if r != col and a[r][col] != 0.0:
                f = a[r][col]
                a[r] = [v - f * w for v, w in zip(a[r], a[col])]
    return [row[3:] for row in a]


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
        g = [a - b for a, b in zip(features(self.base, steps, batch), features(self.base, cur, batch))]
        var = sum(g[i] * self.cov[i][j] * g[j] for i in range(3) for j in range(3))
        return math.sqrt(max(var, 0.0)) / max(self.cycle_ms(cur, batch), 1e-9)

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
        p = 1.0 / (sd * sd)
        # the prior's precision and right-hand side, plus each observation's weighted x x^T and x y (x: the features)
        p00 = p11 = p22 = r0 = r1 = r2 = p
        p01 = p02 = p12 = 0.0
        c = base
        n = len(self.observations)
        for age, o in zip(range(n - 1, -1, -1), self.observations):
            b, y = o.batch, o.cycle_ms
            # parts() of the cost model, written out (it is linear in the batch)
            warm = c.warm_extend_base + c.warm_extend_per_seq * b  # steps 0's draft extend, in T0 (not in S)
            x0 = c.verify_base + c.verify_per_token * b + c.overhead + warm
            x1 = o.spec_fraction * (c.extend_base + c.extend_per_token * b + c.broadcast + c.host_base - warm)
            x2 = o.steps * (
                c.verify_per_token * b + c.draft_base + c.draft_per_seq * b + c.extend_per_token * b + c.host_per_step
            )
            w = self.forget**age / (self.obs_sd * y) ** 2
            w0, w1, w2 = w * x0, w * x1, w * x2
            p00 += w0 * x0
            p01 += w0 * x1
            p02 += w0 * x2
            p11 += w1 * x1
            p12 += w1 * x2
            p22 += w2 * x2
            r0 += w0 * y
            r1 += w1 * y
            r2 += w2 * y
        prec = [[p00, p01, p02], [p01, p11, p12], [p02, p12, p22]]
        rhs = (r0, r1, r2)
        try:
            cov = inverse3(prec)
        except SingularMatrix:
            return RefinedCost(base)
        rv, rs, rd = (max(sum(cov[i][j] * rhs[j] for j in range(3)), 0.05) for i in range(3))
        return RefinedCost(base, rv, rs, rd, tuple(tuple(row) for row in cov))
