"""The in-place draft rollout against fake pods: canary, promote, roll back, refusal, restart, supersede; status.draft,
the DraftRollout condition and Events."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml

from specdecode_operator.api.models import DraftStatus
from specdecode_operator.api.validate import parse
from specdecode_operator.object_state import ObjectState
from specdecode_operator.tuner.snapshot import BucketCounters, PodSnapshot
from specdecode_operator.tuning.draft_rollout import Answer, DraftRollouts
from specdecode_operator.tuning.pods import Target

ROOT = Path(__file__).resolve().parents[2]
OLD, GOOD, BAD, MISSING = "/models/draft-old", "/models/draft-good", "/models/draft-bad", "/models/nowhere"
RATE = {OLD: 0.7, GOOD: 0.75, BAD: 0.1}


class Pods:
    def __init__(self, n: int):
        self.serving = {f"pod-{i}": OLD for i in range(n)}
        self.att = {p: 0.0 for p in self.serving}
        self.acc = {p: 0.0 for p in self.serving}
        self.posts: list[tuple[str, str]] = []

    def targets(self):
        return [Target(p, "ip", None, f"http://{p}") for p in sorted(self.serving)]

    async def get(self, url):
        pod = url.removeprefix("http://")
        return Answer(200, {"draft": {"source": self.serving[pod], "digest": f"sha256:{self.serving[pod]}"}})

    async def post(self, url, source):
        pod = url.removeprefix("http://")
        self.posts.append((pod, source))
        if source not in RATE:
            return Answer(422, {"error": f"{source}: no config.json", "cause": "not_found"})
        self.serving[pod] = source
        return Answer(200, {"draft": {"source": source, "digest": f"sha256:{source}"}})

    def traffic(self):
        for p, src in self.serving.items():
            self.att[p] += 1000
            self.acc[p] += 1000 * RATE[src]

    def snaps(self):
        return [
            PodSnapshot(p, 0.0, buckets={"1-7": BucketCounters(attempts={1: self.att[p]}, accepted={1: self.acc[p]})})
            for p in sorted(self.serving)
        ]


def _nulls(value, path: str = "draft") -> list[str]:
    """Where ``value`` holds a null: the CRD types these fields string / object, and the API server refuses null."""
    if value is None:
        return [path]
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in _nulls(v, f"{path}.{k}")]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in _nulls(v, f"{path}[{i}]")]
    return []


class Harness:
    def __init__(self, n: int, intervals: int = 2):
        self.pods = Pods(n)
        self.state = ObjectState()
        self.events: list[tuple[str, str, str]] = []
        self.writes: list[dict] = []
        self.reconciles = 0
        self.intervals = intervals
        self.body = {"metadata": {"name": "x", "namespace": "ns"}, "status": {}}
        self.ro = DraftRollouts(self.state, self.pods, self._write, self._event, self._changed)

    async def _write(self, d):
        DraftStatus.model_validate(d)  # what is written fits the CRD's model
        assert not _nulls(d), f"status.draft with a null the API server refuses: {d}"
        self.writes.append(d)

    def _event(self, t, r, m):
        self.events.append((t, r, m))

    async def _changed(self):
        self.reconciles += 1

    def sdd(self, model):
        body = yaml.safe_load((ROOT / "examples" / "pcie8-glm5-eagle3.yaml").read_text())
        body["spec"]["draft"].update(model=model, rollout={"intervals": self.intervals, "minAcceptRatio": 0.97})
        body["spec"]["replicas"] = len(self.pods.serving)
        return parse(body)

    def tick(self, model):
        self.pods.traffic()
        asyncio.run(self.ro.step(self.sdd(model), self.body, self.pods.targets(), self.pods.snaps()))
        return self.state.draft_status or {}

    def run(self, model, ticks):
        for _ in range(ticks):
            st = self.tick(model)
        return st

    def reasons(self):
        return [r for _, r, _ in self.events]


def test_better_draft_is_canaried_then_promoted_on_every_replica():
    h = Harness(3)
    assert h.tick(OLD)["phase"] == "Serving"
    st = h.tick(GOOD)
    assert st["phase"] == "Canary" and st["candidate"]["source"] == GOOD
    assert list(h.pods.serving.values()) == [GOOD, OLD, OLD]  # one replica only
    st = h.run(GOOD, 2)
    assert st["phase"] == "Serving" and st["serving"] == {"source": GOOD, "digest": f"sha256:{GOOD}"}
    assert "candidate" not in st
    assert set(h.pods.serving.values()) == {GOOD}
    assert h.reasons()[:2] == ["DraftCanaryStarted", "DraftPromoting"] and "DraftPromoted" in h.reasons()
    assert [e["phase"] for e in st["history"]][-3:] == ["Canary", "Promoting", "Serving"]
    assert h.state.draft_condition is None


def test_worse_draft_is_rolled_back_within_the_interval_count():
    h = Harness(2)
    h.tick(OLD)
    h.tick(BAD)
    st = h.run(BAD, 2)
    assert st["phase"] == "RolledBack" and st["serving"]["source"] == OLD and st["candidate"]["source"] == BAD
    assert set(h.pods.serving.values()) == {OLD}
    assert ("Warning", "DraftRolledBack") in [(t, r) for t, r, _ in h.events]
    # decided: no new canary until spec changes again
    posts = len(h.pods.posts)
    h.run(BAD, 3)
    assert len(h.pods.posts) == posts


def test_single_replica_alternates_and_rolls_back():
    h = Harness(1)
    h.tick(OLD)
    h.tick(BAD)
    seen = set()
    for _ in range(6):
        st = h.tick(BAD)
        seen.add(h.pods.serving["pod-0"])
        if st["phase"] != "Canary":
            break
    assert seen == {OLD, BAD}  # alternated
    assert st["phase"] == "RolledBack" and h.pods.serving["pod-0"] == OLD


def test_single_replica_promotes_a_better_draft():
    h = Harness(1)
    h.tick(OLD)
    h.tick(GOOD)
    st = h.run(GOOD, 5)
    assert st["phase"] == "Serving" and st["serving"]["source"] == GOOD and h.pods.serving["pod-0"] == GOOD


def test_refused_candidate_fails_with_the_pods_message_and_a_condition():
    h = Harness(2)
    h.tick(OLD)
    st = h.tick(MISSING)
    assert st["phase"] == "Failed" and "no config.json" in st["message"] and "not_found" in st["message"]
    assert st["serving"]["source"] == OLD and set(h.pods.serving.values()) == {OLD}
    cond = h.state.draft_condition
    assert cond and cond["type"] == "DraftRollout" and cond["reason"] == "DraftRefused"
    assert "no config.json" in cond["message"]
    t, r, m = h.events[-1]
    assert (t, r) == ("Warning", "DraftRefused") and "no config.json" in m
    assert h.reconciles >= 1  # the reconciler reports the condition
    # the next change clears it
    h.tick(GOOD)
    assert h.state.draft_condition is None


def test_canary_pod_that_restarts_restarts_the_canary():
    h = Harness(2)
    h.tick(OLD)
    h.tick(GOOD)
    h.pods.serving["pod-0"] = OLD  # restarted: loaded the config's draft
    st = h.tick(GOOD)
    assert "DraftCanaryRestarted" in h.reasons() and st["phase"] == "Canary"
    assert h.pods.serving["pod-0"] == GOOD
    st = h.run(GOOD, 3)
    assert st["phase"] == "Serving" and st["serving"]["source"] == GOOD


def test_newer_change_supersedes_the_canary():
    h = Harness(2)
    h.tick(OLD)
    h.tick(BAD)
    st = h.tick(GOOD)
    # the older canary was rolled back (OLD posted back to its pod) before the new one started
    assert ("pod-0", OLD) in h.pods.posts
    assert h.pods.posts.index(("pod-0", OLD)) < h.pods.posts.index(("pod-0", GOOD))
    assert st["phase"] == "Canary" and st["candidate"]["source"] == GOOD
    assert any(e["phase"] == "RolledBack" and "superseded" in e["message"] for e in st["history"])


def test_hub_draft_falls_back_to_a_restart():
    h = Harness(2)
    h.tick(OLD)
    st = h.tick("hf://org/draft")
    assert st["phase"] == "Serving" and st["serving"]["source"] == "hf://org/draft"
    assert "restarting the pods" in st["message"] and "init container" in st["message"]
    assert h.pods.posts == []


def test_rollout_settings_are_validated():
    from specdecode_operator.api.validate import validate_object

    body = yaml.safe_load((ROOT / "examples" / "pcie8-glm5-eagle3.yaml").read_text())
    body["spec"]["draft"]["rollout"] = {"intervals": 0, "minAcceptRatio": 2}
    paths = {p.path for p in validate_object(body)}
    assert {"spec.draft.rollout.intervals", "spec.draft.rollout.minAcceptRatio"} <= paths
    body["spec"]["draft"]["rollout"] = {"intervals": 2}
    body["spec"]["runtime"] = {**body["spec"].get("runtime", {}), "launcher": "sglang"}
    assert any("draft.rollout needs runtime.launcher specdecode" in p.message for p in validate_object(body))


def test_a_deployment_without_pods_records_its_draft_without_a_digest():
    """No pod answers yet (scaled to zero, or before the first pod is up): the serving draft is recorded without a
    digest, never with a null one (the API server refused that status patch)."""
    h = Harness(0)
    st = h.tick(OLD)
    assert st["serving"] == {"source": OLD} and h.writes
