"""Torch implementations of the probability renormalisation ops of sgl_kernel 0.4.10.

Both return float32 probabilities, as the real ops do, and accept either one threshold for the whole batch or one
per row.
"""

import torch


def _per_row(value: torch.Tensor | int | float, rows: int, dtype, device) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return (
            value.to(device=device, dtype=dtype).reshape(-1).expand(rows)
            if value.numel() == 1
            else value.to(device=device, dtype=dtype)
        )
    return torch.full((rows,), value, dtype=dtype, device=device)


def top_k_renorm_probs(probs: torch.Tensor, top_k: torch.Tensor | int) -> torch.Tensor:
    """Keep each row's ``top_k`` largest probabilities (ties at the threshold kept), zero the rest, renormalise."""
    probs = probs.float()
    rows, vocab = probs.shape
    k = _per_row(top_k, rows, torch.int64, probs.device)
    k = torch.where(k <= 0, torch.full_like(k, vocab), k).clamp(max=vocab)
    ordered = probs.sort(dim=-1, descending=True).values
    threshold = ordered.gather(-1, (k - 1).unsqueeze(-1))
    kept = torch.where(probs >= threshold, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


top_k_renorm_prob = top_k_renorm_probs


def top_p_renorm_probs(probs: torch.Tensor, top_p: torch.Tensor | float) -> torch.Tensor:
    """Keep each row's smallest set of largest probabilities whose mass reaches ``top_p``, zero the rest, renormalise."""
    probs = probs.float()
    rows = probs.shape[0]
    p = _per_row(top_p, rows, torch.float32, probs.device).unsqueeze(-1)
    ordered, order = probs.sort(dim=-1, descending=True)
    mass_before = ordered.cumsum(dim=-1) - ordered
    keep_sorted = mass_before < p
    keep_sorted[:, 0] = True
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)
    kept = torch.where(keep, probs, torch.zeros_like(probs))
    return kept / kept.sum(dim=-1, keepdim=True)


top_p_renorm_prob = top_p_renorm_probs
