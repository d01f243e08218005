"""Per-position acceptance of EAGLE-3 heads against their target's greedy decoding, in plain PyTorch: what a draft
would be accepted at when served with chain speculation of ``k`` draft tokens.

A scored sequence is a prompt and a continuation (the target's greedy decoding, or a served output). The target runs
once over it; at every continuation position n the head drafts a chain of ``k`` tokens exactly as the runtime does
after a verify that ended at n (step 0 over the prefix on the target's captured hidden states, steps 1..k-1 on its
own hidden states and proposals), and the chain is compared with the target's greedy next token at each of the
next ``k`` positions. Reported (:func:`summarize`):

* ``conditional_acceptance[i]``: P(draft token i+1 matches | tokens 1..i matched), the per-position rate;
* ``accept_length``: expected accepted draft tokens per verify, E[leading matches], and ``+1`` for the bonus token
  (``tokens_per_verify``, what SGLang reports as its accept length);
* ``accept_length_by_steps[s]``: the same for a chain of s = 1..k drafts (what each static step count gets).
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Callable, Sequence

import torch

from .eagle3_head import Eagle3Head, aux_features

Amp = Callable[[], Any]


def no_amp() -> Any:
    return nullcontext()


@torch.no_grad()
def greedy(target, prompts: torch.Tensor, new_tokens: int, amp: Amp = no_amp) -> torch.Tensor:
    """prompt + ``new_tokens`` greedy tokens (KV cache; an end-of-sequence token does not stop it: every row has the
    same length)."""
    with amp():
        out = target(input_ids=prompts, use_cache=True)
    past = out.past_key_values
    seq = [prompts, out.logits[:, -1].argmax(-1, keepdim=True)]
    for _ in range(new_tokens - 1):
        with amp():
            out = target(input_ids=seq[-1], past_key_values=past, use_cache=True)
        past = out.past_key_values
        seq.append(out.logits[:, -1].argmax(-1, keepdim=True))
    return torch.cat(seq, dim=1)


@torch.no_grad()
def target_view(target, seqs: torch.Tensor, amp: Amp = no_amp) -> tuple[tuple, torch.Tensor]:
    """The target's hidden states (transformers' ``output_hidden_states``) and its greedy next token after each
    position, for sequences [B, T]."""
    with amp():
        out = target(input_ids=seqs, output_hidden_states=True)
    return out.hidden_states, out.logits.argmax(-1)


@torch.no_grad()
def chain_matches(
    head: Eagle3Head, hidden_states: tuple, greedy_next: torch.Tensor, seqs: torch.Tensor, prompt_len: int, k: int, amp
) -> torch.Tensor:
    """[B, S, k] booleans: whether draft i of the chain after each continuation position matches the target's greedy
    token there. A verify that ends at n (token n known) drafts from step 0 at position n-1 (feature n-1, token n);
    that chain proposes tokens n+1..n+k, the target's are ``greedy_next[n..n+k-1]``."""
    feats = aux_features(hidden_states, head.aux_layer_ids)
    t = seqs.shape[1]
    with amp():
        step_logits = head.unroll(feats[:, :-1], seqs[:, 1:], k)
    drafts = torch.stack([head.draft_to_target(lg.argmax(-1)) for lg in step_logits], dim=-1)  # [B, T-1, k]
    starts = torch.arange(prompt_len - 1, t - 1 - k, device=seqs.device)  # n-1 with n in the continuation
    ref = torch.stack([greedy_next[:, starts + 1 + i] for i in range(k)], dim=-1)  # [B, S, k]
    return drafts[:, starts] == ref


def summarize(matches: Sequence[torch.Tensor], k: int) -> dict:
    """Acceptance over every chain of ``matches`` (each [B, S, k])."""
    flat = [m.reshape(-1, k) for m in matches if m.numel()]
    match = torch.cat(flat) if flat else torch.zeros(0, k, dtype=torch.bool)
    lead = match.long().cumprod(-1)  # 1 while every earlier draft matched
    n = lead.shape[0]
    reached = torch.cat([torch.ones_like(lead[:, :1]), lead[:, :-1]], dim=-1).sum(0).float()
    accepted = lead.sum(0).float()
    conditional = (accepted / reached.clamp(min=1)).tolist()
    by_steps = {s: round(lead[:, :s].sum(-1).float().mean().item(), 4) if n else 0.0 for s in range(1, k + 1)}
    return {
        "chains": n,
        "conditional_acceptance": [round(c, 4) for c in conditional],
        "reached": [int(r) for r in reached.tolist()],
        "accept_length": by_steps[k],
        "tokens_per_verify": round(by_steps[k] + 1, 4),
        "accept_length_by_steps": by_steps,
        "unconditional_match": [round(m, 4) for m in (match.float().mean(0) if n else torch.zeros(k)).tolist()],
    }


@torch.no_grad()
def measure(target, head: Eagle3Head, seqs: torch.Tensor, prompt_len: int, k: int, amp: Amp = no_amp) -> dict:
    """Acceptance of ``head`` on sequences [B, T] whose continuation starts at ``prompt_len``."""
    hidden_states, greedy_next = target_view(target, seqs, amp)
    return summarize([chain_matches(head, hidden_states, greedy_next, seqs, prompt_len, k, amp)], k)


@torch.no_grad()
def score_sequences(
    target,
    heads: dict[str, Eagle3Head],
    sequences: Sequence[tuple[Sequence[int], Sequence[int]]],
    k: int,
    device: Any = "cpu",
    amp: Amp = no_amp,
    batch: int = 16,
) -> dict[str, dict]:
    """Acceptance of each head on the same (prompt ids, continuation ids) pairs: the target runs once per batch of
    pairs of one shape (prompt and continuation lengths), and every head drafts over the same hidden states. Pairs
    whose continuation has no room for a chain of ``k`` are left out (``sequences_scored`` counts those that
    counted)."""
    groups: dict[tuple[int, int], list[list[int]]] = {}
    for prompt, cont in sequences:
        if len(prompt) >= 1 and len(cont) > k:
            groups.setdefault((len(prompt), len(cont)), []).append(list(prompt) + list(cont))
    found: dict[str, list[torch.Tensor]] = {name: [] for name in heads}
    for (prompt_len, _), rows in sorted(groups.items()):
        for i in range(0, len(rows), batch):
            seqs = torch.tensor(rows[i : i + batch], dtype=torch.long, device=device)
            hidden_states, greedy_next = target_view(target, seqs, amp)
            for name, head in heads.items():
                found[name].append(chain_matches(head, hidden_states, greedy_next, seqs, prompt_len, k, amp))
    used = sum(len(rows) for rows in groups.values())
    return {name: {**summarize(m, k), "sequences_scored": used} for name, m in found.items()}


def verdict(serving: dict, candidate: dict, min_ratio: float = 1.0) -> dict:
    """``better``: the candidate's tokens per verify over the serving draft's (``ratio``) is at least ``min_ratio``
    and above 1 (a tie keeps the serving draft)."""
    ratio = candidate["tokens_per_verify"] / serving["tokens_per_verify"]
    return {
        "serving": serving,
        "candidate": candidate,
        "ratio": round(ratio, 4),
        "ratio_of": "tokens_per_verify",
        "min_ratio": min_ratio,
        "better": bool(ratio >= min_ratio and candidate["accept_length"] > serving["accept_length"]),
    }
