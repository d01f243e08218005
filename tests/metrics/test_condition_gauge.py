"""``specdecode_deployment_condition``: one series per deployment, condition type and status, 1 for the current
status; replaced when the conditions change, removed with the deployment (deleted, or relabelled out of the
operator's selection, also while its last pass is still running), and never removed for a new object that took the
name. The real reconciler's part (it sets the gauge where it writes status) runs in tests/e2e/test_condition_metrics.py."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import dataclass, field

from prometheus_client import generate_latest

from specdecode_operator.config import OperatorConfig
from specdecode_operator.metrics import OperatorMetrics
from specdecode_operator.reconcile.controller import Controller

NS = "team"
GAUGE = "specdecode_deployment_condition"


def cond(ctype: str, status: str) -> dict:
    return {"type": ctype, "status": status, "reason": "R", "message": ""}


def series(metrics: OperatorMetrics) -> dict[tuple[str, str, str, str], float]:
    out = {}
    for family in metrics.registry.collect():
        if family.name == GAUGE:
            for s in family.samples:
                out[(s.labels["namespace"], s.labels["name"], s.labels["type"], s.labels["status"])] = s.value
    return out


def current(metrics: OperatorMetrics) -> dict[tuple[str, str, str], str]:
    """(namespace, name, type) -> the status whose series is 1; checks that exactly one is."""
    out: dict = {}
    for (ns, name, ctype, status), value in series(metrics).items():
        assert value in (0.0, 1.0)
        if value == 1.0:
            assert (ns, name, ctype) not in out, "two statuses of one condition at 1"
            out[(ns, name, ctype)] = status
    per_type: dict = {}
    for ns, name, ctype, _ in series(metrics):
        per_type[(ns, name, ctype)] = per_type.get((ns, name, ctype), 0) + 1
    assert set(per_type.values()) <= {3} and set(per_type) == set(out), "each type: True, False and Unknown"
    return out


def test_one_series_per_status_and_the_current_one_at_1():
    m = OperatorMetrics()
    m.set_conditions("u1", NS, "llama", [cond("Ready", "False"), cond("Degraded", "True"), cond("Stalled", "Unknown")])
    assert current(m) == {
        (NS, "llama", "Ready"): "False",
        (NS, "llama", "Degraded"): "True",
        (NS, "llama", "Stalled"): "Unknown",
    }
    assert len(series(m)) == 9
    text = generate_latest(m.registry).decode()
    assert 'specdecode_deployment_condition{name="llama",namespace="team",status="True",type="Degraded"} 1.0' in text
    assert 'specdecode_deployment_condition{name="llama",namespace="team",status="False",type="Degraded"} 0.0' in text
    # a flip keeps the series and moves the 1; a type no longer reported goes
    m.set_conditions("u1", NS, "llama", [cond("Ready", "True"), cond("Degraded", "False")])
    assert current(m) == {(NS, "llama", "Ready"): "True", (NS, "llama", "Degraded"): "False"}
    assert len(series(m)) == 6


def test_forget_removes_only_that_objects_series():
    m = OperatorMetrics()
    m.set_conditions("u1", NS, "llama", [cond("Ready", "True")])
    m.set_conditions("u2", NS, "qwen", [cond("Ready", "False")])
    m.forget_deployment("u1", NS, "llama")
    assert current(m) == {(NS, "qwen", "Ready"): "False"}
    # a new object of the same name (another uid) keeps its series when the old one's deletion is seen late
    m.set_conditions("u3", NS, "qwen", [cond("Ready", "True")])
    m.forget_deployment("u2", NS, "qwen")
    assert current(m) == {(NS, "qwen", "Ready"): "True"}
    m.forget_deployment("u3", NS, "qwen")
    assert series(m) == {}


# ---- through the controller: what removes the series, with a reconciler that sets them as the real one does ----
class SettingReconciler:
    """Sets the object's conditions at the end of its pass, as ``Reconciler.reconcile`` does after its status write
    (``gate``: hold the pass before that)."""

    def __init__(self, metrics: OperatorMetrics):
        self.metrics = metrics
        self.gate: asyncio.Event | None = None

    async def reconcile(self, body, state, live):
        if self.gate is not None:
            await self.gate.wait()
        md = body["metadata"]
        if not state.deleted:
            self.metrics.set_conditions(md["uid"], md["namespace"], md["name"], [cond("Ready", "True")])
        return "ok"


@dataclass
class Context:
    config: OperatorConfig
    metrics: OperatorMetrics
    reconciler: SettingReconciler
    stopping: threading.Event = field(default_factory=threading.Event)


def sdd(uid: str, rv: str, name: str, labels: dict) -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {"name": name, "namespace": NS, "uid": uid, "resourceVersion": rv, "labels": labels},
        "spec": {},
    }


async def settle(ctl: Controller) -> None:
    for _ in range(400):
        await asyncio.sleep(0.005)
        if not len(ctl.queue) and not ctl.queue.processing:
            return


def test_deleted_deselected_and_mid_pass_objects_leave_no_series():
    async def main():
        metrics = OperatorMetrics()
        rec = SettingReconciler(metrics)
        ctl = Controller(
            Context(OperatorConfig(resync_seconds=3600.0, api_workers=2, label_selector="shard=a"), metrics, rec),
            {},
        )
        a = {"shard": "a"}
        ctl.observe("ADDED", sdd("u1", "1", "one", a), {})
        ctl.observe("ADDED", sdd("u2", "1", "two", a), {})
        await settle(ctl)
        assert set(current(metrics)) == {(NS, "one", "Ready"), (NS, "two", "Ready")}
        ctl.observe("DELETED", sdd("u1", "2", "one", a), {})
        ctl.observe("MODIFIED", sdd("u2", "2", "two", {"shard": "b"}), {})  # relabelled out of this shard
        assert series(metrics) == {}

        # relabelled out while its pass runs: the pass sets the conditions after the object was forgotten
        rec.gate = asyncio.Event()
        ctl.observe("ADDED", sdd("u3", "1", "three", a), {})
        await asyncio.sleep(0.02)
        ctl.observe("MODIFIED", sdd("u3", "2", "three", {"shard": "b"}), {})
        rec.gate.set()
        await settle(ctl)
        assert series(metrics) == {}

        # deleted while its pass runs
        rec.gate = asyncio.Event()
        ctl.observe("ADDED", sdd("u4", "1", "four", a), {})
        await asyncio.sleep(0.02)
        ctl.observe("DELETED", sdd("u4", "2", "four", a), {})
        rec.gate.set()
        await settle(ctl)
        assert series(metrics) == {}
        await ctl.stop()

    asyncio.run(asyncio.wait_for(main(), 10))
