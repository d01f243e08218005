"""The controller between kopf's events and the reconciler: which events start a pass, that a pass reads the newest
body, back-off after a failed pass, the resync sweep, and the tuner's scheduler taking objects in only once their
pods are ready. The reconciler and the tuning loop are stand-ins; kopf's part is covered by the e2e suite."""

from __future__ import annotations

import asyncio
import math
import threading
from dataclasses import dataclass, field

import pytest

from specdecode_operator.config import OperatorConfig
from specdecode_operator.metrics import OperatorMetrics
from specdecode_operator.reconcile import controller as controller_module
from specdecode_operator.reconcile.controller import Controller
from specdecode_operator.tuning import scheduler as scheduler_module

NS = "team"


class FakeReconciler:
    def __init__(self, results=None):
        self.bodies: list[dict] = []
        self.results = list(results or [])
        self.gate: asyncio.Event | None = None

    async def reconcile(self, body, state, live):
        self.bodies.append(body)
        if self.gate is not None:
            await self.gate.wait()
        return self.results.pop(0) if self.results else "ok"


@dataclass
class FakeContext:
    config: OperatorConfig
    reconciler: FakeReconciler
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    stopping: threading.Event = field(default_factory=threading.Event)


def sdd(uid: str, rv: str, *, ready: int = 0, labels: dict | None = None) -> dict:
    return {
        "apiVersion": "specdecode.io/v1alpha1",
        "kind": "SpecDecodeDeployment",
        "metadata": {
            "name": f"o-{uid}",
            "namespace": NS,
            "uid": uid,
            "resourceVersion": rv,
            "generation": 1,
            "labels": labels or {},
        },
        "spec": {},
        "status": {"readyReplicas": ready} if ready else {},
    }


def child(owner_uid: str, rv: str, name: str = "o-cm") -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "namespace": NS,
            "resourceVersion": rv,
            "ownerReferences": [{"controller": True, "uid": owner_uid}],
        },
    }


def make(results=None, **config) -> tuple[Controller, FakeReconciler]:
    rec = FakeReconciler(results)
    values = dict(resync_seconds=3600.0, api_workers=2)
    values.update(config)
    ctl = Controller(FakeContext(OperatorConfig(**values), rec), {"configmaps": "children_configmaps"})
    return ctl, rec


async def settle(ctl: Controller) -> None:
    for _ in range(200):
        await asyncio.sleep(0.005)
        if not len(ctl.queue) and not ctl.queue.processing:
            return


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def test_a_pass_per_change_on_the_newest_body_and_none_for_our_own_status_echo():
    async def main():
        ctl, rec = make()
        rec.gate = asyncio.Event()
        ctl.observe("ADDED", sdd("a", "1"), {})
        await asyncio.sleep(0.01)  # the pass on rv 1 is running
        ctl.observe("MODIFIED", sdd("a", "2"), {})
        ctl.observe("MODIFIED", sdd("a", "3"), {})  # two changes during the pass: one more pass, on the newest
        rec.gate.set()
        await settle(ctl)
        assert [b["metadata"]["resourceVersion"] for b in rec.bodies] == ["1", "3"]
        ctl.objects["a"].state.own_status_rvs = ("4",)
        ctl.observe("MODIFIED", sdd("a", "4"), {})  # the echo of our status write
        await settle(ctl)
        assert len(rec.bodies) == 2
        assert ctl.objects["a"].body["metadata"]["resourceVersion"] == "4"  # still the newest body for later
        await ctl.stop()

    run(main())


def test_an_echo_that_arrives_before_the_writes_answer_starts_no_pass():
    """The watch may deliver the event of our write before the pass has read the write's answer: events seen
    during a pass are judged when it ends."""

    async def main():
        ctl, rec = make()
        rec.gate = asyncio.Event()
        ctl.observe("ADDED", sdd("a", "1"), {})
        await asyncio.sleep(0.01)
        ctl.observe("MODIFIED", sdd("a", "2"), {})  # our status write's echo, before its answer was read
        assert ctl.child_seen(child("a", "5")) is False  # our ConfigMap's echo, likewise
        state = ctl.objects["a"].state
        state.own_status_rvs = ("2",)
        state.applied[("v1", "ConfigMap", "o-cm")] = (0.0, child("a", "5"))
        rec.gate.set()
        await settle(ctl)
        assert len(rec.bodies) == 1
        ctl.observe("MODIFIED", sdd("a", "3"), {})  # a change: a pass
        await settle(ctl)
        assert len(rec.bodies) == 2
        await ctl.stop()

    run(main())


def test_a_child_event_queues_its_owner_unless_it_is_the_echo_of_our_write():
    async def main():
        ctl, rec = make()
        ctl.observe("ADDED", sdd("a", "1"), {})
        await settle(ctl)
        state = ctl.objects["a"].state
        key = ("v1", "ConfigMap", "o-cm")
        state.applied[key] = (0.0, child("a", "10"))
        assert ctl.child_seen(child("a", "10")) is True  # our own write: no pass, and the index now knows it
        assert key not in state.applied
        await settle(ctl)
        assert len(rec.bodies) == 1
        state.checked[key] = ("10", "hash")
        assert ctl.child_seen(child("a", "10")) is True  # a version already checked (a re-list)
        assert ctl.child_seen(child("a", "11")) is False  # someone else's change (or a Deployment becoming ready)
        await settle(ctl)
        assert len(rec.bodies) == 2
        assert ctl.child_seen(child("unknown", "12")) is False  # not an object of ours: nothing queued
        await settle(ctl)
        assert len(rec.bodies) == 2
        await ctl.stop()

    run(main())


def test_a_failed_pass_backs_off_and_is_retried(monkeypatch):
    async def main():
        ctl, rec = make(results=["error", "error", "ok"])
        ctl.queue.backoff_base = 0.01
        ctl.observe("ADDED", sdd("a", "1"), {})
        for _ in range(100):
            await asyncio.sleep(0.01)
            if len(rec.bodies) == 3:
                break
        assert len(rec.bodies) == 3 and ctl.queue.failures("a") == 0
        await ctl.stop()

    run(main())


def test_deleted_or_deselected_objects_are_forgotten():
    async def main():
        ctl, rec = make(label_selector="shard=a")
        ctl.observe("ADDED", sdd("a", "1", labels={"shard": "a"}), {})
        ctl.observe("ADDED", sdd("b", "1", labels={"shard": "b"}), {})
        await settle(ctl)
        assert set(ctl.objects) == {"a"} and len(rec.bodies) == 1
        ctl.observe("MODIFIED", sdd("a", "2", labels={"shard": "b"}), {})  # relabelled out of this shard
        assert ctl.objects == {}
        ctl.observe("ADDED", sdd("c", "1", labels={"shard": "a"}), {})
        await settle(ctl)
        ctl.observe("DELETED", sdd("c", "2", labels={"shard": "a"}), {})
        assert ctl.objects == {}
        await ctl.stop()

    run(main())


def test_a_deletion_during_a_pass_stops_its_child_writes_and_queues_nothing_more():
    """The reconciler applies no child for a state marked deleted (test_operator_e2e.py has the pass itself); a
    pass ending after the deletion, even a failed one (its status write found the object gone), is not retried."""

    async def main():
        ctl, rec = make(results=["error"])
        rec.gate = asyncio.Event()
        ctl.observe("ADDED", sdd("a", "1"), {})
        await asyncio.sleep(0.01)  # the pass is running
        state = ctl.objects["a"].state
        ctl.observe("DELETED", sdd("a", "2"), {})
        assert state.deleted and ctl.objects == {}
        rec.gate.set()
        await settle(ctl)
        assert ctl.queue.failures("a") == 0 and len(rec.bodies) == 1
        ctl.observe("ADDED", sdd("b", "1"), {})
        await settle(ctl)
        deleting = sdd("b", "2")
        deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        ctl.observe("MODIFIED", deleting, {})
        assert ctl.objects["b"].state.deleted  # being deleted: the garbage collector's part from here on
        await ctl.stop()

    run(main())


def test_the_sweep_queues_objects_whose_last_pass_is_older_than_the_period():
    async def main():
        import time

        ctl, rec = make(resync_seconds=0.2)
        ctl.observe("ADDED", sdd("a", "1"), {})
        ctl.observe("ADDED", sdd("b", "1"), {})
        while ctl.objects["b"].state.passed_at == -math.inf:
            await asyncio.sleep(0.005)
        ctl.objects["b"].state.passed_at = time.monotonic() + 3600  # as if it had just passed, all the time
        await asyncio.sleep(0.9)
        passes = [body["metadata"]["uid"] for body in rec.bodies]
        # one pass each from the event, then one per period for "a" (every sweep finds its pass a period old)
        assert passes.count("b") == 1, passes
        assert 3 <= passes.count("a") <= 5, passes
        await ctl.stop()

    run(main())


def test_the_sweep_waits_while_the_queue_holds_work_for_at_most_one_more_period():
    async def main():
        ctl, rec = make(resync_seconds=0.2)
        ctl.observe("ADDED", sdd("a", "1"), {})
        await settle(ctl)
        rec.gate = asyncio.Event()  # passes now hang: more new objects than workers leave a backlog
        for uid in "bcdefg":
            ctl.observe("ADDED", sdd(uid, "1"), {})
        await asyncio.sleep(0.3)
        assert len(ctl.queue) == 6 - ctl.workers
        assert "a" not in ctl.queue._dirty  # the sweep due at 0.2 s waits for the backlog
        await asyncio.sleep(0.35)
        assert "a" in ctl.queue._dirty  # but not longer than one more period
        rec.gate.set()
        await ctl.stop()

    run(main())


def test_the_sweep_waits_while_passes_are_in_flight_with_nothing_queued():
    """The end of a creation wave: every object taken by a worker, none waiting. The sweep still waits (for at most
    one more period), or it would re-pass the objects done first while the last ones are being created."""

    async def main():
        ctl, rec = make(resync_seconds=0.2)
        ctl.observe("ADDED", sdd("a", "1"), {})
        await settle(ctl)
        rec.gate = asyncio.Event()  # passes now hang
        for uid in "bc":  # fewer than the workers: nothing waits in the queue, two passes run
            ctl.observe("ADDED", sdd(uid, "1"), {})
        await asyncio.sleep(0.3)
        assert len(ctl.queue) == 0 and ctl.queue.processing == 2
        swept = lambda: "a" in ctl.queue._dirty or "a" in ctl.queue._processing  # noqa: E731 - idle workers take it
        assert not swept()  # the sweep due at 0.2 s waits for the passes in flight
        await asyncio.sleep(0.35)
        assert swept()  # but not longer than one more period
        rec.gate.set()
        await ctl.stop()

    run(main())


class FakeLoop:
    def __init__(self, context, body, state, reconcile):
        self.body, self.reconcile, self.ticks = body, reconcile, 0

    def see(self, body):
        self.body = body

    async def tick(self):
        self.ticks += 1
        await self.reconcile()  # e.g. Rollout's new step count: a pass soon
        return 0.05


def test_the_tuner_visits_an_object_only_once_its_pods_are_ready(monkeypatch):
    monkeypatch.setattr(scheduler_module, "TuningLoop", FakeLoop)

    async def main():
        ctl, rec = make()
        ctl.observe("ADDED", sdd("a", "1"), {})
        await asyncio.sleep(0.2)
        assert ctl.tuner.loops == {} and ctl.tuner.ticks == 0  # no pods: no tuning, no status write
        passes = len(rec.bodies)
        ctl.observe("MODIFIED", sdd("a", "2", ready=1), {})
        await asyncio.sleep(0.3)
        loop = ctl.tuner.loops["a"]
        assert 3 <= loop.ticks <= 8, loop.ticks  # every 0.05 s, one at a time
        assert loop.body["metadata"]["resourceVersion"] == "2"
        assert len(rec.bodies) > passes  # the tuner's reconcile queued passes
        ctl.observe("DELETED", sdd("a", "3", ready=1), {})
        ticks = loop.ticks
        await asyncio.sleep(0.15)
        assert ctl.tuner.loops == {} and loop.ticks <= ticks + 1
        await ctl.stop()

    run(main())


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setattr(controller_module, "GAUGE_PERIOD_SECONDS", 3600.0)


def test_the_kept_body_drops_managed_fields_and_shares_nothing_with_the_event():
    """Each event is decoded afresh: the body kept until the next one holds its own containers and one interned copy
    of the keys and values every object repeats (condition fields, defaulted spec keys), not the event's."""
    import json

    def event(name: str) -> dict:
        return json.loads(
            json.dumps(
                {
                    "apiVersion": "specdecode.io/v1alpha1",
                    "kind": "SpecDecodeDeployment",
                    "metadata": {
                        "name": name,
                        "namespace": NS,
                        "uid": f"uid-{name}",
                        "managedFields": [{"manager": "x"}],
                    },
                    "spec": {"replicas": 1, "speculative": {"numSteps": 3}},
                    "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Available"}]},
                }
            )
        )

    first, second = event("a"), event("b")
    a, b = controller_module.compact(first), controller_module.compact(second)
    assert "managedFields" not in a["metadata"] and "managedFields" in first["metadata"]
    assert a["spec"] == first["spec"] and a["status"] == first["status"]
    assert a["spec"] is not first["spec"] and a["status"]["conditions"][0] is not first["status"]["conditions"][0]
    cond_a, cond_b = a["status"]["conditions"][0], b["status"]["conditions"][0]
    assert first["status"]["conditions"][0]["reason"] is not second["status"]["conditions"][0]["reason"]
    assert cond_a["reason"] is cond_b["reason"]
    assert next(iter(a["spec"]["speculative"])) is next(iter(b["spec"]["speculative"]))
