"""Without ``capture`` in runtime.yaml (spec.draft.adaptation off, the default) the same CPU engine captures nothing:
no capture file anywhere, SGLang's output path is not wrapped (TP rank 0 logs the hook whenever it finds it
installed) and /metrics has no capture series, after requests were served."""

from __future__ import annotations

import pytest
import yaml
from conftest import MAX_NEW_TOKENS, PROMPTS
from test_stock_launch import _get, _post, launched, write_runtime

from specdecode_runtime.sglang_patch.finished_requests import INSTALLED

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def served(tiny_models, tmp_path_factory):
    work = tmp_path_factory.mktemp("capture-off")
    port, _ = write_runtime(work, "capture-off", tiny_models, "{numSteps: 3, eagleTopK: 1, candidateSteps: [3]}")
    assert "capture" not in yaml.safe_load((work / "runtime.yaml").read_text())
    with launched(work, port, ["--skip-server-warmup"], poll_s=2.0) as base:
        yield base, work


def test_capture_off_writes_nothing_hooks_nothing_and_exports_nothing(served):
    base, work = served
    for prompt in PROMPTS:
        out = _post(
            base + "/generate",
            {
                "input_ids": prompt,
                "sampling_params": {"temperature": 0, "max_new_tokens": MAX_NEW_TOKENS, "ignore_eos": True},
            },
        )
        assert len(out["output_ids"]) == MAX_NEW_TOKENS
    metrics = _get(base + "/metrics").decode()
    log = (work / "launch.log").read_text()
    assert "specdecode: step control on" in log  # TP rank 0's engine started: its hook report below is meaningful
    assert INSTALLED not in log
    assert "capturing finished requests" not in log
    assert not list(work.rglob("*.jsonl"))
    assert "specdecode_verify_cycles_total" in metrics  # the runtime's series are served ...
    assert "specdecode_capture" not in metrics  # ... the capture's are not, not even declared
