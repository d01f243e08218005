"""Tier 0 as plain decoding: while the step table says 0 for the running batch, a decode cycle is the target's own
decode forward and sampling, with no draft forward, no draft extend and no verify tree.

Why: the pinned SGLang serves ``speculative_num_steps == 0`` through the speculative path (a one-node verify tree
through the target-verify graph, then a draft extend that keeps the draft's KV warm). On one H200 with a 304M target
that cycle cost 3.8-4.0 ms against 2.1-2.4 ms for a plain server's decode, so a pod told to stop speculating still
served 0.35-0.82x a server without speculation, and where speculation loses the tuner had nowhere to go.

The draft is skipped, not forgotten: every target-only cycle keeps what a draft extend would have consumed (the
target's hidden state at the decoded position and the token it produced, per request) in a bounded window
(:class:`CatchUpWindow`). The first speculative cycle after target-only ones runs one *catch-up extend* over those
positions (the draft's prefill extend, with the retained hidden states), so the draft drafts from a current state,
as if it had never been off. Greedy outputs do not depend on it (the verify keeps exactly the target's tokens);
acceptance does. Positions older than the window stay as they were (the draft then drafts from a partly stale
context, which costs acceptance, never correctness); the window's size is ``catch_up_tokens`` per request.

With a split draft, every rank runs the target-only cycle (nothing is broadcast); the catch-up runs on S only,
where the draft lives.
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from . import process_state as state

DEFAULT_CATCH_UP_TOKENS = 256  # positions per request kept while off: a few KB of hidden state per token


@dataclass
class _Retained:
    pool: Any  # [bs] request-pool slots
    epoch: Any  # [bs] each slot's occupancy count when the row was kept (a prefill of the slot starts a new one)
    pos: Any  # [bs] the decoded position (the input token's)
    tok_in: Any  # [bs] the input token at that position
    tok_out: Any  # [bs] the token the target produced there
    hidden: Any  # [bs, H] the target's hidden state at that position (EAGLE-3: its captured layers)


@dataclass
class CatchUpWindow:
    """The last ``tokens`` target-only cycles' draft-extend inputs, per decoded position."""

    tokens: int = DEFAULT_CATCH_UP_TOKENS
    records: deque = field(default_factory=deque)
    epochs: Any = None  # per request-pool slot: how many prefills filled it (one device tensor, sized by bind)

    def bind(self, slots: int, device: Any) -> None:
        """One epoch per request-pool slot, sized from the pool (a host-side shape): no cycle ever reads a device
        value for the window, which would stall the overlap scheduler's launch of the next cycle on the GPU."""
        if self.epochs is None or self.epochs.shape[0] < slots or self.epochs.device != device:
            import torch

            grown = torch.zeros(max(int(slots), 1), dtype=torch.int64, device=device)
            if self.epochs is not None and self.epochs.device == device:
                grown[: self.epochs.shape[0]] = self.epochs
            self.epochs = grown

    def epoch_of(self, pool: Any) -> Any:
        return self.epochs[pool]

    def keep(self, rec: _Retained) -> None:
        if self.tokens <= 0:
            return
        self.records.append(rec)
        while len(self.records) > self.tokens:
            self.records.popleft()

    def forget(self, pool_indices: Any) -> None:
        """A request slot was (re)filled by a prefill: what an earlier occupant left is not its history. One
        device op per prefill batch, whatever the window holds (the rows are told apart by their epoch)."""
        if not self.records or self.epochs is None or pool_indices is None or pool_indices.numel() == 0:
            return
        self.epochs[pool_indices] += 1

    def current(self, rec: _Retained) -> Any:
        """The rows of ``rec`` whose slot still holds the request that decoded them."""
        return rec.epoch == self.epochs[rec.pool]

    def clear(self) -> None:
        self.records.clear()

    def __bool__(self) -> bool:
        return bool(self.records)


window = CatchUpWindow()
enabled = True  # the runtime's tier 0 is plain decoding; False restores SGLang's one-token verify (for comparison)
plain_graph_runner: Any = None  # the target's DECODE-mode CUDA graphs (captured beside the tiers), None on a CPU
plain_attn_backend: Any = None  # the attention backend those graphs were captured with
on_catch_up: Callable[[int, float], None] | None = None  # (tokens, seconds) after each catch-up, for metrics


MODE_ENV = "SPECDECODE_TIER0"  # "plain" (default) or "verify": SGLang's own one-token verify + draft extend
CATCH_UP_ENV = "SPECDECODE_CATCH_UP_TOKENS"  # positions kept per request while off (0: no catch-up)


def reset(catch_up_tokens: int | None = None) -> None:
    global window, plain_graph_runner, plain_attn_backend, on_catch_up, enabled
    enabled = os.environ.get(MODE_ENV, "plain") != "verify"
    if catch_up_tokens is None:
        catch_up_tokens = int(os.environ.get(CATCH_UP_ENV, DEFAULT_CATCH_UP_TOKENS))
    window = CatchUpWindow(tokens=int(catch_up_tokens))
    plain_graph_runner = plain_attn_backend = None
    on_catch_up = None


def _is_decode(batch) -> bool:
    return not (batch.forward_mode.is_extend() or batch.is_extend_in_batch) and not batch.forward_mode.is_idle()


def eligible(batch) -> bool:
    """A target-only cycle serves this batch: its draft input carries the bonus tokens, and it asks for nothing
    the plain cycle does not return in the speculative result's shape (logprobs, a grammar); those batches take
    SGLang's one-token verify at tier 0."""
    info = batch.spec_info
    return (
        info is not None
        and getattr(info, "bonus_tokens", None) is not None
        and not batch.return_logprob
        and not batch.has_grammar
        and not (hasattr(info, "is_verify_input") and info.is_verify_input())
    )


def _hosts_draft(worker) -> bool:
    """This rank runs the draft (every rank when sharded; S when split)."""
    split = state.split
    return split is None or bool(split.groups.in_draft)


@contextlib.contextmanager
def _plain_graphs(model_runner):
    """The target's decode graphs and their attention backend in force for one plain forward (the tier's verify
    graphs and backend otherwise); none captured (a CPU): the forward runs eagerly on the tier's backend."""
    saved = model_runner.decode_cuda_graph_runner, model_runner.attn_backend
    model_runner.decode_cuda_graph_runner = plain_graph_runner
    if plain_attn_backend is not None:
        model_runner.attn_backend = plain_attn_backend
    try:
        yield
    finally:
        model_runner.decode_cuda_graph_runner, model_runner.attn_backend = saved


def target_only_cycle(worker, batch, on_publish):
    """One decode cycle of the target alone, returned as SGLang's spec-v2 result of a one-token verify that
    accepted its root (so the scheduler's result processing, the overlap FutureMap and the metrics see the shape
    they expect): ``next_token_ids [bs]``, ``accept_lens`` ones, the new token as the next cycle's bonus token."""
    import torch
    from sglang.srt.managers.utils import GenerationBatchResult
    from sglang.srt.model_executor.forward_batch_info import CaptureHiddenMode, ForwardMode
    from sglang.srt.speculative.eagle_info import EagleDraftInput

    target = worker.target_worker
    draft_input = batch.spec_info
    bs = int(batch.seq_lens.shape[0])
    seq_lens = batch.seq_lens
    tok_in = draft_input.bonus_tokens.to(torch.int64)
    batch.input_ids = tok_in
    req_to_token = worker.req_to_token_pool.req_to_token
    batch.out_cache_loc = req_to_token[batch.req_pool_indices, seq_lens].to(torch.int64)
    batch.forward_mode = ForwardMode.DECODE
    batch.spec_info = None
    # a plain decode batch counts the token being decoded in its lengths (SGLang's prepare_for_decode adds it
    # before the forward: positions are seq_lens - 1); the speculative batch's lengths are the committed ones
    saved = (batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum)
    batch.seq_lens = seq_lens + 1
    if batch.seq_lens_cpu is not None:
        batch.seq_lens_cpu = batch.seq_lens_cpu + 1
    batch.seq_lens_sum = None if batch.seq_lens_sum is None else batch.seq_lens_sum + bs
    keep_hidden = window.tokens > 0 and _hosts_draft(worker)
    capture = CaptureHiddenMode.LAST if keep_hidden else CaptureHiddenMode.NULL
    try:
        with _plain_graphs(target.model_runner):
            out = target.forward_batch_generation(batch, capture_hidden_mode=capture)
    finally:
        batch.spec_info = draft_input
        batch.seq_lens, batch.seq_lens_cpu, batch.seq_lens_sum = saved
    next_ids = out.next_token_ids
    new_seq_lens = seq_lens + 1
    if on_publish is not None:
        on_publish(new_seq_lens)
    if keep_hidden and out.logits_output is not None and out.logits_output.hidden_states is not None:
        window.bind(req_to_token.shape[0], batch.req_pool_indices.device)
        window.keep(
            _Retained(
                pool=batch.req_pool_indices.clone(),
                epoch=window.epoch_of(batch.req_pool_indices),
                pos=seq_lens.to(torch.int64).clone(),
                tok_in=tok_in.clone(),
                tok_out=next_ids.to(torch.int64).clone(),
                hidden=out.logits_output.hidden_states[:bs].clone(),
            )
        )
    result = GenerationBatchResult(
        logits_output=out.logits_output,
        next_token_ids=next_ids,
        can_run_cuda_graph=out.can_run_cuda_graph,
        speculative_num_draft_tokens=1,
        next_draft_input=EagleDraftInput(bonus_tokens=next_ids.to(torch.int32)),
        accept_lens=torch.ones(bs, dtype=torch.int32, device=seq_lens.device),
        accept_index=torch.arange(bs, dtype=torch.int64, device=seq_lens.device).unsqueeze(1),
        new_seq_lens=new_seq_lens,
        routed_experts_output=getattr(out, "routed_experts_output", None),
    )
    worker._stub_skipped_draft_extend(batch, result)
    return result


def catch_up(worker, batch) -> int:
    """Before a speculative cycle: the draft extend every target-only position of this batch's requests still
    kept in the window would have had, as one extend (the draft's prefill extend over the retained target hidden
    states). The batch's draft input then holds the draft's state at each request's last position. Returns the
    positions written. A rank outside S only forgets the window (the draft is not there)."""
    if not window:
        return 0
    if not _hosts_draft(worker) or batch.spec_info is None:
        window.clear()
        return 0
    import torch

    t0 = time.perf_counter()
    recs = list(window.records)
    window.clear()
    pool = torch.cat([torch.where(window.current(r), r.pool, torch.full_like(r.pool, -1)) for r in recs])
    pos = torch.cat([r.pos for r in recs])
    seq_lens = batch.seq_lens.to(torch.int64)
    # request b owns row n when its slot matches and the position is below its current length
    own = (pool.unsqueeze(1) == batch.req_pool_indices.to(pool.dtype).unsqueeze(0)) & (
        pos.unsqueeze(1) < seq_lens.unsqueeze(0)
    )
    rows, reqs = own.nonzero(as_tuple=True)
    if rows.numel() == 0:
        return 0
    counts = torch.bincount(reqs, minlength=seq_lens.shape[0])
    # a request's kept positions must end right below its length and be contiguous (one per target-only cycle)
    order = torch.argsort(reqs * (int(pos.max()) + 2) + pos[rows])
    rows, reqs = rows[order], reqs[order]
    with_rows = (counts > 0).nonzero(as_tuple=True)[0]
    n_tokens = int(rows.numel())
    tok_in = torch.cat([r.tok_in for r in recs])[rows]
    tok_out = torch.cat([r.tok_out for r in recs])[rows]
    hidden = torch.cat([r.hidden for r in recs])[rows]
    kept_counts = counts[with_rows]
    ends = torch.cumsum(kept_counts, 0) - 1
    written = _run_catch_up(worker, batch, with_rows, kept_counts, tok_in, tok_out, hidden, ends)
    dt = time.perf_counter() - t0
    if on_catch_up is not None:
        on_catch_up(n_tokens, dt)
    return written


def _run_catch_up(worker, batch, reqs, counts, tok_in, tok_out, hidden, ends) -> int:
    """The draft's extend over ``counts[i]`` positions of request ``reqs[i]`` (ending at its length), then the
    draft state of the batch's draft input replaced for those requests."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.speculative.eagle_worker_v2 import (
        draft_tp_context,
        speculative_moe_a2a_backend_context,
        speculative_moe_backend_context,
    )

    dw = worker.draft_worker
    sub = batch.copy()
    sub.reqs = [batch.reqs[i] for i in reqs.tolist()]
    sub.req_pool_indices = batch.req_pool_indices[reqs]
    seq_lens = batch.seq_lens[reqs]
    starts = seq_lens.to(torch.int64) - counts
    counts_l = counts.tolist()
    starts_l = starts.tolist()
    lens_l = seq_lens.tolist()
    sub.seq_lens = seq_lens
    sub.seq_lens_cpu = torch.tensor(lens_l, dtype=torch.int64)
    sub.orig_seq_lens = seq_lens
    sub.seq_lens_sum = int(sum(lens_l))
    sub.prefix_lens = starts_l
    sub.extend_lens = counts_l
    sub.extend_num_tokens = int(sum(counts_l))
    sub.extend_logprob_start_lens = counts_l
    sub.return_logprob = False
    sub.top_logprobs_nums = None
    sub.token_ids_logprobs = None
    sub.forward_mode = ForwardMode.EXTEND
    sub.chunked_req = None
    sub.chunked_req_next_prompt_token = None
    sub.is_extend_in_batch = True
    sub.input_ids = tok_in
    req_to_token = worker.req_to_token_pool.req_to_token
    cols = torch.cat([torch.arange(s, s + n, dtype=torch.int64) for s, n in zip(starts_l, counts_l)]).to(
        req_to_token.device
    )
    sub.out_cache_loc = req_to_token[torch.repeat_interleave(sub.req_pool_indices, counts), cols].to(torch.int64)
    sub.sampling_info = _sampling_rows(batch.sampling_info, reqs)
    last_out = tok_out[ends]
    with (
        draft_tp_context(dw.parallel_layout),
        speculative_moe_backend_context(),
        speculative_moe_a2a_backend_context(),
    ):
        fresh = dw._draft_extend_for_prefill(sub, hidden, last_out)
    info = batch.spec_info
    for name in ("topk_p", "topk_index", "hidden_states"):
        new, old = getattr(fresh, name, None), getattr(info, name, None)
        if new is None or old is None:
            continue
        merged = old.clone()
        merged[reqs] = new.to(old.dtype)
        setattr(info, name, merged)
    return int(sum(counts_l))


def _sampling_rows(sampling_info, reqs):
    """The sampling info of the caught-up requests (a greedy chain reads only temperatures/top-k of them)."""
    if sampling_info is None:
        return None
    sub = copy.copy(sampling_info)
    for name in ("temperatures", "top_ps", "top_ks", "min_ps", "sampling_seed"):
        val = getattr(sampling_info, name, None)
        if val is not None and hasattr(val, "shape") and val.shape and val.shape[0] >= int(reqs.max()) + 1:
            setattr(sub, name, val[reqs])
    return sub
