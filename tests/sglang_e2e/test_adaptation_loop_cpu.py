"""A draft that learns from its own traffic, the whole loop on the CPU: real SGLang under ``specdecode-runtime
launch`` (tiny target, the random EAGLE-3 head, 3 steps, capture on), a real kube-apiserver with the operator's
ServiceAccount under the chart's RBAC, and the operator's draft rollout and adaptation steps once per tuner interval
(tests/sglang_e2e/adaptation_loop.py; the test plays the Job controller and the kubelet by running the Job's
rendered commands itself).

What it proves:

* capture on -> records written: the pod writes one record per finished request to the claim;
* the operator applies the training Job; its train command (the rendered one, with the CPU test's schedule
  appended) trains a head from the served one on the captured records; its gate command passes it (exit 0); the
  termination message reported in the pod's status moves the object to Canary; the in-place canary promotes it;
  the pod serves the candidate from the claim and status.draft says so (spec unchanged);
* a broken candidate (a noisy copy of the served draft in place of a training's output) is refused by the gate
  (exit 3), recorded as Refused with a Warning, never canaried, and the promoted draft serves on;
* throughout, no request fails and every greedy answer equals the pod's own answer at steps 0 (no speculation);
* the checks can fail: with the operator's gate made to ignore the score (a not-better verdict taken as better),
  the broken candidate goes to the canary and the gate check reports it.

One engine for the module; the session's API server, with the module's objects in a namespace of their own (a few
minutes on 2 cores, most of it training and the load).
"""

from __future__ import annotations

import pytest
from adaptation_loop import (
    NEW_TOKENS,
    RECORDS,
    captured,
    load_problems,
    promoted_problems,
    refused_at_gate_problems,
    run_loop,
    send_traffic,
    structured_prompts,
    write_runtime,
)
from draft_canary import Cluster, Pod

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


NAMESPACE = "adaptation-loop"


@pytest.fixture(scope="module")
def bed(tiny_models, tmp_path_factory, apiserver_bed):
    import time

    from test_stock_launch import launched

    work = tmp_path_factory.mktemp("adaptation-loop")
    claim = work / "claim"
    cluster = Cluster(shared=apiserver_bed, namespace=NAMESPACE)
    try:
        pod_dir = work / "pod"
        pod_dir.mkdir()
        port, control = write_runtime(pod_dir, tiny_models, claim)
        with launched(pod_dir, port, ["--skip-server-warmup"], poll_s=1.0) as base:
            pod = Pod(base, f"http://127.0.0.1:{control}", tiny_models.target, tiny_models.eagle3, "")
            assert pod.served() == tiny_models.eagle3
            load_prompts = structured_prompts(6, seed=99)
            reference = pod.reference(load_prompts)
            send_traffic(pod, structured_prompts(RECORDS, seed=1))
            deadline = time.monotonic() + 60
            while captured(claim) < RECORDS + len(load_prompts) and time.monotonic() < deadline:
                time.sleep(0.2)  # the writer thread appends after the answer went out
            yield cluster, pod, claim, work, load_prompts, reference
    finally:
        cluster.stop()


def test_capture_train_gate_canary_promote_then_a_broken_candidate_refused(bed):
    cluster, pod, claim, work, load_prompts, reference = bed
    assert captured(claim) >= RECORDS  # capture on -> records written (the reference's requests too)
    old = pod.served()
    loop = run_loop(cluster, pod, "adapted", claim, work, [False, True], load_prompts, reference)
    problems = load_problems(loop)
    first, second = loop.attempts
    problems += promoted_problems(loop, first, old)
    promoted = str(claim / "adapt" / "adapted" / "attempt-1")
    problems += refused_at_gate_problems(loop, second, promoted)
    assert not problems, "\n".join(problems)
    assert loop.served_after == promoted
    status = loop.api_status
    assert status["adaptation"]["promoted"]["source"] == promoted and status["adaptation"]["phase"] == "Refused"
    assert status["adaptation"]["lastResult"]["better"] is False
    assert loop.load["failed"] == 0 and loop.load["requests"] > 0
    assert NEW_TOKENS > 0


def test_the_gate_check_catches_a_gate_that_ignores_the_score(bed, monkeypatch):
    from specdecode_operator.tuner import adaptation as decide
    from specdecode_operator.tuning import adaptation

    real = decide.job_outcome

    def ignores_the_score(job, pods, min_ratio):
        out = real(job, pods, min_ratio)
        return decide.Outcome("better", out.message, out.result) if out.kind == "not_better" else out

    monkeypatch.setattr(adaptation.decide, "job_outcome", ignores_the_score)
    cluster, pod, claim, work, load_prompts, reference = bed
    serving = pod.served()
    loop = run_loop(cluster, pod, "planted-fault", claim, work / "planted", [True], load_prompts, reference)
    problems = refused_at_gate_problems(loop, loop.attempts[0], serving)
    assert loop.attempts[0].job.gate_exit == 3  # the gate itself said not better
    assert "Canary" in loop.attempts[0].phases()  # the fault: the operator canaried it anyway
    assert any("was not refused at the gate" in p for p in problems), problems
    assert load_problems(loop) == []  # caught for what it is, not for the load
