"""Behaviour the split-draft patches rely on, checked against the installed SGLang without a GPU or a model.

``check-sglang`` resolves names and parameters (:mod:`.compat`); that cannot see a release that keeps every name
but changes an order or a shape the patches depend on. Each check here runs SGLang's own code on the CPU where it
can (the draft tree builder, ``draft_tp_context``), or reads the order of calls in its source where running it
needs a model:

* proposal widths: SGLang's ``select_top_k_tokens`` + ``organize_draft_results`` produce exactly the
  ``parent_list`` / ``top_scores_index`` / ``draft_tokens`` widths :class:`ProposalLayout` broadcasts (a
  single-step tree included);
* the draft worker is built before the target KV pool is sized (the vocab gather at the end of
  ``EAGLEWorkerV2.__init__`` must be resident when free memory is profiled);
* step tiers: ``EAGLEWorkerV2.init_cuda_graphs`` captures the draft's own graphs before it enters the draft TP
  context for the tiers, each tier's draft half is the two methods the patch re-enters the draft group for, and a
  layout without a group makes ``draft_tp_context`` swap nothing (S's detached layout during the tier build);
* the verify window S plans in ``prepare_for_draft`` is the translator plan over
  ``assign_draft_cache_locs_contiguous_func``'s window, which ranks outside S rebuild.
"""

from __future__ import annotations

import contextlib
import inspect
from dataclasses import dataclass
from typing import Callable

from ..draft_group import ProposalLayout
from .draft_layout import TIER_METHODS


@dataclass
class BehaviourResult:
    name: str
    ok: bool
    detail: str


def _in_order(fn: Callable, *needles: str) -> tuple[bool, str]:
    src = inspect.getsource(fn)
    where = [src.find(n) for n in needles]
    missing = [n for n, i in zip(needles, where) if i < 0]
    if missing:
        return False, f"{fn.__qualname__} no longer contains {missing}"
    if where != sorted(where):
        return False, f"{fn.__qualname__} calls {list(needles)} in another order"
    return True, f"{fn.__qualname__}: {' -> '.join(needles)}"


def _proposal_widths() -> tuple[bool, str]:
    import torch
    from sglang.srt.speculative.eagle_utils import organize_draft_results
    from sglang.srt.speculative.spec_utils import select_top_k_tokens

    seen = []
    for steps, topk, n in ((1, 2, 3), (2, 2, 4), (3, 2, 6), (3, 4, 8)):
        g = torch.Generator().manual_seed(steps * 10 + topk)
        bs, vocab = 2, 32
        p = torch.rand(bs, topk, generator=g).softmax(-1)
        idx = torch.randint(0, vocab, (bs, topk), generator=g)
        hs, scores = torch.randn(bs, 4, generator=g), None
        lists: tuple[list, list, list] = ([], [], [])
        for i in range(steps):
            _, hs, scores, info = select_top_k_tokens(i, p, idx, hs, scores, topk)
            for acc, t in zip(lists, info):
                acc.append(t)
            p = torch.rand(bs * topk, topk, generator=g).softmax(-1)
            idx = torch.randint(0, vocab, (bs * topk, topk), generator=g)
        parents, score_idx, tokens = organize_draft_results(lists[0], lists[1], lists[2], n)
        lay = ProposalLayout(steps, topk, n)
        got = (parents.shape[1], score_idx.shape[1], tokens.shape[1])
        want = (lay.parent_cols, lay.score_cols, lay.token_cols)
        if got != want:
            return False, f"steps {steps} topk {topk}: SGLang widths (parents, scores, tokens) {got}, packed {want}"
        seen.append(f"{steps}x{topk}")
    return True, f"trees {', '.join(seen)}: parents / scores / tokens widths equal"


def _detached_layout_is_inert() -> tuple[bool, str]:
    from sglang.srt.configs.draft_parallel import DraftParallelLayout
    from sglang.srt.speculative.spec_utils import draft_tp_context

    ctx = draft_tp_context(DraftParallelLayout(tp_group=None, attn_tp_size=8))
    if not isinstance(ctx, contextlib.nullcontext):
        return False, f"draft_tp_context of a group-less layout is {type(ctx).__name__}, not a no-op"
    return True, "draft_tp_context(layout without a group) swaps nothing"


def check_behaviour() -> list[BehaviourResult]:
    from sglang.srt.managers.scheduler import Scheduler
    from sglang.srt.speculative import eagle_worker_common as common
    from sglang.srt.speculative.eagle_worker_v2 import EAGLEWorkerV2

    checks: list[tuple[str, Callable[[], tuple[bool, str]]]] = [
        ("proposal widths match SGLang's tree code", _proposal_widths),
        (
            "draft worker built before the target KV pool is sized",
            lambda: _in_order(Scheduler.init_model_worker, "maybe_init_draft_worker()", "init_memory_pools()"),
        ),
        (
            "target KV pool sized before the draft's",
            lambda: _in_order(
                Scheduler.init_memory_pools, "init_target_memory_pool()", "draft_worker.alloc_memory_pool("
            ),
        ),
        (
            "step tiers built after the draft's own graphs",
            lambda: _in_order(
                EAGLEWorkerV2.init_cuda_graphs,
                "super().init_cuda_graphs()",
                "draft_tp_context(self._draft_worker.parallel_layout)",
                "init_states(",
            ),
        ),
        (
            "a tier's draft half is the re-entered methods",
            lambda: _in_order(
                EAGLEWorkerV2.build_adaptive_runtime_state,
                *(f"self._draft_worker.{m}()" for m in TIER_METHODS),
                "_get_attention_backend(",
            ),
        ),
        ("a detached draft layout swaps no TP group", _detached_layout_is_inert),
        (
            "S plans the verify window from the draft cache-loc window",
            lambda: _in_order(
                common.prepare_for_draft, "assign_draft_cache_locs_contiguous_func(", "target_translator.plan("
            ),
        ),
    ]
    out = []
    for name, fn in checks:
        try:
            ok, detail = fn()
        except Exception as e:  # noqa: BLE001 - a check that cannot run is a failed check
            ok, detail = False, f"{type(e).__name__}: {e}"
        out.append(BehaviourResult(name, ok, detail))
    return out
