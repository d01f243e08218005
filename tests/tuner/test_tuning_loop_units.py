"""The operator-side glue of the tuner that needs no API server: pod discovery from EndpointSlices, the NCCL
gauge, and how Rollout's step count and the MetricsAvailable condition survive an operator restart."""

from __future__ import annotations

from specdecode_operator.api.models import SpecDecodeDeployment
from specdecode_operator.object_state import ObjectState
from specdecode_operator.tuning import hooks as tuning
from specdecode_operator.tuning.pod_client import nccl_from_text
from specdecode_operator.tuning.pods import targets_from_slices


def _sdd(mode: str = "Rollout", steps: int = 5) -> SpecDecodeDeployment:
    return SpecDecodeDeployment.model_validate(
        {
            "metadata": {"name": "x", "namespace": "default"},
            "spec": {
                "target": {"model": "t", "tensorParallelSize": 1},
                "draft": {"model": "d", "tensorParallelSize": 1},
                "speculative": {"numSteps": steps, "autotune": {"mode": mode, "minSteps": 1, "maxSteps": 7}},
            },
        }
    )


def test_targets_are_ready_endpoints_with_named_ports():
    slices = [
        {
            "ports": [{"name": "http", "port": 30000}, {"name": "control", "port": 30001}],
            "endpoints": [
                {"addresses": ["10.0.0.2"], "conditions": {"ready": True}, "targetRef": {"name": "pod-b"}},
                {"addresses": ["10.0.0.1"], "targetRef": {"name": "pod-a"}},  # ready unset counts as ready
                {"addresses": ["10.0.0.3"], "conditions": {"ready": False}, "targetRef": {"name": "pod-c"}},
                {"addresses": ["fd00::4"], "conditions": {"ready": True}},
            ],
        },
        {"ports": [{"name": "metrics-only", "port": 9}], "endpoints": [{"addresses": ["10.0.0.5"]}]},
    ]
    got = {t.pod: t for t in targets_from_slices(slices)}
    assert set(got) == {"pod-a", "pod-b", "fd00::4", "10.0.0.5"}
    assert got["pod-a"].metrics_url == "http://10.0.0.1:30000/metrics"
    assert got["pod-a"].control_url == "http://10.0.0.1:30001"
    assert got["fd00::4"].metrics_url == "http://[fd00::4]:30000/metrics"
    assert got["10.0.0.5"].metrics_url is None and got["10.0.0.5"].control_url is None


def test_nccl_latency_in_microseconds_and_garbage_gives_nothing():
    text = (
        'specdecode_nccl_latency_seconds{op="all_reduce",bytes="4096"} 4.2e-05\n'
        'specdecode_nccl_latency_seconds{op="broadcast",bytes="64"} NaN\n'
    )
    assert nccl_from_text(text) == {"all_reduce/4096": 42.0}
    assert nccl_from_text("this is { not prometheus") == {}


def test_rollout_steps_resume_from_status_until_the_loop_runs():
    sdd = _sdd()
    body = {"status": {"speculative": {"numSteps": 3}}}
    assert tuning.tuned_steps(ObjectState(), sdd, body) == 3  # operator restarted: keep what the pods run
    assert (
        tuning.tuned_steps(ObjectState(tuner_started=True, tuned_steps=None), sdd, body) is None
    )  # the loop decided: spec's value
    assert tuning.tuned_steps(ObjectState(tuner_started=True, tuned_steps=2), sdd, body) == 2
    assert tuning.tuned_steps(ObjectState(), sdd, {"status": {"speculative": {"numSteps": 9}}}) is None  # out of bounds
    assert (
        tuning.tuned_steps(ObjectState(tuner_started=True, tuned_steps=2), _sdd("Live"), body) is None
    )  # only Rollout re-renders


def test_metrics_condition_carried_over_until_the_loop_reports():
    body = {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True"},
                {
                    "type": "MetricsAvailable",
                    "status": "True",
                    "reason": "Scraped",
                    "message": "1 pod(s) scraped",
                    "lastTransitionTime": "t",
                },
            ]
        }
    }
    assert tuning.conditions(ObjectState(), body) == [
        {"type": "MetricsAvailable", "status": "True", "reason": "Scraped", "message": "1 pod(s) scraped"}
    ]
    mine = {"type": "MetricsAvailable", "status": "False", "reason": "MetricsDown", "message": "m"}
    assert tuning.conditions(ObjectState(tuner_condition=mine), body) == [mine]
    assert tuning.conditions(ObjectState(), {}) == []


def test_initial_condition_is_what_the_first_interval_reports():
    """Before the loop's first interval the reconciler reports the tuner's expected first condition (for a valid
    spec only), so a new object's first status write already carries MetricsAvailable."""
    from specdecode_operator.tuner.tuner import Tuner, TunerConfig

    assert tuning.conditions(ObjectState(), {}, tuned=False) == []
    first = tuning.conditions(ObjectState(), {}, tuned=True)
    d = Tuner(TunerConfig.from_autotune(_sdd().spec.speculative.autotune, 5)).step(0.0, [])
    assert first == [tuning.condition_dict(d.condition)]
    assert first[0]["reason"] == "NoPods"
    warming = tuning.conditions(ObjectState(), {"status": {"readyReplicas": 1}}, tuned=True)
    assert warming[0]["status"] == "Unknown" and warming[0]["reason"] == "WarmingUp"
