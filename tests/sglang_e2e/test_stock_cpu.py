"""The stock (unpatched) pinned SGLang end to end on the CPU: greedy tokens are identical without speculation at TP 1
and TP 2 (gloo), and with EAGLE / EAGLE-3 chains and trees they equal the tokens without speculation, while the
agreeing drafts get drafts accepted."""

from __future__ import annotations

import pytest
from conftest import MAX_NEW_TOKENS, PROMPTS, STOCK_RUNS, first_divergence, result_of

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # the first test also starts every engine it needs


def test_nospec_tp2_equals_tp1(stock):
    tp1, tp2 = result_of(stock, "nospec-tp1"), result_of(stock, "nospec-tp2")
    assert [len(t) for t in tp1["tokens"]] == [MAX_NEW_TOKENS] * len(PROMPTS)
    assert tp2["tokens"] == tp1["tokens"], first_divergence(tp1["tokens"], tp2["tokens"])


def test_prompts_give_different_continuations(stock):
    """The target depends on its context: different prompts, different tokens (a KV slot read from the wrong
    place would change them)."""
    a, b = result_of(stock, "nospec-tp1")["tokens"]
    assert a != b


@pytest.mark.parametrize("name", [n for n, spec in STOCK_RUNS.items() if spec[1]])
def test_speculative_tokens_equal_nospec(stock, name):
    base = result_of(stock, "nospec-tp1")["tokens"]
    got = result_of(stock, name)
    assert got["tokens"] == base, first_divergence(base, got["tokens"])
    assert all(m["spec_verify_ct"] > 0 for m in got["meta"])
    # every verify cycle yields at least one token: fewer cycles than tokens means drafts were accepted
    assert all(m["spec_verify_ct"] <= MAX_NEW_TOKENS for m in got["meta"])


@pytest.mark.parametrize("name", [n for n, spec in STOCK_RUNS.items() if spec[2] == "agree"])
def test_agreeing_draft_accepts(stock, name):
    meta = result_of(stock, name)["meta"]
    accepted = sum(m["spec_num_correct_drafts"] for m in meta)
    assert accepted > 0
    assert max(m["spec_accept_length"] for m in meta) > 1.0
    # accept length is what SGLang computes from its own counters: tokens per verify cycle
    for m in meta:
        assert m["spec_accept_length"] == pytest.approx(m["completion_tokens"] / m["spec_verify_ct"], rel=0.2)
