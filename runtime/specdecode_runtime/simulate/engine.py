"""The in-process simulated runtime: a discrete-event loop over decode cycles on a simulated clock.

Everything it reports is simulated. Cycle times come from ``goodput.CycleCost`` (the same arithmetic the tuner uses),
accepted drafts are sampled from the scenario's per-position acceptance chain, and the results are recorded through
``SpecMetrics`` on the engine's own registry, so a tuner reading ``metrics_text()`` sees exactly the contract the
patched runtime serves.

Speed: cycles are simulated in numpy chunks. Two random streams (one uniform per cycle for the batch size, one per
request for acceptance) are consumed exactly, so the outcome depends only on the seed and on when the step table
changes, not on how ``advance`` calls split the timeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import numpy as np
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from ..contract.goodput import CycleCost
from ..contract.metric_names import PHASES, SIMULATED_LABELS
from ..contract.scenario import Scenario, cost_for_draft_tp
from ..contract.step_table import StepTable
from ..metrics import SpecMetrics
from .probe import DEFAULT_BIAS, DEFAULT_NOISE, simulated_probe

CycleObserver = Callable[[int, int, list, float], None]  # (batch, steps, accepted per request, cycle_ms)
WINDOW_CYCLES = 40  # SGLang's --decode-log-interval: its spec gauges average over this many iterations
MAX_CHUNK = 8192


class _UniformStream:
    """Uniforms drawn in blocks but consumed exactly: ``peek`` looks ahead, ``consume`` commits."""

    def __init__(self, rng: np.random.Generator, block: int = 65536) -> None:
        self._rng, self._block = rng, block
        self._buf = np.empty(0)
        self._pos = 0

    def peek(self, n: int) -> np.ndarray:
        if self._pos + n > len(self._buf):
            rest = self._buf[self._pos :]
            self._buf = np.concatenate([rest, self._rng.random(max(n, self._block))])
            self._pos = 0
        return self._buf[self._pos : self._pos + n]

    def consume(self, n: int) -> None:
        self._pos += n


@dataclass
class _PhaseArrays:
    sizes: np.ndarray
    cdf: np.ndarray
    alphas: list[float]
    survival_cache: dict


class SimEngine:
    """See docs/scenarios.md. Steps 0 means plain decoding (no speculation); that is also the initial table."""

    def __init__(
        self,
        scenario: Scenario,
        seed: int | None = None,
        draft_tp: int | None = None,
        probe_bias: float | None = DEFAULT_BIAS,
        probe_noise: float = DEFAULT_NOISE,
    ) -> None:
        """``probe_bias``/``probe_noise``: the start-up cost probe's systematic error per stage and noise per sample
        (simulate/probe.py); ``probe_bias=None`` serves no probe (a runtime without one)."""
        self.scenario = scenario
        self.seed = scenario.seed if seed is None else seed
        self.probe_bias, self.probe_noise = probe_bias, probe_noise
        self.probe_points: list = []
        self.draft_tp = draft_tp
        self.cost: CycleCost = scenario.cycle_cost() if draft_tp is None else cost_for_draft_tp(scenario, draft_tp)
        root = np.random.SeedSequence(self.seed)
        batch_seq, accept_seq = root.spawn(2)
        self._batch_stream = _UniformStream(np.random.default_rng(batch_seq))
        self._accept_stream = _UniformStream(np.random.default_rng(accept_seq))
        self._phase_ends = np.cumsum([p.seconds for p in scenario.phases])
        self._phase_arrays = [self._arrays_for(p) for p in scenario.phases]
        self._observers: list[CycleObserver] = []
        self._table_version = 0
        self.now = 0.0
        self._target = 0.0
        self.tokens_total = 0
        self.cycles_total = 0
        self.restarts = 0
        self.restart_seconds_total = 0.0
        self._buckets = np.asarray(scenario.buckets)
        self.registry = CollectorRegistry()
        self._new_metrics()
        self.set_step_table([(1, 0)])

    # ------------------------------------------------------------------ setup
    @staticmethod
    def _arrays_for(phase) -> _PhaseArrays:
        sizes, probs = phase.batch_distribution()
        cdf = np.cumsum(probs)
        cdf[-1] = 1.0
        return _PhaseArrays(np.asarray(sizes, dtype=np.int64), cdf, list(phase.acceptance), {})

    def _new_metrics(self) -> None:
        self.registry = CollectorRegistry()
        self.metrics = SpecMetrics(
            self.registry, buckets=self.scenario.buckets, const_labels=SIMULATED_LABELS, max_positions=64
        )
        labels = tuple(SIMULATED_LABELS)
        self._accept_length = Gauge(
            "sglang:spec_accept_length",
            "Simulated: mean accepted tokens per request per "
            f"verify over the last {WINDOW_CYCLES} cycles (bonus included)",
            labels,
            registry=self.registry,
        ).labels(*SIMULATED_LABELS.values())
        self._gen_throughput = Gauge(
            "sglang:gen_throughput",
            f"Simulated: tokens/s over the last {WINDOW_CYCLES} cycles",
            labels,
            registry=self.registry,
        ).labels(*SIMULATED_LABELS.values())
        self.metrics.set_draft_tp(self.draft_tp or (self.scenario.draft_tp.current if self.scenario.draft_tp else 0))

    @property
    def candidates(self) -> list[int]:
        return list(getattr(self, "_candidates", []))

    def set_candidates(self, candidates: Iterable[int]) -> None:
        """The captured tiers; like the runtime after graph capture, the pod then probes their costs."""
        self._candidates = sorted(set(candidates))
        self.metrics.set_candidates(self._candidates)
        self._probe()

    def _probe(self) -> None:
        if self.probe_bias is None:
            return
        # Its own stream (seed, restarts): the probe must not shift the batch and acceptance draws, which policies
        # compared on one seed share.
        seed = np.random.SeedSequence([self.seed, 7919, self.restarts])
        self.probe_points = simulated_probe(
            self.cost,
            self._candidates,
            self.scenario.buckets,
            int(seed.generate_state(1)[0]),
            self.probe_bias,
            self.probe_noise,
        )
        for p in self.probe_points:
            self.metrics.set_cost(p.stage, p.steps, p.bucket, p.batch, p.seconds)

    def set_step_table(self, table: StepTable | Sequence[tuple[int, int]]) -> None:
        """Takes effect from the next cycle (also when called from an observer mid-``advance``)."""
        if not isinstance(table, StepTable):
            table = StepTable.from_pairs(table)
        self.table = table
        self._table_version += 1
        lo = [e.min_batch for e in table.entries()]
        self._table_min = np.asarray(lo, dtype=np.int64)
        self._table_steps = np.asarray([e.steps for e in table.entries()], dtype=np.int64)
        self.metrics.set_steps(table.lookup)

    def observe(self, callback: CycleObserver) -> None:
        """Per-cycle hook ``callback(batch, steps, accepted_per_req, cycle_ms)``; it may call ``set_step_table``,
        which then applies from the next cycle. Observed runs simulate in small chunks, so they are slower."""
        self._observers.append(callback)

    # ------------------------------------------------------------------ state
    @property
    def phase_index(self) -> int:
        return self.scenario.phase_at(self.now)[0]

    @property
    def phase(self):
        return self.scenario.phases[self.phase_index]

    @property
    def finished(self) -> bool:
        return self.now >= self.scenario.duration

    def throughput(self) -> float:
        """Simulated tokens per simulated second since start (restarts included)."""
        return self.tokens_total / self.now if self.now > 0 else 0.0

    def metrics_text(self) -> str:
        return generate_latest(self.registry).decode()

    # ------------------------------------------------------------------ time
    def restart(self, seconds: float | None = None, reset_metrics: bool = True) -> None:
        """A pod restart (Rollout mode): no tokens for ``seconds`` (default: the scenario's restartSeconds). Like a
        new process, Prometheus counters start again from zero unless ``reset_metrics`` is False; ``tokens_total``
        keeps counting for the benchmark."""
        seconds = self.scenario.restart_seconds if seconds is None else float(seconds)
        if seconds < 0:
            raise ValueError(f"restart seconds must be >= 0, got {seconds}")
        self.now += seconds
        self._target = max(self._target, self.now)
        self.restarts += 1
        self.restart_seconds_total += seconds
        if reset_metrics:
            table = self.table
            self._new_metrics()
            if hasattr(self, "_candidates"):
                self.metrics.set_candidates(self._candidates)
                self._probe()
            self.set_step_table(table)

    def advance(self, seconds: float) -> None:
        """Simulate until the clock passes ``seconds`` more: every cycle that starts before the deadline runs to
        completion, so ``now`` may end slightly past it."""
        if seconds < 0:
            raise ValueError(f"seconds must be >= 0, got {seconds}")
        self._target += seconds  # not from `now`: a cycle that overran the last deadline must not shift this one
        while self.now < self._target:
            idx = int(np.searchsorted(self._phase_ends, self.now, side="right"))
            last = idx >= len(self._phase_ends) - 1
            idx = min(idx, len(self._phase_ends) - 1)
            deadline = self._target if last else min(self._target, float(self._phase_ends[idx]))
            self._run_chunk(idx, deadline)

    def _steps_for(self, batch: np.ndarray) -> np.ndarray:
        pos = np.searchsorted(self._table_min, batch, side="right") - 1
        return self._table_steps[np.maximum(pos, 0)]

    def _survival(self, pa: _PhaseArrays, max_steps: int) -> np.ndarray:
        """P(position j accepted) = prod_{i<=j} alpha_i, ascending for searchsorted."""
        surv = pa.survival_cache.get(max_steps)
        if surv is None:
            a = np.asarray([pa.alphas[min(j, len(pa.alphas)) - 1] for j in range(1, max_steps + 1)], dtype=float)
            surv = np.cumprod(a)[::-1].copy()  # ascending
            pa.survival_cache[max_steps] = surv
        return surv

    def _run_chunk(self, idx: int, deadline: float) -> None:
        pa = self._phase_arrays[idx]
        cost = self.cost
        min_cycle = cost.cycle_ms(0, 1) / 1000.0
        n = int(min(MAX_CHUNK, max(1, (deadline - self.now) / max(min_cycle, 1e-6) + 1)))
        if self._observers:
            n = min(n, 256)
        batch = pa.sizes[np.searchsorted(pa.cdf, self._batch_stream.peek(n), side="right").clip(max=len(pa.sizes) - 1)]
        steps = self._steps_for(batch)
        b = batch.astype(float)
        spec = steps > 0
        verify = np.where(
            spec,
            cost.verify_base + cost.verify_per_token * b * (steps + 1),
            cost.verify_base + cost.verify_per_token * b,
        )
        draft = steps * (cost.draft_base + cost.draft_per_seq * b)
        extend = np.where(spec, cost.extend_base + cost.extend_per_token * b * (steps + 1), 0.0)
        other = np.where(spec, cost.overhead + cost.broadcast, cost.overhead)
        cycle_ms = verify + draft + extend + other
        ends = self.now + np.cumsum(cycle_ms) / 1000.0
        starts = np.concatenate(([self.now], ends[:-1]))
        m = int(np.searchsorted(starts, deadline, side="left"))  # cycles starting before the deadline
        m = max(m, 1)

        # acceptance: one uniform per request; c = #positions j <= steps with u < P(j accepted)
        req_steps = np.repeat(steps[:m], batch[:m])
        max_steps = int(steps[:m].max()) if m else 0
        u = self._accept_stream.peek(len(req_steps))
        if max_steps > 0:
            surv = self._survival(pa, max_steps)
            c = np.minimum(len(surv) - np.searchsorted(surv, u, side="right"), req_steps)
        else:
            c = np.zeros(len(req_steps), dtype=np.int64)

        if self._observers:
            version = self._table_version
            offsets = np.concatenate(([0], np.cumsum(batch[:m])))
            for i in range(m):
                accepted = c[offsets[i] : offsets[i + 1]].tolist()
                for cb in self._observers:
                    cb(int(batch[i]), int(steps[i]), accepted, float(cycle_ms[i]))
                if self._table_version != version:
                    m = i + 1
                    c = c[: offsets[m]]
                    req_steps = req_steps[: offsets[m]]
                    break

        self._batch_stream.consume(m)
        self._accept_stream.consume(len(c))
        self._record(batch[:m], steps[:m], req_steps, c, verify[:m], draft[:m], extend[:m], other[:m])
        self.now = float(ends[m - 1])

    def _record(self, batch, steps, req_steps, c, verify, draft, extend, other) -> None:
        m = len(batch)
        tokens = int(c.sum()) + len(c)
        self.tokens_total += tokens
        self.cycles_total += m
        nb = len(self._buckets)
        bucket_idx = np.searchsorted(self._buckets, batch, side="right") - 1
        req_bucket = np.repeat(bucket_idx, batch)
        width = int(steps.max()) + 2 if m else 2
        cap = np.minimum(c + 1, req_steps)  # positions attempted
        att_hist = np.bincount(req_bucket * width + cap, minlength=nb * width).reshape(nb, width)
        acc_hist = np.bincount(req_bucket * width + c, minlength=nb * width).reshape(nb, width)
        # count of requests with value >= j, for j = 1..width-1
        attempts = att_hist[:, ::-1].cumsum(axis=1)[:, ::-1][:, 1:]
        accepted = acc_hist[:, ::-1].cumsum(axis=1)[:, ::-1][:, 1:]
        cycles = np.bincount(bucket_idx, minlength=nb)
        reqs = np.bincount(bucket_idx, weights=batch, minlength=nb)
        dsteps = np.bincount(bucket_idx, weights=steps, minlength=nb)
        toks = np.bincount(req_bucket, weights=c + 1, minlength=nb)
        phase_tot = {
            name: np.bincount(bucket_idx, weights=arr, minlength=nb) / 1000.0
            for name, arr in zip(PHASES, (draft, verify, extend, other))
        }
        if m:  # tier changes between consecutive cycles, the last cycle of the previous chunk included
            last = self.metrics.last_steps
            seq = steps if last is None else np.concatenate(([last], steps))
            a, b = seq[:-1], seq[1:]
            moved = a != b
            self.metrics.add_switches(
                off=int(np.sum(moved & (b == 0))),
                on=int(np.sum(moved & (a == 0))),
                change=int(np.sum(moved & (a > 0) & (b > 0))),
                last_steps=int(steps[-1]),
            )
        for i in np.nonzero(cycles)[0]:
            self.metrics.add_cycles(
                self.metrics.bucket(int(self._buckets[i])),
                cycles=int(cycles[i]),
                requests=int(reqs[i]),
                draft_steps=int(dsteps[i]),
                attempts=attempts[i].tolist(),
                accepted=accepted[i].tolist(),
                phase_seconds={p: float(v[i]) for p, v in phase_tot.items()},
                tokens=float(toks[i]),
            )
        # SGLang-style window gauges over the last WINDOW_CYCLES cycles of this chunk
        w = min(m, WINDOW_CYCLES)
        wb = batch[-w:]
        wreq = int(wb.sum())
        wtok = float(c[len(c) - wreq :].sum()) + wreq
        wsec = float((verify[-w:] + draft[-w:] + extend[-w:] + other[-w:]).sum()) / 1000.0
        self._accept_length.set(wtok / wreq if wreq else 0.0)
        self._gen_throughput.set(wtok / wsec if wsec > 0 else 0.0)
