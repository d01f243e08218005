"""A draft that learns from its traffic, without a cluster: the pure decisions (tuner/adaptation.py: when an attempt
is due, what a training Job's status and its pod's termination message say), the contract's bounded summary, and
the loop's steps (tuning/adaptation.py) against a fake API client: Capturing -> Training -> Canary -> Promoted, a
worse candidate Refused, a failed or timed-out Job Failed, each with its Event and condition; the adapted draft
wanted and rendered from status, never from spec (render/draft_source.py)."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from specdecode_operator.api.validate import parse
from specdecode_operator.object_state import ObjectState
from specdecode_operator.render import draft_source
from specdecode_operator.tuner import adaptation as decide
from specdecode_operator.tuning import hooks
from specdecode_operator.tuning.adaptation import Adaptations
from specdecode_runtime.contract import adaptation as contract

DRAFT = "/models/eagle3"
BASE = {
    "apiVersion": "specdecode.io/v1alpha1",
    "kind": "SpecDecodeDeployment",
    "metadata": {"name": "llama", "namespace": "llm", "uid": "u1"},
    "spec": {
        "replicas": 2,
        "target": {"model": "/models/llama", "tensorParallelSize": 1},
        "draft": {
            "model": DRAFT,
            "tensorParallelSize": 1,
            "adaptation": {
                "enabled": True,
                "capture": {"claimName": "traffic"},
                "training": {"intervalSeconds": 600, "maxSeconds": 600, "minRatio": 1.05},
            },
        },
    },
}
VERDICT = {
    "better": True,
    "ratio": 1.3,
    "heldout_records": 12,
    "serving": {"accept_length": 1.0, "conditional_acceptance": [0.5, 0.4]},
    "candidate": {"accept_length": 1.6, "conditional_acceptance": [0.7, 0.6], "digest": "sha256:abc"},
}


def gate_pod(code: int | None, message: str = "", train_code: int | None = 0) -> dict:
    statuses = {"initContainerStatuses": [{"name": "train", "state": {"terminated": {"exitCode": train_code}}}]}
    if train_code is None:
        statuses = {}
    if code is not None:
        statuses["containerStatuses"] = [
            {"name": "gate", "state": {"terminated": {"exitCode": code, "message": message}}}
        ]
    return {"status": statuses}


def summary(**over) -> str:
    return contract.encode(contract.summary({**VERDICT, **over}))


# ---------------------------------------------------------------------------------------------------- decisions
def test_due_after_the_interval_from_the_wait_start():
    assert decide.due(100.0, None, 600)
    assert not decide.due(699.0, 100.0, 600)
    assert decide.due(700.0, 100.0, 600)


def test_a_better_verdict_needs_exit_0_and_the_summary():
    out = decide.job_outcome({}, [gate_pod(0, summary())], 1.05)
    assert out.kind == "better" and out.result["ratio"] == 1.3 and out.result["candidateAcceptance"] == [0.7, 0.6]
    # exit 0 without a readable summary, or a summary that says not better: never "better"
    assert decide.job_outcome({}, [gate_pod(0, "log tail")], 1.05).kind == "failed"
    assert decide.job_outcome({}, [gate_pod(0, summary(better=False))], 1.05).kind != "better"


def test_not_better_bad_input_training_failure_and_the_deadline():
    assert decide.job_outcome({}, [gate_pod(3, summary(better=False, ratio=0.8))], 1.05).kind == "not_better"
    bad = decide.job_outcome({}, [gate_pod(2, "error: --capture: no held-out records")], 1.05)
    assert bad.kind == "failed" and "no held-out records" in bad.message
    assert decide.job_outcome({}, [gate_pod(None, train_code=1)], 1.05).kind == "failed"
    pod = gate_pod(None)
    pod["status"]["initContainerStatuses"][0]["state"]["terminated"] = {"exitCode": 2, "message": "no records"}
    assert decide.job_outcome({}, [pod], 1.05).kind == "failed"
    deadline = {"status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]}}
    out = decide.job_outcome(deadline, [], 1.05)
    assert out.kind == "failed" and "maxSeconds" in out.message
    assert decide.job_outcome({"status": {"active": 1}}, [gate_pod(None, train_code=None)], 1.05).kind == "running"


def test_the_summary_is_bounded_and_decoded_defensively():
    huge = {**VERDICT, "serving": {"accept_length": 1.0, "conditional_acceptance": [0.1] * 10_000}}
    text = contract.encode(contract.summary(huge))
    assert len(text.encode()) <= contract.SUMMARY_LIMIT
    assert contract.decode(text)["better"] is True
    assert contract.decode("x" * 5000) is None and contract.decode('{"better": "yes"}') is None
    assert contract.decode(json.dumps({"better": False, "ratio": "NaN", "evil": 1})) == {"better": False}


# ---------------------------------------------------------------------------------------------------- the loop
class FakeClient:
    def __init__(self):
        self.jobs: dict[str, dict] = {}
        self.pods: dict[str, list[dict]] = {}
        self.applied: list[dict] = []

    async def apply(self, obj, plural):
        assert plural == "jobs"
        self.applied.append(obj)
        self.jobs[obj["metadata"]["name"]] = copy.deepcopy(obj)
        return obj

    async def get(self, api_version, plural, namespace, name):
        assert (api_version, plural, namespace) == ("batch/v1", "jobs", "llm")
        return self.jobs.get(name)

    async def request(self, method, path, *, query=None, verb=None, **kw):
        assert (method, verb, path) == ("GET", "list", "/api/v1/namespaces/llm/pods")
        name = dict(query)["labelSelector"].split("=", 1)[1]
        return {"items": self.pods.get(name, [])}


class Bed:
    def __init__(self, body: dict | None = None):
        self.body = copy.deepcopy(body or BASE)
        self.state = ObjectState()
        self.client = FakeClient()
        self.now = 1_000_000.0
        self.writes: list[dict] = []
        self.events: list[tuple[str, str, str]] = []
        self.changes = 0

        async def write(status):
            self.writes.append(copy.deepcopy(status))

        async def changed():
            self.changes += 1

        self.loop = Adaptations(
            self.state, self.client, write, lambda *e: self.events.append(e), changed, "img", lambda: self.now
        )
        self.serve(DRAFT)

    def serve(self, source: str, phase: str = "Serving", candidate: str | None = None) -> None:
        self.state.draft_status = {"serving": {"source": source}, "phase": phase, "message": "m"}
        if candidate:
            self.state.draft_status["candidate"] = {"source": candidate}

    def step(self):
        asyncio.run(self.loop.step(parse(self.body), self.body))
        return self.state.adaptation_status

    def status(self) -> dict:
        return hooks.newest_draft_status(self.body, self.state)


def train_once(bed: Bed, code: int, message: str) -> dict:
    assert bed.step()["phase"] == "Capturing"
    bed.now += 599
    assert bed.step()["phase"] == "Capturing" and not bed.client.applied  # not due yet
    bed.now += 1
    st = bed.step()
    assert st["phase"] == "Training" and st["attempt"] == 1 and st["job"] == "llama-adapt-1"
    assert bed.step() == st  # running: no write
    bed.client.pods["llama-adapt-1"] = [gate_pod(code, message)]
    return bed.step()


def test_a_better_candidate_is_canaried_then_promoted_without_writing_spec():
    bed = Bed()
    spec_before = copy.deepcopy(bed.body["spec"])
    st = train_once(bed, 0, summary())
    cand = contract.attempt_dir("llama", 1)
    assert st["phase"] == "Canary" and st["candidate"] == {"source": cand, "base": DRAFT, "attempt": 1}
    assert st["lastResult"]["ratio"] == 1.3
    sdd = parse(bed.body)
    assert draft_source.wanted_model(sdd, bed.status()) == cand  # the draft rollout canaries it
    assert draft_source.served_model(sdd, bed.status()) == DRAFT  # the pods keep the served draft meanwhile
    bed.serve(DRAFT, "Canary", candidate=cand)
    assert bed.step()["phase"] == "Canary"
    bed.serve(cand)  # the canary promoted it
    st = bed.step()
    assert st["phase"] == "Promoted" and st["promoted"]["source"] == cand and "candidate" not in st
    assert draft_source.served_model(parse(bed.body), bed.status()) == cand  # new and restarted pods load it
    assert [r for _, r, _ in bed.events] == ["DraftTrainingStarted", "DraftCandidateGated", "DraftAdapted"]
    assert bed.body["spec"] == spec_before and bed.state.adaptation_condition is None
    # the next attempt trains from the adapted draft, an interval later
    bed.now += 600
    st = bed.step()
    assert st["attempt"] == 2
    cmd = bed.client.applied[-1]["spec"]["template"]["spec"]["initContainers"][0]["command"]
    assert cmd[cmd.index("--init-draft") + 1] == cand
    # a new spec.draft.model supersedes the adapted draft
    bed.body["spec"]["draft"]["model"] = "/models/eagle3-v2"
    assert draft_source.wanted_model(parse(bed.body), bed.status()) == "/models/eagle3-v2"


def test_a_worse_candidate_is_refused_at_the_gate_and_never_wanted():
    bed = Bed()
    st = train_once(bed, 3, summary(better=False, ratio=0.7))
    assert st["phase"] == "Refused" and "not better" in st["message"] and "candidate" not in st
    assert bed.events[-1][:2] == ("Warning", "DraftCandidateRefused")
    assert bed.state.adaptation_condition["reason"] == "CandidateRefused"
    assert hooks.draft_conditions(bed.state)[0]["type"] == "DraftAdaptation"
    assert draft_source.wanted_model(parse(bed.body), bed.status()) == DRAFT


def test_a_failed_job_is_recorded_and_the_next_attempt_waits():
    bed = Bed()
    st = train_once(bed, 2, "error: --capture /var/lib/specdecode/capture: no training records")
    assert st["phase"] == "Failed" and "no training records" in st["message"]
    assert bed.events[-1][:2] == ("Warning", "DraftTrainingFailed")
    bed.now += 10
    assert bed.step()["phase"] == "Failed" and len(bed.client.applied) == 1
    bed.now += 600
    assert bed.step()["attempt"] == 2


def test_a_canary_rollback_refuses_the_candidate():
    bed = Bed()
    train_once(bed, 0, summary())
    cand = contract.attempt_dir("llama", 1)
    bed.serve(DRAFT, "RolledBack", candidate=cand)
    st = bed.step()
    assert st["phase"] == "Refused" and "refused by the canary" in st["message"]
    assert draft_source.wanted_model(parse(bed.body), bed.status()) == DRAFT


def test_a_job_gone_before_its_result_fails_the_attempt():
    bed = Bed()
    bed.step()
    bed.now += 600
    bed.step()
    bed.client.jobs.clear()
    assert "gone" in bed.step()["message"]


@pytest.mark.parametrize("capture_on", [True, False])
def test_training_off_does_nothing_and_wants_no_adapted_draft(capture_on):
    body = copy.deepcopy(BASE)
    del body["spec"]["draft"]["adaptation"]["training"]
    body["spec"]["draft"]["adaptation"]["enabled"] = capture_on
    body["status"] = {
        "draft": {"adaptation": {"promoted": {"source": contract.attempt_dir("llama", 1), "base": DRAFT}}}
    }
    bed = Bed(body)
    assert bed.step() is None and not bed.client.applied
    assert draft_source.wanted_model(parse(bed.body), body["status"]) == DRAFT


def test_an_adapted_draft_is_not_rendered_once_the_capture_claim_is_gone():
    body = copy.deepcopy(BASE)
    body["spec"]["draft"]["adaptation"] = {"enabled": False}
    status = {"draft": {"serving": {"source": contract.attempt_dir("llama", 1)}}}
    assert draft_source.served_model(parse(body), status) == DRAFT
