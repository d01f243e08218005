"""Tier switches are counted where they happen and reach status: the runtime's exporter counts the served tier of
consecutive cycles (off: to plain decoding, on: back to speculation, change: between step counts), the simulator
counts the same from its cycles, and the tuner reports the scraped pods' totals in ``status.speculative.stepSwitches``."""

from __future__ import annotations

from helpers import scenario
from prometheus_client import CollectorRegistry, generate_latest

from specdecode_operator.tuner.policy import PolicyConfig
from specdecode_operator.tuner.snapshot import parse_metrics
from specdecode_operator.tuner.tuner import Tuner, TunerConfig
from specdecode_runtime.metrics import SpecMetrics
from specdecode_runtime.simulate.engine import SimEngine


def test_the_exporter_counts_each_kind_of_switch_between_served_cycles():
    m = SpecMetrics(CollectorRegistry())
    for steps in (3, 3, 0, 0, 5, 0, 3, 7, 7):
        m.record_cycle(4, steps, [0] * 4, {})
    snap = parse_metrics(generate_latest(m.registry).decode(), "p", 1.0)
    assert snap.switches == {"off": 2.0, "on": 2.0, "change": 1.0}


def test_the_tuner_reports_the_scraped_pods_switch_totals():
    pods = []
    for seq in ((3, 0, 3), (0, 5, 5, 0)):
        m = SpecMetrics(CollectorRegistry())
        for steps in seq:
            m.record_cycle(2, steps, [0, 0], {})
        pods.append(parse_metrics(generate_latest(m.registry).decode(), f"p{len(pods)}", 1.0))
    tuner = Tuner(TunerConfig(policy=PolicyConfig(candidates=(0, 3, 5)), initial_steps=3))
    d = tuner.step(1.0, pods)
    assert d.status.stepSwitches == {"off": 2, "on": 2, "change": 0}


def test_the_simulator_counts_switches_when_batches_cross_a_bucket_that_is_off():
    # batch sizes alternate between buckets 1 and 2-7; a table that turns speculation off for 2+ flips every change
    sc = scenario([{"seconds": 60, "batchSize": {"1": 0.5, "4": 0.5}, "acceptance": [0.7]}])
    eng = SimEngine(sc)
    eng.set_step_table([(1, 3), (2, 0)])
    eng.advance(5.0)
    snap = parse_metrics(eng.metrics_text(), "p", eng.now)
    assert snap.switches["off"] > 10 and abs(snap.switches["on"] - snap.switches["off"]) <= 1
    assert snap.switches.get("change", 0.0) == 0.0
