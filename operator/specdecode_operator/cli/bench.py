"""``specdecode bench tuner``: the step tuner against no speculation, every static step count, the per-phase oracle
and SGLang's own adaptive controller, on the in-process simulator (every number printed is simulated; the harness and what each
policy is given are described in :mod:`specdecode_operator.bench.tuner_benchmark`)."""

from __future__ import annotations

import argparse
import glob
import json
import sys

from specdecode_runtime.contract.cli_common import UsageError
from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.contract.versions import SGLANG_VERSION
from specdecode_runtime.simulate.probe import DEFAULT_BIAS, DEFAULT_NOISE

from ..bench import sglang_adaptive
from ..bench.tuner_benchmark import DEFAULT_INTERVAL, PROFILES, benchmark

MAX_STEPS = 16


def add_parser(subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help=help_text)
    sub = p.add_subparsers(dest="bench", metavar="BENCHMARK")
    sub.required = True
    tuner = sub.add_parser(
        "tuner",
        help="benchmark the step tuner against static step counts, the oracle and SGLang adaptive (simulated)",
        description=__doc__.splitlines()[0].replace("``", ""),
    )
    add_tuner_arguments(tuner)
    tuner.set_defaults(func=run_tuner)
    return p


def add_tuner_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scenarios",
        nargs="+",
        required=True,
        metavar="FILE",
        help="scenario YAML files (globs are expanded), e.g. bench/scenarios/*.yaml",
    )
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    p.add_argument(
        "--interval",
        type=float,
        default=DEFAULT_INTERVAL,
        help="our tuner's intervalSeconds in simulated seconds (CRD allows 5..3600; default: the CRD's "
        f"default, {DEFAULT_INTERVAL:g})",
    )
    p.add_argument(
        "--profile",
        choices=PROFILES,
        default="measured",
        help="what our tuner knows about costs: measured = the pod's start-up probe with its error, refined "
        "online (what a cluster gives; default); exact = the scenario's true costs (upper bound, not "
        "reachable in a cluster); none = no probe",
    )
    p.add_argument(
        "--probe-bias",
        type=float,
        default=DEFAULT_BIAS,
        help=f"systematic error per probe stage, drawn per pod in 1 +- this (default {DEFAULT_BIAS})",
    )
    p.add_argument(
        "--probe-noise",
        type=float,
        default=DEFAULT_NOISE,
        help=f"relative noise per probe sample (default {DEFAULT_NOISE})",
    )
    p.add_argument("--no-rollout", action="store_true", help="skip the Rollout-mode run (faster)")
    p.add_argument("--min-steps", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=7, help="largest static and oracle step count (default 7)")
    p.add_argument("--initial-steps", type=int, default=3, help="starting numSteps for ours and SGLang (default 3)")
    p.add_argument("--seed", type=int, default=None, help="override every scenario's seed")
    p.add_argument(
        "--candidates",
        type=_candidates,
        default=None,
        metavar="STEPS,...|all",
        help="step counts the runtime has captured for our tuner (default: 0 plus "
        "config.candidate_steps(min, max, initial), at most 4 values in bounds, as rendered); "
        "'all' = 0..max-steps",
    )


def _candidates(text: str) -> list[int] | str:
    if text == "all":
        return "all"
    try:
        candidates = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers or 'all', got {text!r}") from None
    if not candidates or any(steps < 0 or steps > MAX_STEPS for steps in candidates):
        raise argparse.ArgumentTypeError(f"candidates must be integers within 0..{MAX_STEPS}, got {text!r}")
    return candidates


def check_settings(args: argparse.Namespace) -> None:
    """Every flag within what the CRD and the simulator accept, before minutes of simulation start."""
    if not (0 <= args.min_steps <= args.max_steps <= MAX_STEPS):
        raise UsageError(
            f"--min-steps/--max-steps must satisfy 0 <= min <= max <= {MAX_STEPS}, "
            f"got {args.min_steps}..{args.max_steps}"
        )
    if not (args.min_steps <= args.initial_steps <= args.max_steps):
        raise UsageError(f"--initial-steps must be within {args.min_steps}..{args.max_steps}, got {args.initial_steps}")
    if not (5 <= args.interval <= 3600):
        raise UsageError(f"--interval must be within 5..3600 seconds (autotune.intervalSeconds), got {args.interval:g}")
    if not (0 <= args.probe_bias < 1):
        raise UsageError(f"--probe-bias must be within 0..1 (relative), got {args.probe_bias:g}")
    if args.probe_noise < 0:
        raise UsageError(f"--probe-noise must be >= 0, got {args.probe_noise:g}")


def scenario_paths(patterns: list[str]) -> list[str]:
    """Globs expanded (a shell may not have); a pattern matching nothing stays, so its error names it."""
    paths: list[str] = []
    for pattern in patterns:
        paths.extend(sorted(glob.glob(pattern)) or [pattern])
    return paths


def run_tuner(args: argparse.Namespace) -> int:
    check_settings(args)
    if args.candidates == "all":
        args.candidates = list(range(0, args.max_steps + 1))
    try:
        sglang_adaptive.import_sglang()
    except sglang_adaptive.SglangUnavailable as exc:  # the comparison is the point: refuse rather than skip it
        raise UsageError(str(exc)) from None
    scenarios = [load_scenario(path) for path in scenario_paths(args.scenarios)]
    progress = None if args.json else (lambda text: print(f"  {text}", file=sys.stderr))
    out = benchmark(scenarios, args, progress)
    print(json.dumps(out, indent=2) if args.json else format_table(out))
    return 0


def format_table(out: dict) -> str:
    st = out["settings"]
    known = (
        f"the pod's start-up probe (bias +-{st['probe_bias']:g} per stage, noise {st['probe_noise']:g}), refined online"
        if st["profile"] == "measured"
        else "the scenario's TRUE costs (upper bound, not reachable in a cluster)"
        if st["profile"] == "exact"
        else "no cost probe (phase averages)"
    )
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
    lines.append(
        f"{'geometric mean':<24} {'':>7} {'':>6} {'':>7} {'':>7} {'':>7} {'':>7} {'':>7} {'':>7} "
        f"{g['ours_over_oracle']:6.3f} {g['ours_over_best_static']:6.3f} {g['ours_over_sglang_adaptive']:6.3f} "
        f"{g['ours_over_sglang_0to7']:6.3f}"
    )
    lines.append(
        f"o/orc = ours/oracle, o/bst = ours/best static, o/sgl = ours/SGLang adaptive ({SGLANG_VERSION} AdaptiveController, "
        "default candidates), o/s07 = ours/the same controller with candidates 0..7; chg = our Live changes, "
        "rst = restarts in Rollout mode"
    )
    return "\n".join(lines)
