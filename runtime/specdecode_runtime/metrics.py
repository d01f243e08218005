"""The exporter of the metrics contract (names in :mod:`specdecode_runtime.contract.metric_names`, documented in
docs/metrics.md), used by the patched runtime and the simulator.

SGLang's own speculative gauges are 40-iteration averages with no per-position or per-phase detail, which is too
coarse to fit a goodput model. These counters are cumulative, so any scraper can take exact deltas over any window,
and they are split by batch-size bucket because the best step count depends on batch size.

Position semantics: a request verified with ``s`` steps and ``c`` accepted drafts attempted positions
``1..min(c+1, s)`` and had ``1..c`` accepted. ``accepted_j / attempts_j`` is therefore the *conditional* acceptance
of position j given j-1 was accepted, whatever mix of step counts produced the data.

Multiprocess: prometheus-client picks its shared-file value class when ``PROMETHEUS_MULTIPROC_DIR`` is set before
it is imported, so the same ``SpecMetrics`` works inside SGLang's multi-process server; ``render_latest`` then
aggregates the files with ``MultiProcessCollector``.
"""

from __future__ import annotations

import os
from typing import Any, Iterable, Mapping, Sequence

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Summary, generate_latest

from .contract.metric_names import (
    CANDIDATE_STEPS,
    CAPTURE_BYTES,
    CAPTURE_RECORDS,
    CATCH_UP_SECONDS,
    CATCH_UP_TOKENS,
    COST_SECONDS,
    CYCLE_SECONDS,
    DEFAULT_BUCKETS,
    DRAFT_INFO,
    DRAFT_STEPS,
    DRAFT_SWAP_SECONDS,
    DRAFT_SWAPS,
    DRAFT_TP,
    METRICS,
    NCCL_LATENCY,
    NUM_STEPS,
    PHASES,
    PLAIN_GRAPHS,
    POSITION_ACCEPTED,
    POSITION_ATTEMPTS,
    PREFILL_BATCHES,
    PREFILL_PHASE,
    PREFILL_PHASE_SECONDS,
    PREFILL_REQUESTS,
    PREFILL_SECONDS,
    PREFILL_TOKENS,
    REQUESTS_VERIFIED,
    STEP_SWITCHES,
    SWITCH_KINDS,
    TOKENS_GENERATED,
    VERIFY_CYCLES,
    Metric,
    bucket_label,
    bucket_labels,
    position_counts,
)


class _BulkSummary(Summary):
    """A Summary that can add ``count`` observations with a known total at once.

    The simulator aggregates thousands of identical-cost cycles per batch; observing them one by one would cost more
    than simulating them. prometheus-client has no public bulk observe, so this uses the two value objects Summary
    itself increments in ``observe`` (tests/sim/test_spec_metrics.py fails loudly if that internal ever changes).
    """

    def observe_bulk(self, count: float, total: float) -> None:
        self._raise_if_not_observable()
        self._count.inc(count)
        self._sum.inc(total)


_TYPES = {"counter": Counter, "gauge": Gauge, "summary": _BulkSummary}


class SpecMetrics:
    """The contract's metrics on one registry.

    ``const_labels`` adds fixed labels to every series: the simulator passes ``{"simulated": "true"}`` so simulated
    numbers can never be mistaken for measurements. The default registry is prometheus-client's global one (the one
    SGLang's ``/metrics`` serves); the simulator gives each engine its own. ``capture=False`` leaves the traffic
    capture's series undeclared (the engine without a ``capture`` section): a pod that captures nothing exports
    nothing of them, not even their HELP lines.
    """

    def __init__(
        self,
        registry: CollectorRegistry | None = REGISTRY,
        buckets: Sequence[int] = DEFAULT_BUCKETS,
        const_labels: Mapping[str, str] | None = None,
        max_positions: int = 16,
        capture: bool = True,
    ) -> None:
        self.buckets = tuple(sorted(buckets))
        self.max_positions = max_positions
        self._const = dict(const_labels or {})
        self._registry = registry
        enabled = {"capture": capture}
        # Every row of the contract's table, declared from the row: a metric is its row and the call that counts it.
        self.series: dict[str, Any] = {
            name: self._declare(row)
            for name, row in METRICS.items()
            if row.feature is None or enabled.get(row.feature, False)
        }
        self._draft: tuple[str, str] | None = None
        self._last_steps: int | None = None
        self._children: dict[tuple, object] = {}
        self.registry = registry

    def _declare(self, row: Metric) -> Any:
        """One metric of the contract's table: its type, help and labels from the row, the constant labels after
        (a gauge reads the most recent value across processes)."""
        kwargs: dict[str, Any] = {"multiprocess_mode": "mostrecent"} if row.kind == "gauge" else {}
        kind = _TYPES[row.kind]
        return kind(row.name, row.help, (*row.labels, *self._const), registry=self._registry, **kwargs)

    def add(self, name: str, value: float, *labels: str) -> None:
        """One sample of a row of the table, by name and the row's label values in its order: a counter grows by
        ``value``, a gauge is set to it, a summary observes it. Nothing where the row's feature is off."""
        metric = self.series.get(name)
        if metric is None:
            return
        child = self._child(metric, *labels)
        kind = METRICS[name].kind
        if kind == "counter":
            child.inc(value)
        elif kind == "gauge":
            child.set(value)
        else:
            child.observe(value)

    # -- child cache: .labels() takes a lock and builds a tuple each call; the hot path avoids that ----------------
    def _child(self, metric: Any, *values: str) -> Any:
        key = (id(metric),) + values
        child = self._children.get(key)
        if child is None:
            child = metric.labels(*values, *self._const.values()) if (values or self._const) else metric
            self._children[key] = child
        return child

    def bucket(self, batch_size: int) -> str:
        return bucket_label(batch_size, self.buckets)

    def record_cycle(
        self,
        batch_size: int,
        steps: int,
        accepted_per_req: Sequence[int],
        phase_seconds: Mapping[str, float],
    ) -> None:
        """One decode cycle. ``accepted_per_req`` is SGLang's ``num_correct_drafts_per_req`` (bonus excluded), which
        it already copies to the CPU after verify, so recording adds no device sync. ``steps == 0`` is a plain
        decode step: it counts as a cycle with no positions attempted. A ``prefill`` entry of ``phase_seconds``
        (prefill work that ran inside the cycle, which the four phases exclude) goes to its own counter."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps}")
        if steps > self.max_positions:
            raise ValueError(f"steps must be <= max_positions ({self.max_positions}), got {steps}")
        unknown = set(phase_seconds) - set(PHASES) - {PREFILL_PHASE}
        if unknown:
            raise ValueError(f"unknown phase(s) {sorted(unknown)}; allowed: {[*PHASES, PREFILL_PHASE]}")
        self._count_switch(steps)
        attempts, accepted = position_counts(steps, accepted_per_req if steps else [0] * len(accepted_per_req))
        tokens = sum(int(c) + 1 for c in accepted_per_req) if steps else len(accepted_per_req)
        self.add_cycles(
            self.bucket(batch_size),
            cycles=1,
            requests=batch_size,
            draft_steps=steps,
            attempts=attempts,
            accepted=accepted,
            phase_seconds={p: float(phase_seconds.get(p, 0.0)) for p in PHASES},
            tokens=tokens,
        )
        prefill = float(phase_seconds.get(PREFILL_PHASE, 0.0))
        if prefill > 0.0:
            self._child(self.series[PREFILL_SECONDS], self.bucket(batch_size)).inc(prefill)

    def add_cycles(
        self,
        bucket: str,
        cycles: int,
        requests: int,
        draft_steps: int,
        attempts: Sequence[float],
        accepted: Sequence[float],
        phase_seconds: Mapping[str, float],
        tokens: float,
    ) -> None:
        """Many cycles of one bucket at once (the simulator's aggregated path). ``phase_seconds`` are totals over
        the cycles; each phase counts ``cycles`` observations."""
        if cycles <= 0:
            return
        self._child(self.series[VERIFY_CYCLES], bucket).inc(cycles)
        if requests:
            self._child(self.series[REQUESTS_VERIFIED], bucket).inc(requests)
        if draft_steps:
            self._child(self.series[DRAFT_STEPS], bucket).inc(draft_steps)
        for j, (a, c) in enumerate(zip(attempts, accepted), start=1):
            if a:
                self._child(self.series[POSITION_ATTEMPTS], bucket, str(j)).inc(a)
            if c:
                self._child(self.series[POSITION_ACCEPTED], bucket, str(j)).inc(c)
        for phase in PHASES:
            self._child(self.series[CYCLE_SECONDS], bucket, phase).observe_bulk(
                cycles, float(phase_seconds.get(phase, 0.0))
            )
        if tokens:
            self._child(self.series[TOKENS_GENERATED]).inc(tokens)

    def _count_switch(self, steps: int) -> None:
        """A tier change between consecutive served cycles (off, on or change)."""
        last, self._last_steps = self._last_steps, steps
        if last is None or last == steps:
            return
        off, on, change = SWITCH_KINDS
        kind = off if steps == 0 else on if last == 0 else change
        self._child(self.series[STEP_SWITCHES], kind).inc()

    def add_switches(self, off: int, on: int, change: int, last_steps: int) -> None:
        """Many cycles' tier changes at once (the simulator's aggregated path); ``last_steps``: the tier of the last
        of those cycles, from which the next recorded cycle's change is counted."""
        for kind, n in zip(SWITCH_KINDS, (off, on, change)):
            if n:
                self._child(self.series[STEP_SWITCHES], kind).inc(n)
        self._last_steps = int(last_steps)

    @property
    def last_steps(self) -> int | None:
        return self._last_steps

    def record_catch_up(self, tokens: int, seconds: float) -> None:
        """One catch-up extend after target-only cycles."""
        self._child(self.series[CATCH_UP_TOKENS]).inc(int(tokens))
        self._child(self.series[CATCH_UP_SECONDS]).inc(float(seconds))

    def record_prefill_phase(self, phase: str, clock: str, seconds: float) -> None:
        """One part of a prefill batch (:mod:`.sglang_patch.prefill_probe`)."""
        self._child(self.series[PREFILL_PHASE_SECONDS], phase, clock).inc(float(seconds))

    def record_prefill_batch(self, requests: int, tokens: int) -> None:
        self._child(self.series[PREFILL_BATCHES]).inc()
        self._child(self.series[PREFILL_REQUESTS]).inc(int(requests))
        self._child(self.series[PREFILL_TOKENS]).inc(int(tokens))

    def set_draft(self, source: str, digest: str) -> None:
        """The draft served now: its info series 1, the one served before 0 (under ``PROMETHEUS_MULTIPROC_DIR`` a
        series cannot be removed from the shared files, so an earlier draft's stays, at 0)."""
        new = (str(source), str(digest))
        if self._draft is not None and self._draft != new:
            self._child(self.series[DRAFT_INFO], *self._draft).set(0)
        self._draft = new
        self._child(self.series[DRAFT_INFO], *new).set(1)

    def record_draft_swap(self, result: str, seconds: float) -> None:
        """One draft swap's outcome (``ok`` or ``refused``) and how long it took."""
        self._child(self.series[DRAFT_SWAPS], result).inc()
        self._child(self.series[DRAFT_SWAP_SECONDS], result).observe(float(seconds))

    def record_capture(self, result: str, count: int = 1) -> None:
        """Finished requests the traffic capture wrote, dropped or sampled out (the capture's writer thread and the
        scheduler thread both call it; prometheus-client's values take a lock)."""
        if count:
            self.add(CAPTURE_RECORDS, int(count), result)

    def set_capture_bytes(self, nbytes: int) -> None:
        self.add(CAPTURE_BYTES, int(nbytes))

    def set_plain_graphs(self, seconds: float, nbytes: int) -> None:
        self._child(self.series[PLAIN_GRAPHS], "seconds").set(float(seconds))
        self._child(self.series[PLAIN_GRAPHS], "bytes").set(int(nbytes))

    def set_steps(self, steps_for_batch) -> None:
        """Publish the active step count of every bucket; ``steps_for_batch(batch) -> int`` is evaluated at each
        bucket's lower bound (a step table's lookup)."""
        for lo in self.buckets:
            self._child(self.series[NUM_STEPS], self.bucket(lo)).set(int(steps_for_batch(lo)))

    def set_candidates(self, candidates: Iterable[int]) -> None:
        for steps in sorted(set(int(c) for c in candidates)):
            self._child(self.series[CANDIDATE_STEPS], str(steps)).set(1)

    def set_draft_tp(self, tp: int) -> None:
        self._child(self.series[DRAFT_TP]).set(int(tp))

    def set_nccl_latency(self, op: str, nbytes: int, seconds: float) -> None:
        self._child(self.series[NCCL_LATENCY], op, str(int(nbytes))).set(float(seconds))

    def set_cost(self, stage: str, steps: int, bucket: str, batch: int, seconds: float) -> None:
        self._child(self.series[COST_SECONDS], stage, str(int(steps)), bucket, str(int(batch))).set(float(seconds))

    def bucket_names(self) -> list[str]:
        return bucket_labels(self.buckets)


def render_latest(registry: CollectorRegistry | None = None) -> bytes:
    """Exposition text; under ``PROMETHEUS_MULTIPROC_DIR`` it merges every process's files (the documented
    prometheus-client recipe), otherwise it renders ``registry`` (default: the global one)."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR") and registry in (None, REGISTRY):
        from prometheus_client import multiprocess

        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)
        return generate_latest(merged)
    return generate_latest(registry or REGISTRY)
