"""What the reports of ``bench/gpu/campaigns/live_tune.py`` hold, read once for every report built on them (the
trained model's load, replay, paired and host reports): the run files of a raw folder, the pod's counters over one
point turned into decode figures, the start-up probe's profile, the greedy comparison, and the measured points of
a run as :mod:`points` lines.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import points as pts
import renderer

from specdecode_runtime.contract import cost_profile
from specdecode_runtime.contract.metric_names import (
    CYCLE_SECONDS,
    PHASES,
    POSITION_ACCEPTED,
    POSITION_ATTEMPTS,
    PREFILL_SECONDS,
    REQUESTS_VERIFIED,
    TOKENS_GENERATED,
    VERIFY_CYCLES,
    exposed_name,
)


def read_json(raw: Path, name: str) -> dict:
    """One raw report; a missing or unreadable one raises :class:`renderer.RawError` naming it."""
    path = raw / name
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise renderer.RawError(f"{path}: {exc}") from exc


def stock_runs(raw: Path) -> dict[int, dict]:
    """``stock_K.json`` by K: stock SGLang EAGLE-3 at K steps."""
    return {int(p.stem.split("_")[1]): read_json(raw, p.name) for p in sorted(raw.glob("stock_*.json"))}


def replay_runs(raw: Path) -> tuple[dict, list[dict], dict[int, dict]]:
    """``nospec.json``, the ``live_*.json`` (one per batch group) and the ``stock_K.json`` of a ``--replay`` run."""
    nospec = read_json(raw, "nospec.json")
    lives = [read_json(raw, p.name) for p in sorted(raw.glob("live_*.json"))]
    if not lives:
        raise renderer.RawError(f"{raw}: no live_*.json (live_tune.py --server live --replay N writes them)")
    return nospec, lives, stock_runs(raw)


def _split(key: str) -> tuple[str, dict[str, str]]:
    """``name{a=1,b=2}`` (live_tune.pod_samples' keys) -> (name, labels)."""
    name, _, rest = key.partition("{")
    labels = dict(part.split("=", 1) for part in rest.rstrip("}").split(",") if part)
    return name, labels


def pod_figures(counters: dict[str, float]) -> dict | None:
    """The decode-only side of one point from the pod's counter deltas over it (all buckets together)."""
    tot: dict[tuple[str, str], float] = defaultdict(float)
    for key, value in counters.items():
        name, labels = _split(key)
        tot[(name, labels.get("phase") or labels.get("position") or "")] += value
    cycles = tot[(exposed_name(VERIFY_CYCLES), "")]
    if cycles <= 0:
        return None
    phase_ms = {ph: 1000.0 * tot[(CYCLE_SECONDS + "_sum", ph)] / cycles for ph in PHASES}
    cycle_ms = sum(phase_ms.values())
    tokens = tot[(exposed_name(TOKENS_GENERATED), "")]
    seqs = tot[(exposed_name(REQUESTS_VERIFIED), "")]
    alphas = []
    for pos in range(1, 9):
        tries = tot[(exposed_name(POSITION_ATTEMPTS), str(pos))]
        if tries <= 0:
            break
        alphas.append(tot[(exposed_name(POSITION_ACCEPTED), str(pos))] / tries)
    return {
        "cycles": int(cycles),
        "mean_batch": round(seqs / cycles, 2),
        "tokens_per_seq_cycle": round(tokens / seqs, 3),
        "cycle_ms": round(cycle_ms, 3),
        "phase_ms": {k: round(v, 3) for k, v in phase_ms.items()},
        "decode_tokens_per_s": round(tokens / (cycle_ms * cycles / 1000.0), 1),
        "alphas": [round(a, 4) for a in alphas],
    }


LAUNCH = ("draft", "verify", "draft_extend")


def point_metrics(counters: dict) -> dict[str, float]:
    """The decode figures of a point's counter deltas under the point format's metric names (bench/points.py);
    empty when the counters carry no decode cycles."""
    fig = decode_figures(counters)
    if not fig:
        return {}
    return {
        "decode_tok_s": fig["decode_tokens_per_s"],
        "cycle_ms": fig["cycle_ms"],
        "accept_len": fig["tokens_per_seq_cycle"],
        "mean_batch": fig["mean_batch"],
        "cycles": fig["cycles"],
    }


def decode_figures(counters: dict[str, float]) -> dict:
    """``pod_figures`` plus the prefill work inside the cycles and the host launch time, per cycle."""
    fig = pod_figures(counters) or {}
    if fig:
        prefill = sum(v for k, v in counters.items() if k.startswith(exposed_name(PREFILL_SECONDS) + "{"))
        fig["prefill_ms_per_cycle"] = round(1000.0 * prefill / fig["cycles"], 3)
        fig["launch_ms"] = round(sum(fig["phase_ms"][p] for p in LAUNCH), 3)
    return fig


def tier0_extends(run: dict) -> bool:
    """Whether the pod of a live_tune.py report served SGLang's own tier 0 (a one-token verify plus the draft
    extend): every run recorded before tier 0 became plain decoding, whose reports carry no ``tier0`` field."""
    return run.get("tier0") != "plain"


def probe_profile(probe_costs: dict[str, float], extends_at_tier0: bool = True) -> dict:
    """The pod's start-up probe (``specdecode_cost_seconds`` samples) fitted per bucket, as the tuner fits it
    (``extends_at_tier0``: :func:`tier0_extends` of the run)."""
    samples = {}
    for key, sec in probe_costs.items():
        _, lab = _split(key)
        samples[(lab["stage"], int(lab["steps"]), lab["bucket"], int(lab["batch"]))] = sec
    return cost_profile.fit_profile(cost_profile.points_from_samples(samples), extends_at_tier0)


def steps_at(table: list, batch: float | None) -> int | None:
    """The steps a final table gives the batch the load actually ran at (its mean, rounded)."""
    if batch is None:
        return None
    b = max(1, round(batch))
    steps = None
    for lo, k in sorted(table):
        if b >= lo:
            steps = int(k)
    return steps


def pair_order(pairs: int) -> list[str]:
    """The side each of ``paired``'s measurements ran (A B, B A, A B, ...): its ``measurements`` are in this order."""
    return [side for i in range(pairs) for side in (("a", "b") if i % 2 == 0 else ("b", "a"))]


def greedy_vs_nospec(greedy: dict[str, list[list[int]]]) -> dict:
    """Every server's greedy outputs against ``greedy["nospec"]``: prompts identical and where each first differs."""
    return {
        name: {
            "prompts_identical": sum(a == c for a, c in zip(outs, greedy["nospec"])),
            "prompts": len(greedy["nospec"]),
            "first_difference": _first_difference(outs, greedy["nospec"]),
        }
        for name, outs in greedy.items()
        if name != "nospec"
    }


def _first_difference(outs: list[list[int]], ref: list[list[int]]) -> list[dict]:
    diffs = []
    for i, (a, c) in enumerate(zip(outs, ref)):
        if a != c:
            j = next((t for t in range(min(len(a), len(c))) if a[t] != c[t]), min(len(a), len(c)))
            diffs.append({"prompt": i, "token": j, "got": a[j : j + 3], "nospec": c[j : j + 3]})
    return diffs


def command_of(run: dict) -> str:
    """The ``live_tune.py`` command line a run recorded in its ``args``."""
    args = run.get("args") or {}
    flags = []
    for k, v in args.items():
        if v in ("", "False", "None") or k == "out":
            continue
        flags.append(f"--{k.replace('_', '-')}" + ("" if v == "True" else f" {v}"))
    return " ".join(["bench/gpu/campaigns/live_tune.py", *flags])


def run_points(run: dict, campaign: str, shape: str, prov: dict, source: str) -> list[pts.Point]:
    """The measured points of one ``live_tune.py`` report: no speculation or stock SGLang per batch; for the Live
    server every static step count, no speculation alongside, the tuner's table (round 0 its first measurement, then
    one round per paired measurement, as is the best static it was paired with) with the pod's decode figures."""
    server = run.get("server", "")
    cmd = command_of(run)
    out: list[pts.Point] = []

    def add(mode: str, steps: int | None, b: str, rnd: int, tps: float | None, counters: dict | None) -> None:
        if tps is None:
            return
        metrics = {"tok_s": tps, **point_metrics(counters or {})}
        out.append(
            pts.Point(
                campaign=campaign,
                device=prov["device"],
                shape=shape,
                tp=1,
                mode=mode,
                steps=steps,
                batch=int(b),
                round=rnd,
                metrics=metrics,
                commit=prov["commit"],
                date=prov["date"],
                command=cmd,
                source=source,
            )
        )

    for b, row in run.get("batches", {}).items():
        if server == "nospec":
            add("nospec", None, b, 0, row.get("tokens_per_s"), None)
        elif server.startswith("stock:"):
            add("stock", int(server.split(":", 1)[1]), b, 0, row.get("tokens_per_s"), None)
        elif server == "live":
            counters = row.get("pod_counters") or {}
            for k, tps in (row.get("static") or {}).items():
                add("tier0" if k == "0" else "static", int(k), b, 0, tps, counters.get(k))
            add("nospec", None, b, 0, row.get("nospec"), counters.get("nospec"))
            lv = row.get("live") or {}
            add("live", None, b, 0, lv.get("tokens_per_s_replay"), lv.get("pod_counters_replay"))
            pr = row.get("paired") or {}
            best = row.get("best_static") or {}
            baseline = row.get("baseline", f"static:{best.get('steps')}")
            for i, (side, m) in enumerate(zip(pair_order(len(pr.get("rounds", []))), pr.get("measurements", []))):
                if side == "a":
                    add("live", None, b, 1 + i // 2, m["tokens_per_s"], m["pod_counters"])
                elif baseline == "nospec":
                    add("nospec", None, b, 1 + i // 2, m["tokens_per_s"], m["pod_counters"])
                else:
                    steps = int(best["steps"])
                    add("tier0" if steps == 0 else "static", steps, b, 1 + i // 2, m["tokens_per_s"], m["pod_counters"])
    return out


def folder_points(raw: Path, campaign: str, shape: str, meta: str = "meta.json") -> list[pts.Point]:
    """Every ``live_tune.py`` report of a raw folder (a JSON object with ``server`` and ``batches``) as points."""
    prov = renderer.provenance(raw / meta)
    out: list[pts.Point] = []
    for p in sorted(raw.glob("*.json")):
        run = read_json(raw, p.name)
        if isinstance(run, dict) and "server" in run and "batches" in run:
            out += run_points(run, campaign, shape, prov, str(p.relative_to(renderer.ROOT)))
    return out
