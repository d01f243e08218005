"""The served calibration: whole served cycles correct the replayed profile, and the start-up measurement that takes
them counts only what it should.

A fake engine stands in for SGLang here (its cycle times come from a known ``CycleCost`` with host terms, its step
table reaches the ranks one generation late, sequences of a batch finish at different cycles); the CPU test bed
runs the same code through real SGLang (``tests/sglang_e2e/test_served_calibration_cpu.py``)."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from specdecode_runtime import served_probe
from specdecode_runtime.contract.cost_profile import SERVED, ProbePoint, calibrate, fit_bucket, fit_profile
from specdecode_runtime.contract.goodput import CycleCost
from specdecode_runtime.contract.metric_names import bucket_label
from specdecode_runtime.contract.step_table import StepTable
from specdecode_runtime.control import create_control_app
from specdecode_runtime.engine import ControlServer
from specdecode_runtime.served_probe import Totals, measure_point, totals_from_samples

REPLAYED = CycleCost(
    verify_base=2.0,
    verify_per_token=0.01,
    draft_base=0.15,
    draft_per_seq=0.0,
    extend_base=0.4,
    extend_per_token=0.005,
    overhead=0.2,
    warm_extend_base=0.3,
    warm_extend_per_seq=0.002,
)
# what serving costs: more overhead than the replays see, and host work per speculative cycle that grows with steps
TRUE = dataclasses.replace(REPLAYED, overhead=1.4, host_base=0.9, host_per_step=0.12)


def served(steps: int, batch: int, cost: CycleCost = TRUE, bucket: str = "1") -> ProbePoint:
    return ProbePoint(SERVED, steps, bucket, batch, cost.cycle_ms(steps, batch) / 1000.0)


# ---- the fit: contract.cost_profile.calibrate ------------------------------------------------------------------------
def test_served_cycles_recover_the_overhead_and_the_host_line():
    got = calibrate(REPLAYED, [served(0, 1), served(1, 1), served(3, 1), served(7, 1)])
    assert got.overhead == pytest.approx(1.4)
    assert (got.host_base, got.host_per_step) == pytest.approx((0.9, 0.12))
    # the replayed split is kept: the draft-TP planner scales the draft's and the verify's shares, not host work
    assert dataclasses.replace(got, overhead=REPLAYED.overhead, host_base=0.0, host_per_step=0.0) == REPLAYED
    for k in range(8):  # tiers never served are priced on the line too
        assert got.cycle_ms(k, 1) == pytest.approx(TRUE.cycle_ms(k, 1))


def test_one_served_tier_gives_a_flat_host_term():
    got = calibrate(REPLAYED, [served(0, 1), served(5, 1)])
    assert got.host_per_step == 0.0
    assert got.cycle_ms(5, 1) == pytest.approx(TRUE.cycle_ms(5, 1))


def test_replays_that_over_price_lower_the_cost_but_never_below_zero_overhead():
    cheap = dataclasses.replace(REPLAYED, overhead=0.0, verify_base=1.0)
    got = calibrate(REPLAYED, [served(0, 1, cheap), served(2, 1, cheap), served(4, 1, cheap)])
    assert got.overhead == 0.0  # the plain residual (-1.2 ms) would make it negative
    assert got.host_base < 0  # the speculative cycles are cheaper than the replays say, too
    assert got.host_per_step == 0.0  # the residuals do not grow with steps


def test_a_host_term_falling_with_steps_is_kept_flat():
    falling = [ProbePoint(SERVED, k, "1", 1, (REPLAYED.cycle_ms(k, 1) + 2.0 - 0.1 * k) / 1000.0) for k in (1, 3, 5)]
    got = calibrate(REPLAYED, falling)
    assert got.host_per_step == 0.0
    assert got.host_base == pytest.approx(2.0 - 0.3)  # the mean residual


def test_only_positive_served_points_of_real_batches_count():
    ignored = [
        ProbePoint("verify", 3, "1", 1, 0.5),  # a replayed stage is not a served cycle
        ProbePoint(SERVED, 3, "1", 1, 0.0),
        ProbePoint(SERVED, 3, "1", 1, -0.002),
        ProbePoint(SERVED, 3, "1", 0, 0.009),
    ]
    assert calibrate(REPLAYED, ignored) == REPLAYED
    # without a plain served cycle the overhead stays as replayed: the host term takes the whole residual
    residual = TRUE.cycle_ms(3, 1) - REPLAYED.cycle_ms(3, 1)
    assert calibrate(REPLAYED, [*ignored, served(3, 1)]).host_base == pytest.approx(residual)


def _replayed_points(bucket: str, batch: int) -> list[ProbePoint]:
    pts = [ProbePoint("verify", k, bucket, batch, REPLAYED.verify_ms(k, batch) / 1000.0) for k in (0, 1, 3)]
    pts += [ProbePoint("draft_extend", k, bucket, batch, REPLAYED.extend_ms(k, batch) / 1000.0) for k in (1, 3)]
    pts += [ProbePoint("draft_step", 1, bucket, batch, REPLAYED.draft_base / 1000.0)]
    pts += [ProbePoint("overhead", 0, bucket, batch, REPLAYED.overhead / 1000.0)]
    return pts


def test_the_fit_calibrates_each_bucket_with_its_own_served_cycles():
    pts = _replayed_points("1", 1) + _replayed_points("8-31", 8)
    plain = fit_profile(pts)
    assert plain["1"].host_base == plain["8-31"].host_base == 0.0
    both = fit_profile(pts + [served(0, 1), served(3, 1), served(5, 1)])
    assert both["8-31"] == plain["8-31"]  # no served cycles there: the replayed profile alone
    assert both["1"].cycle_ms(4, 1) == pytest.approx(TRUE.cycle_ms(4, 1), rel=1e-6)
    assert fit_bucket([served(0, 1), served(3, 1)]) is None  # served cycles alone anchor nothing


# ---- the measurement: a fake engine -----------------------------------------------------------------------------------
class FakeEngine:
    """Cycle times from ``cost``; a tier set takes effect at the next generation after the one that follows it (the
    table reaches the ranks at an exchange); each sequence gains ``min(steps + 1, left)`` tokens per cycle except
    every third sequence, which gains one (a rejected draft), so a batch shrinks as sequences finish."""

    def __init__(self, cost: CycleCost = TRUE, steps: int = 3, ignores: set[int] = frozenset(), lag: int = 1):
        self.cost, self.steps, self.ignores, self.lag = cost, steps, set(ignores), lag
        self.pending: list[tuple[int, int]] = []
        self.totals: dict[str, Totals] = {}
        self.calls = 0

    def set_tier(self, steps: int) -> None:
        if steps not in self.ignores:
            self.pending.append((self.calls + self.lag, steps))

    def read(self) -> dict[str, Totals]:
        return dict(self.totals)

    def generate(self, ids, n: int) -> list[dict]:
        self.calls += 1
        for at, steps in list(self.pending):
            if self.calls > at:
                self.steps = steps
                self.pending.remove((at, steps))
        left = [n] * len(ids)
        while any(left):
            live = [i for i, x in enumerate(left) if x > 0]
            b = len(live)
            label = bucket_label(b)
            t = self.totals.get(label, Totals())
            self.totals[label] = Totals(
                t.cycles + 1,
                t.seconds + self.cost.cycle_ms(self.steps, b) / 1000.0,
                t.requests + b,
                t.draft_steps + self.steps,
            )
            for i in live:
                gain = 1 if (i % 3 == 2 or self.steps == 0) else self.steps + 1
                left[i] = max(left[i] - gain, 0)
        return [{"output_ids": [0] * n} for _ in ids]


def test_every_tier_is_measured_after_its_switch_shows_in_the_counters():
    eng = FakeEngine(lag=2)
    pts = served_probe.calibrate(eng.generate, eng.read, eng.set_tier, [0, 1, 3, 7], [1], tokens=64)
    assert [(p.stage, p.steps, p.bucket, p.batch) for p in pts] == [(SERVED, k, "1", 1) for k in (0, 1, 3, 7)]
    for p in pts:
        assert 1000.0 * p.seconds == pytest.approx(TRUE.cycle_ms(p.steps, 1))
    # and the fit of the replayed stages plus these points prices every tier as served
    fitted = fit_bucket(_replayed_points("1", 1) + pts)
    assert [fitted.cycle_ms(k, 1) for k in range(8)] == pytest.approx([TRUE.cycle_ms(k, 1) for k in range(8)])


def test_a_tier_that_never_runs_is_skipped_and_the_others_are_kept(caplog):
    eng = FakeEngine(ignores={5})
    pts = served_probe.calibrate(eng.generate, eng.read, eng.set_tier, [1, 5, 7], [1], tokens=32)
    assert [p.steps for p in pts] == [1, 7]
    assert "steps=5 never ran" in caplog.text


def test_only_the_batch_buckets_cycles_count_and_the_point_carries_their_mean_batch():
    eng = FakeEngine(steps=3)
    p = measure_point(eng.generate, eng.read, 3, 9, 40)
    # sequences 2, 5 and 8 gain one token per cycle: after 10 cycles the other six are done and three decode on in
    # bucket 2-7, which must not count; all of bucket 8-31's cycles ran the full batch of 9
    assert (p.bucket, p.batch) == ("8-31", 9)
    assert 1000.0 * p.seconds == pytest.approx(TRUE.cycle_ms(3, 9))
    assert eng.totals["2-7"].cycles > 0


def test_too_few_cycles_or_the_wrong_tier_is_no_point(caplog):
    eng = FakeEngine(steps=3)
    assert measure_point(eng.generate, eng.read, 3, 1, tokens=3 * (served_probe.MIN_CYCLES - 1) + 1) is None
    assert "cycles in bucket 1" in caplog.text
    assert measure_point(eng.generate, eng.read, 3, 1, tokens=4 * served_probe.MIN_CYCLES) is not None
    assert measure_point(eng.generate, eng.read, 5, 1, tokens=64) is None  # the engine runs 3
    assert "cycles ran 3.00 steps" in caplog.text


def test_the_deadline_keeps_what_was_measured():
    eng = FakeEngine()
    ticks = iter(range(100))
    pts = served_probe.calibrate(
        eng.generate, eng.read, eng.set_tier, [1, 3, 7], [1, 2], tokens=16, deadline=2.5, clock=lambda: next(ticks)
    )
    # clock reads: 0 (tier 1), 1 (b1), 2 (b2), 3 (tier 3: past the deadline)
    assert [(p.steps, p.batch) for p in pts] == [(1, 1), (1, 2)]


def test_a_pod_without_step_control_measures_its_one_tier():
    eng = FakeEngine(steps=4)
    pts = served_probe.calibrate(eng.generate, eng.read, None, [4], [1, 8], tokens=40)
    assert [(p.steps, p.batch) for p in pts] == [(4, 1), (4, 8)]


def test_totals_sum_the_four_phases_of_each_bucket_and_nothing_else():
    samples = [
        ("specdecode_verify_cycles_total", {"bucket": "1"}, 10.0),
        ("specdecode_requests_verified_total", {"bucket": "1"}, 10.0),
        ("specdecode_draft_steps_total", {"bucket": "1"}, 30.0),
        *[
            ("specdecode_cycle_seconds_sum", {"bucket": "1", "phase": ph}, 0.01)
            for ph in ("draft", "verify", "draft_extend", "other")
        ],
        ("specdecode_cycle_seconds_sum", {"bucket": "1", "phase": "prefill"}, 5.0),  # counted apart, not a phase
        ("specdecode_cycle_seconds_count", {"bucket": "1", "phase": "verify"}, 10.0),
        ("specdecode_verify_cycles_total", {}, 99.0),  # no bucket
        ("specdecode_verify_cycles_total", {"bucket": "1", "pid": "7"}, 2.0),  # another process's file: summed
        ("sglang:num_running_reqs", {"bucket": "1"}, 3.0),
    ]
    got = totals_from_samples(samples)
    assert got == {"1": Totals(cycles=12.0, seconds=pytest.approx(0.04), requests=10.0, draft_steps=30.0)}


def test_prompts_are_distinct_deterministic_and_in_every_vocabulary():
    ps = served_probe.prompts(16)
    assert ps == served_probe.prompts(16)
    assert len({tuple(p) for p in ps}) == 16
    assert all(10 <= t < 210 for p in ps for t in p)
    assert served_probe.prompts(2, salt=1) != served_probe.prompts(2)
    assert math.isnan(served_probe.mean_steps(Totals()))


# ---- the pod's side: a real control server, an HTTP stand-in for SGLang's server ---------------------------------
class _Sink:
    def __init__(self, table: StepTable, candidates: list[int]):
        self.table, self._candidates, self.applied = table, candidates, []

    @property
    def candidates(self):
        return self._candidates

    def current_table(self):
        return self.table

    def apply_table(self, table):
        self.applied.append(table)
        self.table = table
        return "applied"


def _server(engine: FakeEngine | None):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _reply(self, status, body):
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self):
            self._reply(200, {"is_generation": True})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            if engine is None:
                return self._reply(500, {"error": "engine down"})
            n = body["sampling_params"]["max_new_tokens"]
            assert body["sampling_params"]["ignore_eos"] and body["sampling_params"]["temperature"] == 0.0
            self._reply(200, engine.generate(body["input_ids"], n))

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    return srv


@pytest.fixture
def control(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    sink = _Sink(StepTable.from_pairs([(1, 3), (8, 1)]), [0, 1, 3])
    server = ControlServer(create_control_app(sink, str(token)), "127.0.0.1", 0)
    server.start()
    yield sink, served_probe.Control(server.bound_port, "s3cret")
    server.stop()


class _Metrics:
    def __init__(self):
        self.costs = []

    def set_cost(self, *args):
        self.costs.append(args)


def test_the_pod_measures_every_listed_tier_restores_its_table_and_exports(control):
    sink, ctl = control
    eng = FakeEngine(steps=3)
    real_set = ctl.set_tier

    class Relay(served_probe.Control):  # the table the control API accepted reaches the fake engine's ranks
        def set_tier(self, steps):
            real_set(steps)
            eng.set_tier(steps)

    srv = _server(eng)
    metrics = _Metrics()
    try:
        pts = served_probe.run_at_start(
            f"http://127.0.0.1:{srv.server_port}",
            Relay(ctl.port, ctl.token),
            3,
            [1],
            32,
            60.0,
            metrics=metrics,
            read=eng.read,
        )
    finally:
        srv.shutdown()
    assert [p.steps for p in pts] == [0, 1, 3]  # the candidates the control API lists
    assert [t.pairs() for t in sink.applied] == [[(1, 0)], [(1, 1)], [(1, 3)], [(1, 3), (8, 1)]]
    assert sink.table.pairs() == [(1, 3), (8, 1)]  # put back as it was
    assert metrics.costs == [("cycle", p.steps, "1", 1, p.seconds) for p in pts]


def test_a_failing_server_ends_the_calibration_but_restores_the_table(control, caplog):
    sink, ctl = control
    srv = _server(None)
    try:
        pts = served_probe.run_at_start(f"http://127.0.0.1:{srv.server_port}", ctl, 3, [1], 32, 30.0, read=dict)
    finally:
        srv.shutdown()
    assert pts == []
    assert "served calibration stopped" in caplog.text
    assert sink.table.pairs() == [(1, 3), (8, 1)]


def test_a_server_that_never_answers_gives_up_at_the_time_limit(caplog):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert served_probe.run_at_start(f"http://127.0.0.1:{port}", None, 3, [1], 32, 1.5, read=dict) == []
    assert "did not answer within 2 s" in caplog.text


@pytest.mark.parametrize("steps, want", [(-1, 0.0), (0, 0.0), (1, 0.9 + 0.12), (5, 0.9 + 5 * 0.12)])
def test_host_work_is_a_speculative_cycles_only(steps, want):
    """A plain cycle's host work is its overhead; the host terms price what a speculative cycle adds."""
    assert TRUE.host_ms(steps) == pytest.approx(want)
