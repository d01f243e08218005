"""``specdecode-runtime adapt``: train an EAGLE-3 draft from captured traffic (``train``) and gate it offline against
the serving draft on the capture's held-out records (``score``). docs/runtime.md "Training a draft from captured
traffic".

Exit codes: 0 done (``score``: the candidate is better by ``--min-ratio``), 3 (``score``) the candidate is not
better, 2 bad input (a missing directory, an incompatible candidate, no usable records; the message names the
argument), 1 the command could not do its job.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path

from .. import draft_checkpoint
from ..contract import adaptation
from ..contract.cli_common import (
    EXIT_OK,
    UsageError,
    float_in,
    int_in,
    positive_float,
    run_command,
)
from . import data

PROG = "specdecode-runtime adapt"
EXIT_NOT_BETTER = adaptation.EXIT_NOT_BETTER
DEVICES = ("cpu", "cuda")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "adapt",
        help="train a draft from captured traffic and gate it offline",
        description=__doc__.split("\n\n")[0].replace("``", ""),
    )
    sub = p.add_subparsers(dest="adapt_command", required=True)
    t = sub.add_parser(
        "train",
        help="train an EAGLE-3 head from the capture, starting from the serving head",
        description="Train an EAGLE-3 head for TARGET from the capture's training split, starting from the serving "
        "head, within --minutes and --max-steps; the checkpoint (same config, tensor names, shapes and dtypes as "
        "--init-draft: a pod serving it can load it in place) and train_report.json go to --out.",
    )
    t.add_argument("--capture", required=True, type=Path, help="capture directory (JSON-lines files)")
    t.add_argument("--target", required=True, type=Path, help="the target model's directory")
    t.add_argument("--init-draft", required=True, type=Path, help="the serving draft's checkpoint directory")
    t.add_argument("--out", required=True, type=Path, help="directory to write the new checkpoint to")
    t.add_argument("--minutes", type=positive_float, default=10.0, help="training wall-time budget (default 10)")
    t.add_argument("--max-steps", type=int_in(1, 10**9), default=None, help="at most this many steps")
    t.add_argument("--device", choices=DEVICES, default="cpu")
    t.add_argument(
        "--max-memory-gb",
        type=positive_float,
        default=None,
        help="cuda: the process's memory cap; cpu: refused when the weights and training state exceed it",
    )
    t.add_argument("--batch", type=int_in(1, 4096), default=8, help="windows per step (default 8)")
    t.add_argument("--seq", type=int_in(16, 1 << 16), default=512, help="tokens per window (default 512)")
    t.add_argument("--lr", type=float_in(0.0, 1.0), default=3e-4, help="peak learning rate (default 3e-4)")
    t.add_argument("--warmup", type=int_in(0, 10**6), default=20, help="warm-up steps (default 20)")
    t.add_argument("--ttt", type=int_in(1, 8), default=4, help="unrolled draft steps per position (default 4)")
    t.add_argument("--seed", type=int_in(0, 2**31 - 1), default=0)
    _add_capture_args(t)
    t.set_defaults(func=lambda ns: run_command(run_train, ns))
    s = sub.add_parser(
        "score",
        help="acceptance of the serving and a candidate draft on the held-out records; exit 0 if the candidate wins",
        description="Per-position acceptance and accept length of the SERVING and CANDIDATE drafts against the "
        "target's greedy decoding on the capture's held-out records; prints the verdict JSON and exits 0 when the "
        "candidate is better by --min-ratio, 3 when not.",
    )
    s.add_argument("--capture", required=True, type=Path, help="capture directory (JSON-lines files)")
    s.add_argument("--target", required=True, type=Path, help="the target model's directory")
    s.add_argument(
        "--drafts", required=True, nargs=2, type=Path, metavar=("SERVING", "CANDIDATE"), help="two checkpoints"
    )
    s.add_argument("--steps", type=int_in(1, 16), default=7, help="draft chain length K (default 7)")
    s.add_argument("--max-prompts", type=int_in(1, 10**6), default=64, help="held-out records scored (default 64)")
    s.add_argument("--max-len", type=int_in(8, 1 << 16), default=1024, help="tokens per scored record (default 1024)")
    s.add_argument(
        "--min-ratio",
        type=positive_float,
        default=1.0,
        help="the candidate's tokens per verify over the serving draft's must reach this (default 1.0)",
    )
    s.add_argument(
        "--any-layout",
        action="store_true",
        help="also score a CANDIDATE a pod serving SERVING could not load in place (another config or tensors: a "
        "rollout with restarts); the verdict's in_place says so",
    )
    s.add_argument("--device", choices=DEVICES, default="cpu")
    s.add_argument("--out", type=Path, default=None, help="also write the verdict JSON to this file")
    s.add_argument(
        "--summary",
        type=Path,
        default=None,
        help="also write the verdict's summary (at most 4096 bytes of JSON) to this file: a training Job's "
        f"termination message ({adaptation.TERMINATION_LOG}), which the operator reads",
    )
    _add_capture_args(s)
    s.set_defaults(func=lambda ns: run_command(run_score, ns))
    return p


def _add_capture_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads", type=int_in(1, 1024), default=None, help="CPU threads for torch (default: torch's own choice)"
    )
    p.add_argument(
        "--heldout-percent",
        type=float_in(0.0, 100.0),
        default=data.DEFAULT_HELDOUT_PERCENT,
        help="share of prompts held out, by a hash of the prompt (default 10; train and score must agree)",
    )
    p.add_argument("--max-bytes", type=int_in(1, 1 << 50), default=data.DEFAULT_MAX_BYTES, help="capture bytes read")
    p.add_argument(
        "--max-records", type=int_in(1, 10**9), default=data.DEFAULT_MAX_RECORDS, help="capture records read"
    )


def _model_dir(flag: str, path: Path) -> Path:
    if not path.is_dir():
        raise UsageError(f"{flag} {path}: no such directory")
    if not (path / "config.json").is_file():
        raise UsageError(f"{flag} {path}: no config.json (a model checkpoint directory is expected)")
    return path


def _capture_dir(path: Path) -> Path:
    data.capture_files(path)  # raises naming --capture when it is not a readable directory
    return path


def _device(name: str):
    import torch

    if name == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is visible to this process")
    return torch.device(name)


@contextlib.contextmanager
def _threads(count: int | None):
    """torch's CPU threads for the command, restored after it (a caller in the same process keeps its own)."""
    import torch

    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _progress(message: str) -> None:
    print(f"{PROG}: {message}", file=sys.stderr, flush=True)


def run_train(ns: argparse.Namespace) -> int:
    _capture_dir(ns.capture)
    _model_dir("--target", ns.target)
    _model_dir("--init-draft", ns.init_draft)
    if ns.out.resolve() == ns.init_draft.resolve():
        raise UsageError(f"--out {ns.out}: is the --init-draft directory; the serving checkpoint is never overwritten")
    if ns.out.exists() and not ns.out.is_dir():
        raise UsageError(f"--out {ns.out}: exists and is not a directory")
    _device(ns.device)
    # lazy: torch and transformers (2.7 s); validation above runs without them
    from .train import TrainOptions, train_from_capture

    opts = TrainOptions(
        capture=ns.capture,
        target=ns.target,
        init_draft=ns.init_draft,
        out=ns.out,
        minutes=ns.minutes,
        max_steps=ns.max_steps,
        device=ns.device,
        max_memory_gb=ns.max_memory_gb,
        batch=ns.batch,
        seq=ns.seq,
        lr=ns.lr,
        warmup=ns.warmup,
        ttt=ns.ttt,
        seed=ns.seed,
        heldout_percent=ns.heldout_percent,
        max_bytes=ns.max_bytes,
        max_records=ns.max_records,
    )
    with _threads(ns.threads):
        report = train_from_capture(opts, _progress)
    print(json.dumps({k: v for k, v in report.items() if k != "log"}), flush=True)
    return EXIT_OK


def run_score(ns: argparse.Namespace) -> int:
    serving, candidate = ns.drafts
    _capture_dir(ns.capture)
    _model_dir("--target", ns.target)
    _model_dir("--drafts SERVING", serving)
    _model_dir("--drafts CANDIDATE", candidate)
    device = _device(ns.device)
    t0 = time.monotonic()
    in_place: dict = {"ok": True}
    try:
        draft_checkpoint.load(str(candidate.resolve()), draft_checkpoint.reference(str(serving.resolve())))
    except draft_checkpoint.Refused as e:
        if not ns.any_layout:
            raise UsageError(
                f"--drafts CANDIDATE {candidate}: cannot replace the serving draft {serving} in place ({e.cause}): "
                f"{e.message} (--any-layout scores it anyway)"
            ) from None
        in_place = {"ok": False, "cause": e.cause, "message": e.message}
    vocab = draft_checkpoint.read_config(ns.target).get("vocab_size")
    records, stats = data.read_capture(ns.capture, max_bytes=ns.max_bytes, max_records=ns.max_records, vocab_size=vocab)
    held = data.split(records, ns.heldout_percent)[data.HELDOUT]
    pairs, skipped = data.heldout_pairs(held, max_pairs=ns.max_prompts, min_output=ns.steps, max_len=ns.max_len)
    if not pairs:
        raise UsageError(
            f"--capture {ns.capture}: no held-out records to score ({stats.records} read, {len(held)} held out at "
            f"--heldout-percent {ns.heldout_percent:g}; left out: {skipped['finish']} not finished by length or "
            f"stop, {skipped['short']} with at most --steps {ns.steps} output tokens; {stats.malformed} malformed "
            "lines)"
        )
    # lazy: torch and transformers (2.7 s); validation above runs without them
    import torch

    from .eagle3_head import Eagle3Head, HeadError
    from .score import score_sequences, verdict
    from .train import load_target

    amp_on = device.type == "cuda"
    target = load_target(ns.target, device, torch.bfloat16 if amp_on else torch.float32)
    heads = {}
    for role, path in (("serving", serving), ("candidate", candidate)):
        try:
            heads[role] = Eagle3Head.load(path, device, target=target).eval()
        except HeadError as e:
            raise UsageError(f"--drafts {role.upper()} {path}: {e}") from None
    t_load = time.monotonic()
    with _threads(ns.threads):
        scores = score_sequences(
            target,
            heads,
            pairs,
            ns.steps,
            device,
            lambda: torch.autocast(device.type, dtype=torch.bfloat16, enabled=amp_on),
        )
    result = verdict(
        {
            **scores["serving"],
            "source": str(serving.resolve()),
            "digest": draft_checkpoint.digest(str(serving.resolve())),
        },
        {
            **scores["candidate"],
            "source": str(candidate.resolve()),
            "digest": draft_checkpoint.digest(str(candidate.resolve())),
        },
        ns.min_ratio,
    )
    result.update(
        {
            "in_place": in_place,
            "steps": ns.steps,
            "heldout_records": len(held),
            "capture": stats.as_dict(),
            "left_out": skipped,
            "device": str(device),
            "wall_s": {"load": round(t_load - t0, 2), "score": round(time.monotonic() - t_load, 2)},
        }
    )
    text = json.dumps(result, indent=2)
    if ns.out is not None:
        ns.out.parent.mkdir(parents=True, exist_ok=True)
        ns.out.write_text(text + "\n")
    if ns.summary is not None:
        ns.summary.write_text(adaptation.encode(adaptation.summary(result)))
    print(text, flush=True)
    return EXIT_OK if result["better"] else EXIT_NOT_BETTER
