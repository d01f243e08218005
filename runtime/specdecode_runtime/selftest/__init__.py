"""``specdecode-runtime selftest``: real SGLang, the given layout, greedy tokens compared token for token.

Three runs of the same prompts: no speculation (the reference), stock EAGLE (the draft sharded over every target
rank) and the runtime's split layout (the draft on its own ranks S, proposals broadcast). Each starts SGLang's real
scheduler processes through the runtime's own launch path, and each scheduler records what it did
(:mod:`.rank_probe`), so besides the tokens the report says: acceptance lengths (the engine's own and the exported
``specdecode_*`` counters), per-phase timings, whether each live step table (``--live-steps``, PUT to the control
API mid-generation) switched the tier on every rank at the same decode round, whether every rank wrote the same KV
slots for every verify batch, and whether the target's state was built with the target's TP group everywhere.

On a CPU it runs anywhere (the runtime's CPU stand-ins, gloo); in the runtime image on GPUs it is the pre-flight
for a placement before serving. A run that outlives ``--timeout`` is reported with, per rank, the collective it
waits in (:mod:`.hang`), and the command exits 1. Exit codes: 0 every run identical and every check holds, 1 a
difference, failure or hang, 2 bad flags.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
from pathlib import Path
from typing import Sequence

from ..cpu.tiny_models import DEFAULT_SHAPE, make_tiny_models, noisy_copy
from .options import OptionError, add_arguments, from_namespace

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "selftest",
        help="run real SGLang with a layout and compare greedy tokens across layouts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(p)
    p.set_defaults(func=run_from_namespace)
    return p


def _models(opts, root: Path):
    models = _served_models(opts, root)
    if "noisy" in opts.draft_swaps:  # the same draft with other weights: loadable in its place, rarely agreeing
        models.noisy = noisy_copy(models.draft, root / "models" / "draft_noisy")
    return models


def _served_models(opts, root: Path):
    # lazy: `selftest --help` and completion skip the runner: launch, SGLang's arguments, pydantic (0.89 s)
    from .runner import Models

    if opts.model_path:
        from transformers import AutoConfig

        vocab = int(AutoConfig.from_pretrained(opts.model_path).vocab_size)
        pool = prompt_pool(opts) if opts.prompt_file else []
        return Models(target=opts.model_path, draft=opts.draft_model_path, vocab=vocab, prompt_pool=pool)

    tiny = make_tiny_models(
        root / "models", opts.model_config or default_shape(opts.tp), seed=0, weights=opts.load_format != "dummy"
    )
    return Models(target=tiny.target, draft=tiny.draft(opts.algorithm, opts.agree), vocab=tiny.shape["vocab_size"])


MAX_PROMPTS = 256


def prompt_pool(opts) -> list[list[int]]:
    """Prompts from real text: the first ``opts.prompt_tokens`` tokens of each document of ``opts.prompt_file``
    (documents split at ``<|endoftext|>``) long enough to give them, in file order, at most 256."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(opts.model_path)
    text = Path(opts.prompt_file).read_text(encoding="utf-8", errors="replace")
    pool: list[list[int]] = []
    for doc in text.split("<|endoftext|>"):
        ids = tok(doc, add_special_tokens=False)["input_ids"]
        if len(ids) >= opts.prompt_tokens:
            pool.append([int(i) for i in ids[: opts.prompt_tokens]])
        if len(pool) >= MAX_PROMPTS:
            break
    return pool


def default_shape(tp: int) -> dict[str, int]:
    """The tiny target's shape when ``--model-config`` is not given: every attention and KV head split evenly over
    ``tp`` ranks, a shape every device loads (on a CPU SGLang pads KV heads fewer than the ranks instead of
    replicating them, and the padded heads do not load: :func:`.options.head_split_problem`)."""
    heads = max(DEFAULT_SHAPE["num_attention_heads"], tp)
    return {
        "num_attention_heads": heads,
        "num_key_value_heads": max(DEFAULT_SHAPE["num_key_value_heads"], tp),
        "hidden_size": max(DEFAULT_SHAPE["hidden_size"], 16 * heads),
    }


def _kill_children() -> None:
    """The scheduler and detokenizer processes this command started (a hung collective never returns)."""
    try:
        import psutil
    except ImportError:
        return
    for child in psutil.Process(os.getpid()).children(recursive=True):
        try:
            child.send_signal(signal.SIGKILL)
        except psutil.Error:
            pass


def run(opts, out=None) -> int:
    # lazy: `selftest --help` and completion skip the runner: launch, SGLang's arguments, pydantic (0.89 s)
    from . import report
    from .runner import run_layout

    out = out or sys.stdout
    results = []

    def emit(rep) -> None:
        print(report.to_json(rep) if opts.json else report.to_text(rep), file=out, flush=True)

    def on_hang(result) -> None:
        results.append(result)
        _kill_children()
        emit(report.build(opts, results))
        os._exit(EXIT_FAIL)

    with tempfile.TemporaryDirectory(prefix="specdecode-selftest-") as tmp:
        root = Path(opts.keep) if opts.keep else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        models = _models(opts, root)
        for layout in opts.layouts:
            work = root / layout
            work.mkdir(parents=True, exist_ok=True)
            results.append(run_layout(opts, layout, models, work, on_hang))
        rep = report.build(opts, results)
    emit(rep)
    return EXIT_OK if rep.ok else EXIT_FAIL


def run_from_namespace(ns: argparse.Namespace) -> int:
    try:
        opts = from_namespace(ns)
    except OptionError as e:
        print(f"specdecode-runtime selftest: {e}", file=sys.stderr)
        return EXIT_USAGE
    return run(opts)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="specdecode-runtime selftest")

    add_arguments(ap)
    return run_from_namespace(ap.parse_args(argv))
