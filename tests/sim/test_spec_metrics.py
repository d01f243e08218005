"""Metrics contract semantics: attempts/accepted per position, buckets, phases, multiprocess mode."""

import os
import subprocess
import sys
import textwrap

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from specdecode_runtime.contract.metric_names import SIMULATED_LABELS, position_counts
from specdecode_runtime.metrics import SpecMetrics


def samples(registry):
    from prometheus_client import generate_latest

    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(registry, name, **labels):
    return samples(registry).get((name, tuple(sorted(labels.items()))), 0.0)


def test_position_counts_follow_the_rule():
    # steps 5: c=0 -> attempted {1}; c=2 -> attempted {1,2,3}, accepted {1,2}; c=5 -> attempted 1..5, accepted 1..5
    attempts, accepted = position_counts(5, [0, 2, 5])
    assert attempts == [3, 2, 2, 1, 1]
    assert accepted == [2, 2, 1, 1, 1]


def test_position_counts_reject_impossible_acceptance():
    with pytest.raises(ValueError, match="within 0..3"):
        position_counts(3, [4])


def test_record_cycle_updates_every_contract_series():
    reg = CollectorRegistry()
    m = SpecMetrics(reg)
    m.record_cycle(3, 4, [4, 1, 0], {"draft": 0.004, "verify": 0.010, "draft_extend": 0.001, "other": 0.0005})
    b = "2-7"
    assert value(reg, "specdecode_verify_cycles_total", bucket=b) == 1
    assert [value(reg, "specdecode_position_attempts_total", bucket=b, position=str(j)) for j in range(1, 5)] == [
        3,
        2,
        1,
        1,
    ]
    assert [value(reg, "specdecode_position_accepted_total", bucket=b, position=str(j)) for j in range(1, 5)] == [
        2,
        1,
        1,
        1,
    ]
    assert value(reg, "specdecode_cycle_seconds_sum", bucket=b, phase="verify") == pytest.approx(0.010)
    assert value(reg, "specdecode_cycle_seconds_count", bucket=b, phase="draft_extend") == 1
    assert value(reg, "specdecode_tokens_generated_total") == 5 + 2 + 1
    assert value(reg, "specdecode_draft_steps_total", bucket=b) == 4
    assert value(reg, "specdecode_requests_verified_total", bucket=b) == 3


def test_plain_decode_counts_a_cycle_without_positions():
    reg = CollectorRegistry()
    m = SpecMetrics(reg)
    m.record_cycle(40, 0, [0] * 40, {"verify": 0.012, "other": 0.001})
    assert value(reg, "specdecode_verify_cycles_total", bucket="32-63") == 1
    assert value(reg, "specdecode_tokens_generated_total") == 40
    assert not any(k[0] == "specdecode_position_attempts_total" for k in samples(reg))
    assert value(reg, "specdecode_cycle_seconds_count", bucket="32-63", phase="draft") == 1


def test_unknown_phase_is_refused():
    with pytest.raises(ValueError, match="allowed"):
        SpecMetrics(CollectorRegistry()).record_cycle(1, 1, [1], {"queue": 0.1})


def test_gauges_and_const_labels():
    reg = CollectorRegistry()
    m = SpecMetrics(reg, const_labels=SIMULATED_LABELS)
    m.set_steps(lambda b: 5 if b < 8 else 1)
    m.set_candidates([1, 3, 5])
    m.set_draft_tp(1)
    m.set_nccl_latency("all_reduce", 4096, 42e-6)
    s = samples(reg)
    assert all(dict(labels).get("simulated") == "true" for (_, labels) in s)
    assert value(reg, "specdecode_num_steps", bucket="1", simulated="true") == 5
    assert value(reg, "specdecode_num_steps", bucket="64+", simulated="true") == 1
    assert value(reg, "specdecode_candidate_steps", steps="3", simulated="true") == 1
    assert value(reg, "specdecode_draft_tp", simulated="true") == 1
    assert value(reg, "specdecode_nccl_latency_seconds", op="all_reduce", bytes="4096", simulated="true") == 42e-6


def test_bulk_add_equals_repeated_records():
    one, bulk = CollectorRegistry(), CollectorRegistry()
    a, b = SpecMetrics(one), SpecMetrics(bulk)
    phases = {"draft": 0.003, "verify": 0.011, "draft_extend": 0.001, "other": 0.0003}
    for c in (0, 1, 2, 2):
        a.record_cycle(1, 2, [c], phases)
    att, acc = position_counts(2, [0, 1, 2, 2])
    b.add_cycles(
        "1",
        cycles=4,
        requests=4,
        draft_steps=8,
        attempts=att,
        accepted=acc,
        phase_seconds={k: 4 * v for k, v in phases.items()},
        tokens=1 + 2 + 3 + 3,
    )
    sa, sb = samples(one), samples(bulk)
    strip = lambda s: {k: v for k, v in s.items() if not k[0].endswith("_created")}
    assert strip(sa).keys() == strip(sb).keys()
    for k in strip(sa):
        assert sa[k] == pytest.approx(sb[k]), k


def test_multiprocess_mode_aggregates_processes(tmp_path):
    """Two processes record into PROMETHEUS_MULTIPROC_DIR; render_latest merges them."""
    script = textwrap.dedent("""
        import sys
        from specdecode_runtime.metrics import SpecMetrics
        m = SpecMetrics()
        m.record_cycle(1, 3, [int(sys.argv[1])], {"verify": 0.01})
    """)
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for c in ("1", "3"):
        subprocess.run([sys.executable, "-c", script, c], check=True, env=env)
    render = textwrap.dedent("""
        from specdecode_runtime.metrics import render_latest
        print(render_latest().decode())
    """)
    out = subprocess.run([sys.executable, "-c", render], check=True, env=env, capture_output=True, text=True).stdout
    vals = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(out)
        for s in f.samples
    }
    assert vals[("specdecode_verify_cycles_total", (("bucket", "1"),))] == 2
    assert vals[("specdecode_position_accepted_total", (("bucket", "1"), ("position", "1")))] == 2
    assert vals[("specdecode_position_accepted_total", (("bucket", "1"), ("position", "3")))] == 1
