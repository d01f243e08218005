"""Tiny Llama targets and EAGLE / EAGLE-3 drafts written to a directory, so real SGLang can be run end to end on a
CPU without downloading anything: seeded random weights (a few MB), transformers configs, and a word-level
tokenizer made locally (token ``i`` is the word ``t<i>``).

Two kinds of draft:

* **random**: its own seeded weights; it rarely agrees with the target, which exercises the reject path;
* **agreeing**: built from the target's weights so that it predicts the target's next token most of the time and
  acceptance lengths above 1 occur. An EAGLE draft copies every target layer (SGLang's EAGLE layer 0 has no input
  norm, which is exact here because the target's embedding rows have RMS 1 and unit norm weights) and shares the
  target's embedding and head; it differs from the target only in not seeing the first prompt token. An EAGLE-3
  draft copies the target's layers with the target-hidden half of its first attention zeroed and ``fc`` zeroed,
  and scales its final norm down (argmax is unchanged, but the hidden state it feeds its next step is ~0) so it
  behaves like the target without the embedding's residual term. The target's attention and MLP outputs are
  scaled up so that term is small and the context (the KV cache) dominates every prediction: a token that reads
  a wrong KV slot changes the output.

The target's shape is a dict of transformers ``LlamaConfig`` keys (:data:`DEFAULT_SHAPE`).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

SHAPE_KEYS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "vocab_size",
)
DEFAULT_SHAPE: dict[str, int] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
}
SPECIAL_TOKENS = ("<unk>", "<s>", "</s>")  # ids 0, 1, 2
MAX_POSITIONS = 2048
OUTPUT_GAIN = 4.0  # attention / MLP output scale relative to an embedding row (RMS 1)
FINAL_NORM_SCALE = 1e-4  # agreeing EAGLE-3 draft: logits argmax unchanged, fed-back hidden state ~0


class ShapeError(ValueError):
    """A model shape the tiny models cannot be built with (names the key and what is allowed)."""


MAX_TINY_VALUE = 65536  # weights are written to disk: a tiny model stays tiny
MAX_DUMMY_VALUE = 1 << 20  # no weights written (SGLang's --load-format dummy): production shapes allowed


def validate_shape(shape: Mapping[str, Any] | None, dummy: bool = False) -> dict[str, int]:
    """``shape`` over :data:`DEFAULT_SHAPE`; every value a positive int, heads dividing the hidden size, KV heads
    dividing the heads, the vocabulary large enough for the special tokens plus a few words. ``dummy``: only
    configs are written (SGLang makes the weights), so production shapes (a 128k vocabulary) are allowed."""
    limit = MAX_DUMMY_VALUE if dummy else MAX_TINY_VALUE
    out = dict(DEFAULT_SHAPE)
    for key, value in dict(shape or {}).items():
        if key not in SHAPE_KEYS:
            raise ShapeError(f"unknown model-config key {key!r}; allowed: {', '.join(SHAPE_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ShapeError(f"{key} must be a positive integer, got {value!r}")
        if value > limit:
            raise ShapeError(
                f"{key} must be at most {limit} for a {'dummy-weight' if dummy else 'tiny'} model, got {value}"
            )
        out[key] = value
    if out["hidden_size"] % out["num_attention_heads"]:
        raise ShapeError(
            f"hidden_size {out['hidden_size']} must be divisible by num_attention_heads {out['num_attention_heads']}"
        )
    if out["num_attention_heads"] % out["num_key_value_heads"]:
        raise ShapeError(
            f"num_attention_heads {out['num_attention_heads']} must be divisible by "
            f"num_key_value_heads {out['num_key_value_heads']}"
        )
    if (out["hidden_size"] // out["num_attention_heads"]) % 2:
        raise ShapeError("hidden_size / num_attention_heads (the head size) must be even for rotary embeddings")
    if out["vocab_size"] < len(SPECIAL_TOKENS) + 8:
        raise ShapeError(f"vocab_size must be at least {len(SPECIAL_TOKENS) + 8}, got {out['vocab_size']}")
    return out


@dataclass(frozen=True)
class TinyModels:
    """Directories of one target and its drafts (every path loadable by SGLang's ``--model-path`` /
    ``--speculative-draft-model-path``)."""

    target: str
    eagle: str
    eagle3: str
    eagle_agree: str
    eagle3_agree: str
    shape: dict[str, int]

    def draft(self, algorithm: str, agree: bool) -> str:
        if algorithm.upper() == "EAGLE":
            return self.eagle_agree if agree else self.eagle
        if algorithm.upper() == "EAGLE3":
            return self.eagle3_agree if agree else self.eagle3
        raise ValueError(f"algorithm must be EAGLE or EAGLE3, got {algorithm!r}")


def word(i: int) -> str:
    return SPECIAL_TOKENS[i] if i < len(SPECIAL_TOKENS) else f"t{i}"


def prompt_text(token_ids: list[int]) -> str:
    """The text that the tiny tokenizer encodes to ``token_ids`` (after its BOS)."""
    return " ".join(word(i) for i in token_ids)


def write_tokenizer(path: str | Path, vocab_size: int) -> None:
    """A word-level fast tokenizer: whitespace pre-tokenizer, ``<s>`` prepended, ids 0..vocab_size-1."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {word(i): i for i in range(vocab_size)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # ids -> words joined by spaces
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(path))


def _llama_config(shape: dict[str, int], **extra: Any):
    from transformers import LlamaConfig

    kwargs: dict[str, Any] = {
        **shape,
        "max_position_embeddings": MAX_POSITIONS,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
        **extra,
    }
    return LlamaConfig(**kwargs)


def _normal(gen, *size: int, gain: float = 1.0):
    import torch

    fan_in = size[-1]
    return torch.randn(*size, generator=gen) * (gain / math.sqrt(fan_in))


def _unit_rms_rows(gen, rows: int, cols: int):
    import torch

    w = torch.randn(rows, cols, generator=gen)
    return w / w.pow(2).mean(dim=1, keepdim=True).sqrt()


def target_weights(shape: dict[str, int], seed: int) -> dict[str, Any]:
    """Weights of the target in transformers' LlamaForCausalLM naming."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    h, inter, v = shape["hidden_size"], shape["intermediate_size"], shape["vocab_size"]
    hd = h // shape["num_attention_heads"]
    q_out, kv_out = shape["num_attention_heads"] * hd, shape["num_key_value_heads"] * hd
    w: dict[str, Any] = {"model.embed_tokens.weight": _unit_rms_rows(gen, v, h)}
    for i in range(shape["num_hidden_layers"]):
        p = f"model.layers.{i}."
        w[p + "input_layernorm.weight"] = torch.ones(h)
        w[p + "post_attention_layernorm.weight"] = torch.ones(h)
        w[p + "self_attn.q_proj.weight"] = _normal(gen, q_out, h, gain=2.0)  # sharper attention: context matters
        w[p + "self_attn.k_proj.weight"] = _normal(gen, kv_out, h, gain=2.0)
        w[p + "self_attn.v_proj.weight"] = _normal(gen, kv_out, h)
        w[p + "self_attn.o_proj.weight"] = _normal(gen, h, q_out, gain=OUTPUT_GAIN)
        w[p + "mlp.gate_proj.weight"] = _normal(gen, inter, h)
        w[p + "mlp.up_proj.weight"] = _normal(gen, inter, h)
        w[p + "mlp.down_proj.weight"] = _normal(gen, h, inter, gain=OUTPUT_GAIN)
    w["model.norm.weight"] = torch.ones(h)
    w["lm_head.weight"] = _normal(gen, v, h, gain=8.0)  # logits far apart: greedy ties (and TP reordering) are rare
    return w


def _save(path: Path, config, weights: dict[str, Any] | None, vocab_size: int) -> str:
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(str(path))
    if weights is not None:  # None: a config-only model for SGLang's --load-format dummy
        from safetensors.torch import save_file

        save_file({k: t.contiguous() for k, t in weights.items()}, str(path / "model.safetensors"))
    write_tokenizer(path, vocab_size)
    return str(path)


def _layer_keys(prefix: str) -> tuple[str, ...]:
    return tuple(
        prefix + k
        for k in (
            "self_attn.q_proj.weight",
            "self_attn.k_proj.weight",
            "self_attn.v_proj.weight",
            "self_attn.o_proj.weight",
            "mlp.gate_proj.weight",
            "mlp.up_proj.weight",
            "mlp.down_proj.weight",
            "post_attention_layernorm.weight",
        )
    )


def eagle_weights(shape: dict[str, int], target: dict[str, Any], seed: int, agree: bool) -> tuple[int, dict]:
    """(layers, weights) of an EAGLE draft in SGLang's ``LlamaForCausalLMEagle`` naming (no ``model.`` prefix)."""
    import torch

    h = shape["hidden_size"]
    if agree:
        layers = shape["num_hidden_layers"]
        w = {
            "embed_tokens.weight": target["model.embed_tokens.weight"].clone(),
            "fc.weight": torch.cat([torch.eye(h), torch.zeros(h, h)], dim=1),
            "fc.bias": torch.zeros(h),
        }
        for i in range(layers):
            for k in _layer_keys(f"model.layers.{i}."):
                w[k.removeprefix("model.")] = target[k].clone()
            if i:
                w[f"layers.{i}.input_layernorm.weight"] = target[f"model.layers.{i}.input_layernorm.weight"].clone()
        return layers, w
    own = target_weights({**shape, "num_hidden_layers": 1}, seed)
    w = {
        k.removeprefix("model."): t
        for k, t in own.items()
        if k.startswith("model.layers.0.") and "input_layernorm" not in k
    }
    w["embed_tokens.weight"] = own["model.embed_tokens.weight"]
    w["fc.weight"] = _normal(torch.Generator().manual_seed(seed + 1), h, 2 * h)
    w["fc.bias"] = torch.zeros(h)
    return 1, w


def eagle3_weights(shape: dict[str, int], target: dict[str, Any], seed: int, agree: bool) -> tuple[int, dict]:
    """(layers, weights) of an EAGLE-3 draft in SGLang's ``LlamaForCausalLMEagle3`` naming."""
    import torch

    h, n_aux = shape["hidden_size"], len(aux_layer_ids(shape["num_hidden_layers"]))
    if agree:
        layers = shape["num_hidden_layers"]
        w: dict[str, Any] = {
            "fc.weight": torch.zeros(h, n_aux * h),
            "norm.weight": target["model.norm.weight"] * FINAL_NORM_SCALE,
            "lm_head.weight": target["lm_head.weight"].clone(),
        }
        for i in range(layers):
            src = f"model.layers.{i}."
            for k in _layer_keys(src):
                t = target[k].clone()
                if i == 0 and k.split(".")[-2] in ("q_proj", "k_proj", "v_proj"):
                    t = torch.cat([t, torch.zeros_like(t)], dim=1)  # [embeds | target hidden]: embeds only
                w[f"layers.{i}." + k.removeprefix(src)] = t
            norm = target[src + "input_layernorm.weight"].clone()
            if i == 0:
                w["layers.0.input_layernorm.weight"] = norm
                w["layers.0.hidden_norm.weight"] = torch.ones(h)
            else:
                w[f"layers.{i}.hidden_norm.weight"] = norm
        return layers, w
    gen = torch.Generator().manual_seed(seed)
    own = target_weights({**shape, "num_hidden_layers": 1}, seed)
    w = {k.removeprefix("model."): t for k, t in own.items() if k.startswith("model.layers.0.")}
    for k in ("q_proj", "k_proj", "v_proj"):
        key = f"layers.0.self_attn.{k}.weight"
        w[key] = _normal(gen, w[key].shape[0], 2 * h, gain=2.0 if k != "v_proj" else 1.0)
    w["layers.0.hidden_norm.weight"] = torch.ones(h)
    w["fc.weight"] = _normal(gen, h, n_aux * h)
    w["norm.weight"] = torch.ones(h)
    w["lm_head.weight"] = own["lm_head.weight"]
    return 1, w


def aux_layer_ids(layers: int) -> list[int]:
    """Up to three distinct target layers whose outputs feed an EAGLE-3 draft (SGLang captures the input of
    layer id+1; -1 is the embedding)."""
    return sorted({-1, (layers - 2) // 2, max(layers - 2, -1)})


def make_tiny_models(
    root: str | Path, shape: Mapping[str, Any] | None = None, seed: int = 0, weights: bool = True
) -> TinyModels:
    """Write a target and four drafts (EAGLE / EAGLE-3, random / agreeing) under ``root``; deterministic in
    ``seed`` and ``shape``. ``weights=False`` writes configs and tokenizers only, for SGLang's ``--load-format
    dummy`` at production shapes (every draft is then a one-layer head of random weights)."""
    import torch

    shape_ = validate_shape(shape, dummy=not weights)
    root = Path(root)
    v = shape_["vocab_size"]

    def config_only(_shape, _target, _seed, _agree):
        return 1, None

    with torch.no_grad():
        tw: Any = target_weights(shape_, seed) if weights else None  # None: config-only models (no weights)
        target = _save(root / "target", _llama_config(shape_, architectures=["LlamaForCausalLM"]), tw, v)
        out: dict[str, str] = {}
        make_eagle, make_eagle3 = (eagle_weights, eagle3_weights) if weights else (config_only, config_only)
        for name, agree in (("eagle", False), ("eagle_agree", True)):
            layers, w = make_eagle(shape_, tw, seed + 101, agree)
            cfg = _llama_config({**shape_, "num_hidden_layers": layers}, architectures=["LlamaForCausalLMEagle"])
            out[name] = _save(root / name, cfg, w, v)
        for name, agree in (("eagle3", False), ("eagle3_agree", True)):
            layers, w = make_eagle3(shape_, tw, seed + 202, agree)
            cfg = _llama_config(
                {**shape_, "num_hidden_layers": layers},
                architectures=["LlamaForCausalLMEagle3"],
                draft_vocab_size=v,
                target_hidden_size=shape_["hidden_size"],
                norm_output=agree,
                num_aux_hidden_states=len(aux_layer_ids(shape_["num_hidden_layers"])),
                eagle_config={"eagle_aux_hidden_state_layer_ids": aux_layer_ids(shape_["num_hidden_layers"])},
            )
            out[name] = _save(root / name, cfg, w, v)
    (root / "shape.json").write_text(json.dumps(shape_, sort_keys=True))
    return TinyModels(target=target, shape=shape_, **out)


NOISE_SEED = 7


def noisy_copy(src: str | Path, dst: str | Path, scale: float = 1.0, seed: int = NOISE_SEED) -> str:
    """A copy of the checkpoint directory ``src`` whose floating-point tensors have Gaussian noise of ``scale`` times
    each tensor's RMS added: same config, names, shapes and dtypes (a checkpoint a pod can load in place of
    ``src``), other weights, so a draft that agreed with its target mostly stops agreeing."""
    import torch
    from safetensors.torch import load_file, save_file

    src, dst = Path(src), Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for f in sorted(src.iterdir()):
        if f.is_file() and not f.name.endswith(".safetensors"):
            shutil.copyfile(f, dst / f.name)
    gen = torch.Generator().manual_seed(seed)
    for f in sorted(src.glob("*.safetensors")):
        weights = load_file(str(f))
        out = {}
        for name in sorted(weights):
            t = weights[name]
            if t.is_floating_point() and t.numel():
                rms = t.float().pow(2).mean().sqrt().clamp_min(1e-3)
                t = (t.float() + torch.randn(t.shape, generator=gen) * rms * scale).to(t.dtype)
            out[name] = t.contiguous()
        save_file(out, str(dst / f.name))
    return str(dst)
