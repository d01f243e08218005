"""Judging the runs: identical greedy tokens, and what every rank saw agrees with itself and with the target.

A check is a (name, ok, detail) triple; the self-test passes only when every run finished, every run produced the
reference's tokens, and every check of every run holds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from . import draft_checks
from .hang import describe
from .options import Options
from .runner import LAYOUT_TITLES, RunResult


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


@dataclass
class Report:
    options: dict[str, Any]
    runs: list[dict[str, Any]] = field(default_factory=list)
    ok: bool = False
    summary: str = ""


def first_divergence(ref: list[list[int]], got: list[list[int]]) -> dict | None:
    if len(ref) != len(got):
        return {"prompt": None, "detail": f"{len(got)} outputs, the reference has {len(ref)}"}
    for i, (a, b) in enumerate(zip(ref, got)):
        for j in range(max(len(a), len(b))):
            x = a[j] if j < len(a) else None
            y = b[j] if j < len(b) else None
            if x != y:
                return {"prompt": i, "position": j, "reference": x, "got": y}
    return None


def _by_rank(r: RunResult, event: str) -> dict[int, list[dict]]:
    return {rank: [e for e in evs if e.get("event") == event] for rank, evs in r.ranks.items()}


def overlap_scheduled(opts: Options) -> bool:
    """Whether SGLang runs its overlap scheduler: on GPUs unless disabled (the CPU runs always disable it)."""
    return opts.device != "cpu" and "--disable-overlap-schedule" not in opts.sglang_args


def rank_checks(opts: Options, r: RunResult) -> list[Check]:
    out: list[Check] = []
    ranks = sorted(r.ranks)
    if r.layout == "nospec" or not ranks:
        return out
    if len(ranks) != opts.tp:
        out.append(Check("every rank reported", False, f"records from ranks {ranks}, expected 0..{opts.tp - 1}"))
    # D1: the target's attention backends (start-up and every step tier) built with the target's TP group.
    backends = _by_rank(r, "target_backend")
    wrong = [
        (rk, e["tp_group"], e["steps"])
        for rk, evs in backends.items()
        for e in evs
        if e["tp_group"] != opts.tp or e["tp_size"] != opts.tp
    ]
    tiers = sum(1 for evs in backends.values() for e in evs if e.get("tier"))
    out.append(
        Check(
            "target state built with the target TP group",
            not wrong,
            f"{sum(len(v) for v in backends.values())} target backends ({tiers} step-tier) on "
            f"{len(backends)} ranks"
            + (f"; wrong group size on (rank, size, steps) {wrong[:4]}" if wrong else f", all TP {opts.tp}"),
        )
    )
    # D3: every rank writes the same KV slots for every verify batch.
    verifies = _by_rank(r, "verify")
    counts = {rk: len(v) for rk, v in verifies.items()}
    mismatch = None
    if len(set(counts.values())) > 1:
        mismatch = f"verify forwards per rank differ: {counts}"
    else:
        ref = verifies[ranks[0]]
        for rk in ranks[1:]:
            for i, (a, b) in enumerate(zip(ref, verifies[rk])):
                for key in ("out_cache_loc", "positions", "input_ids"):
                    if a.get(key) != b.get(key):
                        mismatch = f"verify #{i}: rank {rk} {key} {b.get(key)} != rank {ranks[0]} {a.get(key)}"
                        break
                if mismatch:
                    break
            if mismatch:
                break
    n_verify = counts.get(ranks[0], 0)
    out.append(
        Check(
            "verify KV slots identical on every rank",
            mismatch is None and n_verify > 0,
            mismatch or f"{n_verify} verify batches, same out_cache_loc / positions / input ids on {len(ranks)} ranks",
        )
    )
    # Live: the same switches at the same decode round on every rank, and every requested tier reached.
    if opts.live_steps:
        # switches made by --measure-cycles (after the checked generation) are the measurement's, not the table's
        sw = {
            rk: [(e["round"], e["frm"], e["to"]) for e in evs if not e.get("measuring")]
            for rk, evs in _by_rank(r, "switch").items()
        }
        same = len({json.dumps(v) for v in sw.values()}) == 1
        reached = [e[2] for e in sw.get(ranks[0], [])]
        expected = [steps for i, steps in enumerate(opts.live_steps) if steps != ([opts.steps, *opts.live_steps][i])]
        ok = same and reached == expected and len(sw) == len(ranks)
        out.append(
            Check(
                "step tier switched on every rank",
                ok,
                f"rank 0 switches (round, from, to) {sw.get(ranks[0], [])}; expected tiers {expected}"
                + ("" if same else f"; ranks differ: {sw}"),
            )
        )
    # Tier 0 is plain decoding: the target's own decode forward, no draft forward and no draft extend.
    if opts.live_steps and 0 in opts.live_steps and r.layout in ("sharded", "split"):
        calls = [e for evs in r.ranks.values() for e in evs if e.get("event") == "draft_call" and e["round"] >= 1]
        at_zero = [(e["rank"], e["kind"], e["round"]) for e in calls if e["steps"] == 0]
        plain = sum(1 for e in verifies.get(ranks[0], []) if e.get("plain"))
        catch_ups = sum(1 for e in calls if e["kind"] == "prefill_extend" and e["rank"] == min(r.draft_ranks or [0]))
        out.append(
            Check(
                TIER0_CHECK,
                not at_zero and plain > 0,
                f"{plain} target-only cycles on rank {ranks[0]}; draft calls at tier 0 (rank, kind, round): "
                f"{at_zero[:6] or 'none'}; {catch_ups} prefill or catch-up extends on the draft's first rank",
            )
        )
    # D2: on the split layout the gathered vocabulary is resident when the KV pool is sized.
    if r.layout == "split":
        prof = _by_rank(r, "kv_profile")
        s_ranks = set(r.draft_ranks or [])
        bad = []
        for rk, evs in prof.items():
            if not evs:
                bad.append(f"rank {rk}: no KV profile seen")
                continue
            e = evs[0]
            if rk in s_ranks and e["gathered_bytes"] <= 0:
                bad.append(f"rank {rk} (in S) held no gathered vocabulary when the KV pool was sized")
            if rk not in s_ranks and e["gathered_bytes"] != 0:
                bad.append(f"rank {rk} (outside S) kept {e['gathered_bytes']} bytes")
            if opts.algorithm == "EAGLE3" and e.get("head_gathered"):
                bad.append(f"rank {rk}: the target head was gathered for an EAGLE-3 draft with its own head")
        cells = {rk: [e["cell_size"] for e in evs] for rk, evs in _by_rank(r, "kv_cell").items()}
        if len({json.dumps(v) for v in cells.values()}) > 1:
            bad.append(f"KV bytes per token differ across ranks {cells}")
        held = {rk: evs[0]["gathered_bytes"] for rk, evs in prof.items() if evs}
        out.append(
            Check(
                "KV pool sized with the draft's gathered vocabulary resident",
                not bad,
                "; ".join(bad)
                or f"bytes held at KV sizing per rank {held}; KV bytes per token "
                f"{next(iter(cells.values()), None)} on every rank",
            )
        )
    if opts.draft_swaps and r.layout in ("sharded", "split"):
        out.append(draft_swap_check(opts, r))
    # An agreeing draft must have drafts accepted: verify keeps the tokens right whatever the draft proposes, so
    # identical tokens alone cannot tell a working draft from a broken one.
    eng_acc = r.acceptance.get("engine") if r.acceptance else None
    if opts.agree and opts.load_format != "dummy" and eng_acc and r.layout in ("sharded", "split"):
        out.append(
            Check(
                "the agreeing draft's proposals are accepted",
                eng_acc["correct_drafts"] > 0,
                f"{eng_acc['correct_drafts']} drafts accepted over {eng_acc['verify_ct']} request "
                f"verifies (accept length {eng_acc['accept_length']})",
            )
        )
    # Metrics: the exported specdecode_* counters against SGLang's counts and a recount from the target's logits.
    if r.acceptance:
        eng = r.acceptance.get("engine") or {}
        out.append(
            Check(
                *draft_checks.counters(
                    r.acceptance,
                    draft_checks.cycles(r.ranks.get(ranks[0], [])),
                    overlap=overlap_scheduled(opts),
                    requests=int(eng.get("requests") or 0),
                    max_steps=max(opts.candidate_steps),
                )
            )
        )
    return out


TIER0_CHECK = "the target-only tier runs no draft forward and no draft extend"
DRAFT_SWAP_CHECK = "draft swaps settled alike on every rank, each draft rank's weights changed exactly when accepted"


def draft_swap_check(opts: Options, r: RunResult) -> Check:
    """Every rank settled the same swaps at the same decode round with the same outcome; on each rank holding the
    draft a refused swap left its weights as they were, the same checkpoint always left the same weights, and two
    different checkpoints never the same (a rank that skipped the copy would keep the old weights)."""
    ev = _by_rank(r, "draft_swap")
    ranks = sorted(r.ranks)
    seen = {rk: [(e["seq"], e["round"], e["ok"], e["digest_after"]) for e in evs] for rk, evs in ev.items()}
    problems: list[str] = []
    if len({json.dumps(v) for v in seen.values()}) > 1:
        problems.append(f"ranks differ (seq, round, ok, digest): {seen}")
    reached = [s for s in r.draft_swaps if s.get("status") is not None]
    if ranks and len(seen.get(ranks[0], [])) != len(reached):
        problems.append(f"{len(reached)} swaps answered, {len(seen.get(ranks[0], []))} settled on rank {ranks[0]}")
    holders = sorted(rk for rk, evs in ev.items() if evs and evs[0]["holds"])
    if reached and not holders:
        problems.append("no rank holding the draft recorded a swap")
    for rk in holders:
        weights: dict[str, str] = {}
        for e in ev[rk]:
            if not e["ok"] and e["params_after"] != e["params_before"]:
                problems.append(f"rank {rk}: the refused swap {e['seq']} changed its weights")
            for digest, params in ((e["digest_before"], e["params_before"]), (e["digest_after"], e["params_after"])):
                if digest is not None and weights.setdefault(digest, params) != params:
                    problems.append(f"rank {rk}: checkpoint {digest[:19]} served with two different weight sets")
        if len(set(weights.values())) != len(weights):
            problems.append(f"rank {rk}: different checkpoints left the same weights (a swap copied nothing here)")
    rank0 = ev.get(ranks[0], []) if ranks else []
    return Check(
        DRAFT_SWAP_CHECK,
        not problems and bool(rank0),
        "; ".join(problems[:4])
        or f"{len(rank0)} swaps ({sum(1 for e in rank0 if e['ok'])} loaded) at decode rounds "
        f"{[e['round'] for e in rank0]} on ranks {ranks}; weights written on ranks {holders}",
    )


def draft_comparison(opts: Options, split: RunResult, sharded: RunResult | None) -> list[Check]:
    """The split draft's proposals and acceptance against the sharded draft's, in the same states."""
    if sharded is None or sharded.error is not None or sharded.hang is not None or not sharded.ranks:
        why = "the sharded run did not finish" if sharded is not None else "no sharded run to compare with"
        return [Check(draft_checks.DRAFTS_CHECK, False, why), Check(draft_checks.ACCEPT_CHECK, False, why)]

    def timed(r: RunResult) -> list[dict]:
        # the timed generation's records only: the warm-up decodes the same prompts into the same request slots
        # and positions, and a state seen twice cannot be compared
        rank0 = min(r.ranks)
        skip = r.warmup_records.get(rank0, 0)
        return r.ranks.get(rank0, [])[skip:]

    return [
        Check(*c)
        for c in draft_checks.compare_drafts(
            opts, draft_checks.cycles(timed(split)) if split.ranks else [], draft_checks.cycles(timed(sharded))
        )
    ]


def build(opts: Options, results: list[RunResult]) -> Report:
    rep = Report(options={k: v for k, v in asdict(opts).items()})
    # The reference: the target alone, else stock EAGLE (its tokens are the target's own); never a run itself.
    ref = next(
        (r for layout in ("nospec", "sharded") for r in results if r.layout == layout and r.tokens is not None), None
    )
    measure_only = len(set(opts.layouts)) == 1  # a measurement run (--measure-cycles): nothing to judge tokens by
    sharded = next((r for r in results if r.layout == "sharded"), None)
    all_ok = len(results) == len(opts.layouts)
    for r in results:
        checks = rank_checks(opts, r) if r.hang is None and r.error is None else []
        if r.layout == "split" and r.hang is None and r.error is None and not opts.draft_swaps:
            # (with draft swaps the two runs swap at different rounds: their drafts differ in the same states)
            checks += draft_comparison(opts, r, sharded)
        div = (
            first_divergence(ref.tokens, r.tokens)
            if (ref is not None and ref.tokens is not None and r.tokens is not None and not measure_only)
            else None
        )
        if ref is None and not measure_only:
            checks.append(Check("tokens compared with a reference", False, "no nospec or sharded run finished"))
        ok = r.error is None and r.hang is None and r.tokens is not None and div is None and all(c.ok for c in checks)
        all_ok &= ok
        entry: dict[str, Any] = {
            "layout": r.layout,
            "title": LAYOUT_TITLES[r.layout],
            "ok": ok,
            "tokens_equal_reference": (r.tokens is not None and div is None) if not measure_only else None,
            "first_divergence": div,
            "error": r.error,
            "timings": r.timings,
            "acceptance": r.acceptance,
            "draft_ranks": r.draft_ranks,
            "puts": r.puts,
            "checks": [asdict(c) for c in checks],
            "cost_profile": r.cost_profile,
            "cost_mode": r.cost_mode,
            "served": r.served,
            "graphs": r.graphs,
            "memory_gb": {str(k): v for k, v in r.memory_gb.items()},
            "draft_swaps": r.draft_swaps,
            "draft_status": r.draft_status,
            "draft_metrics": r.draft_metrics,
            "repeat_tokens": r.repeat_tokens,
            "repeat_records": {str(k): v for k, v in r.repeat_records.items()},
            "warmup_records": {str(k): v for k, v in r.warmup_records.items()},
        }
        if r.hang is not None:
            entry["hang"] = {"ranks": {str(k): v for k, v in r.hang.items()}, "summary": describe(r.hang)}
        entry["tokens"] = r.tokens  # every run's, so a caller can compare them with a reference of its own
        rep.runs.append(entry)
    rep.ok = all_ok
    bad = [
        e["layout"] + "".join(f" [{c['name']}]" for c in e["checks"] if not c["ok"]) for e in rep.runs if not e["ok"]
    ]
    rep.summary = (
        ("PASS: measured " + ", ".join(e["layout"] for e in rep.runs) + " (one layout: tokens not compared)")
        if all_ok and measure_only
        else "PASS: identical greedy tokens across "
        + ", ".join(e["layout"] for e in rep.runs)
        + (
            "; the split draft's proposals and acceptance match the sharded draft's"
            if "split" in opts.layouts and not opts.draft_swaps
            else ""
        )
        if all_ok
        else "FAIL: " + ("; ".join(bad) if bad else "not every layout ran")
    )
    return rep


def to_text(rep: Report) -> str:
    o = rep.options
    lines = [
        f"specdecode-runtime selftest: {o['device']}, TP {o['tp']}, {o['algorithm']}, steps {o['steps']}, "
        f"topk {o['topk']}" + (f", live steps {list(o['live_steps'])}" if o["live_steps"] else "")
    ]
    for e in rep.runs:
        mark = "ok  " if e["ok"] else "FAIL"
        where = f" on ranks {e['draft_ranks']}" if e.get("draft_ranks") else ""
        lines.append(f"{mark} {e['layout']:8} {e['title']}{where}")
        if e.get("hang"):
            lines.append(f"       HUNG: {e['hang']['summary']}")
        if e.get("error"):
            lines.append(f"       error: {e['error']}")
        if e["first_divergence"]:
            lines.append(f"       tokens differ: {e['first_divergence']}")
        elif e["tokens_equal_reference"]:
            lines.append("       tokens equal the reference")
        t = e["timings"]
        if t:
            lines.append(
                f"       start {t.get('start_s')} s, generate {t.get('generate_s')} s, "
                f"{t.get('tokens')} tokens ({t.get('tokens_per_s')} tok/s)"
                + (f", phases {t['phases_s']}" if t.get("phases_s") else "")
            )
        acc = e.get("acceptance") or {}
        if acc.get("engine"):
            lines.append(
                f"       acceptance length {acc['engine']['accept_length']} (engine), accepted drafts "
                f"{acc['engine']['correct_drafts']} engine / {int(acc['exported']['accepted_drafts'])} "
                "exported"
            )
        note = " (CPU timings prove the plumbing, not GPU speed)" if o["device"] == "cpu" else ""
        for label, c in (e.get("cost_profile") or {}).items():
            lines.append(
                f"       cost profile {label}: verify {c['verify_base']:.3f} + {c['verify_per_token']:.4f}/token, "
                f"draft step {c['draft_base']:.3f}, extend {c['extend_base']:.3f} + "
                f"{c['extend_per_token']:.4f}/token, overhead {c['overhead']:.3f}, "
                f"broadcast {c['broadcast']:.3f} ms{note}"
            )
        if e.get("cost_mode"):
            lines.append(
                f"       cost probe launched its stages as {e['cost_mode']} "
                + ("(CUDA graph replays, CUDA events)" if e["cost_mode"] == "graph" else "(eager forwards)")
            )
        for tier, g in sorted((e.get("graphs") or {}).items()):
            lines.append(f"       tier {tier} graphs: captured in {g['capture_s']} s, {g['mem_gb']} GiB")
        for row in e.get("served") or []:
            pred = row.get("predicted_cycle_ms")
            lines.append(
                f"       served steps={row['steps']} batch={row['batch']}: cycle {row['served_cycle_ms']} ms, "
                f"{row['tokens_per_s']} tok/s, accept length {row['accept_length']}"
                + (f"; probe predicted {pred} ms ({row.get('probe_over_served')}x)" if pred else "")
                + (f"; switch {row['switch_latency_ms']} ms" if row.get("switch_latency_ms") else "")
            )
        for sw in e.get("draft_swaps") or []:
            body = sw.get("body") or {}
            lines.append(
                f"       draft swap to {sw['item']}: {sw.get('status')} "
                + (
                    body.get("error")
                    or (body.get("draft") or {}).get("digest")
                    or sw.get("note")
                    or sw.get("error")
                    or ""
                )
            )
        for p in e.get("puts") or []:
            lines.append(f"       PUT steps={p['steps']}: {p.get('status')} {p.get('error') or p.get('note') or ''}")
        for c in e["checks"]:
            lines.append(f"       {'ok  ' if c['ok'] else 'FAIL'} {c['name']}: {c['detail']}")
    lines.append(rep.summary)
    return "\n".join(lines)


def to_json(rep: Report) -> str:
    return json.dumps(asdict(rep), indent=2, default=str)
