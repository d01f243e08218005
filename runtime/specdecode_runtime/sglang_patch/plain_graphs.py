"""The target's plain decode CUDA graphs, captured at start-up beside the speculative tiers, for tier 0.

Why: a speculative SGLang server captures its target's decode graphs in ``TARGET_VERIFY`` mode only (one graph per
batch size and tier, over ``steps + 1`` tokens per request). A target-only cycle (:mod:`.plain_decode`) is a
``DECODE`` forward; without graphs of that mode it would run eagerly, which on a host-bound target costs more than
the speculation it replaces. So when tier 0 is among the captured tiers, every rank captures one more set of decode
graphs here, exactly as SGLang captures them for a server without speculation (``DecodeCudaGraphRunner`` with the
speculative algorithm out of the way while it is built), with the target's hidden state of the last position
captured too (the draft's catch-up extend reads it). Its capture time and device memory are returned (and exported,
``specdecode_plain_decode_graphs``): the price of a real tier 0.

Nothing is captured on a CPU, with CUDA graphs off, or when the target model runner has no decode graphs at all
(the target-only cycle then runs eagerly, as every other forward of that server does).
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from . import plain_decode

log = logging.getLogger("specdecode.plain_graphs")


@dataclass(frozen=True)
class Captured:
    seconds: float
    nbytes: int
    batch_sizes: tuple[int, ...]


@contextlib.contextmanager
def _not_speculative(model_runner):
    """The runner sees a server without speculation while its graphs are built: capture mode ``DECODE``, one token
    per request, no verify input."""
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    saved = model_runner.spec_algorithm
    model_runner.spec_algorithm = SpeculativeAlgorithm.NONE
    try:
        yield
    finally:
        model_runner.spec_algorithm = saved


def _runner_class():
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode
    from sglang.srt.model_executor.runner import DecodeCudaGraphRunner

    class PlainDecodeGraphRunner(DecodeCudaGraphRunner):
        """SGLang's decode graph runner, capturing the last position's hidden state (for the catch-up extend)."""

        @property
        def return_hidden_states_mode(self):
            return CaptureHiddenMode.LAST

        @return_hidden_states_mode.setter
        def return_hidden_states_mode(self, value) -> None:  # BaseRunner assigns the server's mode: keep ours
            return None

    return PlainDecodeGraphRunner


def capture(worker: Any) -> Captured | None:
    """Capture the plain decode graphs on this rank (every rank, in the same order) and register them with
    :mod:`.plain_decode`; None where nothing is captured."""
    import torch

    mr = worker.target_worker.model_runner
    if not torch.cuda.is_available() or getattr(mr, "decode_cuda_graph_runner", None) is None:
        return None
    free0 = torch.cuda.mem_get_info()[0]
    t0 = time.perf_counter()
    backup_init = mr.init_new_workspace
    saved_backend = mr.attn_backend
    try:
        backend = mr._get_attention_backend(init_new_workspace=True)
        with _not_speculative(mr):
            mr.attn_backend = backend
            runner = _runner_class()(mr, attn_backend=backend, speculative_num_steps=0, speculative_num_draft_tokens=1)
    finally:
        mr.init_new_workspace = backup_init
        mr.attn_backend = saved_backend
    torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    nbytes = int(free0 - torch.cuda.mem_get_info()[0])
    plain_decode.plain_graph_runner = runner
    plain_decode.plain_attn_backend = backend
    sizes = tuple(int(b) for b in getattr(runner, "capture_bs", ()) or ())
    log.info(
        "specdecode: plain decode graphs for tier 0: %.2f s, %.0f MB, batch sizes %s", seconds, nbytes / 1e6, sizes
    )
    return Captured(seconds=seconds, nbytes=nbytes, batch_sizes=sizes)
