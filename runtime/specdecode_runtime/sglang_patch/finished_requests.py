"""The finished-request hook of the traffic capture (:mod:`specdecode_runtime.capture`).

SGLang hands every request's output to the detokenizer in ``SchedulerOutputStreamer._stream_output_generation``;
a request's final output is the call that sets its ``finished_output`` (the overlap scheduler's extra pass over an
already finished request is skipped there). The wrap notes the finished requests not yet output before the call
and hands those that were output during it to ``process_state.finished_cb``, one call per request, after SGLang's
own output went out. It is installed only where ``runtime.yaml`` has a ``capture`` section
(:func:`.apply.install_capture_hook`); without a callback it passes through.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Callable

from . import process_state as state

log = logging.getLogger("specdecode.capture")

STREAM_OUTPUT = (
    "sglang.srt.managers.scheduler_components.output_streamer.SchedulerOutputStreamer._stream_output_generation"
)

INSTALLED = "finished-request hook installed for the traffic capture"  # logged by TP rank 0 when it is


def set_finished_callback(cb: Callable[[Any], None] | None) -> None:
    """``cb(req)`` for every generation request whose final output was just sent (on the rank whose engine sets
    it; the capture sets it on TP rank 0). It runs on the scheduler thread and must not block."""
    state.finished_cb = cb


def wrap_stream_output(orig):
    """The wrap; the server's own ``/health`` probes (their request id starts with SGLang's health-check prefix)
    are not served traffic and never reach ``cb``."""
    from sglang.srt.constants import HEALTH_CHECK_RID_PREFIX  # installed in a scheduler process: SGLang is loaded

    def served(req) -> bool:
        return not (isinstance(req.rid, str) and req.rid.startswith(HEALTH_CHECK_RID_PREFIX))

    def _stream_output_generation(self, reqs, return_logprob, skip_req=None, is_idle_batch=False):
        cb = state.finished_cb
        if cb is None:
            return orig(self, reqs, return_logprob, skip_req, is_idle_batch)
        pending = [r for r in reqs if r is not skip_req and not r.finished_output and r.finished() and served(r)]
        out = orig(self, reqs, return_logprob, skip_req, is_idle_batch)
        for req in pending:
            if req.finished_output:
                try:
                    cb(req)
                except Exception:  # noqa: BLE001 - the capture never fails a request
                    log.exception("specdecode: capture of a finished request")
        return out

    return _stream_output_generation


def hook_installed() -> bool:
    """Whether SGLang's output path is wrapped in this process, read from the class itself (whoever wrapped it)."""
    module = sys.modules.get(STREAM_OUTPUT.rsplit(".", 2)[0])
    cls = getattr(module, "SchedulerOutputStreamer", None)
    return hasattr(vars(cls).get("_stream_output_generation") if cls is not None else None, "__specdecode_original__")


def record_of(req: Any) -> dict[str, Any]:
    """A finished request as the capture writes it: prompt and output token ids (the output as the client got it,
    through the stop token) and the finish reason."""
    reason = req.finished_reason
    return {
        "prompt_ids": [int(t) for t in req.origin_input_ids],
        "output_ids": [int(t) for t in req.output_ids_through_stop],
        "finish": reason.to_json() if reason is not None else None,
    }
