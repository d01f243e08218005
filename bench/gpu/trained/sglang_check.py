#!/usr/bin/env python3
"""Load an EAGLE-3 head through SGLang 0.5.23's own ``LlamaForCausalLMEagle3`` on the CPU and prove every tensor
lands: SGLang's loader skips names it does not know without a word, so a misnamed tensor would otherwise serve as
random weights. Checks that every checkpoint tensor is consumed by a parameter's loader (or is ``d2t``/``t2d``),
every parameter of the model is written, and the loaded values equal the checkpoint's (``qkv_proj`` = q|k|v,
``gate_up_proj`` = gate|up, ``lm_head`` padded rows aside, ``hot_token_id`` = ``d2t`` + arange).

Usage:  python3 bench/gpu/trained/sglang_check.py DRAFT_DIR        (exit 0: loads exactly; 1: mismatch listed)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def build_sglang_head(draft_dir: Path):
    """SGLang's model object for the head's config.json, on the CPU, outside any server (TP 1, no PP)."""
    from specdecode_runtime import cpu as runtime_cpu

    runtime_cpu.install("cpu")
    from sglang.srt.models.llama_eagle3 import LlamaForCausalLMEagle3
    from sglang.srt.runtime_context import get_context, get_parallel
    from sglang.srt.server_args import ServerArgs
    from transformers import AutoConfig

    ctx = get_context()
    try:
        _ = ctx.server_args
    except Exception:
        ctx.set_server_args(
            ServerArgs(
                model_path=str(draft_dir),
                device="cpu",
                speculative_algorithm="EAGLE3",
                speculative_draft_model_path=str(draft_dir),
            )
        )
    config = AutoConfig.from_pretrained(str(draft_dir))
    with get_parallel().override(tp_size=1, tp_rank=0, attn_tp_size=1, attn_tp_rank=0, tp_group=None, pp_group=None):
        return LlamaForCausalLMEagle3(config)


def check(draft_dir: Path) -> list[str]:
    """Problems found loading ``draft_dir`` with SGLang's loader (empty: every tensor lands where it should)."""
    import torch
    from safetensors.torch import load_file

    model = build_sglang_head(draft_dir)  # installs the CPU import stubs sglang's loader modules need
    from sglang.srt.model_loader.weight_utils import default_weight_loader

    tensors = load_file(str(draft_dir / "model.safetensors"))
    params = dict(model.named_parameters())
    written: dict[str, int] = {name: 0 for name in params}
    current: list[str] = []

    def recorder(pname, orig):
        def load(param, *a, **kw):
            current.append(pname)
            written[pname] += 1
            return orig(param, *a, **kw)

        return load

    for pname, prm in params.items():
        prm.weight_loader = recorder(pname, getattr(prm, "weight_loader", default_weight_loader))
    problems: list[str] = []
    for name in sorted(tensors):
        current.clear()
        try:
            model.load_weights([(name, tensors[name])])
        except Exception as e:  # a shape SGLang's loader refuses
            problems.append(f"{name} {tuple(tensors[name].shape)}: SGLang's loader raised {e!r}")
            continue
        if name in ("d2t", "t2d"):
            continue
        if not current:
            problems.append(f"{name}: no SGLang parameter takes this tensor (silently dropped)")
    expected_writes = {"qkv_proj": 3, "gate_up_proj": 2}
    for pname, n in written.items():
        want = next((v for k, v in expected_writes.items() if k in pname), 1)
        if n != want:
            problems.append(f"{pname}: written {n} times, expected {want}")
    problems += _compare_values(model, tensors)
    if "d2t" in tensors:
        want = tensors["d2t"] + torch.arange(tensors["d2t"].shape[0])
        if model.hot_token_id is None or not torch.equal(model.hot_token_id, want):
            problems.append("hot_token_id is not d2t + arange(draft_vocab)")
    return problems


def _compare_values(model, tensors) -> list[str]:
    import torch

    p = dict(model.named_parameters())
    ln = "midlayer." if any(k.startswith("midlayer.") for k in tensors) else "layers.0."
    pairs = {
        "model.fc.weight": tensors.get("fc.weight"),
        "model.norm.weight": tensors.get("norm.weight"),
        "model.layers.0.input_layernorm.weight": tensors.get(ln + "input_layernorm.weight"),
        "model.layers.0.hidden_norm.weight": tensors.get(ln + "hidden_norm.weight"),
        "model.layers.0.post_attention_layernorm.weight": tensors.get(ln + "post_attention_layernorm.weight"),
        "model.layers.0.self_attn.o_proj.weight": tensors.get(ln + "self_attn.o_proj.weight"),
        "model.layers.0.mlp.down_proj.weight": tensors.get(ln + "mlp.down_proj.weight"),
        "model.embed_tokens.weight": tensors.get("embed_tokens.weight"),
    }
    try:
        pairs["model.layers.0.self_attn.qkv_proj.weight"] = torch.cat(
            [tensors[ln + f"self_attn.{x}_proj.weight"] for x in "qkv"]
        )
        pairs["model.layers.0.mlp.gate_up_proj.weight"] = torch.cat(
            [tensors[ln + f"mlp.{x}_proj.weight"] for x in ("gate", "up")]
        )
    except KeyError as e:
        return [f"tensor {e} is missing from the checkpoint"]
    problems = []
    for pname, want in pairs.items():
        if want is None:
            problems.append(f"{pname}: its checkpoint tensor is missing")
        elif tuple(p[pname].shape) != tuple(want.shape) or not torch.equal(p[pname].data.float(), want.float()):
            problems.append(f"{pname}: loaded {tuple(p[pname].shape)} differs from checkpoint {tuple(want.shape)}")
    lm = tensors.get("lm_head.weight")
    got = p["lm_head.weight"].data
    if lm is None or got.shape[0] < lm.shape[0] or not torch.equal(got[: lm.shape[0]].float(), lm.float()):
        problems.append(f"lm_head.weight: loaded {tuple(got.shape)} does not hold the checkpoint's")
    return problems


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or not (Path(argv[0]) / "model.safetensors").is_file():
        print(
            "usage: sglang_check.py DRAFT_DIR (a directory holding config.json and model.safetensors)", file=sys.stderr
        )
        return 2
    problems = check(Path(argv[0]))
    print(json.dumps({"draft": argv[0], "loads_exactly": not problems, "problems": problems}, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
