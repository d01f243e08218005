#!/usr/bin/env python3
"""Train the target: a byte-level BPE tokenizer and a Llama-architecture code LM on the corpus, by wall-clock budget.

The model is sized so a decode step is dominated by weight reads rather than kernel launches (default ~300M
parameters: 24 layers, hidden 1024, 16 heads, 4 KV heads, MLP 2816, vocab 16384), and trained for ``--minutes`` of
wall time (not epochs): the learning rate warms up over the first steps, then follows a cosine over the elapsed
fraction of the budget. bf16 autocast over fp32 master weights, fused AdamW, packed 1024-token windows.

Output (``--out``), loadable by SGLang's ``LlamaForCausalLM`` and transformers alike: ``config.json``
(``LlamaForCausalLM``, bfloat16), ``model.safetensors``, ``generation_config.json``, ``tokenizer.json``,
``tokenizer_config.json``, and ``train_report.json`` (parameters, tokens seen, tokens/s, held-out loss and perplexity
before and after training, wall times). The corpus's packed token streams are cached in ``--data`` for the head.

Usage:  python3 bench/gpu/trained/train_target.py --data CORPUS_DIR --out DIR [--minutes 4]
        python3 bench/gpu/trained/train_target.py --data CORPUS_DIR --out DIR --smoke      (tiny, CPU, seconds)
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from packed_data import EOT, PAD, documents, encode_split, eval_windows, windows  # noqa: E402

FULL = dict(
    layers=24,
    hidden=1024,
    heads=16,
    kv_heads=4,
    inter=2816,
    vocab=16384,
    seq=1024,
    batch=32,
    lr=8e-4,
    warmup=50,
    eval_windows=64,
    tok_bytes=40_000_000,
)
SMOKE = dict(
    layers=8,
    hidden=64,
    heads=4,
    kv_heads=2,
    inter=128,
    vocab=512,
    seq=128,
    batch=8,
    lr=3e-3,
    warmup=5,
    eval_windows=8,
    tok_bytes=2_000_000,
)


def train_tokenizer(data: Path, vocab: int, sample_bytes: int):
    """Byte-level BPE over the first ``sample_bytes`` of training text (lossless round trip for any text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=[EOT, PAD],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )

    def sample():
        taken = 0
        for doc in documents(data / "train.txt"):
            if taken >= sample_bytes:
                return
            taken += len(doc)
            yield doc

    tok.train_from_iterator(sample(), trainer)
    return tok


def save_tokenizer(tok, out: Path) -> None:
    """As a transformers fast tokenizer (what SGLang's AutoTokenizer loads): no BOS is added, EOT ends text."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=EOT, eos_token=EOT, pad_token=PAD, model_max_length=2048
    )
    fast.save_pretrained(str(out))
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"  # the name every transformers release resolves
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")


def build_model(p: dict, vocab: int, eot: int, pad: int):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=p["hidden"],
        intermediate_size=p["inter"],
        num_hidden_layers=p["layers"],
        num_attention_heads=p["heads"],
        num_key_value_heads=p["kv_heads"],
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=eot,
        eos_token_id=eot,
        pad_token_id=pad,
        hidden_act="silu",
        initializer_range=0.02,
        attention_bias=False,
        mlp_bias=False,
    )
    config.architectures = ["LlamaForCausalLM"]
    model = LlamaForCausalLM._from_config(config, attn_implementation="sdpa")
    return model


@torch.no_grad()
def heldout_loss(model, ids: torch.Tensor, device, batch: int, amp) -> float:
    model.eval()
    total, n = 0.0, 0
    for i in range(0, ids.shape[0], batch):
        x = ids[i : i + batch].to(device)
        with amp():
            loss = model(input_ids=x, labels=x).loss
        total += loss.float().item() * x.shape[0]
        n += x.shape[0]
    model.train()
    return total / n


def save_model(model, out: Path) -> None:
    """bf16 safetensors + config.json carrying both dtype keys and a top-level rope_theta (older readers)."""
    from transformers import GenerationConfig

    model.to(torch.bfloat16).save_pretrained(str(out))
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["torch_dtype"] = "bfloat16"
    cfg["dtype"] = "bfloat16"
    cfg["architectures"] = ["LlamaForCausalLM"]
    cfg.setdefault("rope_theta", 10000.0)
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    c = model.config
    GenerationConfig(
        bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id, pad_token_id=c.pad_token_id, do_sample=False
    ).save_pretrained(str(out))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, type=Path, help="corpus directory (train.txt, heldout.txt)")
    ap.add_argument("--out", required=True, type=Path, help="model directory to write")
    ap.add_argument("--minutes", type=float, default=None, help="training wall-clock budget (default 4; smoke 0.1)")
    ap.add_argument("--smoke", action="store_true", help="tiny model on the CPU: checks the pipeline in seconds")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (off: compile time counts)")
    ap.add_argument("--device", default=None, help="default: cuda when available, else cpu")
    ap.add_argument("--seed", type=int, default=0)
    for k in ("layers", "hidden", "heads", "kv_heads", "inter", "vocab", "seq", "batch"):
        ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=None)
    args = ap.parse_args(argv)
    p = dict(SMOKE if args.smoke else FULL)
    for k in ("layers", "hidden", "heads", "kv_heads", "inter", "vocab", "seq", "batch"):
        v = getattr(args, k)
        if v is not None:
            if v <= 0:
                ap.error(f"--{k.replace('_', '-')} must be positive, got {v}")
            p[k] = v
    if p["hidden"] % p["heads"] or p["heads"] % p["kv_heads"]:
        ap.error(
            f"--hidden ({p['hidden']}) must divide by --heads ({p['heads']}), and --heads by --kv-heads "
            f"({p['kv_heads']})"
        )
    minutes = args.minutes if args.minutes is not None else (0.1 if args.smoke else 4.0)
    if not minutes > 0:
        ap.error(f"--minutes must be positive, got {minutes}")
    for name in ("train.txt", "heldout.txt"):
        if not (args.data / name).is_file():
            ap.error(f"--data {args.data}: {name} is missing (corpus.py writes it)")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(args.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    if args.smoke:
        torch.set_num_threads(1)  # a tiny model gains nothing from threads, and a shared CI core loses to them

    def amp():
        # bf16 autocast on the GPU; the CPU smoke run stays in fp32 (CPU bf16 matmuls are slower, not faster)
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    t_start = time.monotonic()
    args.out.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(args.data, p["vocab"], p["tok_bytes"])
    save_tokenizer(tok, args.out)
    t_tok = time.monotonic()
    print(f"tokenizer: vocab {tok.get_vocab_size()} in {t_tok - t_start:.1f}s", flush=True)
    train_ids = encode_split(tok, args.data, "train")
    held_ids = encode_split(tok, args.data, "heldout")
    t_enc = time.monotonic()
    print(
        f"encoded: train {train_ids.numel()} tokens, held-out {held_ids.numel()} tokens in {t_enc - t_tok:.1f}s",
        flush=True,
    )

    model = build_model(p, tok.get_vocab_size(), tok.token_to_id(EOT), tok.token_to_id(PAD)).to(device)
    params = sum(t.numel() for t in model.parameters())
    print(f"model: {params / 1e6:.1f}M parameters on {device}", flush=True)
    evals = eval_windows(held_ids, p["eval_windows"], p["seq"])
    init_loss = heldout_loss(model, evals, device, p["batch"], amp)
    print(f"held-out loss at init {init_loss:.3f}", flush=True)

    opt = torch.optim.AdamW(
        model.parameters(), lr=p["lr"], betas=(0.9, 0.95), weight_decay=0.1, fused=device.type == "cuda"
    )
    step_fn = torch.compile(model) if args.compile else model
    gen = torch.Generator().manual_seed(args.seed)
    budget = minutes * 60.0
    tokens_per_step = p["batch"] * p["seq"]
    losses: list[tuple[int, float]] = []
    step = 0
    t0 = time.monotonic()
    last_log, last_tokens = t0, 0
    model.train()
    while True:
        elapsed = time.monotonic() - t0
        if elapsed >= budget:
            break
        frac = elapsed / budget
        warm = min(1.0, (step + 1) / p["warmup"])
        lr = p["lr"] * warm * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = windows(train_ids, p["batch"], p["seq"], gen).to(device, non_blocking=True)
        with amp():
            loss = step_fn(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        if step % 25 == 0 or step == 1:
            now = time.monotonic()
            lv = loss.float().item()
            losses.append((step, round(lv, 4)))
            tps = (step * tokens_per_step - last_tokens) / max(now - last_log, 1e-9)
            last_log, last_tokens = now, step * tokens_per_step
            print(f"step {step} loss {lv:.3f} lr {lr:.2e} {tps:,.0f} tok/s elapsed {now - t0:.0f}s", flush=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    train_s = time.monotonic() - t0
    final_loss = heldout_loss(model, evals, device, p["batch"], amp)
    print(
        f"held-out loss after training {final_loss:.3f} (ppl {math.exp(final_loss):.2f}), init {init_loss:.3f}",
        flush=True,
    )
    save_model(model, args.out)
    report = {
        "params": params,
        "shape": {k: p[k] for k in ("layers", "hidden", "heads", "kv_heads", "inter", "vocab", "seq", "batch")},
        "device": str(device),
        "steps": step,
        "tokens_seen": step * tokens_per_step,
        "tokens_per_s": round(step * tokens_per_step / train_s, 1),
        "train_tokens_available": int(train_ids.numel()),
        "heldout_tokens": int(held_ids.numel()),
        "heldout_eval_tokens": int(evals.numel()),
        "heldout_loss_init": round(init_loss, 4),
        "heldout_loss": round(final_loss, 4),
        "heldout_ppl": round(math.exp(final_loss), 3),
        "train_loss_log": losses,
        "wall_s": {
            "tokenizer": round(t_tok - t_start, 2),
            "encode": round(t_enc - t_tok, 2),
            "train": round(train_s, 2),
            "total": round(time.monotonic() - t_start, 2),
        },
        "budget_minutes": minutes,
    }
    (args.out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "train_loss_log"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
