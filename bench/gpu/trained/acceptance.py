#!/usr/bin/env python3
"""Per-position acceptance of an EAGLE-3 head against its target's greedy decoding, on held-out prompts, in plain
PyTorch: what the planner needs to predict the speedup of chain speculation with ``k`` draft tokens.

For each of ``--prompts`` held-out prompts (``--prompt-len`` tokens from a held-out document), the target decodes
``--gen`` tokens greedily. Then, at every decoded position n, the head drafts a chain of ``k`` tokens exactly as the
runtime does after a verify that ended at n (step 0 over the prefix on the target's captured hidden states, steps
1..k-1 on its own hidden states and proposals), and the chain is compared with the target's next ``k`` greedy
tokens. Reported:

* ``conditional_acceptance[i]``: P(draft token i+1 matches | tokens 1..i matched), the per-position rate;
* ``accept_length``: expected accepted draft tokens per verify, E[leading matches], and ``+1`` for the bonus token
  (``tokens_per_verify``);
* ``accept_length_by_steps[s]``: the same for a chain of s = 1..k drafts (what each static step count gets).

The measurement is the product's (``specdecode_runtime.adapt.score``, which ``specdecode-runtime adapt score`` runs
on captured traffic); this is the benchmark's command over the corpus's held-out documents.

Usage:  python3 bench/gpu/trained/acceptance.py --target DIR --draft DIR --data CORPUS_DIR --prompts 64 --out FILE
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
from packed_data import EOT, documents  # noqa: E402

from specdecode_runtime.adapt.eagle3_head import Eagle3Head  # noqa: E402
from specdecode_runtime.adapt.score import greedy, measure  # noqa: E402

__all__ = ["greedy", "held_out_prompts", "main", "measure"]


def held_out_prompts(tokenizer, data: Path, count: int, length: int) -> torch.Tensor:
    """The first ``length`` tokens of each of the first ``count`` held-out documents long enough to give them."""
    rows = []
    for doc in documents(data / "heldout.txt"):
        ids = tokenizer.encode(doc[: 16 * length], add_special_tokens=False)  # bytes per token < 16
        if len(ids) >= length:
            rows.append(ids[:length])
        if len(rows) == count:
            break
    if not rows:
        raise SystemExit(f"no held-out document in {data} has {length} tokens")
    return torch.tensor(rows, dtype=torch.long)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, type=Path)
    ap.add_argument("--draft", required=True, type=Path)
    ap.add_argument("--data", required=True, type=Path, help="corpus directory holding heldout.txt")
    ap.add_argument("--prompts", type=int, default=64, help="held-out prompts (default 64)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128, help="greedy tokens decoded per prompt")
    ap.add_argument("--k", type=int, default=7, help="draft chain length")
    ap.add_argument("--out", type=Path, default=None, help="JSON file (default: DRAFT/acceptance.json)")
    ap.add_argument("--device", default=None)
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args(argv)
    for name in ("prompts", "prompt_len", "gen", "k"):
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive, got {getattr(args, name)}")
    if args.gen <= args.k + 1:
        ap.error(f"--gen ({args.gen}) must exceed --k + 1 ({args.k + 1}): no chain fits in the decoded region")
    for flag, d in (("--target", args.target), ("--draft", args.draft)):
        if not (d / "config.json").is_file():
            ap.error(f"{flag} {d}: config.json is missing")
    if not (args.data / "heldout.txt").is_file():
        ap.error(f"--data {args.data}: heldout.txt is missing (corpus.py writes it)")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if args.smoke:
        torch.set_num_threads(1)

    def amp():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    t0 = time.monotonic()
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    target = AutoModelForCausalLM.from_pretrained(str(args.target), dtype=dtype, attn_implementation="sdpa")
    target = target.to(device).eval()
    try:
        head = Eagle3Head.load(args.draft, device, target=target).eval()
    except ValueError as e:  # HeadError: a checkpoint this head cannot represent, or one that does not fit the target
        raise SystemExit(f"--draft {args.draft}: {e}") from None
    tok = AutoTokenizer.from_pretrained(str(args.target))
    prompts = held_out_prompts(tok, args.data, args.prompts, args.prompt_len).to(device)
    t1 = time.monotonic()
    seqs = greedy(target, prompts, args.gen, amp)
    t2 = time.monotonic()
    result = measure(target, head, seqs, args.prompt_len, args.k, amp)
    t3 = time.monotonic()
    eot = tok.convert_tokens_to_ids(EOT)
    result.update(
        {
            "k": args.k,
            "prompts": int(prompts.shape[0]),
            "prompt_len": args.prompt_len,
            "gen": args.gen,
            "eot_share_of_generated": round((seqs[:, args.prompt_len :] == eot).float().mean().item(), 4),
            "distinct_generated_share": round(
                seqs[:, args.prompt_len :].unique().numel() / seqs[:, args.prompt_len :].numel(), 4
            ),
            "draft_vocab_size": head.draft_vocab,
            "aux_layer_ids": head.aux_layer_ids,
            "device": str(device),
            "wall_s": {"load": round(t1 - t0, 2), "greedy": round(t2 - t1, 2), "measure": round(t3 - t2, 2)},
            "sample": tok.decode(seqs[0, args.prompt_len :].tolist())[:400],
        }
    )
    out = args.out or (args.draft / "acceptance.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "sample"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
