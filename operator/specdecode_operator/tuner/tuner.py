"""The tuner as a pure object: snapshots in, a decision out; the operator does all I/O around it.

Keeping it free of Kubernetes and HTTP is what lets the same code run inside the kopf timer and inside the
benchmark's simulated clock, so the benchmark measures the controller the operator really runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Callable, Literal, Mapping

from specdecode_runtime.contract import cost_profile
from specdecode_runtime.contract.capabilities import tuner_steps
from specdecode_runtime.contract.goodput import CostModel, CycleCost, expected_tokens, goodput
from specdecode_runtime.contract.metric_names import DEFAULT_BUCKETS, SWITCH_KINDS, bucket_label
from specdecode_runtime.contract.step_table import StepTable

from ..api.models import Condition, CostProfileEntry, HistoryEntry, SpeculativeStatus
from .cost_refine import PRIOR_SD_OVERRIDE, PRIOR_SD_PHASE_AVERAGES, CostRefiner
from .estimator import Acceptance, Estimator, ObserveReport
from .policy import Aggregate, BucketState, Choice, PolicyConfig, choose, choose_prior
from .snapshot import PodSnapshot

Mode = Literal["Off", "Live", "Rollout"]
CONDITION_TYPE = "MetricsAvailable"
# What an interval without pods reports; also the condition the reconciler reports before the tuner's first interval
# (tuning/hooks.py), so an object's first status write already carries it.
NO_PODS = Condition(type=CONDITION_TYPE, status="False", reason="NoPods", message="no pods to scrape")
FIRST_SCRAPE = "first scrape: a decision needs two snapshots of the counters"
ProfileSource = Mapping[str, CycleCost] | Callable[[str], CycleCost | None] | CycleCost | None
# Where a bucket's cost comes from (status.speculative.costSource / costProfile[].source).
OVERRIDE, MEASURED, REFINED, PHASE_AVERAGES = "Override", "MeasuredAtStart", "RefinedOnline", "PhaseAverages"


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass
class TunerConfig:
    mode: Mode = "Live"
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    initial_steps: int = 3
    restart_s: float = 300.0  # Rollout: tokens lost to a restart = tokens/s x this
    rollout_cooldown_s: float = 1800.0  # Rollout: the horizon a change must pay back over
    history_limit: int = 50
    stale_acceptance_s: float = 600.0  # a bucket at steps=0 re-probes steps>0 when its acceptance is older than this

    @classmethod
    def from_autotune(
        cls,
        autotune: Any,
        num_steps: int,
        candidates: list[int] | None = None,
        buckets: tuple[int, ...] = DEFAULT_BUCKETS,
        restart_s: float = 300.0,
    ) -> TunerConfig:
        """From the CRD's ``spec.speculative.autotune`` (api.models.Autotune). Cooldown defaults to two intervals
        in Live mode, so a change is judged on at least one clean interval before the next one."""
        interval = float(autotune.intervalSeconds)
        caps = (
            candidates
            if candidates is not None
            else tuner_steps(autotune.mode, autotune.minSteps, autotune.maxSteps, num_steps)
        )
        return cls(
            mode=autotune.mode,
            policy=PolicyConfig(
                min_steps=autotune.minSteps,
                max_steps=autotune.maxSteps,
                candidates=tuple(caps),
                objective=autotune.objective,
                max_itl_ms=autotune.maxInterTokenLatencyMs,
                cooldown_s=2 * interval,
                explore_every_s=max(12 * interval, 120.0),
            ),
            buckets=tuple(buckets),
            initial_steps=num_steps,
            restart_s=restart_s,
        )


@dataclass
class BucketReport:
    bucket: str
    min_batch: int
    steps: int
    choice: Choice
    samples: float
    batch: float | None
    alphas: list[float]
    observed_positions: int
    cost_source: str


@dataclass
class Decision:
    time: float
    mode: Mode
    table: list[tuple[int, int]]  # (minBatch, steps) in force after this decision
    changed: bool  # the table differs from the previous one (Live: push it)
    restart: bool  # Rollout: re-render --speculative-num-steps = rollout_steps and roll the pods
    rollout_steps: int | None
    buckets: dict[str, BucketReport]
    history: list[HistoryEntry]
    status: SpeculativeStatus
    condition: Condition
    events: list[Event]
    recommended_table: list[tuple[int, int]]  # what the model would run (differs from table in Off mode)

    def step_table_body(self) -> dict[str, Any]:
        """The body for PUT /specdecode/v1/steps on every pod's control endpoint."""
        return StepTable.from_pairs(self.table).to_json()


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Tuner:
    """One per SpecDecodeDeployment; ``step`` once per ``intervalSeconds``."""

    def __init__(
        self,
        config: TunerConfig,
        profile: ProfileSource = None,
        estimator: Estimator | None = None,
        refine: bool = True,
    ) -> None:
        """``profile``: an override (the ConfigMap named by the profile annotation); without one the tuner uses the
        pods' own start-up cost probe. Either is refined online from live cycle timings unless ``refine`` is off."""
        self.config = config
        self.profile = profile
        self.refine = refine
        self.measured: dict[str, CycleCost] = {}  # bucket -> cost fitted from the pods' start-up probes
        self._pod_costs: dict[str, dict[tuple[str, int, str, int], float]] = {}
        self._restarted: set[str] = set()
        self.refiners: dict[str, CostRefiner] = {}
        self._costs: dict[str, tuple[CostModel | None, str]] = {}  # per-interval cache of cost(label)
        self.last_reports: dict[str, BucketReport] = {}  # the latest interval that decided anything
        self.estimator = estimator or Estimator()
        self.bounds = tuple(sorted(config.buckets))
        self.labels = {bucket_label(lo, self.bounds): lo for lo in self.bounds}
        start = config.initial_steps
        self.states = {label: BucketState(steps=start) for label in self.labels}
        self.rollout_steps = start
        self.rollout_last_change = -math.inf
        self.remembered: dict[str, tuple[Acceptance, float]] = {}
        self.history: list[HistoryEntry] = []
        self.changes = 0
        self.restarts = 0
        self.measured_tokens_per_s: float | None = None
        self.switches: dict[str, int] | None = None  # served tier changes of the pods scraped last, by kind
        self._rendered: tuple[int, ...] | None = None  # the policy's candidates before the pods reported theirs
        self._active: list[str] = []  # buckets that ran cycles in the latest interval with any traffic

    # ------------------------------------------------------------------
    def _override(self, label: str) -> CycleCost | None:
        p = self.profile
        if p is None or isinstance(p, CycleCost):
            return p
        if callable(p):
            return p(label)
        return p.get(label)

    def _profile(self, label: str) -> tuple[CycleCost | None, str]:
        """The base profile of a bucket and its source: the override, else the pods' start-up probe."""
        over = self._override(label)
        if over is not None:
            return over, OVERRIDE
        return self.measured.get(label), MEASURED

    def cost(self, label: str) -> tuple[CostModel | None, str]:
        """The cost model the policy uses for a bucket, and where it comes from: the base profile refined by the
        bucket's live cycle timings; per-cycle phase averages when there is no profile at all."""
        hit = self._costs.get(label)
        if hit is None:
            hit = self._costs[label] = self._compute_cost(label)
        return hit

    def _compute_cost(self, label: str) -> tuple[CostModel | None, str]:
        base, source = self._profile(label)
        if base is None:
            cost, _ = self.estimator.cost(label, None)
            if cost is None:
                return None, "None"
            if not self.refine:
                return cost, PHASE_AVERAGES
            # Phase averages split the cycle by where the host spent its time, which under an overlapping scheduler
            # is not where the GPU did: only their total at the running step count is trusted (a wide prior on the
            # parts).
            return self.refiners.setdefault(label, CostRefiner()).refine(cost, PRIOR_SD_PHASE_AVERAGES), PHASE_AVERAGES
        if not self.refine:
            return base, source
        ref = self.refiners.setdefault(label, CostRefiner())
        refined = ref.refine(base, PRIOR_SD_OVERRIDE if source == OVERRIDE else None)  # the prior alone without data
        return refined, source if source == OVERRIDE or not ref.observations else REFINED

    def wants_costs(self, pod: str) -> bool:
        """Whether the next scrape of ``pod`` should parse its start-up cost probe: not yet seen, or the pod restarted
        (its counters went back) and measured again."""
        return pod not in self._pod_costs or pod in self._restarted

    def _learn_costs(self, snapshots: list[PodSnapshot], report: ObserveReport) -> None:
        """The pods' probes (re-fitted when a pod's probe changes: a restarted pod measures again) and this
        interval's mean cycle time per bucket at the step count that ran."""
        changed = False
        self._restarted = set(report.resets)
        for snap in snapshots:
            if snap.ok and snap.costs and self._pod_costs.get(snap.pod) != snap.costs:
                self._pod_costs[snap.pod] = dict(snap.costs)
                changed = True
        if changed:
            points = [p for costs in self._pod_costs.values() for p in cost_profile.points_from_samples(costs)]
            self.measured = cost_profile.fit_profile(points)
        for label in report.bucket_cycles:
            d = self.estimator.last_interval.get(label)
            if d is None or d.cycles <= 0 or d.busy_s <= 0:
                continue
            mean_steps = d.draft_steps / d.cycles
            if mean_steps > 0 and not d.steps:
                continue  # switched to steps=0 within the interval: the share of drafting cycles is unknown
            frac = min(1.0, mean_steps / d.steps) if d.steps else 0.0
            self.refiners.setdefault(label, CostRefiner()).add(
                d.requests / d.cycles, mean_steps, frac, 1000.0 * d.busy_s / d.cycles, d.cycles
            )

    def table(self) -> list[tuple[int, int]]:
        if self.config.mode == "Rollout":
            return [(1, self.rollout_steps)]
        return [(lo, self.states[label].steps) for label, lo in self.labels.items()]

    def _acceptance(self, label: str, now: float, positions: int) -> Acceptance:
        acc = self.estimator.acceptance(label, positions)
        if acc.observed > 0:
            self.remembered[label] = (acc, now)
            return acc
        old = self.remembered.get(label)
        if old is not None and now - old[1] <= self.config.stale_acceptance_s:
            return old[0]
        return acc

    # ------------------------------------------------------------------
    def served_by_pods(self, snapshots: list[PodSnapshot]) -> None:
        """Live: restrict the choice to the tiers every scraped pod reports it captured (``specdecode_candidate_steps``),
        so the tuner never sends a table a pod would refuse. Rollout re-renders pods and Off sends nothing, so there
        the rendered set stands."""
        if self.config.mode != "Live":
            return
        reported = [set(s.candidates) for s in snapshots if getattr(s, "candidates", None)]
        if not reported:
            return
        if self._rendered is None:  # recorded once: without rendered candidates, every step count in bounds
            rendered = self.config.policy.candidates
            self._rendered = tuple(rendered) if rendered is not None else tuple(range(self.config.policy.max_steps + 1))
        served = tuple(sorted(set(self._rendered).intersection(*reported)))
        if served and served != self.config.policy.candidates:
            self.config.policy = replace(self.config.policy, candidates=served)

    def step(self, now: float, snapshots: list[PodSnapshot]) -> Decision:
        cfg = self.config
        self.served_by_pods(snapshots)
        scraped = [s for s in snapshots if s.ok and s.switches]
        if scraped:
            self.switches = {k: int(sum(s.switches.get(k, 0.0) for s in scraped)) for k in SWITCH_KINDS}
        report = self.estimator.observe(snapshots)
        self._learn_costs(snapshots, report)
        self._costs.clear()
        events: list[Event] = []
        condition = self._condition(report, snapshots)
        if condition.status != "True":
            events.append(Event("Warning", condition.reason, condition.message))
        if report.tokens_per_s is not None:
            self.measured_tokens_per_s = report.tokens_per_s
        before = self.table()
        reports: dict[str, BucketReport] = {}
        new_history: list[HistoryEntry] = []
        positions = max(cfg.policy.allowed() or [0]) + 1
        recommended: dict[str, int] = {}
        if report.usable:
            aggregates = self._aggregates(now, positions, report)
            for label, lo in self.labels.items():
                if label not in self.estimator.windows or report.bucket_cycles.get(label, 0) <= 0:
                    continue  # an idle bucket keeps its step count (or, never observed, takes the prior below)
                rep = self._decide_bucket(label, lo, now, positions, report, aggregates.get(label))
                if rep is None:
                    continue
                reports[label] = rep
                recommended[label] = rep.choice.steps
        if reports:
            self.last_reports = dict(reports)  # the decisions on traffic; the priors below are not kept here
        if report.usable and cfg.mode != "Rollout":  # Rollout runs one step count everywhere: no per-bucket prior
            for label, rep in self._priors(now, positions).items():
                recommended[label] = rep.choice.steps
                if rep.choice.steps != self.states[label].steps:
                    reports[label] = rep  # a change is reported, applied and counted like any other switch
        active = [label for label in self.labels if report.bucket_cycles.get(label, 0) > 0]
        if active:
            self._active = active
        if cfg.mode == "Rollout":
            restart = self._rollout(now, reports, new_history, events) if reports else False
        else:
            restart = False
            for label, rep in reports.items():
                ch = rep.choice
                state = self.states[label]
                if ch.steps == state.steps:
                    continue
                entry = HistoryEntry(
                    time=iso(now),
                    bucket=label,
                    fromSteps=state.steps,
                    toSteps=ch.steps,
                    reason=f"{ch.kind}: {ch.reason}" + (" (mode Off: not applied)" if cfg.mode == "Off" else ""),
                    predictedGain=None
                    if ch.predicted_gain is None or math.isinf(ch.predicted_gain)
                    else round(ch.predicted_gain, 4),
                )
                new_history.append(entry)
                events.append(
                    Event(
                        "Normal",
                        "StepsRecommended" if cfg.mode == "Off" else "StepsChanged",
                        f"bucket {label}: steps {state.steps} -> {ch.steps} ({ch.kind}: {ch.reason})",
                    )
                )
                if cfg.mode == "Live":
                    state.steps = ch.steps
                    self.changes += 1
                else:  # Off: report only; undo the policy's bookkeeping so it keeps recommending
                    state.probing_from = None
                    state.pending_rollback = None
        self.history = (self.history + new_history)[-cfg.history_limit :]
        after = self.table()
        rec_table = [(lo, recommended.get(label, self.states[label].steps)) for label, lo in self.labels.items()]
        return Decision(
            time=now,
            mode=cfg.mode,
            table=after,
            changed=after != before,
            restart=restart,
            rollout_steps=self.rollout_steps if cfg.mode == "Rollout" else None,
            buckets=reports,
            history=new_history,
            status=self._status(now, report),
            condition=condition,
            events=events,
            recommended_table=rec_table,
        )

    def prior_source(self, label: str, now: float, positions: int) -> tuple[str, Acceptance] | None:
        """The bucket whose acceptance prices ``label`` while ``label`` has never had traffic (nothing in the
        estimator's windows, nothing remembered): the nearest bucket, in bucket order, with acceptance of its own
        (at least one observed position and ``min_samples`` cycles in its window); between two equally near, the one
        with more cycles. Returns that bucket and its acceptance; None when ``label`` has been observed or no bucket
        qualifies.

        Why the nearest and not all observed buckets pooled: acceptance belongs to the workload and the draft, so any
        observed bucket is evidence, but the traffic that first reaches an empty bucket comes through its neighbour
        (a lull drains a batch of 8-31 through 2-7 to 1; a burst fills 32-63 from 8-31), and where the mix differs by
        batch size (long prompts only at low load, say) the neighbour's mix is the likeliest one. One bucket's curve
        also keeps censoring coherent: its ``observed`` positions are positions that bucket measured, where a pooled
        curve would mix depths measured at different step counts. And the history can name the bucket it came from."""
        est = self.estimator
        if label in est.windows or label in self.remembered:
            return None
        order = list(self.labels)
        i = order.index(label)
        found: list[tuple[int, float, str]] = []
        for j, other in enumerate(order):
            samples = est.samples(other) if other in est.windows else 0.0
            if samples >= self.config.policy.min_samples:
                found.append((abs(i - j), -samples, other))
        for _, _, other in sorted(found):
            acc = self._acceptance(other, now, positions)
            if acc.observed >= 1:
                return other, acc
        return None

    def nominal_batch(self, lo: int) -> int:
        """The batch a never-observed bucket is priced at: the geometric middle of its bounds (the open top bucket:
        of its lower bound and twice that), where the start-up probe measures each bucket's cost
        (runtime cost_probe ``probe_batch``), so the prior reads the cost model where it was measured."""
        i = self.bounds.index(lo)
        hi = self.bounds[i + 1] - 1 if i + 1 < len(self.bounds) else 2 * lo
        return max(lo, round(math.sqrt(lo * hi)))

    def _priors(self, now: float, positions: int) -> dict[str, BucketReport]:
        """Choices for the buckets that have never had traffic: the nearest observed bucket's acceptance at each one's
        own cost model (``prior_source``, policy ``choose_prior``), never below ``initial_steps`` (the rendered start
        value; why: ``choose_prior``). Off mode works on a copy of the state, so a recommendation leaves no cooldown
        behind."""
        out: dict[str, BucketReport] = {}
        for label, lo in self.labels.items():
            found = self.prior_source(label, now, positions)
            cost, cost_source = self.cost(label) if found is not None else (None, "None")
            if found is None or cost is None:
                continue
            source, acc = found
            state = self.states[label] if self.config.mode == "Live" else replace(self.states[label])
            batch = self.nominal_batch(lo)
            floor = self.config.initial_steps
            choice = choose_prior(self.config.policy, state, acc, cost, batch, now, source, floor)
            out[label] = BucketReport(label, lo, state.steps, choice, 0.0, batch, acc.alphas, acc.observed, cost_source)
        return out

    def _aggregates(self, now: float, positions: int, report: ObserveReport) -> dict[str, Aggregate]:
        """Deployment tokens/s of decode time at every bucket's current step count (the model's prediction, weighted by
        the cycles each bucket ran this interval) and each bucket's share of the time: the policy then picks the step
        count that maximises the deployment's throughput, not each bucket's own (see policy.Aggregate)."""
        if self.config.policy.objective != "Throughput" or len(self.labels) < 2:
            return {}
        est = self.estimator
        parts: dict[str, tuple[float, float, float]] = {}
        for label, n in report.bucket_cycles.items():
            if label not in self.labels or n <= 0:
                continue
            batch = est.batch_mean(label)
            cost, _ = self.cost(label)
            if batch is None or cost is None:
                continue
            steps = self.rollout_steps if self.config.mode == "Rollout" else self.states[label].steps
            acc = self._acceptance(label, now, positions)
            tok = batch * (expected_tokens(acc.alphas, steps) if steps > 0 else 1.0)
            parts[label] = (n, tok, cost.cycle_ms(steps, batch) / 1000.0)
        time_total = sum(n * sec for n, _, sec in parts.values())
        if time_total <= 0:
            return {}
        rate = sum(n * tok for n, tok, _ in parts.values()) / time_total
        # A bucket without traffic this interval keeps its own objective: the rate it would be traded against is
        # the other buckets' present one, which says nothing about the traffic that will bring it back.
        return {label: Aggregate(rate, n * sec / time_total) for label, (n, _, sec) in parts.items()}

    def _decide_bucket(
        self, label: str, lo: int, now: float, positions: int, report: ObserveReport, aggregate: Aggregate | None = None
    ) -> BucketReport | None:
        est = self.estimator
        batch = est.batch_mean(label)
        if batch is None:
            return None
        cost, source = self.cost(label)
        if cost is None:
            return None
        acc = self._acceptance(label, now, positions)
        state = self.states[label]
        if self.config.mode == "Rollout":
            state = BucketState(steps=self.rollout_steps)  # per-bucket advice only; the rollout choice is global
        choice = choose(
            self.config.policy,
            state,
            acc,
            cost,
            batch,
            est.samples(label),
            now,
            measured_goodput=est.measured_goodput(label, latest_only=True),
            workload_changed=label in report.changed_buckets,
            aggregate=aggregate,
            measured_cycle_s=est.measured_cycle_s(label),
            latest_alphas=est.latest_alphas(label, acc.alphas),
        )
        if state.steps == 0 and choice.steps == 0 and acc.observed == 0 and choice.kind in ("hold", "wait"):
            # Nothing is drafted at steps=0, so acceptance goes stale; re-probe the smallest steps>0 now and then.
            old = self.remembered.get(label)
            pos = [steps for steps in self.config.policy.allowed() if steps > 0]
            if (
                pos
                and (old is None or now - old[1] > self.config.stale_acceptance_s)
                and now - state.last_probe >= self.config.policy.explore_every_s
            ):
                state.last_probe = now
                state.probing_from = 0
                choice = Choice(pos[0], "explore", "acceptance unknown or stale at steps=0: probing one interval")
        return BucketReport(label, lo, state.steps, choice, est.samples(label), batch, acc.alphas, acc.observed, source)

    def _rollout(
        self, now: float, reports: dict[str, BucketReport], history: list[HistoryEntry], events: list[Event]
    ) -> bool:
        """One step count for all batch sizes (stock SGLang), weighted by where decode time is spent; restart only
        if the predicted extra tokens over the rollout cooldown exceed the tokens a restart loses."""
        cfg = self.config
        est = self.estimator
        cur = self.rollout_steps
        allowed = [steps for steps in cfg.policy.allowed() if steps > 0 or cfg.policy.allow_zero]
        if not allowed:
            return False  # no step count to render: the pods keep the one they run, as Live holds
        busy = {label: est.window(label).busy_s for label in reports}
        total_busy = sum(busy.values()) or 1.0
        score = {}
        for steps in allowed:
            s = 0.0
            for label, rep in reports.items():
                acc = self._acceptance(label, now, max(allowed) + 1)
                if steps > acc.observed + 1 and steps > cur:
                    s = -math.inf  # censored: never roll pods onto an unobserved depth
                    break
                cost, _ = self.cost(label)
                if cost is None or rep.batch is None:  # reports are made only for buckets with both
                    continue
                g_cur = goodput(acc.alphas, cost, cur, rep.batch)
                s += busy[label] / total_busy * goodput(acc.alphas, cost, steps, rep.batch) / g_cur
            score[steps] = s
        best = max(score, key=lambda steps: (score[steps], -steps))
        gain = score[best] - 1.0
        if (
            best == cur
            or gain <= cfg.policy.hysteresis
            or any(r.samples < cfg.policy.min_samples for r in reports.values())
        ):
            return False
        if now - self.rollout_last_change < cfg.rollout_cooldown_s:
            return False
        if gain * cfg.rollout_cooldown_s <= cfg.restart_s:
            events.append(
                Event(
                    "Normal",
                    "RolloutSkipped",
                    f"steps={best} predicted {gain:+.1%}, which over "
                    f"{cfg.rollout_cooldown_s:.0f}s does not repay a {cfg.restart_s:.0f}s restart",
                )
            )
            return False
        history.append(
            HistoryEntry(
                time=iso(now),
                bucket="all",
                fromSteps=cur,
                toSteps=best,
                reason=f"rollout: predicted {gain:+.1%} over {cfg.rollout_cooldown_s:.0f}s "
                f"repays a {cfg.restart_s:.0f}s restart",
                predictedGain=round(gain, 4),
            )
        )
        events.append(
            Event("Normal", "RolloutStarted", f"--speculative-num-steps {cur} -> {best} ({gain:+.1%} predicted)")
        )
        self.rollout_steps = best
        self.rollout_last_change = now
        self.changes += 1
        self.restarts += 1
        return True

    def _profile_status(self) -> list[CostProfileEntry]:
        out = []
        for label in self.labels:
            batch = self.estimator.batch_mean(label)
            cost, source = self.cost(label)
            if batch is None or cost is None:  # no cost is source "None"
                continue
            steps = self.rollout_steps if self.config.mode == "Rollout" else self.states[label].steps
            ref = self.refiners.get(label)
            out.append(
                CostProfileEntry(
                    bucket=label,
                    source=source,
                    batch=round(batch, 2),
                    plainCycleMs=round(cost.cycle_ms(0, batch), 4),
                    cycleMs=round(cost.cycle_ms(steps, batch), 4),
                    stepMs=round(cost.cycle_ms(2, batch) - cost.cycle_ms(1, batch), 4),
                    observedSteps=ref.steps_seen() if ref is not None and source in (REFINED, OVERRIDE) else None,
                )
            )
        return out

    def _condition(self, report: ObserveReport, snapshots: list[PodSnapshot]) -> Condition:
        if not snapshots:
            return NO_PODS.model_copy()
        problems = []
        if report.down:
            problems.append("down: " + "; ".join(f"{p}: {e}" for p, e in sorted(report.down.items())))
        if report.invalid:
            problems.append(
                "invalid samples: " + "; ".join(f"{p}: {', '.join(e[:3])}" for p, e in sorted(report.invalid.items()))
            )
        if report.resets:
            problems.append("counter reset (pod restarted?): " + ", ".join(sorted(report.resets)))
        if not report.usable:
            reason = (
                "MetricsDown"
                if report.down and not report.invalid
                else "MetricsInvalid"
                if report.invalid
                else "CounterReset"
                if report.resets
                else "WarmingUp"
            )
            msg = "; ".join(problems) or FIRST_SCRAPE
            return Condition(
                type=CONDITION_TYPE,
                status="False" if problems else "Unknown",
                reason=reason,
                message=f"no decision this interval: {msg}",
            )
        if problems:
            return Condition(
                type=CONDITION_TYPE,
                status="True",
                reason="PartialMetrics",
                message=f"decided on {len(report.pods_used)} pod(s); " + "; ".join(problems),
            )
        return Condition(
            type=CONDITION_TYPE, status="True", reason="Scraped", message=f"{len(report.pods_used)} pod(s) scraped"
        )

    def _status(self, now: float, report: ObserveReport) -> SpeculativeStatus:
        est = self.estimator
        tokens = requests = accepted = drafted = 0.0
        busiest, busiest_cycles = None, -1.0
        for label in self._active:  # the buckets of the latest interval with traffic ("over the last interval")
            d = est.last_interval.get(label)
            if d is None:
                continue
            tokens += d.tokens
            requests += d.requests
            acc_sum = sum(d.accepted.values())
            accepted += acc_sum
            drafted += d.requests * (d.steps or 0)
            if d.cycles > busiest_cycles:
                busiest, busiest_cycles = label, d.cycles
        table = self.table()
        num_steps = (
            self.rollout_steps
            if self.config.mode == "Rollout"
            else (self.states[busiest].steps if busiest else table[0][1])
        )
        profile = self._profile_status()
        source = next((e.source for e in profile if e.bucket == busiest), profile[0].source if profile else None)
        return SpeculativeStatus(
            costSource=source,
            costProfile=profile or None,
            numSteps=num_steps,
            stepTable=StepTable.from_pairs(table).to_json()["table"],
            acceptLength=round(tokens / requests, 4) if requests else None,
            acceptRate=round(accepted / drafted, 4) if drafted else None,
            tokensPerSecond=round(self.measured_tokens_per_s, 2) if self.measured_tokens_per_s is not None else None,
            stepSwitches=dict(self.switches) if self.switches is not None else None,
            lastTuneTime=iso(now) if report.usable else None,
        )
