"""An EAGLE-3 draft head in plain PyTorch whose parameters are named and shaped exactly as SGLang 0.5.23's
``LlamaForCausalLMEagle3`` loads them, so a head trained here serves unchanged with ``--speculative-algorithm EAGLE3``.

The forward mirrors SGLang's ``sglang.srt.models.llama_eagle3``:

* the target's hidden states from three layers are concatenated (3H) and projected by ``fc`` to H (step 0 only;
  later draft steps feed the draft's own output hidden state, which already has width H);
* one decoder layer whose attention input is ``cat(input_layernorm(embed(token)), hidden_norm(hidden))`` (2H), with
  the un-normalised hidden as the residual;
* ``norm`` then ``lm_head`` over the draft vocabulary; ``d2t`` maps a draft id to a target id
  (``target = draft + d2t[draft]``) when the draft vocabulary is a subset.

SGLang captures, for ``eagle_aux_hidden_state_layer_ids = [a, b, c]``, the outputs of target layers a, b, c, i.e.
transformers' ``output_hidden_states[a + 1]`` etc. (index 0 is the embedding output).

Drafting ``k`` tokens is unrolled the way the runtime does it: step 0 runs over every position causally on target
features; step j >= 1 at position t (rotary position t + j) attends to step-0 keys at positions <= t plus the keys of
its own chain's earlier steps. Training uses the same unroll ("training-time test").
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


def default_aux_layer_ids(num_layers: int) -> list[int]:
    """SGLang's default for Llama targets (``set_eagle3_layers_to_capture(None)`` captures the inputs of layers
    2, L//2, L-3, i.e. the outputs of layers 1, L//2-1, L-4), clamped for very shallow smoke models."""
    ids = [1, num_layers // 2 - 1, num_layers - 4]
    return [min(max(i, 0), num_layers - 1) for i in ids]


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


class Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(2 * hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, hidden: int, heads: int, kv_heads: int, inter: int, eps: float):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden, eps)
        self.hidden_norm = RMSNorm(hidden, eps)
        self.self_attn = Attention(hidden, heads, kv_heads)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = MLP(hidden, inter)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Eagle3Draft(nn.Module):
    """The head; ``state_dict()`` keys are the checkpoint's tensor names (plus the ``d2t``/``t2d`` buffers)."""

    def __init__(
        self,
        *,
        hidden: int,
        heads: int,
        kv_heads: int,
        inter: int,
        vocab: int,
        draft_vocab: int,
        aux_layer_ids: list[int],
        eps: float = 1e-5,
        rope_theta: float = 10000.0,
        max_positions: int = 2048,
    ):
        super().__init__()
        self.hidden, self.vocab, self.draft_vocab = hidden, vocab, draft_vocab
        self.aux_layer_ids = list(aux_layer_ids)
        self.eps, self.rope_theta, self.max_positions = eps, rope_theta, max_positions
        self.embed_tokens = nn.Embedding(vocab, hidden)  # the target's; SGLang shares the target's at load time
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(len(aux_layer_ids) * hidden, hidden, bias=False)
        self.midlayer = MidLayer(hidden, heads, kv_heads, inter, eps)
        self.norm = RMSNorm(hidden, eps)
        self.lm_head = nn.Linear(hidden, draft_vocab, bias=False)
        if draft_vocab < vocab:
            self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(vocab, dtype=torch.bool))
        else:
            self.d2t = None
            self.t2d = None
        hd = hidden // heads
        inv = 1.0 / (rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    # ----- construction -------------------------------------------------------------------------------------------
    @classmethod
    def for_target(cls, target_config, draft_vocab_ids: torch.Tensor | None, aux_layer_ids: list[int]):
        """A head shaped after a transformers ``LlamaConfig``; ``draft_vocab_ids`` (sorted target ids) reduces the
        draft vocabulary, None keeps the target's."""
        vocab = target_config.vocab_size
        draft_vocab = vocab if draft_vocab_ids is None else int(draft_vocab_ids.numel())
        head = cls(
            hidden=target_config.hidden_size,
            heads=target_config.num_attention_heads,
            kv_heads=target_config.num_key_value_heads,
            inter=target_config.intermediate_size,
            vocab=vocab,
            draft_vocab=draft_vocab,
            aux_layer_ids=aux_layer_ids,
            eps=target_config.rms_norm_eps,
            rope_theta=rope_theta_of(target_config),
            max_positions=target_config.max_position_embeddings,
        )
        if draft_vocab_ids is not None:
            ids = draft_vocab_ids.long().sort().values
            head.d2t.copy_(ids - torch.arange(draft_vocab))
            head.t2d.zero_()
            head.t2d[ids] = True
        return head

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if self.d2t is None else draft_ids + self.d2t[draft_ids]

    # ----- forward ------------------------------------------------------------------------------------------------
    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        freqs = pos.float()[..., None] * self.inv_freq  # [B, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, hd]
        return (x.float() * emb.cos() + _rotate_half(x.float()) * emb.sin()).to(x.dtype)

    def step(self, hidden: torch.Tensor, tokens: torch.Tensor, pos: torch.Tensor, chain: list):
        """One draft step for every position. ``hidden`` [B,T,3H] (step 0: target features) or [B,T,H] (own
        output); ``chain`` holds step 0's (K, V) first, then this chain's earlier steps; the new (K, V) is appended.
        Returns (logits over the draft vocabulary, output hidden state fed to the next step)."""
        if hidden.shape[-1] != self.hidden:
            hidden = self.fc(hidden)
        layer = self.midlayer
        attn = layer.self_attn
        residual = hidden
        x = torch.cat(
            [layer.input_layernorm(self.embed_tokens(tokens).to(hidden.dtype)), layer.hidden_norm(hidden)], dim=-1
        )
        b, t, _ = x.shape
        q = attn.q_proj(x).view(b, t, attn.heads, attn.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
        q, k = self._rope(q, pos), self._rope(k, pos)
        rep = attn.heads // attn.kv_heads
        chain.append((k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)))
        out = _chain_attention(q, chain, 1.0 / math.sqrt(attn.head_dim))
        out = attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))
        residual = out + residual
        h = layer.mlp(layer.post_attention_layernorm(residual))
        hidden_out = h + residual
        return self.lm_head(self.norm(hidden_out)), hidden_out

    def unroll(self, features: torch.Tensor, tokens: torch.Tensor, steps: int, teacher_tokens=None):
        """``steps`` chained draft steps over every position. ``features`` [B,T,3H] are the target's features at
        positions 0..T-1, ``tokens`` [B,T] the token after each position. Step j's input token at position t is
        ``teacher_tokens[:, t + j]`` (training) or the draft's own step j-1 proposal (inference: ``None``).
        Returns per-step draft-vocabulary logits [B,T,Vd]."""
        b, t = tokens.shape
        pos0 = torch.arange(t, device=tokens.device).expand(b, t)
        chain: list = []
        logits, hidden = self.step(features, tokens, pos0, chain)
        out = [logits]
        for j in range(1, steps):
            if teacher_tokens is None:
                nxt = self.draft_to_target(logits.argmax(-1))
            else:
                nxt = F.pad(teacher_tokens[:, j:], (0, j), value=0)[:, :t]
            logits, hidden = self.step(hidden, nxt, pos0 + j, chain)
            out.append(logits)
        return out

    # ----- checkpoint ---------------------------------------------------------------------------------------------
    def checkpoint_tensors(self, dtype=torch.bfloat16) -> dict[str, torch.Tensor]:
        """Tensors under the names SGLang's loader maps (``midlayer`` is its legacy alias of ``layers.0``)."""
        out = {}
        for name, t in self.state_dict().items():
            if name in ("d2t", "t2d"):
                out[name] = t.contiguous().cpu()
            else:
                out[name] = t.detach().to(dtype).contiguous().cpu()
        return out

    def hf_config(self, target_config) -> dict:
        """config.json for SGLang: a Llama config of one layer, architecture ``LlamaForCausalLMEagle3``."""
        cfg = {
            "architectures": ["LlamaForCausalLMEagle3"],
            "model_type": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": self.midlayer.mlp.gate_proj.out_features,
            "num_attention_heads": self.midlayer.self_attn.heads,
            "num_key_value_heads": self.midlayer.self_attn.kv_heads,
            "head_dim": self.midlayer.self_attn.head_dim,
            "num_hidden_layers": 1,
            "vocab_size": self.vocab,
            "draft_vocab_size": self.draft_vocab,
            "target_hidden_size": self.hidden,
            "hidden_act": "silu",
            "rms_norm_eps": self.eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None,
            "max_position_embeddings": self.max_positions,
            "tie_word_embeddings": False,
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": target_config.bos_token_id,
            "eos_token_id": target_config.eos_token_id,
            "pad_token_id": target_config.pad_token_id,
            "torch_dtype": "bfloat16",
            "dtype": "bfloat16",
            "eagle_config": {
                "eagle_aux_hidden_state_layer_ids": self.aux_layer_ids,
                "use_aux_hidden_state": True,
            },
        }
        return cfg

    def save(self, out: Path, target_config) -> None:
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        save_file(self.checkpoint_tensors(), str(out / "model.safetensors"))
        (out / "config.json").write_text(json.dumps(self.hf_config(target_config), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path, device="cpu") -> Eagle3Draft:
        from safetensors.torch import load_file

        cfg = json.loads((path / "config.json").read_text())
        head = cls(
            hidden=cfg["hidden_size"],
            heads=cfg["num_attention_heads"],
            kv_heads=cfg["num_key_value_heads"],
            inter=cfg["intermediate_size"],
            vocab=cfg["vocab_size"],
            draft_vocab=cfg["draft_vocab_size"],
            aux_layer_ids=cfg["eagle_config"]["eagle_aux_hidden_state_layer_ids"],
            eps=cfg["rms_norm_eps"],
            rope_theta=cfg["rope_theta"],
            max_positions=cfg["max_position_embeddings"],
        )
        tensors = load_file(str(path / "model.safetensors"))
        head.load_state_dict({k: (v if k in ("d2t", "t2d") else v.float()) for k, v in tensors.items()})
        return head.to(device)


def _chain_attention(q: torch.Tensor, chain: list, scale: float) -> torch.Tensor:
    """Attention of step j's queries [B,h,T,d]: causal over step 0's keys, plus the same position's keys of steps
    1..j (the chain that position's drafts form at decode time)."""
    k0, v0 = chain[0]
    t = q.shape[2]
    s0 = torch.matmul(q, k0.transpose(-1, -2)).float() * scale
    mask = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    s0 = s0.masked_fill(~mask, float("-inf"))
    if len(chain) == 1:
        return torch.matmul(s0.softmax(-1).to(v0.dtype), v0)
    sd = torch.stack([(q * k).sum(-1).float() * scale for k, _ in chain[1:]], dim=-1)  # [B,h,T,j]
    p = torch.cat([s0, sd], dim=-1).softmax(-1)
    out = torch.matmul(p[..., :t].to(v0.dtype), v0)
    for i, (_, v) in enumerate(chain[1:]):
        out = out + p[..., t + i, None].to(v.dtype) * v
    return out


def rope_theta_of(config) -> float:
    """rope_theta from a transformers LlamaConfig of either the v4 (attribute) or v5 (rope_parameters) layout."""
    params = getattr(config, "rope_parameters", None) or {}
    if isinstance(params, dict) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(getattr(config, "rope_theta", 10000.0))


def aux_features(hidden_states: tuple, aux_layer_ids: list[int]) -> torch.Tensor:
    """The 3H feature SGLang feeds the head, from transformers' ``output_hidden_states`` (index i+1 = output of
    layer i)."""
    return torch.cat([hidden_states[i + 1] for i in aux_layer_ids], dim=-1)
