"""The draft's third parallel layout: on the subset S of the target's TP ranks the draft loads its weights
|S|-way sharded and captures its CUDA graphs; the other ranks get a :class:`.remote_draft_worker` stand-in.

* **Groups.** ``EAGLEWorkerV2.__init__`` (every TP rank) first creates, in one fixed order, the draft
  ``GroupCoordinator`` over S (singleton blocks for the other ranks) and the dedicated broadcast communicator over
  the target group (:class:`~specdecode_runtime.draft_group.DraftGroups`).
* **Layout, third case.** ``resolve_draft_parallel_layout`` (as bound in ``eagle_worker_v2``) returns
  ``DraftParallelLayout(tp_group=<draft group>, attn_tp_size=|S|)`` on S, so SGLang's own
  ``patch_tensor_parallel_group`` narrows tp/attn/moe sizes for the draft.
* **Embedding / shared head.** At the end of ``EAGLEWorkerV2.__init__`` (every rank) the target's vocab-sharded
  embedding, and its head only when the draft uses it, are all-gathered once; S keeps its |S|-way shard. This runs
  before the scheduler sizes the target KV pool from free memory (world minimum), so the memory S keeps is inside
  SGLang's budget on every rank. ``EagleDraftWorker._resolve_shared_embed_and_head`` hands S those shards.
* **Step tiers (autotune Live).** SGLang builds every extra tier inside the draft's TP context, and each tier holds
  the *target's* verify attention backend and decode graph. On S that context would narrow the global TP group
  to |S| while the target half is built, so S would capture target graphs without the target's all-reduces while
  the other ranks wait in theirs. While the tiers are built, S's draft layout is the target's (no group swap)
  and only the draft half of each tier enters the draft group (:func:`draft_tier`).
* **No group-wide collective on S alone.** Draft construction, memory-pool allocation, backend and graph set-up run
  inside :func:`~specdecode_runtime.draft_group.draft_only_scope`: ``get_available_gpu_memory(distributed=True)``
  is answered locally there, and any other torch.distributed collective over a group reaching outside S raises at
  once instead of deadlocking.
"""

from __future__ import annotations

import gc
import logging
from typing import Any, Callable

from ..contract.derived import is_split_draft
from ..draft_group import (
    DraftGroups,
    DraftPlacement,
    ProposalBroadcaster,
    ProposalLayout,
    decide_draft_ranks,
    detect_topology,
    draft_only_scope,
    in_draft_only_scope,
)
from . import process_state as state
from .process_state import SplitConfig, _SplitState

logger = logging.getLogger("specdecode.sglang_patch")

# EagleDraftWorker methods that run on S alone, each with the phase name a stray collective's error reports.
DRAFT_ONLY_METHODS: tuple[tuple[str, str], ...] = (
    ("__init__", "draft model construction"),
    ("alloc_memory_pool", "draft KV pool allocation"),
    ("init_attention_backends", "draft attention backends"),
    ("init_cuda_graphs", "draft CUDA-graph capture"),
    ("init_attention_backend", "draft attention backend of a step tier"),
    ("_capture_cuda_graphs", "draft CUDA-graph capture of a step tier"),
)


# Of those, the two SGLang calls again for every extra step tier (``build_adaptive_runtime_state``).
TIER_METHODS = ("init_attention_backend", "_capture_cuda_graphs")


def draft_only(orig: Callable, what: str) -> Callable:
    """Run a draft-worker method inside the draft-only guard whenever this rank's TP group is split."""

    def method(self, *a, **k):
        st = state.split
        if st is None:
            return orig(self, *a, **k)
        with draft_only_scope(st.groups.placement.draft_ranks, what):
            return orig(self, *a, **k)

    return method


def _outside_tp_patch() -> bool:
    from sglang.srt.distributed import parallel_state

    return not parallel_state._TP_STATE_PATCHED


def draft_pool_in_group(orig: Callable, what: str) -> Callable:
    """``EagleDraftWorker.alloc_memory_pool`` on S: inside the draft group. SGLang calls it outside any draft TP
    context and the draft's KV pool takes its heads per rank from the TP size in force, so outside the group S's
    pool would have the target's head split (N ranks) while the draft model was built for |S| ranks: the first
    draft KV write fails on its shape. Stock SGLang never differs here (its draft group, under attention DP, has
    the target's attention TP size)."""
    guarded = draft_only(orig, what)

    def method(self, *a, **k):
        st = state.split
        layout = getattr(self, "parallel_layout", None)
        if st is None or getattr(layout, "tp_group", None) is None or not _outside_tp_patch():
            return guarded(self, *a, **k)
        from sglang.srt.speculative.spec_utils import draft_tp_context

        with draft_tp_context(layout):
            return guarded(self, *a, **k)

    return method


def draft_tier(orig: Callable, what: str) -> Callable:
    """The draft half of a step tier: inside the draft group even while S's layout is detached for the tier build
    (:func:`wrap_tier_build`), and inside the draft-only guard."""
    guarded = draft_only(orig, what)

    def method(self, *a, **k):
        st = state.split
        if st is None or st.draft_layout is None or getattr(self.parallel_layout, "tp_group", None) is not None:
            return guarded(self, *a, **k)
        from sglang.srt.speculative.spec_utils import draft_tp_context

        with draft_tp_context(st.draft_layout):
            return guarded(self, *a, **k)

    return method


def draft_graphs_then_detach(orig: Callable, what: str) -> Callable:
    """``EagleDraftWorker.init_cuda_graphs``: the draft's own graphs inside the draft group; then, when step tiers
    follow (:func:`wrap_tier_build`), S's layout becomes the target's until they are built."""
    guarded = draft_only(orig, what)

    def method(self, *a, **k):
        out = guarded(self, *a, **k)
        st = state.split
        if st is not None and st.building_tiers and getattr(self.parallel_layout, "tp_group", None) is not None:
            import msgspec
            from sglang.srt.runtime_context import get_parallel

            st.draft_layout = self.parallel_layout
            self.parallel_layout = msgspec.structs.replace(
                self.parallel_layout, tp_group=None, attn_tp_size=get_parallel().attn_tp_size
            )
        return out

    return method


def wrap_tier_build(orig):
    """``EAGLEWorkerV2.init_cuda_graphs`` on S with step tiers: SGLang enters
    ``draft_tp_context(draft_worker.parallel_layout)`` around ``adaptive_controller.init_states``, which builds the
    target's verify backend and graph for every tier. With S's layout detached there (no group swap) the target
    half runs with the target's TP group on every rank; the draft half enters the draft group itself
    (:func:`draft_tier`). The real layout is back before the first decode."""

    def init_cuda_graphs(self):
        st = state.split
        if st is None or not st.groups.in_draft or getattr(self, "adaptive_controller", None) is None:
            return orig(self)
        st.building_tiers = True
        try:
            return orig(self)
        finally:
            st.building_tiers = False
            if st.draft_layout is not None:
                self._draft_worker.parallel_layout = st.draft_layout
                st.draft_layout = None

    return init_cuda_graphs


def wrap_worker_init(split: SplitConfig, real_draft_worker: type, remote_draft_worker: type):
    """``EAGLEWorkerV2.__init__``: groups first (every rank, same order), then SGLang's own constructor with the
    draft-worker name re-pointed to the stand-in outside S."""

    def make(orig):
        def __init__(self, server_args, gpu_id, nccl_port, target_worker):
            from sglang.srt.runtime_context import get_parallel
            from sglang.srt.speculative import eagle_worker_v2 as ew2

            if not is_split_draft(split.draft_tp, get_parallel().tp_size):
                state.split = None
                return orig(self, server_args, gpu_id, nccl_port, target_worker)
            groups, bcaster = create_groups(split, target_worker)
            state.split = _SplitState(groups=groups, broadcaster=bcaster, hidden=(None, None))
            factory = real_draft_worker if groups.in_draft else remote_draft_worker
            ew2.EagleDraftWorker = factory
            try:
                orig(self, server_args, gpu_id, nccl_port, target_worker)
            finally:
                ew2.EagleDraftWorker = real_draft_worker
            from sglang.srt.speculative.eagle_utils import get_draft_recurrent_hidden_state_spec_from_config

            runner = target_worker.model_runner
            cfg = runner.spec_aux_config.draft_model_config
            state.split.hidden = (
                get_draft_recurrent_hidden_state_spec_from_config(cfg, runner.spec_algorithm)
                if cfg is not None
                else (None, None)
            )
            gather_shared_vocab(self, state.split)
            logger.info(
                "specdecode: draft on ranks %s of %s (this rank %s S)",
                groups.placement.draft_ranks,
                groups.placement.target_ranks,
                "in" if groups.in_draft else "outside",
            )

        return __init__

    return make


def draft_uses_target_head(worker: Any) -> bool:
    """Whether the draft on S takes the target's lm_head. EAGLE drafts share it (a hot-token map slices it);
    EAGLE-3 drafts have their own head unless the checkpoint says ``load_lm_head_from_target``. Asked of the built
    draft model itself, so it holds for every draft model class."""
    if not worker.speculative_algorithm.is_eagle3():
        return True
    model = worker._draft_worker.draft_runner.model
    return bool(getattr(model, "load_lm_head_from_target", False))


def gather_shared_vocab(worker: Any, st: _SplitState) -> None:
    """Every rank, once, before the scheduler sizes the target KV pool: all-gather the target's vocab-sharded
    embedding, and its head only when the draft uses it (S's leader decides, every rank learns it from one
    broadcast, so every rank joins the same gathers). S keeps its |S|-way shard; the other ranks drop theirs at
    once. Doing this before ``init_target_memory_pool`` puts S's kept copy inside SGLang's free-memory profile
    (the world minimum), so every rank's KV pool is sized with it already resident."""
    from sglang.srt.speculative.pp_draft_embedding import resolve_target_embed_and_head

    runner = worker._target_worker.model_runner
    vocab = runner.model_config.vocab_size
    embed, head = resolve_target_embed_and_head(runner.model)
    leader_view = [1 if draft_uses_target_head(worker) else 0] if st.groups.is_leader else None
    (use_head,) = st.groups.broadcast_ints(leader_view, 1, device=st.broadcaster.device)
    gathered: list[Any] = []
    for t, wanted in ((embed, True), (head, bool(use_head))):
        if t is None or not wanted:
            gathered.append(None)
            continue
        if t.shape[0] >= vocab:  # already replicated
            gathered.append(t)
            continue
        full = st.groups.gather_vocab_shards(t.data)
        gathered.append(st.groups.draft_shard(full) if full is not None else None)
        del full
    st.gathered = (gathered[0], gathered[1])
    st.head_gathered = bool(use_head)
    gc.collect()  # the all-gather's per-rank parts are temporaries: gone before the KV pool is profiled
    logger.info(
        "specdecode: target vocab gathered for the draft (embedding%s) before KV-pool sizing",
        " and head" if use_head else "; the draft has its own head",
    )


def wrap_pool_sizing(orig):
    """``DefaultPoolConfigurator.__init__`` (every rank, the target's KV sizing): SGLang prices the EAGLE draft's KV
    per token as the target's per-layer KV at the target's head split (``kv_heads / N`` per rank). On S the draft
    runs at TP |S| and its pool holds ``kv_heads / |S|`` heads per rank, up to N/|S| times that price. Every rank
    adds the difference to the per-token cell size (the placement is the same everywhere, so every rank still
    sizes the same token count), which keeps S's draft pool inside SGLang's budget; outside S it stays unused."""

    def __init__(self, kvc):
        orig(self, kvc)
        st = state.split
        if st is None or kvc.is_draft_worker or not kvc.spec_algorithm.is_eagle():
            return
        extra = draft_pool_extra_bytes_per_token(self, kvc, st.groups.placement.draft_tp)
        if extra > 0:
            self._cell_size += extra
            logger.info(
                "specdecode: KV cell size +%d B/token for the draft pool at TP %d on S",
                extra,
                st.groups.placement.draft_tp,
            )

    return __init__


def draft_pool_extra_bytes_per_token(configurator: Any, kvc: Any, draft_tp: int) -> int:
    """Bytes per token S's draft pool needs beyond SGLang's estimate; 0 where SGLang prices it another way
    (fused, hybrid, DSA or HiSparse layouts keep SGLang's own sizing)."""
    from sglang.srt.configs.model_config import is_deepseek_dsa
    from sglang.srt.runtime_context import get_memory, get_parallel

    aux = kvc.spec_aux_config
    draft_cfg, draft_layers = aux.draft_model_config, aux.eagle_draft_num_layers
    if draft_cfg is None or not draft_layers or kvc.fused_entry_bytes("full") is not None:
        return 0
    if getattr(kvc, "mambaish_config", None) is not None or get_memory().enable_hisparse:
        return 0
    if is_deepseek_dsa(kvc.model_config.hf_config):
        return 0
    layers = int(kvc.layer_info.num_effective_layers)
    if layers <= 0:
        return 0
    n = get_parallel().attn_tp_size
    at_n, at_s = draft_cfg.get_num_kv_heads(n), draft_cfg.get_num_kv_heads(draft_tp)
    if at_s <= at_n:
        return 0
    target_cell = configurator._compute_cell_size(kvc, layers)
    budgeted = int(target_cell * int(draft_layers) / layers)  # SGLang's own estimate of the draft's KV per token
    return budgeted * at_s // at_n - budgeted


def wrap_embed(orig):
    def _resolve_shared_embed_and_head(self):
        st = state.split
        if st is None or st.gathered == (None, None):
            return orig(self)
        embed, head = st.gathered
        import torch

        return (
            torch.nn.Parameter(embed, requires_grad=False) if embed is not None else None,
            torch.nn.Parameter(head, requires_grad=False) if head is not None else None,
        )

    return _resolve_shared_embed_and_head


def wrap_layout(orig):
    def resolve_draft_parallel_layout(model_spec, *, collapse_cp=False):
        st = state.split
        if st is None or not st.groups.in_draft:
            return orig(model_spec, collapse_cp=collapse_cp)
        from sglang.srt.configs.draft_parallel import DraftParallelLayout

        g = st.groups.draft_group
        return DraftParallelLayout(tp_group=g, attn_tp_size=g.world_size)

    return resolve_draft_parallel_layout


def local_memory_probe(orig: Callable) -> Callable:
    """``get_available_gpu_memory`` that drops ``distributed=True`` inside a draft-only phase."""

    def get_available_gpu_memory(device, gpu_id, distributed=False, empty_cache=True, cpu_group=None):
        if distributed and in_draft_only_scope():
            distributed = False  # a world all-reduce issued on S alone would hang the other ranks
        return orig(device, gpu_id, distributed=distributed, empty_cache=empty_cache, cpu_group=cpu_group)

    return get_available_gpu_memory


def create_groups(split: SplitConfig, target_worker: Any):
    """Every TP rank, same order: draft GroupCoordinator (S + singletons), then the broadcast communicator."""
    import torch
    import torch.distributed as dist
    from sglang.srt.distributed.parallel_state import init_model_parallel_group
    from sglang.srt.runtime_context import get_parallel

    par = get_parallel()
    tp = par.tp_group
    target_ranks = tuple(tp.ranks)
    # S is decided on the first TP rank alone and broadcast: a rank whose nvidia-smi failed must not choose another S.
    local = decide_draft_ranks(
        len(target_ranks),
        split.draft_tp,
        split.draft_ranks,
        group=tp.cpu_group,
        src=target_ranks[0],
        detect=detect_topology if split.use_topology else (lambda: None),
    )
    placement = DraftPlacement.from_tp_ranks(target_ranks, local)
    blocks = [list(b) for b in DraftGroups.partition(placement)]
    backend = dist.get_backend(tp.device_group)
    coordinator = init_model_parallel_group(
        blocks,
        tp.local_rank,
        backend,
        use_pynccl=placement.draft_tp > 1 and backend == "nccl",
        use_message_queue_broadcaster=False,
        group_name="specdecode_draft",
    )
    bcast = dist.new_group(ranks=list(target_ranks), backend=backend)
    groups = DraftGroups(
        placement=placement,
        rank=dist.get_rank(),
        draft_group=coordinator,
        bcast_group=bcast,
        draft_backend=backend,
        bcast_backend=backend,
    )
    from sglang.srt.runtime_context import get_exec, get_schedule, get_spec

    graph_max = getattr(getattr(get_exec().graph, "cuda_graph_config", None), "decode", None)
    max_bs = max(getattr(graph_max, "max_bs", 0) or 0, get_schedule().max_running_requests or 0, 1)
    spec = get_spec()
    steps = spec.speculative_num_steps
    if getattr(spec, "speculative_adaptive", False):  # size the buffer for the deepest captured tier, once
        from sglang.srt.speculative.adaptive_spec_params import resolve_candidate_steps_from_config

        steps = max([steps, *resolve_candidate_steps_from_config(spec.speculative_adaptive_config)])
    widest = ProposalLayout(
        max(steps, 1),
        spec.speculative_eagle_topk,
        max(spec.speculative_num_draft_tokens, steps + 1)
        if spec.speculative_eagle_topk == 1
        else spec.speculative_num_draft_tokens,
    )
    device = tp.device if hasattr(tp, "device") else torch.device("cuda", torch.cuda.current_device())
    bcaster = ProposalBroadcaster(groups, widest, max_bs=max_bs, device=device)
    return groups, bcaster
