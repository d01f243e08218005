"""A tiny random-weight transformer draft, tensor-parallel over any torch.distributed group (Megatron layout).

Per decoder layer and per draft step it issues exactly two all-reduces over its TP group (attention output
projection, MLP down projection, both row-parallel), plus one all-gather of the vocab-parallel logits, the pattern
SGLang's TP draft pays on every step. float64 keeps sharded and unsharded sums equal to the last bit in practice,
so greedy proposals can be compared exactly against a single-process reference.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist

DTYPE = torch.float64


@dataclass(frozen=True)
class TinyConfig:
    vocab: int = 64
    hidden: int = 32
    heads: int = 4
    ffn: int = 64
    layers: int = 2


def full_weights(cfg: TinyConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)

    def w(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=g, dtype=DTYPE) / shape[-1] ** 0.5

    out = {"embed": w(cfg.vocab, cfg.hidden), "lm_head": w(cfg.vocab, cfg.hidden)}
    for i in range(cfg.layers):
        out[f"l{i}.qkv"] = w(3 * cfg.hidden, cfg.hidden)
        out[f"l{i}.o"] = w(cfg.hidden, cfg.hidden)
        out[f"l{i}.up"] = w(cfg.ffn, cfg.hidden)
        out[f"l{i}.down"] = w(cfg.hidden, cfg.ffn)
    return out


def shard_weights(
    full: dict[str, torch.Tensor], cfg: TinyConfig, tp_rank: int, tp_size: int
) -> dict[str, torch.Tensor]:
    """Column-parallel qkv/up (split output rows by head / ffn), row-parallel o/down (split input columns),
    vocab-parallel lm_head; the embedding stays replicated."""
    hd = cfg.hidden // cfg.heads
    hp = cfg.heads // tp_size
    out = {"embed": full["embed"], "lm_head": full["lm_head"].chunk(tp_size, 0)[tp_rank]}
    for i in range(cfg.layers):
        qkv = full[f"l{i}.qkv"].view(3, cfg.heads, hd, cfg.hidden)[:, tp_rank * hp : (tp_rank + 1) * hp]
        out[f"l{i}.qkv"] = qkv.reshape(3 * hp * hd, cfg.hidden)
        out[f"l{i}.o"] = (
            full[f"l{i}.o"]
            .view(cfg.hidden, cfg.heads, hd)[:, tp_rank * hp : (tp_rank + 1) * hp]
            .reshape(cfg.hidden, hp * hd)
        )
        out[f"l{i}.up"] = full[f"l{i}.up"].chunk(tp_size, 0)[tp_rank]
        out[f"l{i}.down"] = full[f"l{i}.down"].chunk(tp_size, 1)[tp_rank]
    return out


class TinyDraft:
    def __init__(self, cfg: TinyConfig, weights: dict[str, torch.Tensor], group=None, tp_size: int = 1):
        self.cfg, self.w, self.group, self.tp_size = cfg, weights, group, tp_size

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.tp_size > 1:
            dist.all_reduce(x, group=self.group)
        return x

    def logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-token logits ``[bs, vocab]`` for a causal prefix ``tokens [bs, t]`` (no KV cache: tiny sizes)."""
        cfg = self.cfg
        hd = cfg.hidden // cfg.heads
        hp = cfg.heads // self.tp_size
        x = self.w["embed"][tokens]  # [bs, t, h]
        bs, t, _ = x.shape
        mask = torch.full((t, t), float("-inf"), dtype=DTYPE).triu(1)
        for i in range(cfg.layers):
            q, k, v = (x @ self.w[f"l{i}.qkv"].T).view(bs, t, 3, hp, hd).unbind(2)
            att = torch.einsum("bqhd,bkhd->bhqk", q, k) / hd**0.5 + mask
            y = torch.einsum("bhqk,bkhd->bqhd", att.softmax(-1), v).reshape(bs, t, hp * hd)
            x = x + self._all_reduce(y @ self.w[f"l{i}.o"].T)
            h = torch.relu(x @ self.w[f"l{i}.up"].T)
            x = x + self._all_reduce(h @ self.w[f"l{i}.down"].T)
        local = x[:, -1] @ self.w["lm_head"].T  # [bs, vocab / tp]
        if self.tp_size == 1:
            return local
        parts = [torch.empty_like(local) for _ in range(self.tp_size)]
        dist.all_gather(parts, local, group=self.group)
        return torch.cat(parts, dim=-1)

    def propose(self, prefix: torch.Tensor, steps: int, topk: int = 1, num_draft_tokens: int | None = None):
        """EAGLE-style proposals. topk=1: greedy chain ``[bs, steps]``. topk>1: at each step expand the best
        candidate (greedy backbone) with its top-k children; return the (n-1) highest-scoring nodes as
        ``draft_tokens``, with SGLang-shaped ``parent_list [bs, topk*(steps-1)+1]`` and
        ``top_scores_index [bs, n-1]``."""
        seq = prefix.clone()
        if topk == 1:
            out = []
            for _ in range(steps):
                nxt = self.logits(seq).argmax(-1, keepdim=True)
                out.append(nxt)
                seq = torch.cat([seq, nxt], 1)
            return torch.cat(out, 1), None, None
        bs = prefix.shape[0]
        tokens, scores, parents = [], [], [torch.full((bs, 1), -1, dtype=torch.int64)]
        cum = torch.zeros(bs, 1, dtype=DTYPE)
        for s in range(steps):
            logp = self.logits(seq).log_softmax(-1)
            top_p, top_i = logp.topk(topk, dim=-1)
            tokens.append(top_i)
            scores.append(cum + top_p)
            if s < steps - 1:
                parents.append(torch.arange(s * topk, (s + 1) * topk, dtype=torch.int64).repeat(bs, 1))
            cum = cum + top_p[:, :1]
            seq = torch.cat([seq, top_i[:, :1]], 1)
        all_tokens, all_scores = torch.cat(tokens, 1), torch.cat(scores, 1)
        n1 = int(num_draft_tokens) - 1
        top_scores_index = all_scores.topk(n1, dim=-1).indices.sort(-1).values
        return all_tokens.gather(1, top_scores_index), torch.cat(parents, 1), top_scores_index
