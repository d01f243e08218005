"""Checks that judge the draft itself, not only the target's output.

The target's verify keeps the greedy tokens identical whatever the draft proposes, so equal tokens prove nothing
about the split draft: a draft on S that proposed one constant token would still produce the reference's tokens.
These checks compare what the split draft proposed with what the stock sharded draft proposed *in the same state*
and recount acceptance from the target's own verify logits, independently of SGLang's accept bookkeeping and of the
exported counters.

**Same state.** Both runs decode the same prompts greedily and produce the same tokens, so a request at a given
sequence length has the same committed prefix in both, whatever path (acceptance lengths, tier switches) led there.
A verify's state is therefore identified by the request's slot in SGLang's request pool and the position of its
first verify token; cycles with the same key in both runs are compared, cycles that only one run reached are not.
For a chain, the drafts of different tiers share their common prefix (the draft is autoregressive), so the shorter
width is compared; a tree is compared only at the same width.

**Tolerance.** The two drafts run the same weights at different TP sizes (|S| ranks against the target's), so
their reductions sum in a different order and an argmax between two nearly tied tokens may flip. At most
:data:`FLIP_FRACTION` of the compared cycles (and never fewer than one) may therefore differ; a wrong draft
differs in nearly every cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

from .options import Options

# Fraction of same-state cycles whose drafted ids may differ (a near-tie argmax flipped by the reduction order).
# float32 on the CPU leaves a very narrow near-tie band; bf16/fp16 weights on GPUs widen it.
FLIP_FRACTION = {"cpu": 0.05, "cuda": 0.2}

DRAFTS_CHECK = "drafted tokens equal the sharded draft's in the same state"
ACCEPT_CHECK = "accepted drafts equal the sharded draft's in the same state"
COUNTERS_CHECK = "exported acceptance counters equal the engine's counts"


@dataclass(frozen=True)
class Cycle:
    """One request's part of one target verify: what the draft proposed there and what the target accepted."""

    pool_index: int
    start: int  # position of the request's first verify token (the last committed one)
    tokens: tuple[int, ...]  # the verify input: the last committed token, then the drafted tokens
    accepted: int | None  # drafts accepted, recounted from the target's logits (None: not recorded on this rank)

    @property
    def key(self) -> tuple[int, int]:
        return (self.pool_index, self.start)

    @property
    def drafts(self) -> tuple[int, ...]:
        return self.tokens[1:]


def greedy_accepted(
    candidates: Sequence[int],
    target: Sequence[int],
    next_token: Sequence[int] | None,
    next_sibling: Sequence[int] | None,
) -> int:
    """Drafts a greedy verify accepts for one request, from the target's argmax at every verify position.

    ``candidates[j]`` is verify token j (0 is the last committed token), ``target[j]`` the target's argmax after
    it. ``next_token`` / ``next_sibling`` are SGLang's per-request tree links (first child, next sibling; -1 for
    none); ``None`` means a chain (token j+1 follows token j). From the root, the child whose token is the target's
    prediction is accepted and the walk continues from it, as SGLang's ``verify_tree_greedy`` does."""
    n = len(candidates)
    accepted, last, cur = 0, 0, 0
    while True:
        cur = (cur + 1 if cur + 1 < n else -1) if next_token is None else int(next_token[cur])
        want = int(target[last])
        while cur != -1 and int(candidates[cur]) != want:
            cur = -1 if next_sibling is None else int(next_sibling[cur])
        if cur == -1:
            return accepted
        accepted += 1
        last = cur


def cycles(events: Iterable[dict]) -> list[Cycle]:
    """Request cycles from one rank's ``verify`` records, decode rounds only (the start-up cost probe's verify
    forwards run before the first round)."""
    out: list[Cycle] = []
    for e in events:
        if e.get("event") != "verify" or int(e.get("round") or 0) < 1:
            continue
        bs, ids, pos = int(e.get("bs") or 0), e.get("input_ids") or [], e.get("positions") or []
        pools = e.get("req_pool_indices")
        if bs <= 0 or not ids or pools is None or len(ids) % bs or len(pos) != len(ids):
            continue
        n = len(ids) // bs
        acc = e.get("accepted")
        for b in range(bs):
            out.append(
                Cycle(
                    int(pools[b]),
                    int(pos[b * n]),
                    tuple(int(t) for t in ids[b * n : (b + 1) * n]),
                    int(acc[b]) if acc is not None else None,
                )
            )
    return out


def _unique(cs: Iterable[Cycle]) -> dict[tuple[int, int], Cycle]:
    seen: dict[tuple[int, int], Cycle] = {}
    dup: set[tuple[int, int]] = set()
    for c in cs:
        if c.key in seen:
            dup.add(c.key)
        seen[c.key] = c
    return {k: v for k, v in seen.items() if k not in dup}


def _comparable(a: Cycle, b: Cycle, chain: bool) -> int | None:
    """Drafted tokens both cycles have (the shorter chain), or None for trees of different widths."""
    if chain:
        return min(len(a.drafts), len(b.drafts))
    return len(a.drafts) if len(a.drafts) == len(b.drafts) else None


def allowed_flips(compared: int, device: str) -> int:
    return max(1, int(FLIP_FRACTION.get(device, FLIP_FRACTION["cuda"]) * compared))


def compare_drafts(opts: Options, split: Sequence[Cycle], sharded: Sequence[Cycle]) -> list[tuple[str, bool, str]]:
    """(name, ok, detail) for the drafted ids and the accepted drafts of the split run against the sharded run."""
    chain = opts.topk == 1
    a, b = _unique(split), _unique(sharded)
    pairs = [
        (a[k], b[k], w)
        for k in sorted(a.keys() & b.keys())
        if (w := _comparable(a[k], b[k], chain)) is not None and w > 0
    ]
    need = opts.prompts
    requests = {c.pool_index for c, _, _ in pairs}
    tol = allowed_flips(len(pairs), opts.device)
    why = (
        f"at most {tol} of {len(pairs)} may differ ({int(FLIP_FRACTION.get(opts.device, 0.2) * 100)} %, at "
        f"least 1): draft TP {opts.draft_tp} and draft TP {opts.tp} sum in a different order, which can flip a "
        "near-tied argmax"
    )
    if len(requests) < need:
        short = (
            f"only {len(pairs)} cycles of {len(requests)} requests were in the same state in both runs "
            f"(split {len(a)}, sharded {len(b)} request cycles); every one of the {need} requests must be "
            "compared at least once"
        )
        return [(DRAFTS_CHECK, False, short), (ACCEPT_CHECK, False, short)]
    bad = [(c, d, w) for c, d, w in pairs if c.drafts[:w] != d.drafts[:w]]
    first = ""
    if bad:
        c, d, w = bad[0]
        first = (
            f"; first at request slot {c.pool_index}, position {c.start}: split drafted {list(c.drafts[:w])}, "
            f"sharded {list(d.drafts[:w])}"
        )
    out = [
        (
            DRAFTS_CHECK,
            len(bad) <= tol,
            f"{len(pairs) - len(bad)} of {len(pairs)} same-state cycles drafted identical ids; {why}{first}",
        )
    ]
    counted = [(c, d, w) for c, d, w in pairs if c.accepted is not None and d.accepted is not None]
    if not counted:
        out.append(
            (
                ACCEPT_CHECK,
                False,
                "no recounted acceptance in the verify records (rank 0 recounts it from the target's greedy logits)",
            )
        )
        return out
    acc_s = sum(min(c.accepted or 0, w) for c, _, w in counted)  # counted: both recounted (never None)
    acc_h = sum(min(d.accepted or 0, w) for _, d, w in counted)
    differ = sum(1 for c, d, w in counted if min(c.accepted or 0, w) != min(d.accepted or 0, w))
    out.append(
        (
            ACCEPT_CHECK,
            differ <= tol,
            f"accepted drafts in {len(counted)} same-state cycles: split {acc_s}, sharded {acc_h}; "
            f"{differ} cycles differ, {why}",
        )
    )
    return out


def counters(
    acceptance: dict, cs: Sequence[Cycle], overlap: bool = False, requests: int = 0, max_steps: int = 0
) -> tuple[str, bool, str]:
    """The exported counters against two counts: SGLang's own per-request ``spec_num_correct_drafts`` /
    ``spec_verify_ct``, and the acceptance recounted from the target's verify logits on rank 0 (independent of
    SGLang's accept list, which feeds both SGLang's counts and the exporter).

    Under SGLang's overlap scheduler (GPUs) the next cycle is launched before the last one's results are back, so a
    request that finishes has one more cycle run than its own counts deliver: the exporter and the recount still
    agree exactly (both count the cycles that ran), and SGLang's counts may fall short by at most one cycle, with at
    most ``max_steps`` accepted drafts, per finished request."""
    eng, exp = acceptance.get("engine") or {}, acceptance.get("exported") or {}
    if not eng or not exp:
        return COUNTERS_CHECK, False, "no acceptance figures (the run produced no metrics)"
    acc, req = int(exp["accepted_drafts"]), int(exp["requests_verified"])
    recount = [c.accepted for c in cs]
    missing = sum(1 for a in recount if a is None)
    re_acc = sum(a for a in recount if a is not None)
    exact = not missing and bool(recount) and acc == re_acc and req == len(recount)
    extra_req, extra_acc = req - int(eng["verify_ct"]), acc - int(eng["correct_drafts"])
    if overlap:
        engine_ok = 0 <= extra_req <= requests and 0 <= extra_acc <= extra_req * max_steps
    else:
        engine_ok = extra_req == 0 and extra_acc == 0
    note = (
        f"; overlap scheduler: SGLang's counts may miss one in-flight cycle per finished request ({requests})"
        if overlap
        else ""
    )
    return (
        COUNTERS_CHECK,
        bool(exact and engine_ok),
        f"accepted drafts: exported {acc}, SGLang {eng['correct_drafts']}, recounted from the target's logits "
        f"{re_acc}; requests verified: exported {req}, SGLang {eng['verify_ct']}, target verify forwards "
        f"{len(recount)}" + (f"; {missing} request cycles without a recount" if missing else "") + note,
    )
