"""Torch-native attention for speculative decoding on a CPU.

The pinned SGLang's ``TorchNativeAttnBackend`` serves prefill and decode, but a speculative cycle also runs

* the target **verify** forward (``TARGET_VERIFY``): each request's draft tokens attend to its prefix and, inside
  the draft tree, only to their ancestors (``spec_info.custom_mask``; a chain is causal);
* the draft's **multi-step decode**: row (request, branch) at step ``i`` attends to the request's prefix plus the
  branch's own draft slots ``0..i`` (the rows SGLang's ``generate_draft_decode_kv_indices`` builds for the Triton
  backend).

:class:`TorchNativeSpecAttnBackend` adds the first and replaces SGLang's ``torch_native`` backend (it behaves as
the original in every other mode); :class:`TorchNativeMultiStepDraftBackend` is the second, the container SGLang's
draft backend factory asks for.
"""

from __future__ import annotations

import torch
from sglang.srt.layers.attention.torch_native_backend import TorchNativeAttnBackend
from sglang.srt.mem_cache.memory_pool import KVWriteLoc
from torch.nn.functional import scaled_dot_product_attention


def _sdpa(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, scaling: float, gqa: bool
) -> torch.Tensor:
    """``q`` [tokens, heads, d], ``k``/``v`` [keys, kv_heads, d], ``mask`` [tokens, keys] (True = attend)."""
    out = scaled_dot_product_attention(
        q.movedim(0, 1).unsqueeze(0),
        k.movedim(0, 1).unsqueeze(0).to(q.dtype),
        v.movedim(0, 1).unsqueeze(0).to(q.dtype),
        attn_mask=mask,
        scale=scaling,
        enable_gqa=gqa,
    )
    return out.squeeze(0).movedim(1, 0)


def verify_mask(
    prefix_len: int, ntok: int, custom_mask: torch.Tensor | None, offset: int, device: torch.device
) -> torch.Tensor:
    """[ntok, prefix_len + ntok] attend-mask of one request's verify tokens: the FULL_MASK slice of
    ``custom_mask`` at ``offset`` (the layout SGLang's tree builder writes), or prefix + causal for a chain."""
    if custom_mask is not None:
        mask = custom_mask[offset : offset + ntok * (prefix_len + ntok)].view(ntok, prefix_len + ntok).bool().clone()
        mask[:, :prefix_len] = True  # SGLang leaves the prefix columns unwritten when its backend does not read them
        return mask
    mask = torch.ones(ntok, prefix_len + ntok, dtype=torch.bool, device=device)
    mask[:, prefix_len:] = torch.ones(ntok, ntok, dtype=torch.bool, device=device).tril()
    return mask


class TorchNativeSpecAttnBackend(TorchNativeAttnBackend):
    """SGLang's torch-native backend plus the target-verify forward."""

    def get_cuda_graph_seq_len_fill_value(self) -> int:
        """Sequence length of SGLang's dummy decode batches (warm-up, start-up cost probe): 1, as the Triton and
        FlashInfer backends say."""
        return 1

    def forward_extend(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if not forward_batch.forward_mode.is_target_verify() or layer.is_cross_attention:
            return super().forward_extend(q, k, v, layer, forward_batch, save_kv_cache)
        if save_kv_cache and k is not None and v is not None:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc(forward_batch.out_cache_loc, self.swa_out_cache_loc), k, v
            )
        bs = forward_batch.batch_size
        ntok = q.shape[0] // bs
        spec = forward_batch.spec_info
        custom_mask = getattr(spec, "custom_mask", None)
        q_ = q.view(-1, layer.tp_q_head_num, layer.qk_head_dim)
        k_new = k.view(-1, layer.tp_k_head_num, layer.qk_head_dim)
        v_new = v.view(-1, layer.tp_v_head_num, layer.v_head_dim)
        o = q.new_empty((q.shape[0], layer.tp_q_head_num * layer.v_head_dim))
        o_ = o.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        v_cache = self.token_to_kv_pool.get_value_buffer(layer.layer_id)
        req_to_token = self.req_to_token_pool.req_to_token
        gqa = layer.tp_q_head_num != layer.tp_k_head_num
        offset = 0
        for r, (row, prefix_len) in enumerate(
            zip(forward_batch.req_pool_indices.tolist(), forward_batch.seq_lens.tolist())
        ):
            locs = req_to_token[row, :prefix_len].long()
            rows = slice(r * ntok, (r + 1) * ntok)
            keys = torch.cat([k_cache[locs], k_new[rows].to(k_cache.dtype)])
            values = torch.cat([v_cache[locs], v_new[rows].to(v_cache.dtype)])
            mask = verify_mask(prefix_len, ntok, custom_mask, offset, q.device)
            offset += ntok * (prefix_len + ntok)
            o_[rows] = _sdpa(q_[rows], keys, values, mask, layer.scaling, gqa)
        return o


class TorchNativeDraftStepBackend(TorchNativeSpecAttnBackend):
    """One draft decode step: row (request, branch) reads the KV slots its container planned for this step."""

    step_rows: list[torch.Tensor] | None = None

    def forward_decode(self, q, k, v, layer, forward_batch, save_kv_cache=True):
        if self.step_rows is None:
            return super().forward_decode(q, k, v, layer, forward_batch, save_kv_cache)
        if save_kv_cache and k is not None and v is not None:
            self.token_to_kv_pool.set_kv_buffer(
                layer, KVWriteLoc(forward_batch.out_cache_loc, self.swa_out_cache_loc), k, v
            )
        q_ = q.reshape(-1, layer.tp_q_head_num, layer.qk_head_dim)
        o = q.new_empty((q_.shape[0], layer.tp_q_head_num * layer.v_head_dim))
        o_ = o.view(-1, layer.tp_q_head_num, layer.v_head_dim)
        k_cache = self.token_to_kv_pool.get_key_buffer(layer.layer_id)
        v_cache = self.token_to_kv_pool.get_value_buffer(layer.layer_id)
        gqa = layer.tp_q_head_num != layer.tp_k_head_num
        for i, locs in enumerate(self.step_rows):
            o_[i : i + 1] = _sdpa(q_[i : i + 1], k_cache[locs], v_cache[locs], None, layer.scaling, gqa)
        return o


def draft_step_rows(
    req_to_token: torch.Tensor,
    req_pool_indices: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    num_steps: int,
    step: int,
) -> list[torch.Tensor]:
    """KV slots of every (request, branch) row at draft decode ``step``: the request's ``seq_len`` prefix, then
    its branch's slots ``seq_len + branch*num_steps + 0..step`` (page size 1, no window: what SGLang's
    ``generate_draft_decode_kv_indices`` writes)."""
    rows = []
    for row, seq_len in zip(req_pool_indices.tolist(), seq_lens.tolist()):
        prefix = req_to_token[row, :seq_len]
        for branch in range(topk):
            start = seq_len + branch * num_steps
            rows.append(torch.cat([prefix, req_to_token[row, start : start + step + 1]]).long())
    return rows


class TorchNativeMultiStepDraftBackend:
    """The per-step draft decode backends for ``speculative_num_steps - 1`` consecutive draft forwards."""

    def __init__(self, model_runner, topk: int, speculative_num_steps: int):
        self.topk = topk
        self.speculative_num_steps = speculative_num_steps
        self.attn_backends = [TorchNativeDraftStepBackend(model_runner) for _ in range(speculative_num_steps - 1)]
        self.req_to_token_pool = model_runner.req_to_token_pool

    def init_forward_metadata(self, forward_batch) -> None:
        for step, backend in enumerate(self.attn_backends):
            backend.init_forward_metadata(forward_batch)
            backend.step_rows = draft_step_rows(
                self.req_to_token_pool.req_to_token,
                forward_batch.req_pool_indices,
                forward_batch.seq_lens,
                self.topk,
                self.speculative_num_steps,
                step,
            )

    def init_cuda_graph_state(self, *args, **kwargs) -> None:
        raise RuntimeError("the torch-native draft backend runs without CUDA graphs (disable_cuda_graph)")
