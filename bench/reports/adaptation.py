"""The adaptation campaign's report (issue 40 part 4): ``bench/results/gpu_<device>_adaptation.{json,md}`` from the
raw folder ``bench/gpu/campaigns/adaptation.sh`` writes (``adaptation_run.json``, the training reports, and the run's
``meta.json``: commit, device, date, commands, without which nothing is written).

The issue's keys, each computed here from the raw measurements (never copied from a figure the driver computed):

* ``gap_recovered``: (promoted - stale) / (offline B - stale), accept lengths of the promoted head, the stale head A
  and the offline reference head B on the same held-out workload-B set at batch 1, each pooled over the rounds from
  the pod's own counters (1 + accepted draft tokens / request-verifies);
* ``minutes_to_promotion``: from the shift of the traffic to the first operator tick that recorded the promotion;
* ``speedup_over_stale_b1``: the median over the rounds of the promoted head's tok/s over the stale head's (the two
  measured in the same round, on the same requests);
* ``failed_requests``: the load's failed requests over the whole loop plus those of the measurements;
* ``broken_candidate_refused``: the broken attempt's gate exited 3, the operator recorded Refused, never Canary, and
  the pod never served it.

``python bench/renderer.py report gpu_adaptation --raw DIR [--out bench/results] [--name NAME]`` renders it; NAME
defaults to gpu_<h100|h200|...>_adaptation from meta.json's device.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path
from typing import Any

import renderer

INTERVAL_SECONDS = 600  # training.intervalSeconds's minimum (the CRD): what a cluster waits at most per attempt
MAX_RAW_BYTES = 16 << 20
GOALS = {  # key: (what the issue asks, test)
    "gap_recovered": (">= 0.80", lambda v: v is not None and v >= 0.80),
    "minutes_to_promotion": ("<= 20", lambda v: v is not None and v <= 20.0),
    "speedup_over_stale_b1": (">= 1.2", lambda v: v is not None and v >= 1.2),
    "failed_requests": ("== 0", lambda v: v == 0),
    "broken_candidate_refused": ("true", lambda v: v is True),
    "greedy_identical": ("true (float32)", lambda v: v is True),
    "server_restarts": ("== 0", lambda v: v == 0),
}
TITLE = "A draft that learns from its traffic: serve workload A, shift to B, adapt in place"


def _load(path: Path) -> Any:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (bench/gpu/campaigns/adaptation.sh writes it)")
    if path.stat().st_size > MAX_RAW_BYTES:
        raise ValueError(f"{path}: larger than {MAX_RAW_BYTES} bytes")
    return json.loads(path.read_text())


def _optional(path: Path) -> Any:
    try:
        return _load(path)
    except (FileNotFoundError, ValueError):
        return None


def pooled_accept_length(rounds: list[dict], side: str) -> float | None:
    """1 + accepted / verified over every round of ``side`` (the pod's counters: tokens per request-verify)."""
    acc = sum(r[side]["accepted"] for r in rounds if side in r)
    ver = sum(r[side]["verified"] for r in rounds if side in r)
    return round(1.0 + acc / ver, 4) if ver > 0 else None


def gap_recovered(stale: float | None, offline: float | None, promoted: float | None) -> float | None:
    """The share of the stale head's accept-length gap to the offline head B that the promoted head closed; None when
    there is no gap to close (head B no better than head A on B) or a figure is missing."""
    if stale is None or offline is None or promoted is None or offline <= stale:
        return None
    return round((promoted - stale) / (offline - stale), 4)


def speedup(rounds: list[dict]) -> tuple[float | None, list[float]]:
    ratios = [
        round(r["promoted"]["tokens_per_s"] / r["stale"]["tokens_per_s"], 4)
        for r in rounds
        if "promoted" in r and "stale" in r and r["stale"].get("tokens_per_s") and r["promoted"].get("tokens_per_s")
    ]
    return (round(statistics.median(ratios), 4) if ratios else None), ratios


def promotion_time(run: dict) -> float | None:
    """Seconds (the run's clock) of the first operator tick that recorded attempt 1 as Promoted."""
    for t in (run.get("operator") or {}).get("ticks") or []:
        if t.get("attempt") == 1 and t.get("adaptation_phase") == "Promoted":
            return float(t["t"])
    return None


def broken_refused(run: dict) -> tuple[bool, list[str]]:
    """Whether the broken candidate was refused at the gate, and what says otherwise."""
    why = []
    broken = [x for x in run.get("attempts") or [] if x.get("broken")]
    if not broken:
        return False, ["no broken candidate was planted"]
    att = broken[0]
    n = att["attempt"]
    if att.get("gate_exit") != 3:
        why.append(f"the gate exited {att.get('gate_exit')}, not 3 (not better)")
    if run.get(f"outcome_{n}") != "Refused":
        why.append(f"the operator recorded {run.get(f'outcome_{n}')}, not Refused")
    ticks = [t for t in (run.get("operator") or {}).get("ticks") or [] if t.get("attempt") == n]
    if any(t.get("adaptation_phase") == "Canary" for t in ticks):
        why.append("it went to the canary")
    out_dir = next((a for a in _after(att.get("rendered_train") or [], "--out")), None)
    name = Path(out_dir).name if out_dir else None
    if name and any((t.get("served") or "").rstrip("/").endswith("/" + name) for t in ticks):
        why.append("the pod served it")
    return not why, why


def _after(cmd: list[str], flag: str) -> list[str]:
    return [cmd[i + 1] for i, x in enumerate(cmd[:-1]) if x == flag]


def failed_requests(run: dict) -> dict:
    traffic = (run.get("traffic") or {}).get("failed", 0)
    measure = sum(r[s]["failed"] for r in (run.get("measure") or {}).get("rounds") or [] for s in r if s != "order")
    ident = (run.get("identity") or {}).get("failed", 0)
    return {"total": traffic + measure + ident, "load": traffic, "measurements": measure, "identity": ident}


def summarize(raw_dir: Path) -> dict:
    prov = renderer.provenance(raw_dir / "meta.json")
    run = _load(raw_dir / "adaptation_run.json")
    rounds = (run.get("measure") or {}).get("rounds") or []
    accept = {s: pooled_accept_length(rounds, s) for s in ("stale", "offline_b", "promoted")}
    gap = gap_recovered(accept["stale"], accept["offline_b"], accept["promoted"])
    med, ratios = speedup(rounds)
    t_promoted = promotion_time(run)
    t_shift = run.get("t_shift")
    minutes = round((t_promoted - t_shift) / 60.0, 3) if t_promoted is not None and t_shift is not None else None
    capture_s = float((run.get("config") or {}).get("capture_seconds") or 0.0)
    bound = round(minutes + (INTERVAL_SECONDS - capture_s) / 60.0, 3) if minutes is not None else None
    failed = failed_requests(run)
    refused, refused_why = broken_refused(run)
    ident = run.get("identity") or {}
    server = run.get("server") or {}
    keys = {
        "gap_recovered": gap,
        "minutes_to_promotion": minutes,
        "speedup_over_stale_b1": med,
        "failed_requests": failed["total"],
        "broken_candidate_refused": refused,
        "greedy_identical": ident.get("identical") if ident else None,
        "server_restarts": server.get("restarts"),
    }
    goals = []
    for key, (goal, ok) in GOALS.items():
        goals.append({"key": key, "goal": goal, "value": keys[key], "met": bool(ok(keys[key]))})
    attempts = []
    for att in run.get("attempts") or []:
        attempts.append(
            {
                "attempt": att.get("attempt"),
                "broken": att.get("broken"),
                "train_exit": att.get("train_exit"),
                "train_s": att.get("train_s"),
                "gate_exit": att.get("gate_exit"),
                "gate_s": att.get("gate_s"),
                "outcome": run.get(f"outcome_{att.get('attempt')}"),
                "gate_ratio": ((att.get("score") or {}).get("ratio")),
                "gate_accept_length": {
                    "serving": ((att.get("score") or {}).get("serving") or {}).get("accept_length"),
                    "candidate": ((att.get("score") or {}).get("candidate") or {}).get("accept_length"),
                },
                "rendered_train": att.get("rendered_train"),
                "rendered_gate": att.get("rendered_gate"),
                "train_ran": att.get("train_ran"),
            }
        )
    reports = {
        name: _optional(raw_dir / f"{name}.json")
        for name in ("corpus_a", "corpus_b", "corpus_mix", "target_report", "head_a_report", "head_b_report")
    }
    return {
        **keys,
        "goals": goals,
        "all_goals_met": all(g["met"] for g in goals),
        "minutes_to_promotion_full_interval": bound,
        "accept_length_b": accept,
        "speedup_rounds": ratios,
        "tokens_per_s_b1": {
            s: [r[s]["tokens_per_s"] for r in rounds if s in r] for s in ("stale", "promoted", "offline_b")
        },
        "broken_refusal_problems": refused_why,
        "failed_requests_by_part": failed,
        "identity": {k: ident.get(k) for k in ("prompts", "tokens", "steps", "dtype", "first_divergence")},
        "timeline_s": {
            "shift": t_shift,
            "attempt_1_due": run.get("t_attempt_1_due"),
            "promoted": t_promoted,
            "attempt_2_due": run.get("t_attempt_2_due"),
            "attempt_2_outcome": run.get("t_outcome_2"),
        },
        "traffic": {k: (run.get("traffic") or {}).get(k) for k in ("clients", "requests", "completed", "failed")},
        "capture_at_attempt": run.get("capture_at_attempt"),
        "attempts": attempts,
        "operator_errors": (run.get("operator") or {}).get("errors") or [],
        "how": run.get("how"),
        "config": {
            k: (run.get("config") or {}).get(k)
            for k in (
                "device",
                "dtype",
                "steps",
                "clients",
                "a_seconds",
                "capture_seconds",
                "prompt_chars",
                "new_tokens",
                "candidate_minutes",
                "measure_prompts",
                "measure_tokens",
                "rounds",
                "min_ratio",
                "canary_min_ratio",
                "tick_seconds",
            )
        },
        "workloads": {
            "a": _corpus_line(reports["corpus_a"]),
            "b": _corpus_line(reports["corpus_b"]),
        },
        "training": {
            "target_minutes": (reports["target_report"] or {}).get("budget_minutes"),
            "target_heldout_loss": (reports["target_report"] or {}).get("heldout_loss"),
            "target_params": (reports["target_report"] or {}).get("params"),
            "head_a_minutes": (reports["head_a_report"] or {}).get("budget_minutes"),
            "head_b_minutes": (reports["head_b_report"] or {}).get("budget_minutes"),
        },
        "server": {k: server.get(k) for k in ("ready_s", "restarts", "alive_at_end")},
        "wall_s": run.get("wall_s"),
        "provenance": prov,
    }


def _corpus_line(report: dict | None) -> str | None:
    if not report:
        return None
    roots = ", ".join(report.get("roots") or [])
    suffixes = " ".join(report.get("suffixes") or [".py"])
    return f"{suffixes} files under {roots}: {report.get('train_bytes')} bytes of training text"


def _fmt(v: Any) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    return f"{v:g}" if isinstance(v, float) else str(v)


def markdown(s: dict) -> str:
    c = s["config"]
    lines = [f"# {TITLE}", ""]
    lines += [
        f"{s['provenance']['device']}. The target knows two workloads (A: {s['workloads']['a'] or 'n/a'}; B: "
        f"{s['workloads']['b'] or 'n/a'}); one pod of the patched runtime ({c['dtype']}, {c['steps']} steps) serves "
        f"it with head A while {c['clients']} clients send greedy requests, first from A, then (the shift) from B. "
        "The operator's own adaptation loop and canary capture, train, gate, canary and promote a head for B in "
        "place; then a deliberately broken candidate goes to the gate.",
        "",
        "How the cluster was stood in for: " + "; ".join(f"{k}: {v}" for k, v in (s.get("how") or {}).items()) + ".",
        "",
        "## The issue's goals",
        "",
    ]
    lines += renderer.table(
        ["key", "goal", "measured", "met"],
        [[g["key"], g["goal"], _fmt(g["value"]), "yes" if g["met"] else "**no**"] for g in s["goals"]],
    )
    lines += [
        "",
        f"All goals met: {'yes' if s['all_goals_met'] else '**no**'}. With a whole `intervalSeconds` of the CRD's "
        f"minimum ({INTERVAL_SECONDS} s) between the shift and the attempt, instead of the {c['capture_seconds']} s of "
        f"capture this run waited, the promotion would come {_fmt(s['minutes_to_promotion_full_interval'])} minutes "
        "after the shift.",
        "",
        "## Accept length on held-out workload-B prompts (batch 1)",
        "",
    ]
    acc = s["accept_length_b"]
    tps = s["tokens_per_s_b1"]
    lines += renderer.table(
        ["head", "accept length (tokens per verify)", "tok/s per round"],
        [
            ["stale head A", _fmt(acc["stale"]), ", ".join(_fmt(x) for x in tps["stale"])],
            [
                "promoted (adapted from A on captured B traffic)",
                _fmt(acc["promoted"]),
                ", ".join(_fmt(x) for x in tps["promoted"]),
            ],
            ["offline head B (reference)", _fmt(acc["offline_b"]), ", ".join(_fmt(x) for x in tps["offline_b"])],
        ],
    )
    lines += [
        "",
        f"{c['measure_prompts']} prompts x {c['measure_tokens']} tokens, {c['rounds']} rounds in rotating order, each "
        "head loaded in place on the same pod. Promoted over stale tok/s per round: "
        f"{', '.join(_fmt(x) for x in s['speedup_rounds']) or 'n/a'} (median {_fmt(s['speedup_over_stale_b1'])}).",
        "",
        "## The loop",
        "",
    ]
    tl = s["timeline_s"]
    lines += [
        f"- shift at {_fmt(tl['shift'])} s (the run's clock starts when the pod is healthy); attempt 1 due at "
        f"{_fmt(tl['attempt_1_due'])} s with {_fmt((s['capture_at_attempt'] or {}).get('records'))} captured records; "
        f"promoted at {_fmt(tl['promoted'])} s; the broken attempt due at {_fmt(tl['attempt_2_due'])} s, decided at "
        f"{_fmt(tl['attempt_2_outcome'])} s.",
        f"- traffic: {_fmt(s['traffic']['requests'])} requests, {_fmt(s['traffic']['failed'])} failed; failed requests "
        f"by part: {s['failed_requests_by_part']}.",
        f"- the pod: healthy after {_fmt(s['server']['ready_s'])} s, restarts {_fmt(s['server']['restarts'])}, alive "
        f"at the end: {_fmt(s['server']['alive_at_end'])}.",
    ]
    if s["broken_refusal_problems"]:
        lines.append(f"- the broken candidate: {'; '.join(s['broken_refusal_problems'])}.")
    if s["operator_errors"]:
        lines.append(f"- operator ticks that failed: {s['operator_errors'][:3]}.")
    lines += [""]
    lines += renderer.table(
        ["attempt", "candidate", "train", "gate (ratio; serving -> candidate accept length)", "outcome"],
        [
            [
                a["attempt"],
                "broken (noisy copy of the serving head)" if a["broken"] else "trained from the serving head",
                f"exit {_fmt(a['train_exit'])} in {_fmt(a['train_s'])} s",
                f"exit {_fmt(a['gate_exit'])} in {_fmt(a['gate_s'])} s ({_fmt(a['gate_ratio'])}; "
                f"{_fmt(a['gate_accept_length']['serving'])} -> {_fmt(a['gate_accept_length']['candidate'])})",
                _fmt(a["outcome"]),
            ]
            for a in s["attempts"]
        ],
    )
    lines += ["", "Rendered Job commands (run as local processes, the claim's mount path mapped to the local one):", ""]
    for a in s["attempts"]:
        lines.append(f"- attempt {a['attempt']} train: `{' '.join(a['rendered_train'] or [])}`")
        lines.append(f"- attempt {a['attempt']} gate: `{' '.join(a['rendered_gate'] or [])}`")
    t = s["training"]
    lines += [
        "",
        f"Training before the run: target {_fmt(t['target_params'])} parameters, {_fmt(t['target_minutes'])} min "
        f"(held-out loss {_fmt(t['target_heldout_loss'])}); head A {_fmt(t['head_a_minutes'])} min, head B "
        f"{_fmt(t['head_b_minutes'])} min. Greedy identity: {_fmt(s['identity'].get('prompts'))} prompts x "
        f"{_fmt(s['identity'].get('tokens'))} tokens, promoted head at {_fmt(s['identity'].get('steps'))} steps vs the "
        f"pod at steps 0, {_fmt(s['identity'].get('dtype'))}; first divergence: "
        f"{_fmt(s['identity'].get('first_divergence'))}. Run wall time {_fmt(s['wall_s'])} s.",
        "",
    ]
    return "\n".join(lines) + "\n" + renderer.provenance_md(s["provenance"])


def default_name(s: dict) -> str:
    """The results' name for a run on another device (``renderer.py report`` without ``--name``)."""
    device = s["provenance"]["device"]
    m = re.search(r"\b([HABL]\d{2,4}[A-Za-z]*)\b", device)
    return f"gpu_{m.group(1).lower()}_adaptation" if m else "cpu_adaptation"
