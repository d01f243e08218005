"""``vllm._custom_ops.rotary_embedding`` in torch.

The pinned SGLang's ``RotaryEmbedding.__init__`` imports vllm's kernel on every platform that is not CUDA / HIP /
SGLang's CPU engine, even though a plain CPU torch then dispatches to ``forward_native``. The stub package
``import_stubs/vllm`` re-exports it as ``vllm._custom_ops`` where vllm itself cannot be imported
(:mod:`.import_paths`), so the import succeeds, and the function is a correct in-place rotary for any caller that
does reach it.
"""

from __future__ import annotations

import torch


def rotary_embedding(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor | None,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> None:
    """vllm's contract: rotate the first ``rotary_dim`` (= cache width) features of every head of ``query`` and
    ``key`` (``[tokens, heads * head_size]`` or ``[tokens, heads, head_size]``) in place, by the angles at
    ``positions``."""
    pos = positions.flatten()
    cos, sin = cos_sin_cache.index_select(0, pos).chunk(2, dim=-1)
    rot = cos.shape[-1] * 2
    for x in (query, key):
        if x is None:
            continue
        v = x.view(pos.shape[0], -1, head_size)
        part = v[..., :rot]
        c, s = cos.unsqueeze(1).to(x.dtype), sin.unsqueeze(1).to(x.dtype)
        if is_neox:
            x1, x2 = part[..., : rot // 2].clone(), part[..., rot // 2 :].clone()
            part[..., : rot // 2] = x1 * c - x2 * s
            part[..., rot // 2 :] = x2 * c + x1 * s
        else:
            x1, x2 = part[..., 0::2].clone(), part[..., 1::2].clone()
            part[..., 0::2] = x1 * c - x2 * s
            part[..., 1::2] = x2 * c + x1 * s
