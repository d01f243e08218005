"""Operator metrics with prometheus-client, in a registry of their own (tests run several operators in one process);
endpoints.py serves them on /metrics."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.reconciles = Counter(
            "specdecode_operator_reconciles", "Reconciliations by result.", ["result"], registry=self.registry
        )
        self.reconcile_seconds = Histogram(
            "specdecode_operator_reconcile_duration_seconds",
            "Duration of one reconciliation.",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
            registry=self.registry,
        )
        self.managed_objects = Gauge(
            "specdecode_operator_managed_objects",
            "Child objects owned by the operator, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self.api_requests = Counter(
            "specdecode_operator_api_requests", "Kubernetes API requests by verb.", ["verb"], registry=self.registry
        )
        self.api_errors = Counter(
            "specdecode_operator_api_errors",
            "Failed Kubernetes API requests by HTTP code (0: timeout/connection).",
            ["code", "verb"],
            registry=self.registry,
        )
        self.child_writes = Counter(
            "specdecode_operator_child_writes",
            "Writes to child objects by kind and action.",
            ["kind", "action"],
            registry=self.registry,
        )
        self.tuner_decisions = Counter(
            "specdecode_tuner_decisions",
            "Tuner decisions per bucket and interval, by action (hold, wait, switch, "
            "explore, rollback, return, recommend in mode Off, rollout, skipped without usable metrics).",
            ["action"],
            registry=self.registry,
        )
        self.tuner_rollbacks = Counter(
            "specdecode_tuner_rollbacks",
            "Step changes undone because measured goodput fell after them.",
            registry=self.registry,
        )
        self.tuner_pushes = Counter(
            "specdecode_tuner_table_pushes",
            "Step-table PUTs to pods by result (ok, unauthorized, error).",
            ["result"],
            registry=self.registry,
        )

    def value(self, name: str, **labels: str) -> float:
        """Read one sample (tests and benchmarks)."""
        return self.registry.get_sample_value(name, labels) or 0.0
