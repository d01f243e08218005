"""The served calibration inside the real, pinned SGLang on a CPU: ``specdecode-runtime launch`` of a Live pod with
``costProbe.served``, whose warm-up serves every captured tier at batch 1 and 2 through the pod's own server before
``/health`` answers 200.

What it proves: the points reach ``/metrics`` as ``specdecode_cost_seconds{stage="cycle"}`` before the pod reports
healthy (no client traffic can mix into them), one per tier and batch bucket, each at the tier it names; the step
table is back as the pod started; the operator's fit of the scraped points carries them into the profile. CPU
timings prove the plumbing, not GPU speed (``bench/gpu/campaigns/live_tune.py --served-calibration`` is the GPU run).
"""

from __future__ import annotations

import json
import statistics
import urllib.request

import pytest
from test_stock_launch import _get, launched, write_runtime

from specdecode_operator.tuner.snapshot import parse_metrics
from specdecode_runtime.contract.cost_profile import SERVED, fit_profile, points_from_samples
from specdecode_runtime.contract.step_table import STEPS_PATH

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
TIERS = (0, 1, 3)
BATCHES = (1, 2)


@pytest.fixture(scope="module")
def calibrated(tiny_models, tmp_path_factory):
    work = tmp_path_factory.mktemp("cpu-served")
    port, control = write_runtime(
        work,
        "cpu-served",
        tiny_models,
        f"{{numSteps: 3, eagleTopK: 1, candidateSteps: {list(TIERS)}, autotune: {{mode: Live, minSteps: 1, maxSteps: 3}}}}",
        f"costProbe: {{served: {{batches: {list(BATCHES)}, tokens: 16, timeoutSeconds: 240}}}}\n",
    )
    with launched(work, port) as base:
        # the first moment /health answers 200: what /metrics holds now was there before any client could send
        at_health = _get(base + "/metrics").decode()
        yield {"base": base, "control": control, "metrics": at_health, "log": work / "launch.log"}


def _cost_samples(text: str) -> dict[tuple[str, int, str, int], float]:
    return parse_metrics(text, "cpu-served", 0.0).costs  # the tuner's own parse of a pod's /metrics


def test_every_tier_is_served_at_every_batch_before_the_pod_is_healthy(calibrated):
    cycles = {k: v for k, v in _cost_samples(calibrated["metrics"]).items() if k[0] == SERVED}
    assert sorted((k[1], k[2], k[3]) for k in cycles) == [(k, b, n) for k in TIERS for b, n in (("1", 1), ("2-7", 2))]
    assert all(0 < v < 10 for v in cycles.values())


def test_the_step_table_is_back_as_the_pod_started(calibrated):
    req = urllib.request.Request(
        f"http://127.0.0.1:{calibrated['control']}{STEPS_PATH}", headers={"Authorization": "Bearer t0ken"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        body = json.loads(r.read(65536))
    assert body["table"] == [{"minBatch": 1, "steps": 3}]
    assert body["candidates"] == list(TIERS)


def test_the_operator_fit_carries_the_served_cycles(calibrated):
    samples = _cost_samples(calibrated["metrics"])
    points = points_from_samples(samples)
    replayed = fit_profile([p for p in points if p.stage != SERVED])
    fitted = fit_profile(points)
    assert set(fitted) >= {"1", "2-7"}
    for bucket in ("1", "2-7"):
        served = [p for p in points if p.stage == SERVED and p.bucket == bucket]
        spec = [p for p in served if p.steps > 0]
        # a least-squares line (or its mean, when the slope is clamped) leaves no mean residual over what it was fitted
        # to: the fitted profile prices the served speculative cycles at their measured mean
        assert statistics.mean(fitted[bucket].cycle_ms(p.steps, p.batch) for p in spec) == pytest.approx(
            statistics.mean(1000.0 * p.seconds for p in spec), rel=1e-6
        )
        plain = next(p for p in served if p.steps == 0)
        if 1000.0 * plain.seconds >= replayed[bucket].cycle_ms(0, plain.batch) - replayed[bucket].overhead:
            assert fitted[bucket].cycle_ms(0, plain.batch) == pytest.approx(1000.0 * plain.seconds, rel=1e-6)
        assert (fitted[bucket].host_base, fitted[bucket].host_per_step) != (0.0, 0.0)
