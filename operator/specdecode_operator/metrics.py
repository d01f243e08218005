"""Operator metrics with prometheus-client, in a registry of their own (tests run several operators in one process);
endpoints.py serves them on /metrics.

``specdecode_deployment_condition{namespace,name,type,status}`` is each SpecDecodeDeployment's conditions as the
operator last wrote (or found unchanged) in its status, in kube-state-metrics' shape: per condition type one series
for each of ``True``, ``False`` and ``Unknown``, 1 for the current status and 0 for the other two. So an alert on
``{type="Ready",status="False"} == 1`` names the deployment in its labels, a flip does not end one series and start
another, and the series count is bounded: deployments x condition types x 3. A deployment's series go when it is
deleted or leaves the operator's selection, so no stale series is left behind."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

STATUSES = ("True", "False", "Unknown")


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.deployment_condition = Gauge(
            "specdecode_deployment_condition",
            "Conditions of each SpecDecodeDeployment as its status holds them: 1 for the current status of the "
            "condition type, 0 for the other two (True, False, Unknown).",
            ["namespace", "name", "type", "status"],
            registry=self.registry,
        )
        # (namespace, name) -> (uid, condition types exported): which series to remove, and for which object
        self._conditions: dict[tuple[str, str], tuple[str, frozenset[str]]] = {}
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

    def set_conditions(self, uid: str, namespace: str, name: str, conditions: list[dict]) -> None:
        """The conditions of one deployment (its status' ``conditions`` list), replacing what it had before."""
        current = {c["type"]: c.get("status") for c in conditions}
        _, before = self._conditions.get((namespace, name), (uid, frozenset()))
        for ctype in before - current.keys():
            self._remove(namespace, name, ctype)
        for ctype, status in current.items():
            for value in STATUSES:
                self.deployment_condition.labels(namespace, name, ctype, value).set(1.0 if value == status else 0.0)
        self._conditions[(namespace, name)] = (uid, frozenset(current))

    def forget_deployment(self, uid: str, namespace: str, name: str) -> None:
        """Remove the deployment's condition series (deleted, or no longer selected). ``uid``: only that object's,
        not those of a new object of the same name."""
        held = self._conditions.get((namespace, name))
        if held is None or held[0] != uid:
            return
        del self._conditions[(namespace, name)]
        for ctype in held[1]:
            self._remove(namespace, name, ctype)

    def _remove(self, namespace: str, name: str, ctype: str) -> None:
        for value in STATUSES:  # every one of them was set (``set_conditions``)
            self.deployment_condition.remove(namespace, name, ctype, value)

    def value(self, name: str, **labels: str) -> float:
        """Read one sample (tests and benchmarks)."""
        return self.registry.get_sample_value(name, labels) or 0.0
