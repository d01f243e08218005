"""Captured traffic as data (``specdecode_runtime.adapt.data``): the split is a function of the record alone (stable as
files grow and whatever is read), the byte and record limits hold, a bad line is counted and skipped, never raised."""

from __future__ import annotations

import json
import os

import pytest

from specdecode_runtime.adapt import data
from specdecode_runtime.contract.cli_common import UsageError
from tests.runtime.adapt_testlib import write_lines


def _records(n: int, start: int = 0, out_len: int = 6) -> list[dict]:
    return [
        {
            "time": 1.0 * i,
            "prompt_ids": [3 + i % 50, 4 + i // 50, 5],
            "output_ids": [7] * out_len,
            "finish": {"type": "length", "length": out_len},
        }
        for i in range(start, start + n)
    ]


def _splits(directory, **kw) -> dict[tuple, str]:
    records, _ = data.read_capture(directory, **kw)
    return {(r.prompt_ids, r.time): data.split_of(r) for r in records}


def test_split_is_stable_as_files_grow_and_new_files_appear(tmp_path):
    first = tmp_path / "pod-a-20240101T00Z-000001.jsonl"
    write_lines(first, _records(300))
    before = _splits(tmp_path)
    assert len(before) == 300
    held = [k for k, s in before.items() if s == data.HELDOUT]
    assert 10 <= len(held) <= 60  # about 10 % of 300

    write_lines(first, _records(200, start=300))  # the same file grows
    write_lines(tmp_path / "pod-b-20240101T01Z-000001.jsonl", _records(200, start=500))  # another pod's file
    after = _splits(tmp_path)
    assert len(after) == 700
    assert {k: after[k] for k in before} == before  # no old record moved
    # and a bounded read (the newest file first) decides each record it reads alike
    partial = _splits(tmp_path, max_records=250)
    assert len(partial) == 250 and all(after[k] == s for k, s in partial.items())


def test_split_depends_on_the_prompt_only():
    a = data.Record((5, 6, 7), (1, 2), "length", time=1.0)
    b = data.Record((5, 6, 7), (9, 9, 9), "stop", time=2.0)  # a retry or a sampled variant of the same prompt
    assert data.split_of(a) == data.split_of(b)
    keys = [data.Record((i, i + 1), (), "length") for i in range(2000)]
    share = sum(data.split_of(r, 25.0) == data.HELDOUT for r in keys) / len(keys)
    assert 0.2 < share < 0.3


def test_record_and_byte_limits(tmp_path):
    path = tmp_path / "pod-a-20240101T00Z-000001.jsonl"
    write_lines(path, _records(100))
    records, stats = data.read_capture(tmp_path, max_records=40)
    assert len(records) == stats.records == 40 and stats.limit == "records"
    size = len(path.read_bytes().splitlines(keepends=True)[0])
    records, stats = data.read_capture(tmp_path, max_bytes=10 * size + size // 2)
    assert stats.limit == "bytes" and stats.bytes_read <= 10 * size + size // 2 and len(records) >= 9
    records, stats = data.read_capture(tmp_path)
    assert stats.limit is None and len(records) == 100 and stats.bytes_read == path.stat().st_size


def test_newest_file_is_read_first(tmp_path):
    write_lines(tmp_path / "pod-a-20240101T00Z-000001.jsonl", _records(5))
    write_lines(tmp_path / "pod-a-20240101T03Z-000002.jsonl", _records(5, start=100))
    records, stats = data.read_capture(tmp_path, max_records=5)
    assert stats.files == 1 and {r.time for r in records} == {100.0 + i for i in range(5)}


def test_malformed_lines_are_counted_and_skipped(tmp_path):
    good = _records(3)
    lines = [
        json.dumps(good[0]),
        "{not json",
        "[1, 2]",
        json.dumps({"prompt_ids": "abc", "output_ids": []}),
        json.dumps({"prompt_ids": [1, -2], "output_ids": []}),
        json.dumps({"prompt_ids": [True], "output_ids": []}),
        json.dumps({"prompt_ids": [], "output_ids": [1]}),
        json.dumps({"prompt_ids": [1], "output_ids": [1.5]}),
        json.dumps({"prompt_ids": [1, 2], "output_ids": [300]}),  # outside a vocabulary of 256
        json.dumps({"prompt_ids": [1] * 5000, "output_ids": []}),  # longer than the line limit below
        json.dumps(good[1]),
        "\xff\xfe",
        "[" * 100000 + "]" * 100000,  # nesting deeper than the JSON parser's recursion
    ]
    path = tmp_path / "x.jsonl"
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("\n".join(lines) + "\n")
        f.write(json.dumps(good[2]))  # a last line still being written: no newline yet
    records, stats = data.read_capture(tmp_path, vocab_size=256, max_line_bytes=8000)
    assert [r.time for r in records] == [0.0, 1.0]
    assert stats.malformed == 10 and stats.out_of_vocab == 1 and stats.incomplete == 1
    assert records[0].finish == "length" and records[0].prompt_ids == (3, 4, 5)


def test_unreadable_directory_is_a_usage_error(tmp_path):
    with pytest.raises(UsageError, match="--capture .*no such directory"):
        data.read_capture(tmp_path / "missing")
    f = tmp_path / "file"
    f.write_text("")
    with pytest.raises(UsageError, match="not a directory"):
        data.read_capture(f)
    (tmp_path / "dir").mkdir()
    (tmp_path / "dir" / "a.jsonl").mkdir()  # not a file: ignored
    (tmp_path / "dir" / "notes.txt").write_text("x\n")  # not a capture file: ignored
    assert data.read_capture(tmp_path / "dir")[1].files == 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file without permission")
def test_an_unreadable_file_is_listed_not_raised(tmp_path):
    write_lines(tmp_path / "a.jsonl", _records(2))
    bad = tmp_path / "b.jsonl"
    write_lines(bad, _records(2))
    bad.chmod(0)
    records, stats = data.read_capture(tmp_path)
    assert len(records) == 2 and stats.unreadable_files and "b.jsonl" in stats.unreadable_files[0]


def test_token_windows_cover_each_record():
    r = data.Record(tuple(range(1, 11)), tuple(range(11, 24)), "length")  # 23 tokens
    wins = data.token_windows([r], 10, min_length=4)
    assert wins == [list(range(1, 11)), list(range(11, 21)), list(range(14, 24))]
    assert data.token_windows([data.Record((1,), (2,), "length")], 10, min_length=4) == []


def test_heldout_pairs_keep_finished_records_in_a_stable_order():
    recs = [data.Record((i, 1), tuple(range(20)), "length") for i in range(10)]
    recs += [data.Record((99, 1), tuple(range(20)), "abort"), data.Record((98, 1), (1, 2), "stop")]
    pairs, skipped = data.heldout_pairs(recs, max_pairs=5, min_output=3, max_len=16)
    assert skipped == {"finish": 1, "short": 1} and len(pairs) == 5
    again, _ = data.heldout_pairs(list(reversed(recs)), max_pairs=5, min_output=3, max_len=16)
    assert pairs == again  # the order of the files does not choose the sample
    assert all(len(p) + len(o) <= 16 and len(o) == 14 and len(p) == 2 for p, o in pairs)
