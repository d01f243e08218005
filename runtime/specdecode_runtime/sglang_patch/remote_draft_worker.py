"""The draft worker of a TP rank outside the draft subset S: no weights, no draft KV pool, no draft graphs.

``EAGLEWorkerV2`` runs unchanged on every rank and calls its draft worker's ``draft()`` and draft-extend methods
everywhere, so outside S it gets this stand-in (bound in :mod:`.draft_layout`). Its ``draft()`` receives S's
broadcast and rebuilds this rank's own verify input with SGLang's original ``build_eagle_verify_input`` (every
rank fills its own target verify buffers) plus the verify-window plan S makes while drafting, so verify writes the
same KV slots on every rank; its draft-extend methods return shape-valid placeholders, which the
overlap FutureMap stores and nothing reads.
"""

from __future__ import annotations

from typing import Any

from ..draft_group import ProposalLayout
from . import process_state as state


class _NullRunner:
    """Just enough of a ModelRunner for EAGLEWorkerV2's bookkeeping outside S (no weights, no KV pool)."""

    def __init__(self, target_runner: Any):
        self.model_config = target_runner.spec_aux_config.draft_model_config or target_runner.model_config
        self.spec_algorithm = target_runner.spec_algorithm
        self.device = target_runner.device
        self.attn_backend = None
        self.draft_attn_backend = None
        self.graph_memory_usage: dict[str, float] = {}
        self.graph_time_usage: dict[str, float] = {}
        self.weight_load_time = 0.0
        self.preloaded_weights_bytes = 0
        self.canary_manager = None
        self.device_timer = None


def _make_remote_draft_worker_cls() -> type:
    import torch
    from sglang.srt.configs.draft_parallel import DraftParallelLayout
    from sglang.srt.runtime_context import get_device, get_parallel, get_spec
    from sglang.srt.speculative import eagle_worker_v2 as ew2
    from sglang.srt.speculative.base_spec_worker import EagleDraftWorkerBase
    from sglang.srt.speculative.eagle_info import EagleDraftInput
    from sglang.srt.speculative.eagle_utils import default_tree_mask_mode
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    class RemoteDraftWorker(EagleDraftWorkerBase):
        """The draft worker of a rank outside S: receives proposals, never drafts."""

        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            super().__init__()
            self.server_args, self.gpu_id, self.nccl_port = server_args, gpu_id, nccl_port
            self.target_worker = target_worker
            self.device = get_device().device
            self.topk = get_spec().speculative_eagle_topk
            self.speculative_num_steps = get_spec().speculative_num_steps
            self.speculative_num_draft_tokens = get_spec().speculative_num_draft_tokens
            self.speculative_algorithm = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
            self._rebuild_topk1_chain_buffers()
            self.parallel_layout = DraftParallelLayout(tp_group=None, attn_tp_size=get_parallel().attn_tp_size)
            self.draft_runner = _NullRunner(target_worker.model_runner)
            self.draft_worker = None
            self.draft_attn_backend = self.draft_extend_attn_backend = None
            self.cuda_graph_runner = self.cuda_graph_runner_for_draft_extend = None
            self.hot_token_id = None
            self.tree_mask_mode = default_tree_mask_mode()

        @property
        def draft_runners(self):
            return []

        def alloc_memory_pool(self, memory_pool_config=None, req_to_token_pool=None, token_to_kv_pool_allocator=None):
            self.req_to_token_pool = req_to_token_pool
            self.token_to_kv_pool_allocator = token_to_kv_pool_allocator

        def init_attention_backends(self):
            pass

        def init_attention_backend(self):
            pass

        def init_cuda_graphs(self):
            pass

        def _capture_cuda_graphs(self):
            pass

        def draft_extend(self):
            pass

        def _placeholders(self, bs: int):
            hidden, dtype = state.split.hidden if state.split is not None else (None, None)
            topk_p = torch.zeros((bs, self.topk), dtype=torch.float32, device=self.device)
            topk_index = torch.zeros((bs, self.topk), dtype=torch.int64, device=self.device)
            hs = torch.zeros((bs, hidden), dtype=dtype, device=self.device) if hidden else None
            return topk_p, topk_index, hs

        def draft(self, batch, *, with_topology: bool = False):
            split, build_verify_input = state.split, state.original_build_verify_input
            if split is None or build_verify_input is None:  # this worker exists only on a split rank
                raise RuntimeError("the remote draft worker ran without the split draft's patches installed")
            draft_input = batch.spec_info
            bs = batch.seq_lens.shape[0]
            parents = scores = tokens = None
            if not batch.forward_mode.is_idle():
                layout = ProposalLayout(self.speculative_num_steps, self.topk, self.speculative_num_draft_tokens)
                tokens, parents, scores = split.broadcaster.broadcast(bs, layout=layout)
                if self.topk == 1:
                    parents = self._topk1_parents_prealloc[:bs]
                    scores = self._topk1_score_indices_prealloc[:bs]
            kv_loc_plan = None
            if not batch.forward_mode.is_idle():
                kv_loc_plan = self._plan_verify_window(batch)
                # On S, prepare_for_draft's ForwardBatch.init_new backfills the batch's seq_lens_sum, which sizes
                # the verify tree mask; the same backfill here, so both build the verify input from the same batch.
                if batch.seq_lens_sum is None and batch.seq_lens_cpu is not None:
                    batch.seq_lens_sum = int(batch.seq_lens_cpu.sum())
            verify_input = build_verify_input(
                batch,
                draft_input,
                parents,
                scores,
                tokens,
                None,
                target_worker=self.target_worker,
                topk=self.topk,
                num_steps=self.speculative_num_steps,
                num_draft_tokens=self.speculative_num_draft_tokens,
                tree_mask_mode=self.tree_mask_mode,
                device=self.device,
            )
            if kv_loc_plan is not None:  # as EagleDraftWorker.draft does with the plan prepare_for_draft made
                verify_input.kv_loc_plan = kv_loc_plan
                verify_input.prepared_out_cache_loc = kv_loc_plan.write_virtual
            if with_topology:
                return verify_input, parents, scores
            return verify_input

        def _plan_verify_window(self, batch):
            """The verify window S plans in ``prepare_for_draft`` (a chain on a GPU: the ``num_draft_tokens`` slots
            past ``seq_lens`` that verify writes, translated once by the target's ``KVIndexTranslator``), planned
            here from the same inputs with the same kernel, so every rank hands verify the same plan and writes
            the same KV slots. None where S plans nothing (trees, single-token windows, CPU)."""
            from sglang.srt.speculative import eagle_worker_common as common

            translator = getattr(self.target_worker.model_runner, "kv_index_translator", None)
            n, steps = self.speculative_num_draft_tokens, self.speculative_num_steps
            if translator is None or self.topk != 1 or n is None or n <= steps or common._is_cpu:
                return None
            window = torch.empty((batch.seq_lens.shape[0] * n,), dtype=torch.int64, device=batch.device)
            common.assign_draft_cache_locs_contiguous_func(
                batch.req_pool_indices,
                self.req_to_token_pool.req_to_token,
                batch.seq_lens,
                window,
                1,
                n,
                positions=None,
                mrope=None,
            )
            return translator.plan(
                req_pool_indices=batch.req_pool_indices,
                seq_lens=batch.seq_lens,
                seq_lens_cpu=batch.seq_lens_cpu,
                write_virtual=window,
                read_extent=n,
            )

        def _draft_extend_for_prefill(
            self, batch, target_hidden_states, next_token_ids, mm_input_embeds=None, kv_loc_plan=None
        ):
            bs = next_token_ids.shape[0]
            topk_p, topk_index, hs = self._placeholders(bs)
            return EagleDraftInput(
                topk_p=topk_p,
                topk_index=topk_index,
                hidden_states=hs,
                bonus_tokens=next_token_ids,
                num_tokens_per_req=1,
                num_tokens_for_logprob_per_req=1,
            )

        def _draft_extend_for_decode(self, batch, batch_result, *, kv_loc_plan=None):
            nd = batch_result.next_draft_input
            nd.topk_p, nd.topk_index, hs = self._placeholders(batch.seq_lens.shape[0])
            if hs is not None:
                nd.hidden_states = hs
            nd.cuda_graph_compatible = True

    RemoteDraftWorker.__module__ = __name__
    ew2  # noqa: B018 - imported for its side effect of being loaded before patching
    return RemoteDraftWorker
