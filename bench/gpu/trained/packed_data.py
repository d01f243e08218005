"""Token streams of the corpus splits, packed: documents encoded by the target's tokenizer and joined by the
end-of-text token into one 1-D tensor, from which fixed-length windows are drawn. Encoded once (by the target's
training) and cached next to the text as ``<split>_ids.pt``, so the head's training reads the same stream."""

from __future__ import annotations

from pathlib import Path

import torch

EOT = "<|endoftext|>"
PAD = "<pad>"
ENCODE_CHUNK = 4096  # documents per encode_batch call: bounds the Python-side lists held at once


def documents(path: Path) -> list[str]:
    return [d for d in path.read_text(encoding="utf-8").split(EOT) if d]


def encode_split(tokenizer, data_dir: Path, split: str) -> torch.Tensor:
    """``split`` ("train" / "heldout") encoded with a ``tokenizers.Tokenizer`` and packed, EOT between documents;
    cached as ``<split>_ids.pt``."""
    cache = data_dir / f"{split}_ids.pt"
    docs = documents(data_dir / f"{split}.txt")
    eot = tokenizer.token_to_id(EOT)
    parts: list[torch.Tensor] = []
    for i in range(0, len(docs), ENCODE_CHUNK):
        for enc in tokenizer.encode_batch(docs[i : i + ENCODE_CHUNK], add_special_tokens=False):
            parts.append(torch.tensor(enc.ids + [eot], dtype=torch.int32))
    ids = torch.cat(parts) if parts else torch.zeros(0, dtype=torch.int32)
    torch.save(ids, cache)
    return ids


def load_split(data_dir: Path, split: str) -> torch.Tensor:
    cache = data_dir / f"{split}_ids.pt"
    if not cache.is_file():
        raise SystemExit(f"{cache} is missing: train_target.py writes it (run it with --data {data_dir})")
    return torch.load(cache)


def windows(ids: torch.Tensor, batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    """``batch`` random windows of ``length`` tokens (int64) from the packed stream."""
    if ids.numel() <= length:
        raise SystemExit(f"the token stream has {ids.numel()} tokens, fewer than one window of {length}")
    starts = torch.randint(0, ids.numel() - length, (batch,), generator=gen)
    return torch.stack([ids[s : s + length] for s in starts.tolist()]).long()


def eval_windows(ids: torch.Tensor, count: int, length: int) -> torch.Tensor:
    """Up to ``count`` consecutive non-overlapping windows from the start: the same evaluation set every time."""
    n = min(count, ids.numel() // length)
    if n == 0:
        raise SystemExit(f"the held-out stream has {ids.numel()} tokens, fewer than one window of {length}")
    return ids[: n * length].view(n, length).long()
