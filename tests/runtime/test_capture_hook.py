"""The capture's finished-request hook against the pinned SGLang's real classes: installed only with a ``capture``
section, it hands each request whose final output was just sent to the callback once (never a /health probe, never
an unfinished one), and removing the patches restores SGLang's method."""

from __future__ import annotations

import types

import pytest
from runtime_testlib import sglang_or_skip

from specdecode_runtime.capture import CaptureSettings
from specdecode_runtime.engine import EngineRuntime, EngineSettings
from specdecode_runtime.sglang_patch import finished_requests
from specdecode_runtime.sglang_patch import process_state as state


@pytest.fixture(scope="module", autouse=True)
def _sglang():
    sglang_or_skip()


def _streamer_method():
    from sglang.srt.managers.scheduler_components.output_streamer import SchedulerOutputStreamer

    return vars(SchedulerOutputStreamer)["_stream_output_generation"]


def _settings(capture: CaptureSettings | None) -> EngineSettings:
    return EngineSettings(
        num_steps=3,
        captured=(3,),
        live=False,
        buckets=(1,),
        draft_tp=1,
        control_port=None,
        token_file=None,
        capture=capture,
    )


def test_the_patch_points_of_the_capture_match_the_installed_sglang():
    from specdecode_runtime.sglang_patch import PATCH_POINTS, check_patch_points

    points = [
        p for p in PATCH_POINTS if "output_streamer" in p.target or "HEALTH_CHECK" in p.target or "Req." in p.target
    ]
    assert len(points) == 3
    results = check_patch_points(points)
    assert all(r.ok and "static" not in r.detail for r in results), [r.detail for r in results]


@pytest.mark.parametrize("capture", [False, True], ids=["off", "on"])
def test_the_hook_is_installed_only_with_a_capture_section(tmp_path, capture):
    from specdecode_runtime import sglang_patch as sp

    original = _streamer_method()
    sp.apply_patches(None)
    try:
        settings = CaptureSettings(str(tmp_path), 1 << 20, 3600.0) if capture else None
        EngineRuntime(_settings(settings)).install()
        assert finished_requests.hook_installed() is capture
        assert (_streamer_method() is not original) is capture
        assert (state.finished_cb is not None) is capture
    finally:
        sp.remove_patches()
    assert _streamer_method() is original and not finished_requests.hook_installed()
    assert state.finished_cb is None


class _Req:
    def __init__(self, rid, done, output_done=False):
        self.rid, self._done, self.finished_output = rid, done, output_done
        self.origin_input_ids = [1, 2, 3]
        self.output_ids = [7, 8, 9, 10]
        self.finished_len = 3 if done else None
        self.finished_reason = types.SimpleNamespace(to_json=lambda: {"type": "length", "length": 3}) if done else None

    def finished(self):
        return self._done

    @property
    def output_ids_through_stop(self):
        return self.output_ids[: self.finished_len] if self.finished_len is not None else self.output_ids


def test_the_wrap_hands_over_each_final_output_once():
    def orig(self, reqs, return_logprob, skip_req=None, is_idle_batch=False):
        for r in reqs:  # SGLang's accept: a finished request's final output
            if r is not skip_req and r.finished() and not r.finished_output:
                r.finished_output = True

    wrapped = finished_requests.wrap_stream_output(orig)
    seen = []
    done, running, health, already, skipped = (
        _Req("a", True),
        _Req("b", False),
        _Req("HEALTH_CHECK_1", True),
        _Req("c", True, output_done=True),
        _Req("d", True),
    )
    state.finished_cb = seen.append
    try:
        wrapped(None, [done, running, health, already, skipped], False, skipped)
        wrapped(None, [done], False)  # the overlap scheduler's second pass over a finished request
    finally:
        state.finished_cb = None
    assert seen == [done]
    assert finished_requests.record_of(done) == {
        "prompt_ids": [1, 2, 3],
        "output_ids": [7, 8, 9],
        "finish": {"type": "length", "length": 3},
    }
    late = _Req("e", True)
    wrapped(None, [late], False)  # no callback: a pass-through to SGLang's method
    assert late.finished_output and seen == [done]
