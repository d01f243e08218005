"""Hook points for the engine wiring (:mod:`specdecode_runtime.engine`): per-verify acceptance and phase times,
step-tier control, the per-iteration step-table exchange, and worker-ready start-up.

These wrappers are installed whether or not the draft is split (``apply_patches(None)`` installs only these and
the NCCL re-apply), and each is a pass-through while its callback is unset. All of them run on the host, outside
any CUDA graph.
"""

from __future__ import annotations

import time as _time
from typing import TYPE_CHECKING, Any, Callable

from . import plain_decode
from . import process_state as state
from .cycle_clock import CycleClock, CycleStamp
from .patch_points import EW2

if TYPE_CHECKING:
    from .patch_set import PatchSet


def set_verify_callback(cb: Callable[[list[int], int, int, dict[str, float]], None] | None) -> None:
    """Metrics hook point: ``EAGLEWorkerV2.on_verify_complete_cpu``. After every decode verify, on every TP rank,
    ``cb(num_correct_drafts_per_req, batch_size, num_steps, phase_seconds)`` is called with the accepted draft count
    per request (bonus token excluded), already on the CPU (no extra GPU sync), the tier that verify ran with
    (stamped at launch: under the overlap scheduler the worker may already run the next batch's tier), and the
    host-side phase times of :class:`.cycle_clock.CycleClock` (empty if the result carries no stamp; with a
    ``prefill`` key for prefill work that ran inside the cycle, which the four phases exclude).
    Per-position acceptance follows: position j was accepted in a request iff its count >= j. Export from one rank
    (tp_rank 0)."""
    state.verify_cb = cb


def set_step_control(cb: Callable[[int], int | None] | None) -> None:
    """Step-control swap point: ``EAGLEWorkerV2.activate_step_by_batch``, called before every decode round on
    every TP rank. ``cb(batch_size)`` returns the step count to run, or None to keep the current one; the value
    must be identical on every rank at the same iteration (the engine's step table, exchanged in
    :func:`set_iteration_callback`'s hook). The swap is SGLang's pointer swap to a pre-captured tier
    (``adaptive_controller._activate``), so the runtime must start with ``--speculative-adaptive`` and the tiers
    (``speculative.candidateSteps``) pre-built; an uncaptured step count raises. While a callback is set, SGLang's
    own EMA controller is neither consulted here nor fed in ``on_verify_complete_cpu``: the table is the only
    actuator."""
    state.step_cb = cb


def set_iteration_callback(cb: Callable[[], None] | None) -> None:
    """``Scheduler.ingest_requests``: ``cb()`` once per scheduler-loop pass, on every TP rank, in the same order,
    before the pass chooses and launches its batch (outside any CUDA graph). The engine exchanges step tables
    here."""
    state.iteration_cb = cb


def set_worker_ready_callback(cb: Callable[[Any], None] | None) -> None:
    """``EAGLEWorkerV2.init_cuda_graphs`` (every rank, once, after the tiers are captured and before the event
    loop): ``cb(worker)``. The engine starts its channel, preflight, metrics and control server here."""
    state.ready_cb = cb


def wrap_verify(orig):
    def on_verify_complete_cpu(self, num_correct_drafts_per_req, batch_size=0):
        if state.verify_cb is not None:
            stamp = state.result_cycle
            steps = stamp.steps if stamp is not None and stamp.steps is not None else self.speculative_num_steps
            state.verify_cb(list(num_correct_drafts_per_req), batch_size, steps, state.clock.phases(stamp))
        if state.step_cb is not None:
            return None  # the step table is the only actuator: SGLang's EMA controller is never fed
        return orig(self, num_correct_drafts_per_req, batch_size)

    return on_verify_complete_cpu


def _decode_cycle(orig, self, batch, on_publish, grammar_barrier, pp_proxy_tensors):
    """One decode cycle: the target alone where the tier is 0 (:mod:`.plain_decode`), else SGLang's speculative
    cycle, preceded by the draft's catch-up over the positions decoded while speculation was off."""
    if plain_decode.enabled and state.step_cb is not None and self.adaptive_controller is not None:
        self.activate_step_by_batch(batch.seq_lens.shape[0])  # the tier of this cycle (SGLang asks again: same)
        if self.speculative_num_steps == 0:
            if plain_decode.eligible(batch):
                stamp = state.cycle
                if stamp is not None:
                    stamp.steps, stamp.t_verify_start = 0, _time.perf_counter()
                try:
                    return plain_decode.target_only_cycle(self, batch, on_publish)
                finally:
                    if stamp is not None:
                        stamp.t_verify_end = _time.perf_counter()
        elif plain_decode.window:
            plain_decode.catch_up(self, batch)
    return orig(self, batch, on_publish, grammar_barrier, pp_proxy_tensors)


def wrap_forward(orig):
    """Stamps a decode cycle's launch (the stamp rides on the returned result to its later result processing) and
    routes the cycle (:func:`_decode_cycle`); a prefill makes its request slots forget earlier target-only
    history."""

    def forward_batch_generation(self, batch, on_publish=None, grammar_barrier=None, pp_proxy_tensors=None):
        decode = not (batch.forward_mode.is_extend() or batch.is_extend_in_batch) and not batch.forward_mode.is_idle()
        if not decode:
            if plain_decode.window and not batch.forward_mode.is_idle():
                plain_decode.window.forget(batch.req_pool_indices)
            return orig(self, batch, on_publish, grammar_barrier, pp_proxy_tensors)
        if state.verify_cb is None:
            return _decode_cycle(orig, self, batch, on_publish, grammar_barrier, pp_proxy_tensors)
        stamp = state.cycle = CycleStamp(t_start=_time.perf_counter())
        try:
            out = _decode_cycle(orig, self, batch, on_publish, grammar_barrier, pp_proxy_tensors)
        finally:
            state.cycle = None
        stamp.t_end = _time.perf_counter()
        try:
            out.specdecode_cycle = stamp
        except AttributeError:  # a result type with slots: phases are then not recorded
            pass
        return out

    return forward_batch_generation


def wrap_verify_launch(orig):
    def verify(self, batch, *a, **k):
        stamp = state.cycle
        if stamp is None:
            return orig(self, batch, *a, **k)
        stamp.steps = self.speculative_num_steps
        stamp.t_verify_start = _time.perf_counter()
        try:
            return orig(self, batch, *a, **k)
        finally:
            stamp.t_verify_end = _time.perf_counter()

    return verify


def wrap_resolve(orig):
    def _resolve_spec_v2_tokens(self, result, batch):
        state.result_cycle = getattr(result, "specdecode_cycle", None)
        try:
            return orig(self, result, batch)
        finally:
            state.result_cycle = None

    return _resolve_spec_v2_tokens


def _is_prefill(batch) -> bool:
    return batch is not None and batch.forward_mode.is_extend()


def _timed_prefill(phase: str, orig, self, batch, *args):
    """``orig(self, batch, *args)``; for a prefill batch (while metrics are on) its host interval goes to the cycle
    clock, which leaves the part inside a decode cycle out of that cycle's phases, and to the prefill probe as
    ``phase`` (``launch`` or ``result``)."""
    if state.verify_cb is None or not _is_prefill(batch):
        return orig(self, batch, *args)
    t0 = _time.perf_counter()
    try:
        return orig(self, batch, *args)
    finally:
        t1 = _time.perf_counter()
        state.clock.prefill(t0, t1)
        if state.prefill_probe is not None:
            state.prefill_probe.host(phase, t1 - t0)


def wrap_run_batch(orig):
    """Each prefill launch (decode launches are stamped in ``forward_batch_generation``)."""

    def run_batch(self, batch, pp_proxy_tensors=None):
        return _timed_prefill("launch", orig, self, batch, pp_proxy_tensors)

    return run_batch


def wrap_process_result(orig):
    """Each prefill result's processing."""

    def process_batch_result(self, batch, result):
        return _timed_prefill("result", orig, self, batch, result)

    return process_batch_result


def wrap_prefill_forward(orig):
    """The speculative prefill (target extend, then the draft's extend over the prompt), split by the prefill probe
    where one is installed."""

    def _forward_prefill_batch(self, batch, on_publish=None, pp_proxy_tensors=None, coordination_plan=None):
        probe = state.prefill_probe
        if probe is None:
            return orig(self, batch, on_publish, pp_proxy_tensors, coordination_plan)
        return probe.run_prefill(orig, self, batch, on_publish, pp_proxy_tensors, coordination_plan)

    return _forward_prefill_batch


def wrap_ready(orig):
    def init_cuda_graphs(self):
        out = orig(self)
        if state.ready_cb is not None:
            state.ready_cb(self)
        return out

    return init_cuda_graphs


def wrap_ingest(orig):
    def ingest_requests(self, stop_at_pause=False):
        if state.iteration_cb is not None:
            state.iteration_cb()
        return orig(self, stop_at_pause)

    return ingest_requests


def wrap_activate(orig):
    def activate_step_by_batch(self, batch_size):
        if state.step_cb is not None:
            want = state.step_cb(batch_size)
            if want is not None and want != self.speculative_num_steps:
                if self.adaptive_controller is None:
                    raise RuntimeError("step control needs --speculative-adaptive (pre-captured tiers)")
                self.adaptive_controller._activate(int(want))
            return None
        return orig(self, batch_size)

    return activate_step_by_batch


def install_engine_hooks(ps: PatchSet) -> None:
    """Wrap every hook point (a fresh :class:`~.cycle_clock.CycleClock` per installation)."""
    state.clock = CycleClock()
    plain_decode.reset()
    ps.wrap(f"{EW2}.EAGLEWorkerV2.on_verify_complete_cpu", wrap_verify)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.activate_step_by_batch", wrap_activate)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.forward_batch_generation", wrap_forward)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.verify", wrap_verify_launch)
    ps.wrap(f"{EW2}.EAGLEWorkerV2.init_cuda_graphs", wrap_ready)
    ps.wrap("sglang.srt.managers.scheduler.Scheduler.ingest_requests", wrap_ingest)
    ps.wrap("sglang.srt.managers.scheduler.Scheduler.run_batch", wrap_run_batch)
    ps.wrap("sglang.srt.managers.scheduler.Scheduler.process_batch_result", wrap_process_result)
    ps.wrap(f"{EW2}.EAGLEWorkerV2._forward_prefill_batch", wrap_prefill_forward)
    ps.wrap(
        "sglang.srt.managers.scheduler_components.batch_result_processor.SchedulerBatchResultProcessor"
        "._resolve_spec_v2_tokens",
        wrap_resolve,
    )
