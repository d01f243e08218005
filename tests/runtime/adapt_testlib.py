"""Captured traffic of the tiny models for the ``adapt`` tests: the tiny target's own greedy decoding (plain torch
through transformers, no server) written by the real capture writer, once per test process.

The "application" the traffic comes from: prompts drawn from a small sub-vocabulary (:data:`SUBVOCAB` tokens), so
the served continuations have structure a head can learn in a few hundred CPU steps; every record finishes by
length, as a served request with ``max_new_tokens`` does."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest

PROMPT_LEN = 12
NEW_TOKENS = 40
RECORDS = 400
SUBVOCAB = 8
SEED = 0


@dataclass(frozen=True)
class World:
    models: object  # TinyModels
    capture: Path
    records: list[dict]


def greedy_records(target_dir: str, count: int = RECORDS, seed: int = SEED) -> list[dict]:
    import torch

    from specdecode_runtime.adapt.train import load_target

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a loaded 2-core machine oversubscribed by torch's pool is many times slower
    try:
        return _greedy_records(load_target(target_dir, "cpu", torch.float32), count, seed)
    finally:
        torch.set_num_threads(threads)


def _greedy_records(target, count: int, seed: int) -> list[dict]:
    import torch

    from specdecode_runtime.adapt.score import greedy

    vocab = target.config.vocab_size
    sub = torch.randperm(vocab - 3, generator=torch.Generator().manual_seed(5))[:SUBVOCAB] + 3
    gen = torch.Generator().manual_seed(seed)
    prompts = sub[torch.randint(0, SUBVOCAB, (count, PROMPT_LEN), generator=gen)]
    seqs = greedy(target, prompts, NEW_TOKENS).tolist()
    return [
        {
            "time": 1_700_000_000.0 + i,
            "prompt_ids": row[:PROMPT_LEN],
            "output_ids": row[PROMPT_LEN:],
            "finish": {"type": "length", "length": NEW_TOKENS},
            "draft": {"source": "/models/draft", "digest": "sha256:0"},
        }
        for i, row in enumerate(seqs)
    ]


def write_capture(directory: Path, records: list[dict], pod: str = "pod-a") -> Path:
    """``records`` through the pod's own writer: the files and lines the capture produces."""
    from specdecode_runtime.capture import CaptureSettings, CaptureWriter

    writer = CaptureWriter(
        CaptureSettings(str(directory), max_bytes=1 << 30, retention_seconds=10**9),
        pod=pod,
        clock=lambda: 1_700_000_000.0,
    ).start()
    for r in records:
        assert writer.offer(lambda r=r: dict(r)) == "queued"
    writer.flush()
    writer.close()
    return directory


def write_lines(path: Path, records: list[dict]) -> None:
    with open(path, "a") as f:
        for r in records:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")


_WORLD: list[World] = []  # one per test process: the models and the capture are read-only to every test


def world(tmp_path_factory) -> World:
    """The tiny models and their captured traffic, made once per test process (a test module's fixture calls it)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    if not _WORLD:
        from specdecode_runtime.cpu.tiny_models import make_tiny_models

        root = tmp_path_factory.mktemp("adapt")
        models = make_tiny_models(root / "models")
        records = greedy_records(models.target)
        _WORLD.append(World(models, write_capture(root / "capture", records), records))
    return _WORLD[0]
