"""The start-up cost probe's stage runner for the pinned SGLang's ``EAGLEWorkerV2``.

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
  small-batch point includes kernel-launch time the captured graph avoids. ``_dummy_run`` synchronises the device
  and passes a TP barrier before its forward, so every rank launches the same forward at the same moment (the target's all-reduces line up) and
  the time includes one barrier, which is the same on every tier and so lands in the fitted base cost, not in the
  per-token cost.
* ``draft_step``: one forward of the draft model over one token per sequence and branch, as one iteration of
  ``EagleDraftWorker.draft_forward`` runs it: a ``DECODE`` ``ForwardBatch`` carrying an ``EagleDraftInput`` (the
  fields SGLang's own ``EAGLEDraftCudaGraphRunner`` fills at capture), the draft's multi-step attention backend
  planned once for the batch (as ``draft()`` plans it once per cycle), the forward under that backend's first step
  and the draft's top-k pick. The backend is the running tier's, or the first captured tier that drafts more than
  one step (a one-step tier runs no draft decode forward). SGLang has no dummy-forward entry for an EAGLE draft
  (``_dummy_run`` refuses a draft runner without target-verify support), so the draft stages build their
  ``ForwardBatch`` from the fields SGLang's own draft graph runners set at capture, and nothing else.
* ``draft_extend`` at tier k: the draft's KV catch-up as ``_draft_extend_for_decode`` runs it eagerly: a
  ``DRAFT_EXTEND_V2`` ``ForwardBatch`` over ``batch * num_draft_tokens`` rows of tier k (``k + 1`` for a chain)
  with an ``EagleDraftExtendInput`` carrying dummy target hidden states of the width the draft reads
  (``get_draft_input_from_target_hidden_dim``: three target layers for EAGLE-3), through the draft model runner
  with tier k's draft-extend attention backend, then the per-request row selection and top-k.
* ``overhead``: the cycle's host-side sampling work that no forward covers, SGLang's ``ModelRunner.sample`` on the
  target over ``[batch, vocab]`` greedy logits plus the copy of the chosen tokens to the host (what every decode
  cycle, speculative or not, does once after its last forward).
* ``broadcast`` (split draft only) at tier k: the proposal broadcast of :mod:`.verify_broadcast` /
  :class:`.remote_draft_worker.RemoteDraftWorker` itself, ``ProposalBroadcaster.broadcast`` over the broadcast
  communicator (S's leader to every target rank) with tier k's ``ProposalLayout``: the one collective a split
  draft adds to a cycle.

The draft stages run inside ``draft_tp_context(draft_worker.parallel_layout)`` as SGLang's decode does, so on a
split draft the draft model's own collectives stay inside S. On ranks outside S (no draft model) the draft stages do
nothing; TP rank 0 exports the profile, so when S does not contain TP rank 0 the draft stages are left out on every
rank (:class:`StageUnavailable`) and the tuner keeps its phase averages rather than a near-zero draft cost.

All dummy rows point at request slot 0 and KV slot 0, the slot SGLang reserves for padding (its graph capture writes
there too), so the probe never touches a live request's cache.

Every rank runs the same points in the same order and, on TP > 1, the same number of calls per point (rank 0
decides, :func:`specdecode_runtime.engine._rank0_decides`), so the forwards' collectives line up.

The worker's running tier is never swapped out, so the first served batch runs the configured numSteps.

**Graph mode (CUDA graphs captured).** When the target runs on CUDA with captured decode graphs, what a cycle costs is
what its graphs cost, and the eager forwards above measure something else (kernel launches the graph avoids, first-call
Triton compilation, no fused replay): on an H200 an eager probe priced a cycle 4.4x the one served. So on such an
engine every stage replays the very graphs serving replays: tier k's target verify graph, tier k's multi-step draft
graph (the ``draft`` stage: a tier's draft steps are one graph in SGLang) and tier k's draft-extend graph, at the
smallest captured size that holds the probed batch (the size serving pads that batch to), timed with CUDA events.
The replays run before the scheduler serves, on the static inputs the capture left: every row points at request
slot 0 and KV slot 0 (the padding slot), as at capture, so no live cache is touched. A stage with no graph at that
tier (verify at k = 0 unless tier 0 is captured, a backend without replayable graphs) is left out with a log line;
the fit extrapolates k = 0 from the tiers. The cycle overhead (sampling) and the broadcast run as in eager mode.
"""

from __future__ import annotations

import contextlib
import logging
import traceback
from types import SimpleNamespace
from typing import Any, Iterator

from ..cost_probe import cuda_event_timer
from ..draft_group import ProposalLayout
from . import process_state as state

log = logging.getLogger("specdecode.cost_runner")

SUPPORTED_STAGES = ("verify", "draft_step", "draft", "draft_extend", "overhead", "broadcast")


class StageUnavailable(RuntimeError):
    """The runner cannot launch this stage on this engine (left out of the profile, same on every rank)."""


class SGLangStageRunner:
    """``cost_probe.RunStep`` over one ``EAGLEWorkerV2``; build it in the worker-ready hook on every TP rank."""

    def __init__(self, worker: Any) -> None:
        self.worker = worker
        self.target_runner = worker._target_worker.model_runner
        self._buffers: dict[tuple, Any] = {}
        self.mode = "graph" if self._graphs_captured() else "eager"
        # forwards on the host CPU (SGLang's --device cpu): timed by a shared host clock (cost_probe.probe_at_start)
        self.host_timed = str(getattr(self.target_runner, "device", "")).startswith("cpu")
        self.timer = None
        if self.mode == "graph":
            self.timer = cuda_event_timer
        self.max_batch = self._largest_batch()
        # the target verify graph sizes serving pads a batch to: the probe times a bucket at one of them
        self.graph_sizes = _graph_sizes(self.target_runner.decode_cuda_graph_runner) if self.mode == "graph" else []

    def _graphs_captured(self) -> bool:
        """CUDA decode graphs are what serving replays: the target's verify graph runner exists with graphs."""
        device = str(getattr(self.target_runner, "device", "cpu"))
        runner = getattr(self.target_runner, "decode_cuda_graph_runner", None)
        return device.startswith("cuda") and bool(_graph_sizes(runner))

    def _largest_batch(self) -> int | None:
        """The largest batch every stage can launch here: the eager runners' static input buffers (target and
        draft) and the proposal broadcaster are sized to what the scheduler may ever batch; a probe point above
        it would measure a batch the pod never runs (``cost_probe.probe_batch`` caps at this)."""
        sizes = [getattr(getattr(self.target_runner, "eager_runner", None), "_eager_max_bs", None)]
        draft = getattr(self.worker, "_draft_worker", None)
        sizes.append(
            getattr(getattr(getattr(draft, "draft_runner", None), "eager_runner", None), "_eager_max_bs", None)
        )
        if state.split is not None:
            sizes.append(getattr(state.split.broadcaster, "max_bs", None))
        if getattr(self, "mode", "eager") == "graph":  # above the largest graph SGLang serves eagerly: not probed
            graphs = _graph_sizes(self.target_runner.decode_cuda_graph_runner)
            sizes.append(max(graphs) if graphs else None)
        bounds = [int(x) for x in sizes if isinstance(x, int) and x > 0]
        return min(bounds) if bounds else None

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

    # ---- draft side ----------------------------------------------------------------------------------------------
    @property
    def draft_worker(self) -> Any:
        return self.worker._draft_worker

    def _draft_runs_here(self) -> bool:
        """False on a rank outside S. Raises, identically on every rank, when S does not hold TP rank 0 (the rank
        that exports): a draft cost timed where there is no draft would read as free drafting."""
        split = state.split
        if split is None:
            return True
        placement = split.groups.placement
        if not placement.contains(placement.target_ranks[0]):
            raise StageUnavailable("the draft group does not contain TP rank 0, which exports the profile")
        return bool(split.groups.in_draft)

    @contextlib.contextmanager
    def _draft_context(self) -> Iterator[None]:
        """The contexts SGLang's decode enters around every draft call (``forward_batch_generation``)."""
        from sglang.srt.layers.moe.utils import speculative_moe_a2a_backend_context, speculative_moe_backend_context
        from sglang.srt.speculative.spec_utils import draft_tp_context

        layout = self.draft_worker.parallel_layout
        if state.split is not None and state.split.draft_layout is not None:
            layout = (
                state.split.draft_layout
            )  # S's own layout, detached while the ready hook runs inside the tier build
        with draft_tp_context(layout), speculative_moe_backend_context(), speculative_moe_a2a_backend_context():
            yield

    def _tier_draft_side(self, steps: int) -> tuple[int, Any]:
        """Tier ``steps``'s draft tokens per request and draft-extend attention backend: the running tier's own
        objects, else its ``AdaptiveController`` state's."""
        dw = self.draft_worker
        if int(steps) == int(self.worker.speculative_num_steps):
            return int(dw.speculative_num_draft_tokens), getattr(dw, "draft_extend_attn_backend", None)
        ctl = getattr(self.worker, "adaptive_controller", None)
        tier = ctl._states.get(int(steps)) if ctl is not None else None
        if tier is None:
            raise StageUnavailable(f"tier {steps} is not captured")
        return int(tier.speculative_num_draft_tokens), tier.draft_extend_attn_backend

    def _draft_decode_backend(self) -> Any:
        """A multi-step draft decode backend with at least one step: the running tier's, else the first captured
        tier's (the per-step forward is the same draft model at every tier)."""
        dw = self.draft_worker
        backends = [dw.draft_attn_backend]
        ctl = getattr(self.worker, "adaptive_controller", None)
        if ctl is not None:
            backends += [ctl._states[k].draft_attn_backend for k in sorted(ctl._states)]
        for b in backends:
            if b is not None and getattr(b, "attn_backends", None):
                return b
        raise StageUnavailable("no captured tier drafts more than one step: no draft decode forward to time")

    def _dummy_slots(self, batch: int, rows: int, seq_len: int) -> dict[str, Any]:
        import torch

        dev = self.draft_worker.draft_runner.device
        return dict(
            req_pool_indices=torch.zeros((batch,), dtype=torch.int64, device=dev),
            seq_lens=torch.full((batch,), seq_len, dtype=torch.int64, device=dev),
            seq_lens_cpu=torch.full((batch,), seq_len, dtype=torch.int64),
            seq_lens_sum=batch * seq_len,
            out_cache_loc=torch.zeros((rows,), dtype=torch.int64, device=dev),
            positions=torch.zeros((rows,), dtype=torch.int64, device=dev),
            input_ids=torch.zeros((rows,), dtype=torch.int64, device=dev),
        )

    def _draft_step_batch(self, batch: int, backend: Any) -> Any:
        """The ``ForwardBatch`` of one draft decode step (``EAGLEDraftCudaGraphRunner.capture_one_shape``'s
        fields), planned on ``backend`` once per batch size."""
        key = ("draft_step", batch, id(backend))
        fb = self._buffers.get(key)
        if fb is not None:
            return fb
        import torch
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
        from sglang.srt.speculative.eagle_info import EagleDraftInput
        from sglang.srt.speculative.eagle_utils import get_draft_recurrent_hidden_state_spec

        dw = self.draft_worker
        runner = dw.draft_runner
        topk = int(dw.topk)
        rows = batch * topk
        fill = backend.attn_backends[0].get_cuda_graph_seq_len_fill_value()
        slots = self._dummy_slots(batch, rows, fill)
        width, dtype = get_draft_recurrent_hidden_state_spec(runner)
        hidden = torch.zeros((rows, width), dtype=dtype, device=runner.device) if width is not None else None
        mode = CaptureHiddenMode.NULL if runner.spec_algorithm.is_standalone() else CaptureHiddenMode.LAST
        spec = EagleDraftInput(
            topk_p=torch.ones((batch, topk), dtype=torch.float32, device=runner.device),
            topk_index=torch.zeros((batch, topk), dtype=torch.int64, device=runner.device),
            hidden_states=hidden,
            capture_hidden_mode=mode,
        )
        fb = ForwardBatch(
            forward_mode=ForwardMode.DECODE,
            batch_size=batch,
            return_logprob=False,
            spec_algorithm=runner.spec_algorithm,
            spec_info=spec,
            capture_hidden_mode=mode,
            extend_seq_lens=torch.ones((batch,), dtype=torch.int32, device=runner.device),
            extend_seq_lens_cpu=[1] * batch,
            **slots,
        )
        translator = getattr(runner, "kv_index_translator", None)
        if translator is not None:
            translator.bind_runner_slots(fb)
        backend.init_forward_metadata(fb)
        fb.mark_forward_metadata_ready()
        self._buffers = {k: v for k, v in self._buffers.items() if k[0] != "draft_step"}  # one plan at a time
        self._buffers[key] = fb
        return fb

    def _draft_step(self, batch: int) -> None:
        if max([int(self.worker.speculative_num_steps), *self.captured_tiers()]) < 2:  # known on every rank
            raise StageUnavailable("no captured tier drafts more than one step: no draft decode forward to time")
        if not self._draft_runs_here():
            return
        import torch
        from sglang.srt.model_executor.forward_context import ForwardContext, forward_context

        dw = self.draft_worker
        with self._draft_context():
            backend = self._draft_decode_backend()
            fb = self._draft_step_batch(batch, backend)
            with forward_context(ForwardContext(attn_backend=backend.attn_backends[0]), forward_batch=fb):
                logits = dw.draft_runner.forward(fb).logits_output.next_token_logits
            torch.topk(logits, int(dw.topk), dim=-1)

    def _draft_extend(self, steps: int, batch: int) -> None:
        if not self._draft_runs_here():
            return
        import torch
        from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardBatch, ForwardMode
        from sglang.srt.speculative.eagle_info import EagleDraftExtendInput
        from sglang.srt.speculative.eagle_utils import get_draft_input_from_target_hidden_dim

        dw = self.draft_worker
        runner = dw.draft_runner
        width, backend = self._tier_draft_side(steps)
        if backend is None:
            raise StageUnavailable(f"tier {steps} has no draft-extend attention backend")
        rows, dev = batch * width, runner.device
        key = ("draft_extend", batch, width)
        fb = self._buffers.get(key)
        if fb is None:
            slots = self._dummy_slots(batch, rows, width)
            hidden = None
            if not runner.spec_algorithm.is_standalone():
                hidden = torch.zeros(
                    (rows, get_draft_input_from_target_hidden_dim(runner)), dtype=runner.model_config.dtype, device=dev
                )
            spec = EagleDraftExtendInput(
                hidden_states=hidden,
                num_correct_drafts=torch.full((batch,), width - 1, dtype=torch.int32, device=dev),
                num_accept_tokens=torch.full((batch,), width, dtype=torch.int32, device=dev),
                num_tokens_per_req=width,
                num_tokens_for_logprob_per_req=width,
            )
            fb = self._buffers[key] = (
                ForwardBatch(
                    forward_mode=ForwardMode.DRAFT_EXTEND_V2,
                    batch_size=batch,
                    return_logprob=False,
                    spec_algorithm=runner.spec_algorithm,
                    spec_info=spec,
                    capture_hidden_mode=CaptureHiddenMode.LAST,
                    extend_num_tokens=rows,
                    extend_seq_lens=torch.full((batch,), width, dtype=torch.int32, device=dev),
                    extend_prefix_lens=torch.zeros((batch,), dtype=torch.int32, device=dev),
                    extend_start_loc=torch.arange(0, rows, width, dtype=torch.int32, device=dev),
                    extend_seq_lens_cpu=[width] * batch,
                    extend_prefix_lens_cpu=[0] * batch,
                    **slots,
                ),
                torch.arange(width - 1, rows, width, dtype=torch.int64, device=dev),
            )
        fb, select = fb
        fb.forward_metadata_ready = False  # the runner plans the extend on the tier's backend, as the eager path does
        running = runner.attn_backend
        with self._draft_context():
            runner.attn_backend = backend
            try:
                logits = runner.forward(fb).logits_output.next_token_logits
            finally:
                runner.attn_backend = running
            torch.topk(logits[select], int(dw.topk), dim=-1)

    # ---- graph mode: replay what serving replays --------------------------------------------------------------------
    def _tier_runners(self, steps: int) -> Any:
        """Tier ``steps``'s graph runners: its ``AdaptiveController`` state (every Live tier), else the running
        tier's own (a pod with one tier)."""
        ctl = getattr(self.worker, "adaptive_controller", None)
        tier = ctl._states.get(int(steps)) if ctl is not None else None
        if tier is not None:
            return tier
        if int(steps) != int(self.worker.speculative_num_steps):
            raise StageUnavailable(f"tier {steps} is not captured")
        dw = self.draft_worker

        return SimpleNamespace(
            target_graph_runner=getattr(self.target_runner, "decode_cuda_graph_runner", None),
            cuda_graph_runner=getattr(dw, "cuda_graph_runner", None),
            cuda_graph_runner_for_draft_extend=getattr(dw, "cuda_graph_runner_for_draft_extend", None),
        )

    def _replay(self, runner: Any, what: str, batch: int, tokens_per_req: int = 1) -> None:
        """One replay of ``runner``'s graph at the smallest captured size that holds ``batch`` (what serving pads
        the batch to)."""
        size = batch * tokens_per_req if getattr(runner, "ragged_verify_mode", False) else batch
        keys = _graph_keys(runner)
        fits = [k for k in keys if k.size >= size]
        if not fits:
            raise StageUnavailable(
                f"no {what} graph holds batch {batch} (captured sizes {sorted({k.size for k in keys})})"
            )
        key = min(fits, key=lambda k: k.size)
        runner.backend.replay(key, None)

    def _graph_verify(self, steps: int, batch: int) -> None:
        tier = self._tier_runners(steps)
        runner = tier.target_graph_runner
        if runner is None or not _graph_keys(runner):
            raise StageUnavailable(f"tier {steps} has no captured target verify graph")
        self._replay(runner, f"tier {steps} target verify", batch, int(steps) + 1)

    def _graph_draft(self, steps: int, batch: int) -> None:
        tier = self._tier_runners(steps)
        if not self._draft_runs_here():
            return
        runner = tier.cuda_graph_runner
        if runner is None:
            if int(steps) <= 1:
                return  # SGLang's tier 1 launches no draft forward: its one proposal comes from the draft extend
            raise StageUnavailable(f"tier {steps} has no captured draft graph")
        with self._draft_context():
            self._replay(runner, f"tier {steps} draft", batch)

    def _graph_draft_extend(self, steps: int, batch: int) -> None:
        tier = self._tier_runners(steps)
        if not self._draft_runs_here():
            return
        runner = tier.cuda_graph_runner_for_draft_extend
        if runner is None or not _graph_keys(runner):
            raise StageUnavailable(f"tier {steps} has no captured draft-extend graph")
        with self._draft_context():
            self._replay(runner, f"tier {steps} draft extend", batch, int(steps) + 1)

    # ---- cycle overhead and broadcast -----------------------------------------------------------------------------
    def _overhead(self, batch: int) -> None:
        key = ("overhead", batch)
        got = self._buffers.get(key)
        if got is None:
            import torch
            from sglang.srt.layers.logits_processor import LogitsProcessorOutput
            from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
            from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo

            mr = self.target_runner
            dev, vocab = mr.device, int(mr.model_config.vocab_size)
            info = SamplingBatchInfo(
                temperatures=torch.ones((batch, 1), dtype=torch.float, device=dev),
                top_ps=torch.ones((batch,), dtype=torch.float, device=dev),
                top_ks=torch.ones((batch,), dtype=torch.int32, device=dev),
                min_ps=torch.zeros((batch,), dtype=torch.float, device=dev),
                is_all_greedy=True,
                is_any_greedy=True,
                need_top_p_sampling=False,
                need_top_k_sampling=False,
                need_min_p_sampling=False,
                vocab_size=vocab,
            )
            fb = ForwardBatch(
                forward_mode=ForwardMode.DECODE,
                batch_size=batch,
                return_logprob=False,
                sampling_info=info,
                **self._dummy_slots(batch, batch, 1),
            )
            got = self._buffers[key] = (fb, torch.zeros((batch, vocab), dtype=torch.float32, device=dev))
        fb, logits = got
        from sglang.srt.layers.logits_processor import LogitsProcessorOutput

        self.target_runner.sample(LogitsProcessorOutput(next_token_logits=logits.clone()), fb).cpu()

    def _broadcast(self, steps: int, batch: int) -> None:
        split = state.split
        if split is None:
            raise StageUnavailable("the draft runs on every rank: no proposal broadcast")
        import torch

        width, _ = self._tier_draft_side(steps)
        layout = ProposalLayout(int(steps), int(self.draft_worker.topk), width)
        if not split.groups.is_leader:
            split.broadcaster.broadcast(batch, layout=layout)
            return
        zeros = lambda cols: torch.zeros((batch, cols), dtype=torch.int64, device=split.broadcaster.device)  # noqa: E731
        split.broadcaster.broadcast(
            batch,
            zeros(layout.token_cols),
            zeros(layout.parent_cols) if layout.topk > 1 else None,
            zeros(layout.score_cols) if layout.topk > 1 else None,
            layout=layout,
        )

    def close(self) -> None:
        """Drop the dummy batches and buffers once the probe is done (the runner outlives it in the engine)."""
        self._buffers.clear()

    # ---- dispatch ------------------------------------------------------------------------------------------------
    def __call__(self, stage: str, steps: int, batch: int) -> None:
        steps, batch = int(steps), int(batch)
        if self.mode == "graph":
            run = {
                "verify": lambda: self._graph_verify(steps, batch),
                "draft": lambda: self._graph_draft(steps, batch),
                "draft_extend": lambda: self._graph_draft_extend(steps, batch),
                "overhead": lambda: self._overhead(batch),
                "broadcast": lambda: self._broadcast(steps, batch),
            }.get(stage)
        else:
            run = {
                "verify": lambda: self._verify(steps, batch),
                "draft_step": lambda: self._draft_step(batch),
                "draft_extend": lambda: self._draft_extend(steps, batch),
                "overhead": lambda: self._overhead(batch),
                "broadcast": lambda: self._broadcast(steps, batch),
            }.get(stage)
        if run is None:
            raise StageUnavailable(f"unknown stage {stage!r}; the SGLang runner measures {', '.join(SUPPORTED_STAGES)}")
        try:
            return run()
        except StageUnavailable:
            raise
        except Exception as exc:  # the probe logs only the message: name the failing frame in it
            where = traceback.extract_tb(exc.__traceback__)[-1]
            raise RuntimeError(
                f"{type(exc).__name__}: {exc} ({where.filename}:{where.lineno} in {where.name})"
            ) from exc


def _graph_keys(runner: Any) -> list:
    """The shape keys of a graph runner's replayable graphs (SGLang's full-graph backend keeps them in
    ``backend._graphs``); only default variants (no stream, LoRA or attention variant), as a plain decode uses."""
    graphs = getattr(getattr(runner, "backend", None), "_graphs", None)
    if not isinstance(graphs, dict):
        return []
    return [
        k
        for k in graphs
        if getattr(k, "size", None) is not None
        and getattr(k, "stream_idx", None) is None
        and getattr(k, "variant_label", None) is None
        and getattr(k, "attention_variant", None) is None
    ]


def _graph_sizes(runner: Any) -> list[int]:
    return sorted({int(k.size) for k in _graph_keys(runner)})


def sync_for(worker: Any):
    """The device synchronise matching the target's device (CPU forwards are synchronous)."""
    import torch

    device = str(getattr(worker._target_worker.model_runner, "device", "cpu"))
    if device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.synchronize
    return lambda: None
