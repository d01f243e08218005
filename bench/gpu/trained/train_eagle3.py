#!/usr/bin/env python3
"""Train an EAGLE-3 head on the target's own predictions, by wall-clock budget, in SGLang's weight layout.

Each step draws packed training windows, runs the frozen target once (bf16, no grad) for its hidden states at the
three capture layers and its next-token distribution, then trains the head with the training-time test: ``--ttt``
chained draft steps unrolled exactly as the runtime drafts (step j >= 1 feeds the head's own hidden state and
attends to step 0's keys plus its chain's), each step's loss the cross-entropy against the target's distribution for
that position (restricted to the draft vocabulary), weighted 0.8^j. The head's embedding is the target's, frozen
(SGLang shares the target's embedding with the head); its ``lm_head`` and ``norm`` start from the target's.

Output (``--out``): ``config.json`` (``LlamaForCausalLMEagle3``, one layer, ``draft_vocab_size``,
``eagle_config.eagle_aux_hidden_state_layer_ids``), ``model.safetensors`` (``fc``, ``midlayer.*``, ``norm``,
``lm_head``, ``embed_tokens``, and ``d2t``/``t2d`` when the draft vocabulary is reduced), ``train_report.json``.

The head and its training loop are the product's (``specdecode_runtime.adapt``: ``eagle3_head``, ``train``); this is
the benchmark's command over the packed corpus, a new head started from the target's embedding, norm and head.

Usage:  python3 bench/gpu/trained/train_eagle3.py --target DIR --data CORPUS_DIR --out DIR [--minutes 2]
        ... --smoke       (CPU, seconds)
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parents[2] / "runtime"))  # the product package where it is not installed
from packed_data import load_split, windows  # noqa: E402

from specdecode_runtime.adapt.eagle3_head import Eagle3Head, default_aux_layer_ids  # noqa: E402
from specdecode_runtime.adapt.train import frequent_tokens, init_from_target, load_target, train_head  # noqa: E402

FULL = dict(seq=512, batch=16, lr=6e-4, warmup=30, ttt=4)
SMOKE = dict(seq=64, batch=4, lr=3e-3, warmup=3, ttt=3)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, type=Path, help="target model directory (train_target.py --out)")
    ap.add_argument("--data", required=True, type=Path, help="corpus directory holding train_ids.pt")
    ap.add_argument("--out", required=True, type=Path, help="head directory to write")
    ap.add_argument("--minutes", type=float, default=None, help="training wall-clock budget (default 2; smoke 0.1)")
    ap.add_argument(
        "--draft-vocab",
        type=int,
        default=0,
        help="draft vocabulary size: the most frequent training tokens, mapped by d2t/t2d "
        "(0: the target's whole vocabulary, no maps)",
    )
    ap.add_argument(
        "--aux-layers",
        default=None,
        help="comma-separated target layer ids whose outputs feed the head (default: SGLang's 1, L/2-1, L-4)",
    )
    ap.add_argument("--ttt", type=int, default=None, help="unrolled draft steps per training position")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--device", default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    p = dict(SMOKE if args.smoke else FULL)
    if args.ttt is not None:
        if not 1 <= args.ttt <= 8:
            ap.error(f"--ttt must be in 1..8, got {args.ttt}")
        p["ttt"] = args.ttt
    minutes = args.minutes if args.minutes is not None else (0.1 if args.smoke else 2.0)
    if not minutes > 0:
        ap.error(f"--minutes must be positive, got {minutes}")
    if not (args.target / "config.json").is_file():
        ap.error(f"--target {args.target}: config.json is missing (train_target.py writes it)")
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    torch.manual_seed(args.seed)
    if args.smoke:
        torch.set_num_threads(1)

    def amp():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    t_start = time.monotonic()
    target = load_target(args.target, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    cfg = target.config
    layers = cfg.num_hidden_layers
    if args.aux_layers:
        try:
            aux_ids = [int(s) for s in args.aux_layers.split(",")]
        except ValueError:
            aux_ids = []
        if len(aux_ids) != 3 or len(set(aux_ids)) != 3 or not all(0 <= i < layers - 1 for i in aux_ids):
            ap.error(f"--aux-layers must be three distinct layer ids in 0..{layers - 2}, got {args.aux_layers!r}")
    else:
        aux_ids = default_aux_layer_ids(layers)
    if len(set(aux_ids)) != 3:
        ap.error(f"the target has {layers} layers: too few for three distinct capture layers")
    train_ids = load_split(args.data, "train")
    draft_ids = None
    if args.draft_vocab:
        if not 0 < args.draft_vocab < cfg.vocab_size:
            ap.error(
                f"--draft-vocab must be in 1..{cfg.vocab_size - 1} (or 0 for the whole vocabulary), "
                f"got {args.draft_vocab}"
            )
        draft_ids = frequent_tokens(train_ids, cfg.vocab_size, args.draft_vocab)
    head = Eagle3Head.for_target(cfg, draft_ids, aux_ids)
    init_from_target(head, target)
    head = head.to(device)
    gen = torch.Generator().manual_seed(args.seed + 1)
    t_load = time.monotonic()
    trainable = sum(q.numel() for q in head.parameters() if q.requires_grad)
    print(
        f"head: {trainable / 1e6:.1f}M trainable parameters, aux layers {aux_ids}, "
        f"draft vocab {head.draft_vocab}; target loaded in {t_load - t_start:.1f}s",
        flush=True,
    )
    result = train_head(
        head,
        target,
        lambda: (windows(train_ids, p["batch"], p["seq"], gen), None),
        seconds=minutes * 60.0,
        lr=p["lr"],
        warmup=p["warmup"],
        ttt=p["ttt"],
        amp=amp,
        on_log=lambda entry: print(json.dumps(entry), flush=True),
    )
    step, log, agree = result.steps, result.log, result.top1_per_step
    train_s = result.train_s
    head.save(args.out, cfg)
    report = {
        "aux_layer_ids": aux_ids,
        "draft_vocab_size": head.draft_vocab,
        "ttt_steps": p["ttt"],
        "steps": step,
        "tokens_seen": step * p["batch"] * p["seq"],
        "tokens_per_s": round(step * p["batch"] * p["seq"] / train_s, 1),
        "final_top1_per_step": [round(a, 4) for a in agree],
        "log": log,
        "wall_s": {
            "load": round(t_load - t_start, 2),
            "train": round(train_s, 2),
            "total": round(time.monotonic() - t_start, 2),
        },
        "budget_minutes": minutes,
    }
    (args.out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "log"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
