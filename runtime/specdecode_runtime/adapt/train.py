"""Training an EAGLE-3 head on its target's own predictions, bounded in wall time and steps.

Each step draws a batch of token windows, runs the frozen target once (no grad) for its hidden states at the capture
layers and its next-token distribution, then trains the head with the training-time test: ``ttt`` chained draft
steps unrolled exactly as the runtime drafts (step j >= 1 feeds the head's own hidden state and attends to step 0's
keys plus its chain's), each step's loss the cross-entropy against the target's distribution for that position
(restricted to the draft vocabulary), weighted 0.8^j. The embedding is the target's, frozen.

:func:`train_head` is the loop (the benchmark's packed corpus and the capture's records both feed it);
:func:`train_from_capture` is ``specdecode-runtime adapt train``: captured records in, a checkpoint the serving pod
can load in place out, with ``train_report.json``.
"""

from __future__ import annotations

import json
import math
import resource
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from .. import draft_checkpoint
from ..contract.cli_common import CommandFailed, UsageError
from . import data
from .eagle3_head import Eagle3Head, HeadError, aux_features, check_target

STEP_WEIGHT = 0.8
Batch = tuple[torch.Tensor, "torch.Tensor | None"]  # token ids [B, T], valid-token mask [B, T] (None: all valid)


def load_target(path: Path | str, device: Any, dtype: Any):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype, attn_implementation="sdpa")
    return model.to(device).eval().requires_grad_(False)


def frequent_tokens(ids: torch.Tensor, vocab: int, n: int) -> torch.Tensor:
    """The ``n`` most frequent token ids of a training stream (a reduced draft vocabulary)."""
    counts = torch.bincount(ids.long(), minlength=vocab)
    return counts.topk(n).indices.sort().values


def init_from_target(head: Eagle3Head, target: Any) -> None:
    """A new head's starting weights: the target's embedding, ``lm_head`` (its draft-vocabulary rows) and final norm;
    the decoder layer and ``fc`` small and random."""
    with torch.no_grad():
        head.embed_tokens.weight.copy_(target.get_input_embeddings().weight.float())
        w = target.get_output_embeddings().weight.float()
        head.lm_head.weight.copy_(w if head.t2d is None else w[head.t2d])  # t2d: sorted ids, as d2t maps
        head.norm.weight.copy_(target.model.norm.weight.float())
        for name, prm in head.layers.named_parameters():
            if prm.dim() == 2:
                prm.normal_(0.0, 0.02 / (math.sqrt(2) if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0))
        head.fc.weight.normal_(0.0, 0.02)


@torch.no_grad()
def target_pass(target, x: torch.Tensor, aux_ids: list[int], t2d, amp):
    """(features [B,T,nH], teacher log-probabilities over the draft vocabulary [B,T,Vd]) at every position."""
    with amp():
        out = target(input_ids=x, output_hidden_states=True)
    feats = aux_features(out.hidden_states, aux_ids).float()
    logits = out.logits.float()
    if t2d is not None:
        logits = logits[..., t2d]
    return feats, logits.log_softmax(-1)


def ttt_loss(head: Eagle3Head, feats, x, teacher_logp, steps: int, amp, mask: torch.Tensor | None = None):
    """Summed weighted loss over ``steps`` unrolled draft steps, and each step's top-1 agreement with the target.
    Step j at position t reads token x[t+1+j] and is scored against the target's distribution at t+1+j; with
    ``mask`` (right padding) only positions whose token there is real count."""
    b, t = x.shape
    tokens = x[:, 1:]  # the token after each feature position
    feats = feats[:, :-1]
    with amp():
        step_logits = head.unroll(feats, tokens, steps, teacher_tokens=tokens)
    total: Any = 0.0
    agree = []
    for j, logits in enumerate(step_logits):
        valid = t - 2 - j  # positions whose label (teacher at t+1+j) exists
        if valid <= 0:
            break
        lp = logits[:, :valid].float().log_softmax(-1)
        teach = teacher_logp[:, 1 + j : 1 + j + valid]
        ce = -(teach.exp() * lp).sum(-1)
        hit = (lp.argmax(-1) == teach.argmax(-1)).float()
        if mask is None:
            loss, a = ce.mean(), hit.mean()
        else:
            m = mask[:, 1 + j : 1 + j + valid].float()
            n = m.sum().clamp(min=1.0)
            loss, a = (ce * m).sum() / n, (hit * m).sum() / n
        total = total + (STEP_WEIGHT**j) * loss
        agree.append(a.item())
    return total, agree


@dataclass
class TrainResult:
    steps: int
    log: list[dict]
    top1_per_step: list[float]
    train_s: float
    tokens_seen: int
    stopped_by: str  # "time" or "steps"


def train_head(
    head: Eagle3Head,
    target: Any,
    next_batch: Callable[[], Batch],
    *,
    seconds: float,
    max_steps: int | None = None,
    lr: float,
    warmup: int,
    ttt: int,
    amp: Callable[[], Any] = nullcontext,
    log_every: int = 25,
    on_log: Callable[[dict], None] | None = None,
) -> TrainResult:
    """AdamW on the head's trainable parameters until ``seconds`` of wall time or ``max_steps`` steps; linear warm-up,
    then cosine decay to a tenth over whichever bound is nearer."""
    device = next(head.parameters()).device
    trainable = [q for q in head.parameters() if q.requires_grad]
    opt = torch.optim.AdamW(trainable, lr=lr, betas=(0.9, 0.95), weight_decay=0.0, fused=device.type == "cuda")
    log: list[dict] = []
    step, tokens = 0, 0
    agree: list[float] = []
    t0 = time.monotonic()
    stopped_by = "time"
    head.train()
    while True:
        elapsed = time.monotonic() - t0
        if elapsed >= seconds:
            break
        if max_steps is not None and step >= max_steps:
            stopped_by = "steps"
            break
        frac = max(elapsed / seconds, step / max_steps if max_steps else 0.0)
        rate = lr * min(1.0, (step + 1) / max(warmup, 1)) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))
        for g in opt.param_groups:
            g["lr"] = rate
        x, mask = next_batch()
        x = x.to(device)
        mask = None if mask is None else mask.to(device)
        feats, teacher = target_pass(target, x, head.aux_layer_ids, head.t2d, amp)
        loss, agree = ttt_loss(head, feats, x, teacher, ttt, amp, mask)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step += 1
        tokens += int(x.numel() if mask is None else mask.sum().item())
        if step % log_every == 0 or step == 1:
            entry = {
                "step": step,
                "loss": round(loss.item(), 4),
                "top1_per_step": [round(a, 4) for a in agree],
                "elapsed_s": round(time.monotonic() - t0, 1),
            }
            log.append(entry)
            if on_log is not None:
                on_log(entry)
    head.eval()
    return TrainResult(step, log, [round(a, 4) for a in agree], time.monotonic() - t0, tokens, stopped_by)


def window_batches(windows: list[list[int]], batch: int, seed: int) -> Callable[[], Batch]:
    """Random batches of the windows, right-padded (token 0) with a mask of the real tokens."""
    gen = torch.Generator().manual_seed(seed)

    def draw() -> Batch:
        picks = torch.randint(0, len(windows), (batch,), generator=gen).tolist()
        rows = [windows[i] for i in picks]
        width = max(len(r) for r in rows)
        x = torch.zeros(len(rows), width, dtype=torch.long)
        mask = torch.zeros(len(rows), width, dtype=torch.bool)
        for i, r in enumerate(rows):
            x[i, : len(r)] = torch.tensor(r, dtype=torch.long)
            mask[i, : len(r)] = True
        return x, mask

    return draw


# ------------------------------------------------------------------------------------------------ the command
@dataclass(frozen=True)
class TrainOptions:
    capture: Path
    target: Path
    init_draft: Path
    out: Path
    minutes: float = 10.0
    max_steps: int | None = None
    device: str = "cpu"
    max_memory_gb: float | None = None
    batch: int = 8
    seq: int = 512
    lr: float = 3e-4
    warmup: int = 20
    ttt: int = 4
    seed: int = 0
    heldout_percent: float = data.DEFAULT_HELDOUT_PERCENT
    max_bytes: int = data.DEFAULT_MAX_BYTES
    max_records: int = data.DEFAULT_MAX_RECORDS


def _param_count(directory: Path) -> int:
    ref = draft_checkpoint.reference(str(directory.resolve()))
    return sum(math.prod(t.shape) for t in ref.tensors.values())


def _peak_gb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return rss / (2**30 if sys.platform == "darwin" else 2**20)


def train_from_capture(opts: TrainOptions, progress: Callable[[str], None] = lambda _m: None) -> dict:
    """Train a head for ``opts.target`` on the capture's training split, starting from ``opts.init_draft``, and write
    it to ``opts.out`` in the init draft's exact layout; :class:`~specdecode_runtime.contract.cli_common.UsageError`
    for input that cannot be used (naming the flag), ``CommandFailed`` when the result does not fit the init draft."""
    t_start = time.monotonic()
    device = torch.device(opts.device)
    target_cfg = draft_checkpoint.read_config(opts.target)
    vocab = target_cfg.get("vocab_size")
    records, stats = data.read_capture(
        opts.capture, max_bytes=opts.max_bytes, max_records=opts.max_records, vocab_size=vocab
    )
    parts = data.split(records, opts.heldout_percent)
    windows = data.token_windows(parts[data.TRAIN], opts.seq, min_length=opts.ttt + 4)
    if not windows:
        raise UsageError(
            f"--capture {opts.capture}: no training records ({stats.records} read, {len(parts[data.HELDOUT])} held "
            f"out, {stats.malformed} malformed, {stats.out_of_vocab} outside the target's vocabulary)"
        )
    if opts.max_memory_gb is not None:
        if device.type == "cuda":
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, opts.max_memory_gb * 2**30 / total), device)
        else:
            bytes_needed = 4 * _param_count(opts.target) + 16 * _param_count(opts.init_draft)
            if bytes_needed > opts.max_memory_gb * 2**30:
                raise UsageError(
                    f"--max-memory-gb {opts.max_memory_gb:g}: the target's weights in float32 and the head's "
                    f"training state alone take {bytes_needed / 2**30:.2f} GiB"
                )
    amp_on = device.type == "cuda"

    def amp():
        return torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp_on)

    torch.manual_seed(opts.seed)
    target = load_target(opts.target, device, torch.bfloat16 if amp_on else torch.float32)
    try:
        head = Eagle3Head.load(opts.init_draft, device, target=target)
    except HeadError as e:
        raise UsageError(f"--init-draft {opts.init_draft}: {e}") from None
    problems = check_target(head, target.config)
    if problems:
        raise UsageError(f"--init-draft {opts.init_draft}: {'; '.join(problems)}")
    t_load = time.monotonic()
    progress(
        f"{len(windows)} training windows from {len(parts[data.TRAIN])} records "
        f"({len(parts[data.HELDOUT])} held out); target and head loaded in {t_load - t_start:.1f}s"
    )
    result = train_head(
        head,
        target,
        window_batches(windows, opts.batch, opts.seed + 1),
        seconds=opts.minutes * 60.0,
        max_steps=opts.max_steps,
        lr=opts.lr,
        warmup=opts.warmup,
        ttt=opts.ttt,
        amp=amp,
        on_log=lambda e: progress(json.dumps(e)),
    )
    head.save_like(opts.out, opts.init_draft)
    init_src, out_src = str(opts.init_draft.resolve()), str(opts.out.resolve())
    try:
        written = draft_checkpoint.load(out_src, draft_checkpoint.reference(init_src))
    except draft_checkpoint.Refused as e:
        raise CommandFailed(f"the written checkpoint {opts.out} cannot replace --init-draft in place: {e}") from None
    report = {
        "out": out_src,
        "digest": written.digest,
        "init_draft": {"source": init_src, "digest": draft_checkpoint.digest(init_src)},
        "compatible_with_init_draft": True,
        "capture": {
            **stats.as_dict(),
            "train_records": len(parts[data.TRAIN]),
            "heldout_records": len(parts[data.HELDOUT]),
        },
        "heldout_percent": opts.heldout_percent,
        "windows": len(windows),
        "steps": result.steps,
        "stopped_by": result.stopped_by,
        "tokens_seen": result.tokens_seen,
        "tokens_per_s": round(result.tokens_seen / max(result.train_s, 1e-9), 1),
        "final_top1_per_step": result.top1_per_step,
        "log": result.log,
        "settings": {
            "device": str(device),
            "batch": opts.batch,
            "seq": opts.seq,
            "lr": opts.lr,
            "warmup": opts.warmup,
            "ttt": opts.ttt,
            "seed": opts.seed,
            "minutes": opts.minutes,
            "max_steps": opts.max_steps,
            "max_memory_gb": opts.max_memory_gb,
        },
        "peak_memory_gb": round(_peak_gb(device), 3),
        "wall_s": {
            "load": round(t_load - t_start, 2),
            "train": round(result.train_s, 2),
            "total": round(time.monotonic() - t_start, 2),
        },
    }
    (opts.out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report
