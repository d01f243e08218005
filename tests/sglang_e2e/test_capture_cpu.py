"""The traffic capture on the pinned SGLang's real CPU engine (``specdecode-runtime launch``, TP 1, the agreeing EAGLE
head): with ``capture`` in runtime.yaml, N greedy requests give N records on the capture directory whose output ids
are the ids the server answered with and whose prompt ids are the requests', and /metrics counts them written."""

from __future__ import annotations

import json
import time

import pytest
from conftest import MAX_NEW_TOKENS, PROMPTS
from test_stock_launch import _get, _post, _series, launched, write_runtime

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REQUESTS = [PROMPTS[0], PROMPTS[1], PROMPTS[0][:5], PROMPTS[1][:7]]


def capture_records(directory) -> list[dict]:
    return [json.loads(line) for f in sorted(directory.glob("*.jsonl")) for line in f.read_text().splitlines()]


@pytest.fixture(scope="module")
def served(tiny_models, tmp_path_factory):
    work = tmp_path_factory.mktemp("capture-on")
    capture = work / "capture"
    extra = f"capture: {{dir: {capture}, maxBytes: 1048576, retentionSeconds: 3600, sampleRatio: 1.0}}\n"
    port, _ = write_runtime(work, "capture-on", tiny_models, "{numSteps: 3, eagleTopK: 1, candidateSteps: [3]}", extra)
    with launched(work, port, ["--skip-server-warmup"], poll_s=2.0) as base:
        yield base, work, capture


def test_every_finished_request_is_captured_with_the_served_ids(served):
    base, work, capture = served
    answers = [
        _post(
            base + "/generate",
            {
                "input_ids": prompt,
                "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True},
            },
        )
        for prompt in REQUESTS
    ]
    deadline = time.monotonic() + 30
    while len(capture_records(capture)) < len(REQUESTS) and time.monotonic() < deadline:
        time.sleep(0.2)  # the writer thread appends after the answer went out
    records = capture_records(capture)
    assert len(records) == len(REQUESTS), records
    assert [r["prompt_ids"] for r in records] == REQUESTS
    assert [r["output_ids"] for r in records] == [a["output_ids"] for a in answers]
    assert all(len(r["output_ids"]) == MAX_NEW_TOKENS for r in records)
    assert all(r["finish"]["type"] == "length" and r["time"] > 0 for r in records)
    assert all(r["draft"]["source"] for r in records)  # the served draft's identity
    files = list(capture.glob("*.jsonl"))
    assert len(files) == 1 and files[0].name.startswith(f"{_hostname()}-")

    metrics = _get(base + "/metrics").decode()
    assert _series(metrics, "specdecode_capture_records_total") == {'{result="written"}': len(REQUESTS)}
    assert _series(metrics, "specdecode_capture_bytes") == {"": files[0].stat().st_size}
    assert "finished-request hook installed" in (work / "launch.log").read_text()


def _hostname() -> str:
    from specdecode_runtime.capture import pod_name

    return pod_name()
