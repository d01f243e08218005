"""``specdecode bench tuner``: our tuner against no speculation, every static k, the per-phase oracle and SGLang's
own adaptive controller (its default candidate list, and candidates 0..7), all in the in-process simulator (every
number it prints is simulated).

Each policy runs the same scenario with the same seed (common random numbers), so ratios compare controllers, not
luck. Ours is driven the way the operator drives it: the metrics text is scraped every ``intervalSeconds`` of
simulated time, parsed, fed to ``Tuner.step`` and the resulting table pushed; SGLang's controller is fed per batch.

What ours is given is what a cluster gives it (``--profile measured``, the default): the simulated pod's metrics,
including its start-up cost probe, which carries a per-stage systematic error drawn per pod (``--probe-bias``) and
per-sample noise (simulate/probe.py). ``--profile exact`` hands it the scenario's true cost block instead: an upper
bound no cluster can reach, labelled so; ``--profile none`` serves no probe (per-cycle phase averages only).
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import tempfile
import time
from typing import Sequence

from specdecode_runtime.config import candidate_steps
from specdecode_runtime.goodput import expected_tokens
from specdecode_runtime.scenario import Scenario, ScenarioError, load_scenario
from specdecode_runtime.simulate.engine import SimEngine
from specdecode_runtime.simulate.probe import DEFAULT_BIAS, DEFAULT_NOISE

from ..api.models import Autotune
from .policy import PolicyConfig
from .scrape import parse_metrics
from .sglang_baseline import SglangAdaptive, SglangUnavailable, import_sglang
from .tuner import Tuner, TunerConfig

RATIOS = ("ours_over_oracle", "ours_over_best_static", "ours_over_sglang_adaptive", "ours_over_sglang_0to7")
DEFAULT_INTERVAL = float(Autotune.model_fields["intervalSeconds"].default)  # the CRD's default
PROFILES = ("measured", "exact", "none")


def _finish(engine: SimEngine, duration: float, step: float | None = None) -> float:
    if step is None:
        engine.advance(max(duration - engine.now, 0.0))
    return engine.tokens_total / engine.now


def run_static(sc: Scenario, k: int, seed: int | None) -> float:
    eng = SimEngine(sc, seed=seed)
    eng.set_step_table([(1, k)])
    return _finish(eng, sc.duration)


def bucket_mix(phase, lo: int, hi: int | None) -> list[tuple[int, float]]:
    sizes, probs = phase.batch_distribution()
    return [(b, p) for b, p in zip(sizes, probs) if b >= lo and (hi is None or b <= hi)]


def oracle_table(sc: Scenario, phase, ks: Sequence[int]) -> list[tuple[int, int]]:
    """The best table for one phase from the scenario's true acceptance and costs.

    The simulator draws a batch size per cycle, so the phase's throughput is sum(p_b tokens_b) / sum(p_b time_b)
    over all batch sizes: buckets are coupled through the shared denominator. Dinkelbach's iteration maximises that
    ratio exactly: with R the current ratio, each bucket independently takes the k maximising
    sum(p_b (tokens_b(k) - R time_b(k))); repeat until R stops rising."""
    cost = sc.cycle_cost()
    bounds = sc.buckets
    groups = []
    for i, lo in enumerate(bounds):
        hi = bounds[i + 1] - 1 if i + 1 < len(bounds) else None
        groups.append((lo, bucket_mix(phase, lo, hi)))

    def tok_time(k: int, mix) -> tuple[float, float]:
        toks = sum(p * b * (expected_tokens(phase.acceptance, k) if k else 1.0) for b, p in mix)
        return toks, sum(p * cost.cycle_ms(k, b) for b, p in mix)

    choice = {lo: 0 for lo, _ in groups}
    ratio = -1.0
    for _ in range(50):
        tt = [tok_time(choice[lo], mix) for lo, mix in groups if mix]
        new_ratio = sum(t for t, _ in tt) / sum(d for _, d in tt)
        if new_ratio <= ratio * (1 + 1e-12):
            break
        ratio = new_ratio
        for lo, mix in groups:
            if mix:
                choice[lo] = max(ks, key=lambda k: (lambda t, d: (t - ratio * d, -k))(*tok_time(k, mix)))
    return [(lo, choice[lo]) for lo, _ in groups]


def run_oracle(sc: Scenario, ks: Sequence[int], seed: int | None) -> float:
    eng = SimEngine(sc, seed=seed)
    end = 0.0
    for phase in sc.phases:
        end += phase.seconds
        eng.set_step_table(oracle_table(sc, phase, ks))
        eng.advance(max(end - eng.now, 0.0))
    return eng.tokens_total / eng.now


def open_candidates_config(max_steps: int) -> dict:
    """SGLang's shipped adaptive config with every batch slot's candidates opened to 0..max_steps (its default
    offers odd k only at batch 1 and no speculation at batch >= 64); thresholds unchanged."""
    from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG

    return {bs: {**entry, "candidate_steps": list(range(0, max_steps + 1))} for bs, entry in DEFAULT_ADAPTIVE_CONFIG.items()}


def run_sglang(sc: Scenario, seed: int | None, initial_steps: int, cfg: dict | None = None) -> tuple[float, int]:
    """SGLang's controller with its default config, or with ``cfg`` (written to the JSON file it reads)."""
    eng = SimEngine(sc, seed=seed)
    max_bs = max(max(p.batch_distribution()[0]) for p in sc.phases)
    path = None
    try:
        if cfg is not None:
            fd, path = tempfile.mkstemp(suffix=".json", prefix="sglang-adaptive-")
            with os.fdopen(fd, "w") as f:
                json.dump(cfg, f)
        ctl = SglangAdaptive(eng, initial_steps=initial_steps, max_bs=max(max_bs, 8), cfg_path=path)
        return _finish(eng, sc.duration), ctl.changes
    finally:
        if path:
            os.unlink(path)


def rendered_candidates(min_steps: int, max_steps: int, initial: int) -> list[int]:
    """What the runtime captures by default: k = 0 plus config.candidate_steps (at most 4 values in bounds)."""
    return [0, *candidate_steps(min_steps, max_steps, initial)]


def our_config(sc: Scenario, mode: str, interval: float, min_steps: int, max_steps: int, initial: int,
               caps: list[int] | None = None) -> TunerConfig:
    caps = caps if caps is not None else rendered_candidates(min_steps, max_steps, initial)
    return TunerConfig(
        mode=mode,
        policy=PolicyConfig(min_steps=min_steps, max_steps=max_steps, candidates=tuple(caps),
                            cooldown_s=2 * interval, explore_every_s=max(12 * interval, 120.0)),
        buckets=tuple(sc.buckets),
        initial_steps=initial,
        restart_s=sc.restart_seconds,
    )


def run_ours(sc: Scenario, seed: int | None, mode: str, interval: float, min_steps: int, max_steps: int,
             initial: int, caps: list[int] | None = None, profile: str = "measured", probe_bias: float = DEFAULT_BIAS,
             probe_noise: float = DEFAULT_NOISE) -> tuple[float, Tuner]:
    """The operator loop on simulated time: scrape every interval, decide, push (Live) or re-render and restart
    (Rollout). The tuner learns costs and acceptance from the pod's metrics only (``profile`` measured / none);
    ``exact`` gives it the scenario's cost block as an override (the labelled upper bound)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    cfg = our_config(sc, mode, interval, min_steps, max_steps, initial, caps)
    eng = SimEngine(sc, seed=seed, probe_bias=probe_bias if profile == "measured" else None, probe_noise=probe_noise)
    eng.set_candidates(cfg.policy.candidates)
    eng.set_step_table([(1, initial)])
    tuner = Tuner(cfg, profile=sc.cycle_cost() if profile == "exact" else None)
    def scrape():
        return [parse_metrics(eng.metrics_text(), "sim-0", eng.now, costs=tuner.wants_costs("sim-0"))]

    tuner.step(eng.now, scrape())
    while eng.now < sc.duration:
        eng.advance(min(interval, sc.duration - eng.now))
        d = tuner.step(eng.now, scrape())
        if mode == "Rollout" and d.restart:
            eng.set_step_table(d.table)
            eng.restart(sc.restart_seconds)
        elif mode == "Live" and d.changed:
            eng.set_step_table(d.table)
    return eng.tokens_total / eng.now, tuner


def bench_scenario(sc: Scenario, args) -> dict:
    ks = list(range(0, args.max_steps + 1))
    static = {k: run_static(sc, k, args.seed) for k in range(1, args.max_steps + 1)}
    none = run_static(sc, 0, args.seed)
    best_k = max(static, key=static.get)
    best_static = max(static[best_k], none)
    oracle = run_oracle(sc, ks, args.seed)
    sglang, sglang_changes = run_sglang(sc, args.seed, args.initial_steps)
    sglang07, _ = run_sglang(sc, args.seed, args.initial_steps, open_candidates_config(args.max_steps))
    known = dict(profile=args.profile, probe_bias=args.probe_bias, probe_noise=args.probe_noise)
    ours, tuner = run_ours(sc, args.seed, "Live", args.interval, args.min_steps, args.max_steps, args.initial_steps,
                           args.candidates, **known)
    rollout, rtuner = (None, None) if args.no_rollout else run_ours(
        sc, args.seed, "Rollout", args.interval, args.min_steps, args.max_steps, args.initial_steps, args.candidates,
        **known)
    return {
        "name": sc.name,
        "simulated": True,
        "duration_s": sc.duration,
        "tokens_per_s": {
            "none": none,
            "static": {str(k): v for k, v in static.items()},
            "best_static": best_static,
            "best_static_k": best_k if static[best_k] >= none else 0,
            "oracle": oracle,
            "sglang_adaptive": sglang,
            "sglang_adaptive_0to7": sglang07,
            "ours": ours,
            "ours_rollout": rollout,
        },
        "ratios": {
            "ours_over_oracle": ours / oracle,
            "ours_over_best_static": ours / best_static,
            "ours_over_sglang_adaptive": ours / sglang,
            "ours_over_sglang_0to7": ours / sglang07,
        },
        "changes": tuner.changes,
        "restarts": rtuner.restarts if rtuner else None,
        "rollout_changes": rtuner.changes if rtuner else None,
        "cost_sources": sorted({rep.cost_source for rep in tuner.last_reports.values()}) if tuner.last_reports else [],
        "sglang_changes": sglang_changes,
        "our_candidates": list(tuner.config.policy.candidates),
    }


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--scenarios", nargs="+", required=True, metavar="FILE",
                   help="scenario YAML files (globs are expanded), e.g. bench/scenarios/*.yaml")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument("--interval", type=float, default=DEFAULT_INTERVAL,
                   help="our tuner's intervalSeconds in simulated seconds (CRD allows 5..3600; default: the CRD's "
                   f"default, {DEFAULT_INTERVAL:g})")
    p.add_argument("--profile", choices=PROFILES, default="measured",
                   help="what our tuner knows about costs: measured = the pod's start-up probe with its error, refined "
                   "online (what a cluster gives; default); exact = the scenario's true costs (upper bound, not "
                   "reachable in a cluster); none = no probe")
    p.add_argument("--probe-bias", type=float, default=DEFAULT_BIAS,
                   help=f"systematic error per probe stage, drawn per pod in 1 +- this (default {DEFAULT_BIAS})")
    p.add_argument("--probe-noise", type=float, default=DEFAULT_NOISE,
                   help=f"relative noise per probe sample (default {DEFAULT_NOISE})")
    p.add_argument("--no-rollout", action="store_true", help="skip the Rollout-mode run (faster)")
    p.add_argument("--min-steps", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=7, help="largest static k and oracle k (default 7)")
    p.add_argument("--initial-steps", type=int, default=3, help="starting numSteps for ours and SGLang (default 3)")
    p.add_argument("--seed", type=int, default=None, help="override every scenario's seed")
    p.add_argument("--candidates", type=_candidates, default=None, metavar="K,K,...|all",
                   help="step counts the runtime has captured for our tuner (default: 0 plus "
                   "config.candidate_steps(min, max, initial), at most 4 values in bounds, as rendered); "
                   "'all' = 0..max-steps")


def _candidates(text: str) -> list[int] | str:
    if text == "all":
        return "all"
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers or 'all', got {text!r}") from None
    if not ks or any(k < 0 or k > 16 for k in ks):
        raise argparse.ArgumentTypeError(f"candidates must be integers within 0..16, got {text!r}")
    return ks


def add_parser(subparsers) -> argparse.ArgumentParser:
    """Register ``tuner`` under the ``specdecode bench`` sub-command group."""
    p = subparsers.add_parser("tuner", help="benchmark the step tuner against static k, the oracle and SGLang "
                              "adaptive (simulated)")
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _usage_error(msg: str) -> int:
    print(f"specdecode bench tuner: error: {msg}", file=sys.stderr)
    return 2


def run(args) -> int:
    if not (0 <= args.min_steps <= args.max_steps <= 16):
        return _usage_error(f"--min-steps/--max-steps must satisfy 0 <= min <= max <= 16, got {args.min_steps}..{args.max_steps}")
    if not (args.min_steps <= args.initial_steps <= args.max_steps):
        return _usage_error(f"--initial-steps must be within {args.min_steps}..{args.max_steps}, got {args.initial_steps}")
    if not (5 <= args.interval <= 3600):
        return _usage_error(f"--interval must be within 5..3600 seconds (autotune.intervalSeconds), got {args.interval:g}")
    if not (0 <= args.probe_bias < 1):
        return _usage_error(f"--probe-bias must be within 0..1 (relative), got {args.probe_bias:g}")
    if args.probe_noise < 0:
        return _usage_error(f"--probe-noise must be >= 0, got {args.probe_noise:g}")
    if args.candidates == "all":
        args.candidates = list(range(0, args.max_steps + 1))
    try:
        import_sglang()
    except SglangUnavailable as exc:
        print(f"specdecode bench tuner: {exc}", file=sys.stderr)
        return 3
    paths: list[str] = []
    for pattern in args.scenarios:
        matched = sorted(glob.glob(pattern))
        paths.extend(matched or [pattern])
    scenarios = []
    for path in paths:
        try:
            scenarios.append(load_scenario(path))
        except ScenarioError as exc:
            return _usage_error(str(exc))
    results = []
    t0 = time.time()
    for sc in scenarios:
        results.append(bench_scenario(sc, args))
        if not args.json:
            print(f"  ran {sc.name} ({time.time() - t0:.1f}s so far)", file=sys.stderr)
    out = {
        "simulated": True,
        "note": "all tokens/s are simulated (in-process simulator, scenario cost model); not measurements",
        "settings": {"interval_s": args.interval, "candidates": args.candidates or "rendered",
                     "min_steps": args.min_steps, "max_steps": args.max_steps, "initial_steps": args.initial_steps,
                     "seed": args.seed, "profile": args.profile,
                     "probe_bias": args.probe_bias if args.profile == "measured" else None,
                     "probe_noise": args.probe_noise if args.profile == "measured" else None},
        "scenarios": results,
        "geomean": {r: geomean([s["ratios"][r] for s in results]) for r in RATIOS},
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print(format_table(out))
    return 0


def format_table(out: dict) -> str:
    st = out["settings"]
    known = (f"the pod's start-up probe (bias +-{st['probe_bias']:g} per stage, noise {st['probe_noise']:g}), refined "
             "online" if st["profile"] == "measured" else "the scenario's TRUE costs (upper bound, not reachable in a "
             "cluster)" if st["profile"] == "exact" else "no cost probe (phase averages)")
    lines = [
        "Simulated tokens/s (in-process simulator; not measurements), interval "
        f"{st['interval_s']:g}s, our captured candidates {st['candidates']}, our cost knowledge: {known}",
        f"{'scenario':<24} {'none':>7} {'best k':>6} {'best st':>7} {'oracle':>7} {'sglang':>7} {'sgl0-7':>7} "
        f"{'ours':>7} {'rollout':>7} {'o/orc':>6} {'o/bst':>6} {'o/sgl':>6} {'o/s07':>6} {'chg':>4} {'rst':>4}",
    ]
    for s in out["scenarios"]:
        t, r = s["tokens_per_s"], s["ratios"]
        rollout = f"{t['ours_rollout']:7.1f}" if t["ours_rollout"] is not None else f"{'-':>7}"
        lines.append(
            f"{s['name'][:24]:<24} {t['none']:7.1f} {t['best_static_k']:>6} {t['best_static']:7.1f} {t['oracle']:7.1f} "
            f"{t['sglang_adaptive']:7.1f} {t['sglang_adaptive_0to7']:7.1f} {t['ours']:7.1f} {rollout} "
            f"{r['ours_over_oracle']:6.3f} {r['ours_over_best_static']:6.3f} {r['ours_over_sglang_adaptive']:6.3f} "
            f"{r['ours_over_sglang_0to7']:6.3f} {s['changes']:>4} {s['restarts'] if s['restarts'] is not None else '-':>4}"
        )
    g = out["geomean"]
    lines.append(f"{'geometric mean':<24} {'':>7} {'':>6} {'':>7} {'':>7} {'':>7} {'':>7} {'':>7} {'':>7} "
                 f"{g['ours_over_oracle']:6.3f} {g['ours_over_best_static']:6.3f} {g['ours_over_sglang_adaptive']:6.3f} "
                 f"{g['ours_over_sglang_0to7']:6.3f}")
    lines.append("o/orc = ours/oracle, o/bst = ours/best static, o/sgl = ours/SGLang adaptive (0.5.23 AdaptiveController, "
                 "default candidates), o/s07 = ours/the same controller with candidates 0..7; chg = our Live changes, "
                 "rst = restarts in Rollout mode")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="specdecode bench tuner", description=__doc__.splitlines()[0])
    add_arguments(p)
    args = p.parse_args(argv)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
