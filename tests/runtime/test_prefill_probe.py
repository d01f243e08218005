"""The prefill probe splits a speculative prefill at SGLang's publish point (target extend before it, the draft's
extend after it), and reads device spans from events only once they completed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from specdecode_runtime.sglang_patch.prefill_probe import MAX_PENDING, PrefillProbe


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


class FakeEvent:
    """A CUDA event stand-in on a fake device timeline: recorded at the host clock's time plus a device lag."""

    done = True
    lag = 0.0

    def __init__(self, clock: Clock) -> None:
        self.clock, self.at = clock, None

    def record(self) -> None:
        self.at = self.clock() + FakeEvent.lag

    def query(self) -> bool:
        return FakeEvent.done

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3  # milliseconds, as torch's


def _forward(clock: Clock, target_s: float, draft_s: float, published: list):
    """SGLang's ``_forward_prefill_batch`` in time: the target's extend, on_publish, the draft's extend."""

    def orig(worker, batch, on_publish, *rest):
        clock.t += target_s
        if on_publish is not None:
            on_publish("seq_lens")
        clock.t += draft_s
        return "out"

    return orig


def _probe(clock: Clock, device: bool):
    got: dict[tuple[str, str], float] = {}
    batches: list[tuple[int, int]] = []

    def sink(phase: str, kind: str, seconds: float) -> None:
        got[(phase, kind)] = got.get((phase, kind), 0.0) + seconds

    probe = PrefillProbe(
        sink,
        lambda r, t: batches.append((r, t)),
        device_events=(lambda: FakeEvent(clock)) if device else None,
        now=clock,
    )
    return probe, got, batches


def test_target_and_draft_split_at_the_publish_point_and_the_scheduler_still_gets_it():
    clock = Clock()
    probe, got, batches = _probe(clock, device=False)
    seen = []
    out = probe.run_prefill(
        _forward(clock, 0.003, 0.001, seen), "worker", SimpleNamespace(extend_lens=[9, 5]), seen.append, None, None
    )
    assert out == "out" and seen == ["seq_lens"]  # SGLang's own on_publish still runs
    assert got[("target", "host")] == pytest.approx(0.003)
    assert got[("draft", "host")] == pytest.approx(0.001)
    assert batches == [(2, 14)]
    assert not any(kind == "device" for _, kind in got)  # no device spans without CUDA


def test_device_spans_wait_for_their_events():
    clock = Clock()
    probe, got, _ = _probe(clock, device=True)
    FakeEvent.done, FakeEvent.lag = False, 0.010  # the device is behind the host
    probe.run_prefill(_forward(clock, 0.004, 0.002, []), "w", SimpleNamespace(extend_lens=[3]), None)
    assert ("target", "device") not in got and len(probe.pending) == 1  # not complete: nothing read, no sync
    FakeEvent.done = True
    probe.resolve()
    assert got[("target", "device")] == pytest.approx(0.004)
    assert got[("draft", "device")] == pytest.approx(0.002)
    assert not probe.pending


def test_pending_spans_are_bounded():
    clock = Clock()
    probe, _, _ = _probe(clock, device=True)
    FakeEvent.done = False
    for _ in range(MAX_PENDING + 3):
        probe.run_prefill(_forward(clock, 0.001, 0.001, []), "w", SimpleNamespace(extend_lens=[1]), None)
    assert len(probe.pending) == MAX_PENDING and probe.unresolved == 3
    FakeEvent.done = True


def test_host_intervals_and_metrics_rows():
    from prometheus_client import CollectorRegistry

    from specdecode_runtime.metrics import SpecMetrics

    reg = CollectorRegistry()
    m = SpecMetrics(registry=reg)
    clock = Clock()
    probe = PrefillProbe(m.record_prefill_phase, m.record_prefill_batch, now=clock)
    probe.host("launch", 0.006)
    probe.host("result", 0.0)  # nothing measured: nothing counted
    probe.run_prefill(_forward(clock, 0.002, 0.001, []), "w", SimpleNamespace(extend_lens=[4, 4, 4]), None)
    value = reg.get_sample_value
    assert value("specdecode_prefill_phase_seconds_total", {"phase": "launch", "clock": "host"}) == pytest.approx(0.006)
    assert value("specdecode_prefill_phase_seconds_total", {"phase": "result", "clock": "host"}) is None
    assert value("specdecode_prefill_phase_seconds_total", {"phase": "target", "clock": "host"}) == pytest.approx(0.002)
    assert value("specdecode_prefill_batches_total") == 1
    assert value("specdecode_prefill_requests_total") == 3
    assert value("specdecode_prefill_tokens_total") == 12
