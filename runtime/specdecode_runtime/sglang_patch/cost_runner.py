"""The start-up cost probe's stage runner for SGLang 0.5.23's ``EAGLEWorkerV2``.

:mod:`specdecode_runtime.cost_probe` times a ``run_step(stage, steps, batch)`` callable; this module supplies one
that launches the forward pass SGLang itself runs for that stage, on dummy inputs, once the tiers are captured and
before the scheduler serves.

How a stage is launched, and why this way:

* ``verify`` at tier k: the target model runner's own warm-up dummy forward, ``EagerRunner._dummy_run`` (the
  forward SGLang runs for its flashinfer autotune), with tier k applied first. ``_dummy_run`` builds its
  ``ForwardBatch`` exactly as SGLang's warm-up and graph capture do (``TARGET_VERIFY`` over
  ``decode_num_tokens_per_req()`` tokens per request, a dummy ``EagleVerifyInput``, the attention backend's
  metadata), so what is timed is the target's real verify forward at that width. Tier k's target side is
  applied for the forward (:meth:`SGLangStageRunner.tier`): SGLang's capture-time override of the step count and
  width, and the tier's own target attention backend from its ``AdaptiveController`` state; k = 0 without a
  captured tier 0 runs the one-token verify SGLang runs for ``steps == 0``. Building ``ForwardBatch`` objects
  here instead would copy forty fields whose meaning moves between SGLang releases; replaying the captured CUDA
  graphs would not run on the CPU path the tests use, and a dummy generate-request loop cannot run here at all (the
  scheduler's event loop has not started when the tiers are ready). It is eager, not a graph replay: on a GPU a
  small-batch point includes kernel-launch time the captured graph avoids. ``_dummy_run`` synchronises the device and passes a TP barrier before
  its forward, so every rank launches the same forward at the same moment (the target's all-reduces line up) and
  the time includes one barrier, which is the same on every tier and so lands in the fitted base cost, not in the
  per-token cost.
* ``draft_step``, ``draft_extend``, ``overhead``, ``broadcast``: not launched yet (the draft model's forward needs
  an ``EagleDraftInput`` / ``EagleDraftExtendInput`` carrying target hidden states that SGLang only builds inside
  ``draft()`` and ``_draft_extend_for_decode``). The runner raises :class:`StageUnavailable` for them, identically
  on every rank, so :func:`cost_probe.run_probe` leaves them out with a log line. The verify points are exported,
  but ``cost_probe.fit_bucket`` makes no cycle profile from verify alone (it would price drafting at zero): the
  tuner keeps its per-cycle phase averages until the draft stages are measured too.

Every rank runs the same points in the same order and, on TP > 1, the same number of calls per point (rank 0
decides, :func:`specdecode_runtime.engine._rank0_decides`), so the forwards' collectives line up.

The worker's running tier is never swapped out, so the first served batch runs the configured numSteps.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Iterator

log = logging.getLogger("specdecode.cost_runner")

SUPPORTED_STAGES = ("verify",)


class StageUnavailable(RuntimeError):
    """The runner cannot launch this stage on this engine (left out of the profile, same on every rank)."""


class SGLangStageRunner:
    """``cost_probe.RunStep`` over one ``EAGLEWorkerV2``; build it in the worker-ready hook on every TP rank."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.target_runner = worker._target_worker.model_runner
        self._buffers: dict[tuple[int, int], Any] = {}

    # ---- tier selection ----------------------------------------------------------------------------------------
    def captured_tiers(self) -> list[int]:
        ctl = getattr(self.worker, "adaptive_controller", None)
        return sorted(ctl._states) if ctl is not None else [int(self.worker.speculative_num_steps)]

    @contextlib.contextmanager
    def tier(self, steps: int) -> Iterator[None]:
        """The target side of tier ``steps`` for the duration: SGLang's capture-time override of the step count and
        draft-token width (``_override_worker_state``, which restores them) plus that tier's target attention
        backend (what ``apply_runtime_state`` swaps in on the target). Not ``AdaptiveController._activate``: a
        full swap would also rebuild the draft side and log a tier switch per probe point; the running tier's
        objects are never replaced, so the first served batch runs the configured numSteps."""
        w = self.worker
        if int(steps) == int(w.speculative_num_steps):
            yield
            return
        ctl = getattr(w, "adaptive_controller", None)
        state = ctl._states.get(int(steps)) if ctl is not None else None
        width = int(state.speculative_num_draft_tokens) if state is not None else int(steps) + 1
        mr = self.target_runner
        running_backend = mr.attn_backend
        with w._override_worker_state(int(steps), width):
            if state is not None and state.target_attn_backend is not None:
                mr.attn_backend = state.target_attn_backend
            try:
                yield
            finally:
                mr.attn_backend = running_backend

    # ---- stages --------------------------------------------------------------------------------------------------
    def _verify(self, steps: int, batch: int) -> None:
        eager = self.target_runner.eager_runner
        with self.tier(steps):
            width = int(self.target_runner.decode_num_tokens_per_req())
            key = (batch, width)
            buffers = self._buffers.get(key)
            if buffers is None:
                buffers = self._buffers[key] = eager._alloc_dummy_decode_buffers(batch, num_tokens_per_req=width)
            with eager.model_context():
                eager._dummy_run(batch, buffers=buffers)

    def __call__(self, stage: str, steps: int, batch: int) -> None:
        if stage == "verify":
            try:
                return self._verify(int(steps), int(batch))
            except Exception as exc:  # the probe logs only the message: name the failing frame in it
                import traceback

                where = traceback.extract_tb(exc.__traceback__)[-1]
                raise RuntimeError(f"{type(exc).__name__}: {exc} ({where.filename}:{where.lineno} "
                                   f"in {where.name})") from exc
        raise StageUnavailable(f"stage {stage!r} is not launched by the SGLang runner (measured: "
                               f"{', '.join(SUPPORTED_STAGES)})")


def sync_for(worker: Any):
    """The device synchronise matching the target's device (CPU forwards are synchronous)."""
    import torch

    device = str(getattr(worker._target_worker.model_runner, "device", "cpu"))
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.synchronize
    return lambda: None
