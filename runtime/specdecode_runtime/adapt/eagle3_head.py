"""An EAGLE-3 draft head in plain PyTorch whose parameters are named and shaped exactly as SGLang's
``LlamaForCausalLMEagle3`` loads them (``sglang.srt.models.llama_eagle3``), so a head trained here serves unchanged
with ``--speculative-algorithm EAGLE3`` and can replace the served draft in place.

The forward mirrors SGLang's:

* the target's hidden states from the capture layers are concatenated (n x H) and projected by ``fc`` to H (step 0
  only; later draft steps feed the draft's own output hidden state, which already has width H);
* decoder layer 0's attention input is ``cat(input_layernorm(embed(token)), hidden_norm(hidden))`` (2H) with the
  projected hidden as the residual; a layer i >= 1 adds its input to the residual and normalises the sum with its
  ``hidden_norm`` (SGLang's fused add-norm), attention input H;
* ``norm`` of the final residual, then ``lm_head`` over the draft vocabulary; ``d2t`` maps a draft id to a target id
  (``target = draft + d2t[draft]``) when the draft vocabulary is a subset. The hidden state fed to the next step is
  the final residual before ``norm`` (after it with ``norm_output``).

SGLang captures, for ``eagle_aux_hidden_state_layer_ids = [a, b, c]``, the outputs of target layers a, b, c (-1: the
embedding), i.e. transformers' ``output_hidden_states[a + 1]`` etc. The embedding is the target's (SGLang shares it
with the head at load time), frozen; so is ``lm_head`` when the draft's config has no ``draft_vocab_size``.

Drafting ``k`` tokens is unrolled the way the runtime does it: step 0 runs over every position causally on target
features; step j >= 1 at position t (rotary position t + j) attends to step-0 keys at positions <= t plus the keys of
its own chain's earlier steps. Training uses the same unroll ("training-time test").

Checkpoints: :meth:`Eagle3Head.load` reads any SGLang EAGLE-3 checkpoint (``midlayer.*`` or ``layers.N.*`` names,
safetensors or ``.bin``, through :mod:`specdecode_runtime.draft_checkpoint`); :meth:`Eagle3Head.save_like` writes a
checkpoint with exactly the config, tensor names, shapes and dtypes of another (what an in-place swap requires);
:meth:`Eagle3Head.save` writes a new head's own config (``midlayer.*`` names, bfloat16).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any, Mapping, cast

import torch
import torch.nn.functional as F
from torch import nn

from .. import draft_checkpoint

LEGACY_LAYER0 = "midlayer."  # SGLang's legacy alias of ``layers.0.``
MAPS = ("d2t", "t2d")
ARCHITECTURE = "LlamaForCausalLMEagle3"
# config keys that change the forward and that this head does not implement: (key, the value it must have)
UNSUPPORTED = (
    ("fc_norm", (None, False)),
    ("use_aux_norm", (None, False)),
    ("norm_before_fc", (None, False)),
    ("bias", (None, False)),
    ("attention_bias", (None, False)),
    ("mlp_bias", (None, False)),
    ("tie_word_embeddings", (None, False)),
    ("hidden_act", (None, "silu")),
)


class HeadError(ValueError):
    """A checkpoint this head cannot represent, or one that does not fit the target; the message names what."""


def default_aux_layer_ids(num_layers: int) -> list[int]:
    """SGLang's default for Llama targets (``set_eagle3_layers_to_capture(None)`` captures the inputs of layers
    2, L//2, L-3, i.e. the outputs of layers 1, L//2-1, L-4), clamped for very shallow models."""
    ids = [1, num_layers // 2 - 1, num_layers - 4]
    return [min(max(i, 0), num_layers - 1) for i in ids]


def rope_theta_of(config: Any) -> float:
    """rope_theta from a transformers config object or a config.json dict, of either the v4 (``rope_theta``) or the
    v5 (``rope_parameters``) layout."""
    get = config.get if isinstance(config, Mapping) else (lambda k, d=None: getattr(config, k, d))
    params = get("rope_parameters", None) or {}
    if isinstance(params, Mapping) and "rope_theta" in params:
        return float(params["rope_theta"])
    return float(get("rope_theta", None) or 10000.0)


def aux_features(hidden_states: tuple, aux_layer_ids: list[int]) -> torch.Tensor:
    """The feature SGLang feeds the head, from transformers' ``output_hidden_states`` (index i+1 = output of
    layer i; index 0 = the embedding, layer id -1)."""
    return torch.cat([hidden_states[i + 1] for i in aux_layer_ids], dim=-1)


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
    def __init__(self, in_dim: int, heads: int, kv_heads: int, head_dim: int, hidden: int):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.q_proj = nn.Linear(in_dim, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(in_dim, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, hidden, bias=False)


class MLP(nn.Module):
    def __init__(self, hidden: int, inter: int):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Layer 0 reads ``[embeds | hidden]`` (2H) and has an ``input_layernorm``; a later layer reads H."""

    def __init__(self, hidden: int, heads: int, kv_heads: int, head_dim: int, inter: int, eps: float, first: bool):
        super().__init__()
        if first:
            self.input_layernorm = RMSNorm(hidden, eps)
        self.hidden_norm = RMSNorm(hidden, eps)
        self.self_attn = Attention(2 * hidden if first else hidden, heads, kv_heads, head_dim, hidden)
        self.post_attention_layernorm = RMSNorm(hidden, eps)
        self.mlp = MLP(hidden, inter)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Eagle3Head(nn.Module):
    """The head. :meth:`checkpoint_name` maps a ``state_dict()`` key to its checkpoint name (``layers.0.`` is
    written ``midlayer.`` when the head was made so or loaded from such a checkpoint)."""

    d2t: torch.Tensor | None
    t2d: torch.Tensor | None
    inv_freq: torch.Tensor

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
        layers: int = 1,
        head_dim: int | None = None,
        eps: float = 1e-5,
        rope_theta: float = 10000.0,
        max_positions: int = 2048,
        norm_output: bool = False,
        maps: bool | None = None,
        legacy_names: bool = True,
    ):
        super().__init__()
        self.hidden, self.vocab, self.draft_vocab = hidden, vocab, draft_vocab
        self.aux_layer_ids = list(aux_layer_ids)
        self.eps, self.rope_theta, self.max_positions = eps, rope_theta, max_positions
        self.norm_output = norm_output
        self.legacy_names = legacy_names
        self.lm_head_from_target = False  # set by load() when the config has no draft_vocab_size
        hd = head_dim or hidden // heads
        self.embed_tokens = nn.Embedding(vocab, hidden)  # the target's; SGLang shares the target's at load time
        self.embed_tokens.weight.requires_grad_(False)
        self.fc = nn.Linear(len(self.aux_layer_ids) * hidden, hidden, bias=False)
        self.layers = nn.ModuleList(
            [DecoderLayer(hidden, heads, kv_heads, hd, inter, eps, first=i == 0) for i in range(layers)]
        )
        self.norm = RMSNorm(hidden, eps)
        self.lm_head = nn.Linear(hidden, draft_vocab, bias=False)
        if maps if maps is not None else draft_vocab < vocab:
            self.register_buffer("d2t", torch.zeros(draft_vocab, dtype=torch.long))
            self.register_buffer("t2d", torch.zeros(vocab, dtype=torch.bool))
        else:
            self.d2t = None
            self.t2d = None
        inv = 1.0 / (rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    @property
    def decoder_layers(self) -> list[DecoderLayer]:
        return [cast(DecoderLayer, layer) for layer in self.layers]

    @property
    def midlayer(self) -> DecoderLayer:
        return self.decoder_layers[0]

    # ----- construction -------------------------------------------------------------------------------------------
    @classmethod
    def for_target(cls, target_config: Any, draft_vocab_ids: torch.Tensor | None, aux_layer_ids: list[int]):
        """A new one-layer head shaped after a transformers ``LlamaConfig``; ``draft_vocab_ids`` (sorted target ids)
        reduces the draft vocabulary, None keeps the target's."""
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
        if draft_vocab_ids is not None and head.d2t is not None and head.t2d is not None:
            ids = draft_vocab_ids.long().sort().values
            head.d2t.copy_(ids - torch.arange(draft_vocab))
            head.t2d.zero_()
            head.t2d[ids] = True
        return head

    @classmethod
    def from_config(
        cls, cfg: Mapping[str, Any], *, target_layers: int | None = None, maps: bool | None = None, legacy=False
    ) -> Eagle3Head:
        """A head shaped by an EAGLE-3 ``config.json``; :class:`HeadError` names a key it cannot represent."""
        if ARCHITECTURE not in (cfg.get("architectures") or []):
            raise HeadError(f"architectures is {cfg.get('architectures')!r}, not [{ARCHITECTURE!r}] (EAGLE-3 only)")
        for key, allowed in UNSUPPORTED:
            if cfg.get(key) not in allowed:
                raise HeadError(f"config key {key}={cfg.get(key)!r} is not supported (allowed: {allowed[1]!r})")
        scaling = cfg.get("rope_scaling") or {}
        params = cfg.get("rope_parameters") or {}
        if scaling or (isinstance(params, Mapping) and params.get("rope_type", "default") != "default"):
            raise HeadError("rope scaling is not supported (rope_scaling / rope_parameters.rope_type)")
        if cfg.get("target_hidden_size") not in (None, cfg.get("hidden_size")):
            raise HeadError(
                f"target_hidden_size {cfg.get('target_hidden_size')} differs from hidden_size "
                f"{cfg.get('hidden_size')}: a head with its own embedding is not supported"
            )
        ids = (cfg.get("eagle_config") or {}).get("eagle_aux_hidden_state_layer_ids")
        if not ids:
            if target_layers is None:
                raise HeadError("eagle_config.eagle_aux_hidden_state_layer_ids is absent and no target was given")
            ids = default_aux_layer_ids(target_layers)
        n_aux = cfg.get("num_aux_hidden_states") or len(ids)
        if n_aux != len(ids):
            raise HeadError(f"num_aux_hidden_states {n_aux} differs from the {len(ids)} capture layer ids {ids}")
        vocab = int(cfg["vocab_size"])
        try:
            return cls(
                hidden=int(cfg["hidden_size"]),
                heads=int(cfg["num_attention_heads"]),
                kv_heads=int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"]),
                head_dim=cfg.get("head_dim"),
                inter=int(cfg["intermediate_size"]),
                vocab=vocab,
                draft_vocab=int(cfg.get("draft_vocab_size") or vocab),
                aux_layer_ids=[int(i) for i in ids],
                layers=int(cfg.get("num_hidden_layers") or 1),
                eps=float(cfg.get("rms_norm_eps") or 1e-6),
                rope_theta=rope_theta_of(cfg),
                max_positions=int(cfg.get("max_position_embeddings") or 2048),
                norm_output=bool(cfg.get("norm_output", False)),
                maps=maps,
                legacy_names=legacy,
            )
        except (KeyError, TypeError, ValueError) as e:
            raise HeadError(f"config.json: {type(e).__name__}: {e}") from None

    @classmethod
    def load(cls, path: str | Path, device: Any = "cpu", target: Any = None) -> Eagle3Head:
        """The head of a checkpoint directory. With ``target`` (a transformers causal LM) the embedding is the
        target's, as SGLang serves it, and so is ``lm_head`` when the config has no ``draft_vocab_size``; the head
        is checked against the target (:func:`check_target`)."""
        source = str(Path(path).resolve())
        try:
            ref = draft_checkpoint.reference(source)
            ckpt = draft_checkpoint.load(source, ref)
        except draft_checkpoint.Refused as e:
            raise HeadError(e.message) from None
        cfg = ref.config
        names = set(ckpt.tensors)
        head = cls.from_config(
            cfg,
            target_layers=None if target is None else target.config.num_hidden_layers,
            maps="d2t" in names or None,
            legacy=any(n.startswith(LEGACY_LAYER0) for n in names),
        )
        if target is not None:
            problems = check_target(head, target.config)
            if problems:
                raise HeadError("; ".join(problems))
        head.lm_head_from_target = not cfg.get("draft_vocab_size")
        own = head.state_dict()
        found = {}
        for name, t in ckpt.tensors.items():
            key = head.internal_name(name)
            if key in own:
                found[key] = t if key in MAPS else t.float()
        needed = set(own) - set(found)
        if target is not None:  # the target provides these (SGLang's set_embed / load_lm_head_from_target)
            needed -= {"embed_tokens.weight"} | ({"lm_head.weight"} if head.lm_head_from_target else set())
        if needed:
            missing = sorted(head.checkpoint_name(n) for n in needed)
            raise HeadError(f"{source}: tensor(s) the head needs are missing: {missing[:4]}")
        with torch.no_grad():
            for key, t in found.items():
                if own[key].shape != t.shape:
                    raise HeadError(
                        f"{source}: tensor {head.checkpoint_name(key)} has shape {list(t.shape)}, "
                        f"the config gives {list(own[key].shape)}"
                    )
                own[key].copy_(t)
            if target is not None:
                head.embed_tokens.weight.copy_(target.get_input_embeddings().weight.float())
                if head.lm_head_from_target:
                    head.lm_head.weight.copy_(target.get_output_embeddings().weight.float())
        head.lm_head.weight.requires_grad_(not head.lm_head_from_target)
        return head.to(device)

    # ----- names --------------------------------------------------------------------------------------------------
    @staticmethod
    def internal_name(name: str) -> str:
        return "layers.0." + name[len(LEGACY_LAYER0) :] if name.startswith(LEGACY_LAYER0) else name

    def checkpoint_name(self, key: str) -> str:
        return LEGACY_LAYER0 + key[len("layers.0.") :] if self.legacy_names and key.startswith("layers.0.") else key

    def draft_to_target(self, draft_ids: torch.Tensor) -> torch.Tensor:
        return draft_ids if self.d2t is None else draft_ids + self.d2t[draft_ids]

    # ----- forward ------------------------------------------------------------------------------------------------
    def _rope(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        freqs = pos.float()[..., None] * self.inv_freq  # [B, T, hd/2]
        emb = torch.cat((freqs, freqs), dim=-1)[:, None]  # [B, 1, T, hd]
        return (x.float() * emb.cos() + _rotate_half(x.float()) * emb.sin()).to(x.dtype)

    def _attend(self, attn: Attention, x: torch.Tensor, pos: torch.Tensor, chain: list) -> torch.Tensor:
        b, t, _ = x.shape
        q = attn.q_proj(x).view(b, t, attn.heads, attn.head_dim).transpose(1, 2)
        k = attn.k_proj(x).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, attn.kv_heads, attn.head_dim).transpose(1, 2)
        q, k = self._rope(q, pos), self._rope(k, pos)
        rep = attn.heads // attn.kv_heads
        chain.append((k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)))
        out = _chain_attention(q, chain, 1.0 / math.sqrt(attn.head_dim))
        return attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))

    def step(self, hidden: torch.Tensor, tokens: torch.Tensor, pos: torch.Tensor, chains: list[list]):
        """One draft step for every position. ``hidden`` [B,T,nH] (step 0: target features) or [B,T,H] (own
        output); ``chains[i]`` holds layer i's step-0 (K, V) first, then this chain's earlier steps; the new (K, V)
        is appended. Returns (logits over the draft vocabulary, output hidden state fed to the next step)."""
        if hidden.shape[-1] != self.hidden:
            hidden = self.fc(hidden)
        embeds = self.embed_tokens(tokens).to(hidden.dtype)
        while len(chains) < len(self.layers):
            chains.append([])
        h, residual = hidden, hidden
        for i, layer in enumerate(self.decoder_layers):
            if i == 0:
                residual = h
                x = torch.cat([layer.input_layernorm(embeds), layer.hidden_norm(h)], dim=-1)
            else:  # SGLang's fused add-norm: the previous MLP output joins the residual first
                residual = h + residual
                x = layer.hidden_norm(residual)
            residual = self._attend(layer.self_attn, x, pos, chains[i]) + residual
            h = layer.mlp(layer.post_attention_layernorm(residual))
        residual = h + residual
        normed = self.norm(residual)
        return self.lm_head(normed), (normed if self.norm_output else residual)

    def unroll(self, features: torch.Tensor, tokens: torch.Tensor, steps: int, teacher_tokens=None):
        """``steps`` chained draft steps over every position. ``features`` [B,T,nH] are the target's features at
        positions 0..T-1, ``tokens`` [B,T] the token after each position. Step j's input token at position t is
        ``teacher_tokens[:, t + j]`` (training) or the draft's own step j-1 proposal (inference: ``None``).
        Returns per-step draft-vocabulary logits [B,T,Vd]."""
        b, t = tokens.shape
        pos0 = torch.arange(t, device=tokens.device).expand(b, t)
        chains: list[list] = []
        logits, hidden = self.step(features, tokens, pos0, chains)
        out = [logits]
        for j in range(1, steps):
            if teacher_tokens is None:
                nxt = self.draft_to_target(logits.argmax(-1))
            else:
                nxt = F.pad(teacher_tokens[:, j:], (0, j), value=0)[:, :t]
            logits, hidden = self.step(hidden, nxt, pos0 + j, chains)
            out.append(logits)
        return out

    # ----- checkpoint ---------------------------------------------------------------------------------------------
    def checkpoint_tensors(self, dtype=torch.bfloat16) -> dict[str, torch.Tensor]:
        """Tensors under the names SGLang's loader maps, floating point ones in ``dtype``."""
        out = {}
        for key, t in self.state_dict().items():
            name = self.checkpoint_name(key)
            out[name] = t.contiguous().cpu() if key in MAPS else t.detach().to(dtype).contiguous().cpu()
        return out

    def hf_config(self, target_config) -> dict:
        """config.json for SGLang: a Llama config, architecture ``LlamaForCausalLMEagle3``."""
        layer0 = self.midlayer
        return {
            "architectures": [ARCHITECTURE],
            "model_type": "llama",
            "hidden_size": self.hidden,
            "intermediate_size": layer0.mlp.gate_proj.out_features,
            "num_attention_heads": layer0.self_attn.heads,
            "num_key_value_heads": layer0.self_attn.kv_heads,
            "head_dim": layer0.self_attn.head_dim,
            "num_hidden_layers": len(self.layers),
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

    def save(self, out: Path, target_config) -> None:
        """A new head's checkpoint: its own config.json and bfloat16 tensors (``midlayer.*`` names)."""
        from safetensors.torch import save_file

        out.mkdir(parents=True, exist_ok=True)
        save_file(self.checkpoint_tensors(), str(out / "model.safetensors"))
        (out / "config.json").write_text(json.dumps(self.hf_config(target_config), indent=2) + "\n")

    def save_like(self, out: Path, reference: Path) -> None:
        """A checkpoint a pod serving ``reference`` can load in place: ``reference``'s config.json and other small
        files copied as they are, and one ``model.safetensors`` with exactly ``reference``'s tensor names, shapes
        and dtypes; the head's own tensors in those dtypes, every other tensor (the frozen embedding, a layer's
        unused norm) copied unchanged."""
        from safetensors.torch import save_file

        source = str(Path(reference).resolve())
        try:
            ckpt = draft_checkpoint.load(source, draft_checkpoint.reference(source))
        except draft_checkpoint.Refused as e:
            raise HeadError(e.message) from None
        own = self.state_dict()
        frozen = {"embed_tokens.weight"} | ({"lm_head.weight"} if self.lm_head_from_target else set())
        tensors = {}
        for name, ref_t in ckpt.tensors.items():
            key = self.internal_name(name)
            if key in own and key not in frozen:
                tensors[name] = own[key].detach().to(ref_t.dtype).cpu().contiguous()
            else:
                tensors[name] = ref_t.clone().contiguous()
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(Path(source).iterdir()):
            weights = f.name.endswith((".safetensors", ".bin")) or f.name == "model.safetensors.index.json"
            if f.is_file() and not weights:
                shutil.copyfile(f, out / f.name)
        save_file(tensors, str(out / "model.safetensors"))


def check_target(head: Eagle3Head, target_config: Any) -> list[str]:
    """What keeps ``head`` from serving the target: vocabulary, hidden size, capture layers."""
    problems = []
    if head.vocab != target_config.vocab_size:
        problems.append(f"the draft's vocab_size {head.vocab} is not the target's {target_config.vocab_size}")
    if head.hidden != target_config.hidden_size:
        problems.append(f"the draft's hidden_size {head.hidden} is not the target's {target_config.hidden_size}")
    layers = target_config.num_hidden_layers
    bad = [i for i in head.aux_layer_ids if not -1 <= i <= layers - 2]
    if bad:
        problems.append(f"capture layer ids {bad} are outside -1..{layers - 2} for a target of {layers} layers")
    return problems


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
