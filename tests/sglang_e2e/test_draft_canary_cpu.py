"""The operator's draft canary against one real runtime pod: the real, pinned SGLang on the CPU under
``specdecode-runtime launch`` (tiny target, agreeing EAGLE draft, 3 steps), the operator's ``DraftRollouts`` with its
real ``PodsApi`` stepped once per tuner interval after the loop's own scrape, and a real kube-apiserver holding the
SpecDecodeDeployment, its control-token Secret and ``status.draft`` (the operator's ServiceAccount under the
chart's RBAC). Three client threads send greedy requests throughout (tests/sglang_e2e/draft_canary.py).

What it proves, with one replica (the canary alternates the pod between the drafts, one interval each) and
``rollout: {intervals: 1, minAcceptRatio: 0.9}`` at 3 s per tuner interval:

* agreeing -> corrupted (``noisy_copy``, noise 3x each tensor's RMS): rolled back by the second tuner interval
  after the canary started, within 2 intervals plus a stated slack of wall time; the pod serves the agreeing draft
  again and status.draft at the API server says RolledBack;
* corrupted -> agreeing: promoted, in the same bound; the pod and status.draft serve the agreeing draft;
* in both, no request fails and every answer equals the pod's own answer at steps 0 (no speculation), taken once
  through its step endpoint before any swap, and requests were in flight during every interval;
* the checks can fail: with the gate made to ignore acceptance (``minAcceptRatio`` 0), the corrupted draft is
  promoted and the rollback check reports it.

One engine for the module; the session's API server, with the module's objects in a namespace of their own (about
45 s on 2 cores, most of it the three rollouts' load).
"""

from __future__ import annotations

import pytest
from draft_canary import (
    MIN_ACCEPT_RATIO,
    NAMESPACE,
    bed,
    common_problems,
    promoted_problems,
    ratio_of,
    rolled_back_problems,
    rollout,
    verdict_intervals,
    verdict_limit_s,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def canary(tiny_models, tmp_path_factory, apiserver_bed):
    with bed(tiny_models, tmp_path_factory.mktemp("draft-canary"), shared=apiserver_bed, namespace=NAMESPACE) as b:
        yield b


def test_a_corrupted_draft_is_rolled_back_within_two_intervals(canary):
    pod = canary.pod
    run = rollout(canary.cluster, pod, "rollback", pod.agree, pod.noisy, canary.reference)
    problems = rolled_back_problems(run)
    assert not problems, "\n".join(problems)
    assert run.verdict_interval <= verdict_intervals() == 2
    assert run.verdict_s <= verdict_limit_s()
    assert ratio_of(run) < MIN_ACCEPT_RATIO
    assert run.load["failed"] == 0 and run.load["requests"] > 0
    assert [s["served"] for s in run.steps] == [pod.noisy, pod.agree, pod.agree]  # alternated, then kept the old


def test_the_rollback_check_catches_a_gate_that_ignores_acceptance(canary, monkeypatch):
    from specdecode_operator.tuner.draft_gate import CanaryGate
    from specdecode_operator.tuning import draft_rollout

    monkeypatch.setattr(draft_rollout, "CanaryGate", lambda intervals, min_ratio: CanaryGate(intervals, 0.0))
    pod = canary.pod
    run = rollout(canary.cluster, pod, "planted-fault", pod.agree, pod.noisy, canary.reference)
    problems = rolled_back_problems(run)
    assert run.outcome == "Serving" and run.served_after == pod.noisy  # the fault: the corrupted draft promoted
    assert common_problems(run) == []  # caught for what it is, not for the load or the timing
    assert any("was not rolled back" in p for p in problems), problems
    assert any(f"the pod serves {pod.noisy}" in p for p in problems), problems


def test_the_agreeing_draft_is_promoted_over_the_corrupted_one(canary):
    pod = canary.pod
    run = rollout(canary.cluster, pod, "promote", pod.noisy, pod.agree, canary.reference)
    problems = promoted_problems(run)
    assert not problems, "\n".join(problems)
    assert run.verdict_interval <= verdict_intervals() and run.verdict_s <= verdict_limit_s()
    assert ratio_of(run) >= MIN_ACCEPT_RATIO
    assert run.load["failed"] == 0 and run.load["requests"] > 0
    assert run.api_status["serving"]["digest"] and run.served_after == pod.agree
