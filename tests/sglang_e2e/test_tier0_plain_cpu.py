"""Tier 0 is plain decoding, on the pinned SGLang's real CPU engine (TP 1, the agreeing EAGLE draft, Live tiers 0, 3,
5): while the step table says 0 the target decodes alone, with no draft forward and no draft extend (counted per
call, with the tier the draft worker ran then), the greedy tokens stay exactly those of the same engine without
speculation across live switches 3 -> 0 -> 5 -> 0 -> 5 with requests in flight, and on the way back to speculation the
catch-up extend leaves the draft in exactly the state it would have had had it never been off.

Three self-test runs, each in its own process:

* ``plain``: the runtime as shipped, beside a run without speculation (tokens compared by the self-test);
* ``warm``: ``SPECDECODE_TIER0=verify``, SGLang's own tier 0 (a one-token verify, then the draft extend over the new
  token): the draft never goes stale, so its proposals after 0 -> 5 are the reference for the catch-up. It is also the
  planted fault for the off-is-off check (a draft extend left running at tier 0), which must fail there;
* ``cold``: ``SPECDECODE_CATCH_UP_TOKENS=0``, tier 0 plain without the catch-up: the negative control showing that
  the draft comparison can fail (a stale draft proposes other tokens).
"""

from __future__ import annotations

import os
import sys
from functools import cache
from pathlib import Path

import pytest

from tests.sglang_e2e.test_split_layouts import _require_sglang, run_selftest

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"
if str(RUNTIME) not in sys.path:
    sys.path.insert(0, str(RUNTIME))

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# 3 -> 0 -> 5 -> 0 with requests in flight, then 0 -> 5 once more: the last speculative stretch runs to the end of
# the generation, long enough for the runs' proposals to meet in the same (request slot, position) states
ARGV = ["--device", "cpu", "--tp", "1", "--algorithm", "EAGLE", "--steps", "3", "--live-steps", "0,5,0,5"]
TIER0_CHECK = "the target-only tier runs no draft forward and no draft extend"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The three runs, each started at most once per module, on first use."""
    base = tmp_path_factory.mktemp("tier0")

    @cache
    def run(name: str) -> tuple[dict, dict[int, list[dict]]]:
        layouts, env = RUNS[name]
        return _run(base / name, layouts, env)

    return run


RUNS = {
    "plain": ("nospec,sharded", ()),
    "warm": ("sharded", (("SPECDECODE_TIER0", "verify"),)),
    "cold": ("sharded", (("SPECDECODE_CATCH_UP_TOKENS", "0"),)),
}


def _run(keep: Path, layouts: str, env: tuple[tuple[str, str], ...]) -> tuple[dict, dict[int, list[dict]]]:
    from specdecode_runtime.selftest.rank_probe import read_records

    _require_sglang()
    saved = {k: os.environ.get(k) for k, _ in env}
    os.environ.update(dict(env))
    try:
        _, report = run_selftest([*ARGV, "--layouts", layouts, "--json", "--timeout", "600", "--keep", str(keep)])
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    for run in report["runs"]:
        assert "hang" not in run, run["hang"]["summary"]
        assert run["error"] is None, run["error"]
    return report, read_records(keep / "sharded" / "ranks")


def _checks(report: dict) -> dict[str, dict]:
    run = next(r for r in report["runs"] if r["layout"] == "sharded")
    return {c["name"]: c for c in run["checks"]}


def _switches(records) -> list[tuple[int, int, int]]:
    return [(e["round"], e["frm"], e["to"]) for e in records[0] if e["event"] == "switch" and not e.get("measuring")]


def _drafts_after(records, frm: int, to: int) -> dict[tuple[int, int], tuple[int, ...]]:
    """Proposals of the speculative cycles after the last frm -> to switch, by (request slot, position)."""
    sw = _switches(records)
    start = [r for r, a, b in sw if (a, b) == (frm, to)][-1]
    end = min([r for r, _, _ in sw if r > start], default=1 << 30)
    out = {}
    for e in records[0]:
        if e["event"] != "verify" or e.get("plain") or not start <= e["round"] < end:
            continue
        bs = e["bs"]
        n = len(e["input_ids"]) // bs
        for b in range(bs):
            out[(e["req_pool_indices"][b], e["positions"][b * n])] = tuple(e["input_ids"][b * n + 1 : (b + 1) * n])
    return out


def test_tier0_runs_the_target_alone_and_switches_keep_the_greedy_tokens(runs):
    report, records = runs("plain")
    assert report["ok"], report["summary"]  # greedy tokens identical to the run without speculation, every check
    checks = _checks(report)
    assert checks[TIER0_CHECK]["ok"], checks[TIER0_CHECK]["detail"]
    assert [(a, b) for _, a, b in _switches(records)] == [(3, 0), (0, 5), (5, 0), (0, 5)]
    calls = [e for e in records[0] if e["event"] == "draft_call" and e["round"] >= 1]
    assert calls and not [e for e in calls if e["steps"] == 0]  # drafting ran at 3 and 5, never at 0
    plain = [e for e in records[0] if e["event"] == "verify" and e.get("plain")]
    assert len(plain) >= 4 and all(len(e["input_ids"]) == e["bs"] for e in plain)  # one token per request
    # the first speculative cycle after 0 -> 5 starts with the catch-up extend over the target-only positions
    for back in [r for r, a, b in _switches(records) if (a, b) == (0, 5)]:
        assert [e["kind"] for e in calls if e["round"] == back][:2] == ["prefill_extend", "draft"], back


def test_the_catch_up_leaves_the_draft_as_if_it_had_never_been_off(runs):
    _, plain = runs("plain")
    warm_report, warm = runs("warm")
    _, cold = runs("cold")
    # SGLang's own tier 0 extends the draft every cycle: the off-is-off check names it
    warm_check = _checks(warm_report)[TIER0_CHECK]
    assert not warm_check["ok"] and "extend" in warm_check["detail"], warm_check
    ref = _drafts_after(warm, 0, 5)
    got, stale = _drafts_after(plain, 0, 5), _drafts_after(cold, 0, 5)
    same = [k for k in set(ref) & set(got)]
    assert len(same) >= 8, (len(ref), len(got))
    assert all(got[k] == ref[k] for k in same), [(k, got[k], ref[k]) for k in same if got[k] != ref[k]][:4]
    common = [k for k in set(ref) & set(stale)]
    assert common and sum(stale[k] != ref[k] for k in common) > len(common) // 2  # the control: a stale draft differs
