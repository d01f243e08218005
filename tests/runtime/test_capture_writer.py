"""The traffic capture's writer (``specdecode_runtime.capture``): the byte budget over this pod's files, retention
over every capture file, sampling, dropping when the queue is full, and a record larger than the budget refused."""

from __future__ import annotations

import json
import os
import threading
import time

import pytest

from specdecode_runtime.capture import DROPPED, SAMPLED_OUT, WRITTEN, CaptureSettings, CaptureWriter

HOUR = 3600.0
T0 = 1_750_000_000.0  # a fixed UTC instant: file names are stable


def settings(tmp_path, max_bytes=1 << 20, retention=24 * HOUR, ratio=1.0) -> CaptureSettings:
    return CaptureSettings(str(tmp_path), max_bytes, retention, ratio)


def record(i: int, width: int = 8) -> dict:
    return {"prompt_ids": [i] * width, "output_ids": [i + 1] * width, "finish": {"type": "length"}}


def line_bytes(i: int, width: int = 8, t: float = T0) -> int:
    rec = {**record(i, width), "time": t}
    return len((json.dumps(rec, separators=(",", ":")) + "\n").encode())


def files(tmp_path) -> list[str]:
    return sorted(n for n in os.listdir(tmp_path) if n.endswith(".jsonl"))


def lines(tmp_path) -> list[dict]:
    return [json.loads(x) for n in files(tmp_path) for x in (tmp_path / n).read_text().splitlines()]


@pytest.fixture
def clock():
    now = [T0]
    return now


def writer(tmp_path, clock, **kw) -> CaptureWriter:
    seen: dict = {"results": [], "bytes": []}
    w = CaptureWriter(
        kw.pop("settings", None) or settings(tmp_path),
        pod="sdd-0",
        clock=lambda: clock[0],
        on_result=lambda r, n: seen["results"].append((r, n)),
        on_bytes=seen["bytes"].append,
        **kw,
    )
    w.seen = seen  # type: ignore[attr-defined]
    return w


def test_records_are_json_lines_named_by_pod_and_hour(tmp_path, clock):
    w = writer(tmp_path, clock).start()
    try:
        for i in range(3):
            assert w.offer(lambda i=i: record(i)) == "queued"
        w.flush()
    finally:
        w.close()
    assert files(tmp_path) == [f"sdd-0-{time.strftime('%Y%m%dT%HZ', time.gmtime(T0))}-000001.jsonl"]
    got = lines(tmp_path)
    assert [r["prompt_ids"][0] for r in got] == [0, 1, 2]
    assert all(r["time"] == T0 for r in got)
    assert w.counts == {WRITTEN: 3, DROPPED: 0, SAMPLED_OUT: 0}
    assert w.seen["bytes"][-1] == sum(line_bytes(i) for i in range(3)) == w.total_bytes


def test_a_new_hour_starts_a_new_file(tmp_path, clock):
    w = writer(tmp_path, clock).start()
    try:
        w.offer(lambda: record(0))
        w.flush()
        clock[0] += HOUR
        w.offer(lambda: record(1))
        w.flush()
    finally:
        w.close()
    assert len(files(tmp_path)) == 2 and [r["prompt_ids"][0] for r in lines(tmp_path)] == [0, 1]


def test_the_budget_removes_the_oldest_files_and_is_never_exceeded(tmp_path, clock):
    size = line_bytes(0)
    budget = 10 * size
    w = writer(tmp_path, clock, settings=settings(tmp_path, max_bytes=budget), rotate_bytes=3 * size).start()
    try:
        for i in range(40):
            w.offer(lambda i=i: record(i % 9))
            w.flush()
            on_disk = sum((tmp_path / n).stat().st_size for n in files(tmp_path))
            assert on_disk <= budget, (i, on_disk)
            assert on_disk == w.total_bytes
    finally:
        w.close()
    kept = lines(tmp_path)
    assert 7 <= len(kept) <= 10  # whole files of 3 records go, oldest first
    assert [r["prompt_ids"][0] for r in kept] == [i % 9 for i in range(40 - len(kept), 40)]  # the newest stay
    assert w.counts[WRITTEN] == 40 and w.counts[DROPPED] == 0


def test_the_budget_counts_this_pods_files_already_there_and_leaves_other_pods_alone(tmp_path, clock):
    size = line_bytes(0)
    old = tmp_path / "sdd-0-20200101T00Z-000007.jsonl"
    old.write_bytes(b"x" * (4 * size))
    other = tmp_path / "sdd-1-20200101T00Z-000001.jsonl"
    other.write_bytes(b"y" * (50 * size))
    unrelated = tmp_path / "notes.txt"
    unrelated.write_text("kept")
    w = writer(tmp_path, clock, settings=settings(tmp_path, max_bytes=5 * size)).start()
    try:
        assert w.total_bytes == 4 * size
        w.offer(lambda: record(0))
        w.offer(lambda: record(1))  # 4 + 2 > 5: the restarted pod's old file goes
        w.flush()
    finally:
        w.close()
    assert not old.exists() and other.exists() and unrelated.exists()
    own = [n for n in files(tmp_path) if n.startswith("sdd-0-")]
    assert own[0].endswith("-000008.jsonl")  # sequence numbers go on from the files found


def test_a_record_larger_than_the_budget_is_refused(tmp_path, clock):
    w = writer(tmp_path, clock, settings=settings(tmp_path, max_bytes=1 << 20)).start()
    try:
        w.offer(lambda: record(1))
        w.offer(lambda: record(2, width=400_000))  # ~2.4 MB of JSON
        w.offer(lambda: record(3))
        w.flush()
    finally:
        w.close()
    assert [r["prompt_ids"][0] for r in lines(tmp_path)] == [1, 3]
    assert w.counts == {WRITTEN: 2, DROPPED: 1, SAMPLED_OUT: 0}
    assert (DROPPED, 1) in w.seen["results"]


def test_files_older_than_the_retention_are_removed_whoever_wrote_them(tmp_path, clock):
    retention = 2 * HOUR
    stale = [tmp_path / "sdd-9-20200101T00Z-000001.jsonl", tmp_path / "sdd-0-20200101T00Z-000001.jsonl"]
    fresh = tmp_path / "sdd-9-20200101T01Z-000002.jsonl"
    for f in (*stale, fresh):
        f.write_text("{}\n")
    for f in stale:
        os.utime(f, (T0 - retention - 10, T0 - retention - 10))
    os.utime(fresh, (T0 - retention + 600, T0 - retention + 600))
    w = writer(tmp_path, clock, settings=settings(tmp_path, retention=retention), sweep_seconds=0.05).start()
    try:
        assert not any(f.exists() for f in stale) and fresh.exists()  # swept at start
        assert w.total_bytes == 0
        w.offer(lambda: record(0))
        w.flush()
        clock[0] += 700  # fresh is now past the retention; the writer's own file is not
        deadline = time.monotonic() + 5
        while fresh.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        w.close()
    assert not fresh.exists()
    assert len(lines(tmp_path)) == 1


def test_sampling_leaves_out_the_drawn_share_without_building_the_record(tmp_path, clock):
    draws = iter([0.1, 0.5, 0.49, 0.9, 0.0])
    built = []
    w = writer(tmp_path, clock, settings=settings(tmp_path, ratio=0.5), rng=lambda: next(draws)).start()
    try:
        results = [w.offer(lambda i=i: built.append(i) or record(i)) for i in range(5)]
        w.flush()
    finally:
        w.close()
    assert results == ["queued", SAMPLED_OUT, "queued", SAMPLED_OUT, "queued"]
    assert built == [0, 2, 4]
    assert w.counts == {WRITTEN: 3, DROPPED: 0, SAMPLED_OUT: 2}


def test_ratio_zero_captures_nothing(tmp_path, clock):
    w = writer(tmp_path, clock, settings=settings(tmp_path, ratio=0.0)).start()
    try:
        assert [w.offer(lambda: record(0)) for _ in range(3)] == [SAMPLED_OUT] * 3
    finally:
        w.close()
    assert lines(tmp_path) == []


def test_a_full_queue_drops_and_counts_instead_of_waiting(tmp_path, clock, monkeypatch):
    """The writer is held inside a write; the scheduler's offers beyond the queue's size return at once."""
    gate, entered = threading.Event(), threading.Event()
    w = writer(tmp_path, clock, queue_size=2).start()
    real = w._write

    def slow_write(rec):
        entered.set()
        gate.wait(10)
        real(rec)

    monkeypatch.setattr(w, "_write", slow_write)
    try:
        w.offer(lambda: record(0))
        assert entered.wait(5)  # the writer holds record 0
        t = time.monotonic()
        results = [w.offer(lambda i=i: record(i)) for i in range(1, 6)]
        assert time.monotonic() - t < 0.5
        assert results == ["queued", "queued", DROPPED, DROPPED, DROPPED]
        gate.set()
        w.flush()
    finally:
        gate.set()
        w.close()
    assert [r["prompt_ids"][0] for r in lines(tmp_path)] == [0, 1, 2]
    assert w.counts == {WRITTEN: 3, DROPPED: 3, SAMPLED_OUT: 0}


def test_metrics_series_follow_the_writer(tmp_path, clock):
    from prometheus_client import CollectorRegistry

    from specdecode_runtime.metrics import SpecMetrics

    registry = CollectorRegistry()
    m = SpecMetrics(registry=registry)
    w = CaptureWriter(
        settings(tmp_path, ratio=0.5),
        pod="p",
        clock=lambda: clock[0],
        rng=iter([0.1, 0.9]).__next__,
        on_result=m.record_capture,
        on_bytes=m.set_capture_bytes,
    ).start()
    try:
        w.offer(lambda: record(0))
        w.offer(lambda: record(1))
        w.flush()
    finally:
        w.close()
    assert registry.get_sample_value("specdecode_capture_records_total", {"result": "written"}) == 1
    assert registry.get_sample_value("specdecode_capture_records_total", {"result": "sampled_out"}) == 1
    assert registry.get_sample_value("specdecode_capture_bytes") == line_bytes(0)


def test_without_capture_the_series_are_not_declared():
    from prometheus_client import CollectorRegistry

    from specdecode_runtime.metrics import SpecMetrics

    registry = CollectorRegistry()
    m = SpecMetrics(registry=registry, capture=False)
    m.record_capture("written")
    m.set_capture_bytes(5)
    names = {f.name for f in registry.collect()}
    assert not {n for n in names if n.startswith("specdecode_capture")}
