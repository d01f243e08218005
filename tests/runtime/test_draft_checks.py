"""The self-test's draft checks (``selftest/draft_checks.py``) on recorded verify cycles, without starting SGLang:
the greedy recount against the CPU tree-verify kernel (itself checked against SGLang's Triton kernel), and the
split-vs-sharded comparison passing for the same draft, failing for a wrong one."""

from __future__ import annotations

import random

import pytest
from runtime_testlib import RUNTIME  # noqa: F401 - puts the runtime package on sys.path

from specdecode_runtime.selftest import draft_checks as dc  # noqa: E402
from specdecode_runtime.selftest import report  # noqa: E402
from specdecode_runtime.selftest.options import Options  # noqa: E402
from specdecode_runtime.selftest.runner import RunResult  # noqa: E402


def _random_tree(rng: random.Random, n: int, vocab: int):
    """SGLang's per-request tree links: node 0 the root, each later node a child of an earlier one."""
    children: dict[int, list[int]] = {j: [] for j in range(n)}
    for j in range(1, n):
        children[rng.randrange(j)].append(j)
    nxt, sib = [-1] * n, [-1] * n
    for p, cs in children.items():
        if cs:
            nxt[p] = cs[0]
        for a, b in zip(cs, cs[1:]):
            sib[a] = b
    cand = [rng.randrange(vocab) for _ in range(n)]
    # the target agrees with some child often enough that deep accepts happen
    target = [
        rng.choice([cand[c] for c in children[j]]) if children[j] and rng.random() < 0.7 else rng.randrange(vocab)
        for j in range(n)
    ]
    return cand, target, nxt, sib


def test_greedy_recount_equals_the_tree_verify_kernel():
    torch = pytest.importorskip("torch")
    from specdecode_runtime.cpu.kernels import verify_tree_greedy_func

    rng = random.Random(7)
    for _ in range(200):
        bs, n, vocab = rng.randint(1, 3), rng.randint(2, 8), rng.choice([3, 5, 50])
        trees = [_random_tree(rng, n, vocab) for _ in range(bs)]
        depth = n  # accept_index width bounds the walk; a tree of n nodes is at most n deep
        accept_num = torch.zeros(bs, dtype=torch.int32)
        verify_tree_greedy_func(
            predicts=torch.zeros(bs * n, dtype=torch.int64),
            accept_index=torch.full((bs, depth), -1),
            accept_token_num=accept_num,
            candidates=torch.tensor([t[0] for t in trees]),
            retrieve_index=torch.arange(bs * n).view(bs, n),
            retrieve_next_token=torch.tensor([t[2] for t in trees]),
            retrieve_next_sibling=torch.tensor([t[3] for t in trees]),
            target_predict=torch.tensor([x for t in trees for x in t[1]]),
        )
        assert [dc.greedy_accepted(c, t, nx, sb) for c, t, nx, sb in trees] == accept_num.tolist()


def test_greedy_recount_of_a_chain():
    # verify tokens [last committed, d1, d2, d3]; target argmax after each
    assert dc.greedy_accepted([9, 4, 5, 6], [4, 5, 7, 1], None, None) == 2
    assert dc.greedy_accepted([9, 4, 5, 6], [3, 5, 6, 1], None, None) == 0
    assert dc.greedy_accepted([9, 4, 5, 6], [4, 5, 6, 1], None, None) == 3


def _verify(round_: int, pools: list[int], starts: list[int], drafts: list[list[int]], accepted: list[int] | None):
    ids, pos = [], []
    for s, d in zip(starts, drafts):
        ids += [100 + s] + d
        pos += list(range(s, s + 1 + len(d)))
    return {
        "event": "verify",
        "rank": 0,
        "round": round_,
        "bs": len(pools),
        "input_ids": ids,
        "positions": pos,
        "req_pool_indices": pools,
        "accepted": accepted,
        "out_cache_loc": list(range(len(ids))),
    }


def _draft(start: int, steps: int) -> list[int]:
    """What a correct draft proposes at a state (a function of the request's position only, like greedy)."""
    return [(start * 7 + j) % 50 for j in range(1, steps + 1)]


def _run(layout: str, steps_by_round: list[int], accept: int, wrong: bool = False, pools=(0, 1)) -> RunResult:
    """Two requests decoding from positions 10 and 14; every cycle accepts ``accept`` drafts (capped by steps)."""
    events, starts = [], [10, 14]
    for rnd, steps in enumerate(steps_by_round, start=1):
        drafts = [[3] * steps if wrong else _draft(s, steps) for s in starts]
        acc = [0 if wrong else min(accept, steps) for _ in starts]
        events.append(_verify(rnd, list(pools), starts, drafts, acc))
        starts = [s + a + 1 for s, a in zip(starts, acc)]
    r = RunResult(layout=layout, tokens=[[1, 2, 3]], draft_ranks=[1] if layout == "split" else None)
    r.ranks = {0: events, 1: [{**e, "rank": 1, "accepted": None} for e in events]}
    for rk in (0, 1):  # the split draft's vocabulary on S (rank 1) when the KV pool was sized
        r.ranks[rk].insert(0, {"event": "kv_profile", "gathered_bytes": 512 * rk, "head_gathered": True})
    return r


def _checks(opts: Options, split: RunResult, sharded: RunResult) -> dict[str, report.Check]:
    return {c.name: c for c in report.draft_comparison(opts, split, sharded)}


def test_same_draft_passes_and_a_constant_draft_fails_naming_the_check():
    opts = Options(tp=2, draft_tp=1, steps=3, prompts=2)
    sharded = _run("sharded", [3] * 8, accept=1)
    ok = _checks(opts, _run("split", [3] * 8, accept=1), sharded)
    assert ok[dc.DRAFTS_CHECK].ok and ok[dc.ACCEPT_CHECK].ok, ok
    assert "16 of 16 same-state cycles" in ok[dc.DRAFTS_CHECK].detail
    bad = _checks(opts, _run("split", [3] * 30, accept=1, wrong=True), sharded)
    assert not bad[dc.DRAFTS_CHECK].ok and "split drafted [3, 3, 3]" in bad[dc.DRAFTS_CHECK].detail
    assert not bad[dc.ACCEPT_CHECK].ok and "split 0, sharded 16" in bad[dc.ACCEPT_CHECK].detail


def test_tier_switches_at_other_rounds_compare_the_common_chain_prefix():
    """Live: the sharded run switched 3 -> 1 two rounds later; states still line up by position."""
    opts = Options(tp=2, draft_tp=1, steps=3, live_steps=(1,), prompts=2)
    split = _run("split", [3, 1, 1, 1, 1, 1, 1, 1, 1], accept=1)
    sharded = _run("sharded", [3, 3, 3, 1, 1, 1, 1], accept=1)
    c = _checks(opts, split, sharded)
    assert c[dc.DRAFTS_CHECK].ok and c[dc.ACCEPT_CHECK].ok, c


def test_one_near_tie_flip_is_within_tolerance_two_are_not_in_a_short_run():
    opts = Options(tp=2, draft_tp=1, steps=3, prompts=2)
    sharded = _run("sharded", [3] * 8, accept=1)
    split = _run("split", [3] * 8, accept=1)
    split.ranks[0][2]["input_ids"][1] += 1  # one drafted token differs in one cycle
    assert _checks(opts, split, sharded)[dc.DRAFTS_CHECK].ok
    split.ranks[0][5]["input_ids"][1] += 1
    c = _checks(opts, split, sharded)[dc.DRAFTS_CHECK]
    assert not c.ok and "14 of 16" in c.detail and "at most 1 of 16" in c.detail


def test_no_common_state_or_no_sharded_run_fails():
    opts = Options(tp=2, draft_tp=1, steps=3, prompts=2)
    c = _checks(opts, _run("split", [3] * 4, accept=1), _run("sharded", [3] * 4, accept=1, pools=(5, 6)))
    assert not c[dc.DRAFTS_CHECK].ok and "every one of the 2 requests" in c[dc.DRAFTS_CHECK].detail
    c = _checks(opts, _run("split", [3] * 4, accept=1), None)
    assert not c[dc.DRAFTS_CHECK].ok and "no sharded run" in c[dc.DRAFTS_CHECK].detail


def test_cost_probe_verify_forwards_before_the_first_round_are_not_cycles():
    ev = _verify(0, [0], [3], [[1, 2]], None)
    assert dc.cycles([ev]) == []
    assert len(dc.cycles([{**ev, "round": 1}])) == 1


def test_exported_counters_against_sglang_and_the_recount():
    cs = dc.cycles(_run("split", [3] * 4, accept=2).ranks[0])  # 8 request cycles, 2 accepted each
    good = {
        "engine": {"correct_drafts": 16, "verify_ct": 8},
        "exported": {"accepted_drafts": 16.0, "requests_verified": 8.0},
    }
    name, ok, detail = dc.counters(good, cs)
    assert ok and "recounted from the target's logits 16" in detail
    # an exporter and SGLang that agree with each other but not with what the target accepted
    both_wrong = {
        "engine": {"correct_drafts": 17, "verify_ct": 8},
        "exported": {"accepted_drafts": 17.0, "requests_verified": 8.0},
    }
    assert not dc.counters(both_wrong, cs)[1]
    missing = [dc.Cycle(c.pool_index, c.start, c.tokens, None) for c in cs]
    assert not dc.counters(good, missing)[1]


def test_report_names_the_failing_draft_check_in_the_summary():
    opts = Options(tp=2, draft_tp=1, steps=3, prompts=2, layouts=("sharded", "split"), corrupt_draft=True)
    sharded = _run("sharded", [3] * 8, accept=1)
    rep = report.build(opts, [sharded, _run("split", [3] * 30, accept=1, wrong=True)])
    assert not rep.ok
    assert rep.summary.startswith("FAIL: split [") and dc.DRAFTS_CHECK in rep.summary
    assert report.build(opts, [sharded, _run("split", [3] * 8, accept=1)]).ok
