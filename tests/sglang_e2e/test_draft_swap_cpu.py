"""Loading a new draft in place on the pinned SGLang's real CPU engine: TP 2 with the agreeing EAGLE-3 draft (its own
head, the target's embedding), once sharded over both ranks and once split onto rank 1 alone (its own process
group; rank 0, which answers the API, holds no draft), beside a run without speculation.

While the prompts decode, ``selftest --draft-swaps`` POSTs five drafts to the control port, each after three decode
rounds: a noisy copy of the served draft (loaded: same shapes, other weights), a path that does not exist (refused:
the noisy draft serves on), the served draft again (loaded), the random EAGLE-3 draft (refused: another config) and
the served draft with a truncated head (refused: another shape). Then the warm-up's generation runs again.

One self-test invocation serves every assertion (three engine starts, about 2.5 minutes on 2 cores):

* no request fails and the greedy tokens equal the run without speculation, through every swap, in both layouts;
* every rank settles each swap at the same decode round; the ranks holding the draft change their weights exactly
  when a swap is accepted and get the served weights back with the served checkpoint (the self-test's check);
* each answer carries the identity (source and digest) or the refusal's cause, the identity GET shows and the
  exported ``specdecode_draft_*`` series follow it, and a refusal leaves the identity as it was;
* the noisy draft accepts less than the served one, and after the swap back a fresh generation proposes exactly
  what the served draft proposed before any swap (the stale draft KV of requests in flight is accepted, not
  rebuilt: docs/runtime.md "Loading a new draft in place").
"""

from __future__ import annotations

import shutil
import sys
from functools import cache
from pathlib import Path

import pytest

from specdecode_runtime.contract.metric_names import DRAFT_INFO
from tests.sglang_e2e.test_split_layouts import _require_sglang, run_selftest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
if str(RUNTIME) not in sys.path:
    sys.path.insert(0, str(RUNTIME))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

DRAFT_SWAP_CHECK = "draft swaps settled alike on every rank, each draft rank's weights changed exactly when accepted"


def _wrong_shape(src: str, dst: Path) -> str:
    """The served draft with two rows of its head cut off; its config unchanged."""
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = load_file(str(dst / "model.safetensors"))
    weights["lm_head.weight"] = weights["lm_head.weight"][:-2].contiguous()
    save_file(weights, str(dst / "model.safetensors"))
    return str(dst)


@pytest.fixture(scope="module")
def swapped(tmp_path_factory):
    """The self-test run, once per module."""
    from specdecode_runtime.cpu.tiny_models import make_tiny_models
    from specdecode_runtime.selftest.rank_probe import read_records

    _require_sglang()
    base = tmp_path_factory.mktemp("draft-swap")
    # the self-test's own tiny models at TP 2 are these (seed 0, the default shape): the refusals are made from them
    mine = make_tiny_models(base / "mine", seed=0)
    missing = str(base / "no-such-draft")
    other_config = mine.eagle3  # the random EAGLE-3 draft: one layer, no norm_output
    other_shape = _wrong_shape(mine.eagle3_agree, base / "short-head")
    keep = base / "keep"
    argv = [
        "--device",
        "cpu",
        "--tp",
        "2",
        "--draft-ranks",
        "1",
        "--algorithm",
        "EAGLE3",
        "--steps",
        "3",
        "--layouts",
        "nospec,sharded,split",
        "--draft-swaps",
        f"noisy,{missing},served,{other_config},{other_shape}",
        "--json",
        "--timeout",
        "600",
        "--keep",
        str(keep),
    ]
    proc, report = run_selftest(argv)
    runs = {r["layout"]: r for r in report["runs"]}
    records = {layout: read_records(keep / layout / "ranks") for layout in ("sharded", "split")}
    return report, runs, records, keep, {"missing": missing, "config": other_config, "shape": other_shape}


@cache
def _digest(path: str) -> str:
    from specdecode_runtime.draft_checkpoint import digest

    return digest(path)


def test_no_request_fails_and_the_tokens_never_change(swapped):
    report, runs, _, _, _ = swapped
    for layout in ("nospec", "sharded", "split"):
        run = runs[layout]
        assert "hang" not in run and run["error"] is None, run
        assert run["tokens_equal_reference"], run["first_divergence"]
        assert len(run["tokens"]) == 2 and all(len(t) == 144 for t in run["tokens"])  # every request ran to the end
    assert report["ok"], report["summary"]
    for layout in ("sharded", "split"):
        assert runs[layout]["repeat_tokens"] == [t[:8] for t in runs["nospec"]["tokens"]]


def test_every_rank_swaps_at_the_same_round_and_only_the_draft_ranks_write(swapped):
    _, runs, records, _, _ = swapped
    for layout, holders in (("sharded", [0, 1]), ("split", [1])):
        checks = {c["name"]: c for c in runs[layout]["checks"]}
        assert checks[DRAFT_SWAP_CHECK]["ok"], checks[DRAFT_SWAP_CHECK]["detail"]
        assert f"weights written on ranks {holders}" in checks[DRAFT_SWAP_CHECK]["detail"]
        swaps = {rk: [e for e in evs if e["event"] == "draft_swap"] for rk, evs in records[layout].items()}
        assert [[e["ok"] for e in swaps[rk]] for rk in (0, 1)] == [[True, False, True, False, False]] * 2
        for rk in holders:
            first, noisy_refused, back = swaps[rk][0], swaps[rk][1], swaps[rk][2]
            assert first["params_after"] != first["params_before"]  # the noisy weights, here
            assert noisy_refused["params_after"] == first["params_after"]  # a refusal leaves them
            assert back["params_after"] == first["params_before"]  # the served weights again, bit for bit
            assert all(e["params_after"] == back["params_after"] for e in swaps[rk][3:])
        assert all(e["params_before"] is None for rk in (0, 1) if rk not in holders for e in swaps[rk])


def test_answers_identity_and_metrics_follow_the_served_draft(swapped):
    _, runs, _, keep, paths = swapped
    served, noisy = str(keep / "models" / "eagle3_agree"), str(keep / "models" / "draft_noisy")
    a, b = {"source": served, "digest": _digest(served)}, {"source": noisy, "digest": _digest(noisy)}
    assert a["digest"] != b["digest"]
    for layout in ("sharded", "split"):
        run = runs[layout]
        answers = [(s["status"], s["body"]) for s in run["draft_swaps"]]
        assert [st for st, _ in answers] == [200, 422, 200, 422, 422], answers
        assert answers[0][1]["draft"] == b and answers[0][1]["previous"] == a and answers[0][1]["result"] == "ok"
        assert answers[2][1]["draft"] == a and answers[2][1]["previous"] == b
        refusals = {body["cause"]: body for _, body in (answers[1], answers[3], answers[4])}
        assert set(refusals) == {"not_found", "config", "shape"}
        assert refusals["not_found"]["draft"] == b  # the noisy draft served on, identity unchanged
        assert refusals["config"]["draft"] == refusals["shape"]["draft"] == a
        assert "no such directory (on ranks 0, 1)" in refusals["not_found"]["error"]
        assert "num_hidden_layers (2 -> 1)" in refusals["config"]["error"]
        assert "lm_head.weight [254, 64] (served [256, 64])" in refusals["shape"]["error"]
        assert all(body["field"] == "source" for body in refusals.values())
        assert run["draft_status"]["status"] == 200 and run["draft_status"]["body"]["draft"] == a
        assert run["draft_status"]["body"]["lastSwap"]["cause"] == "shape"
        m = run["draft_metrics"]
        info = {(s["source"], s["digest"]): s["value"] for s in m["info"]}
        assert info == {(served, a["digest"]): 1.0, (noisy, b["digest"]): 0.0}, m  # one series at 1: the served one
        assert m["swaps"] == {"ok": 2.0, "refused": 3.0}
        assert m["seconds"]["ok"]["count"] == 2.0 and m["seconds"]["refused"]["count"] == 3.0
        assert m["seconds"]["ok"]["sum"] > 0
    assert DRAFT_INFO == "specdecode_draft_info"


def test_the_noisy_draft_accepts_less_and_the_served_one_comes_back_exactly(swapped):
    _, runs, records, _, _ = swapped
    for layout in ("sharded", "split"):
        run, rec = runs[layout], records[layout]
        swaps = [e for e in rec[0] if e["event"] == "draft_swap"]
        to_noisy, back = swaps[0]["round"], swaps[2]["round"]
        # rank 0's records in order: the warm-up, the generation with its swaps, the repeat after them
        warm, repeat_from = int(run["warmup_records"]["0"]), int(run["repeat_records"]["0"])
        warmup = [e for e in rec[0][:warm] if e["event"] == "verify"]
        main = [e for e in rec[0][warm:repeat_from] if e["event"] == "verify"]
        repeat = [e for e in rec[0][repeat_from:] if e["event"] == "verify"]
        noisy = [e for e in main if to_noisy < e["round"] <= back]
        fresh_served = warmup + repeat  # fresh requests, the served draft
        rate = lambda evs: sum(sum(e["accepted"]) for e in evs) / max(sum(len(e["accepted"]) for e in evs), 1)  # noqa: E731
        assert len(noisy) >= 6 and sum(sum(e["accepted"]) for e in fresh_served) > 0
        assert rate(noisy) < rate(fresh_served), (layout, rate(noisy), rate(fresh_served))
        # the repeat decodes the prompts again from the same cached prefixes as the generation's start: with the
        # served weights back on every draft rank it proposes exactly what they proposed before the first swap
        # (compared while both decode the same batch: the repeat's requests stop after 8 tokens)
        before = [e for e in main if e["round"] <= to_noisy]
        n = next(
            (i for i, (a, b) in enumerate(zip(repeat, before)) if a["bs"] != b["bs"]), min(len(before), len(repeat))
        )
        assert n >= 3, (len(before), len(repeat), n)
        assert [e["input_ids"] for e in repeat[:n]] == [e["input_ids"] for e in before[:n]], layout
        assert [e["accepted"] for e in repeat[:n]] == [e["accepted"] for e in before[:n]]
