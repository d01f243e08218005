"""SGLang 0.5.23's own adaptive step controller, driven per batch exactly as EAGLEWorkerV2 drives it.

The real classes are imported from the installed wheel (never re-implemented), so the comparison is against what
``--speculative-adaptive`` ships. SGLang calls ``activate_step_by_batch(bs)`` before each decode batch and
``on_verify_complete(num_correct_drafts_per_req, batch_size=len(reqs))`` after it
(eagle_worker_v2.py ``forward_batch_generation``, scheduler batch_result_processor.py); a decision therefore
applies from the next batch, which is what the simulator's observer hook gives.
"""

from __future__ import annotations

from typing import Any

from specdecode_runtime.contract.derived import draft_tokens_per_cycle
from specdecode_runtime.contract.versions import SGLANG_VERSION

INSTALL_HINT = (
    "SGLang's AdaptiveController could not be imported. Install the wheel without its GPU stack into the venv:\n"
    f"  .venv/bin/python -m pip install --no-deps sglang=={SGLANG_VERSION} orjson psutil triton\n"
    "(the benchmark refuses to run without it rather than silently skip the comparison)"
)


class SglangUnavailable(RuntimeError):
    pass


def import_sglang() -> tuple[Any, Any, Any]:
    try:
        from sglang.srt.speculative.adaptive_runtime_state import AdaptiveController, SpecRuntimeState
        from sglang.srt.speculative.adaptive_spec_params import AdaptiveSpeculativeParams
    except Exception as exc:  # any import-time failure of the wheel means the baseline is missing
        raise SglangUnavailable(f"{INSTALL_HINT}\n(import error: {type(exc).__name__}: {exc})") from exc
    return AdaptiveController, SpecRuntimeState, AdaptiveSpeculativeParams


def spec_cuda_graph_bs(max_bs: int) -> list[int]:
    """SGLang 0.5.23's decode CUDA-graph batch sizes with speculation on
    (arg_groups/cuda_graph_hook.py ``generate_decode_cuda_graph_batch_sizes``): batches are padded up to these, and
    the padded size picks the adaptive slot."""
    bs = (
        list(range(1, 9))
        + list(range(10, 33, 2))
        + list(range(40, 65, 4))
        + list(range(72, 257, 8))
        + list(range(272, max_bs + 1, 16))
    )
    bs = [b for b in bs if b <= max_bs]
    if max_bs not in bs:
        bs.append(max_bs)
    return bs


class _SimWorker:
    """The AdaptiveSpecWorker protocol: runtime states carry no GPU resources here, only the step count."""

    def __init__(self, steps: int, state_cls) -> None:
        self.speculative_num_steps = steps
        self._state_cls = state_cls

    def build_adaptive_runtime_state(self, speculative_num_steps, speculative_num_draft_tokens, cuda_graph_bs=None):
        return self._state_cls(speculative_num_steps, speculative_num_draft_tokens, None, None, None, None, None, None)

    def apply_runtime_state(self, state) -> None:
        self.speculative_num_steps = state.speculative_num_steps


class SglangAdaptive:
    """Attach to a SimEngine: the engine's step table is kept equal to what SGLang's router would pick per batch."""

    def __init__(self, engine, initial_steps: int = 3, max_bs: int = 256, cfg_path: str | None = None) -> None:
        AdaptiveController, SpecRuntimeState, AdaptiveSpeculativeParams = import_sglang()
        self.engine = engine
        self.worker = _SimWorker(initial_steps, SpecRuntimeState)
        self.params = AdaptiveSpeculativeParams(initial_steps=initial_steps, cfg_path=cfg_path)
        self.controller = AdaptiveController(self.worker, self.params)
        num_draft_tokens = draft_tokens_per_cycle(initial_steps, eagle_top_k=1)  # adaptive mode: top-k 1 only
        self.controller.register(self.worker.build_adaptive_runtime_state(initial_steps, num_draft_tokens))
        self.controller.init_states(cuda_graph_bs=spec_cuda_graph_bs(max_bs))
        self.max_bs = max_bs
        self.changes = 0
        self._table: list[tuple[int, int]] | None = None
        self._sync_table()
        engine.set_candidates(self.params.candidate_steps)
        engine.observe(self._on_cycle)

    def _sync_table(self) -> bool:
        """SGLang routes each batch through ``activate_step_by_batch``; with per-slot state that is a pure function
        of the batch size, i.e. a step table, which the engine applies from the next cycle."""
        pairs: list[tuple[int, int]] = []
        last = None
        for bs in range(1, self.max_bs + 1):
            steps = self.params.get_steps_for_batch(bs)
            if steps != last:
                pairs.append((bs, steps))
                last = steps
        if pairs != self._table:
            self._table = pairs
            self.engine.set_step_table(pairs)
            return True
        return False

    def _on_cycle(self, batch: int, steps: int, accepted: list, cycle_ms: float) -> None:
        self.controller.activate_step_by_batch(batch)
        self.controller.on_verify_complete(accepted, batch_size=batch)
        if self.params.get_steps_for_batch(batch) != steps and self._sync_table():
            self.changes += 1
