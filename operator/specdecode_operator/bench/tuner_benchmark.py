"""The step-tuner benchmark behind ``specdecode bench tuner``: our tuner against no speculation, every static step
count, the per-phase oracle and SGLang's own adaptive controller (its default candidate list, and candidates 0..7),
all in the in-process simulator (every number it prints is simulated).

Each policy runs the same scenario with the same seed (common random numbers), so ratios compare controllers, not
luck. Ours is driven the way the operator drives it: the metrics text is scraped every ``intervalSeconds`` of
simulated time, parsed, fed to ``Tuner.step`` and the resulting table pushed; SGLang's controller is fed per batch.

What ours is given is what a cluster gives it (``--profile measured``, the default): the simulated pod's metrics,
including its start-up cost probe, which carries a per-stage systematic error drawn per pod (``--probe-bias``) and
per-sample noise (simulate/probe.py). ``--profile exact`` hands it the scenario's true cost block instead: an upper
bound no cluster can reach, labelled so; ``--profile none`` serves no probe (per-cycle phase averages only).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
import time
from typing import Sequence

from specdecode_runtime.contract.capabilities import tuner_steps
from specdecode_runtime.contract.goodput import expected_tokens
from specdecode_runtime.contract.scenario import Scenario
from specdecode_runtime.simulate.engine import SimEngine
from specdecode_runtime.simulate.probe import DEFAULT_BIAS, DEFAULT_NOISE

from ..api.models import Autotune
from ..tuner.policy import PolicyConfig
from ..tuner.snapshot import parse_metrics
from ..tuner.tuner import Mode, Tuner, TunerConfig
from .sglang_adaptive import SglangAdaptive

RATIOS = ("ours_over_oracle", "ours_over_best_static", "ours_over_sglang_adaptive", "ours_over_sglang_0to7")
DEFAULT_INTERVAL = float(Autotune.model_fields["intervalSeconds"].default)  # the CRD's default
PROFILES = ("measured", "exact", "none")


def _finish(engine: SimEngine, duration: float, step: float | None = None) -> float:
    if step is None:
        engine.advance(max(duration - engine.now, 0.0))
    return engine.tokens_total / engine.now


def run_static(sc: Scenario, steps: int, seed: int | None) -> float:
    eng = SimEngine(sc, seed=seed)
    eng.set_step_table([(1, steps)])
    return _finish(eng, sc.duration)


def bucket_mix(phase, lo: int, hi: int | None) -> list[tuple[int, float]]:
    sizes, probs = phase.batch_distribution()
    return [(b, p) for b, p in zip(sizes, probs) if b >= lo and (hi is None or b <= hi)]


def oracle_table(sc: Scenario, phase, candidates: Sequence[int]) -> list[tuple[int, int]]:
    """The best table for one phase from the scenario's true acceptance and costs.

    The simulator draws a batch size per cycle, so the phase's throughput is sum(p_b tokens_b) / sum(p_b time_b)
    over all batch sizes: buckets are coupled through the shared denominator. Dinkelbach's iteration maximises that
    ratio exactly: with R the current ratio, each bucket independently takes the step count maximising
    sum(p_b (tokens_b(steps) - R time_b(steps))); repeat until R stops rising."""
    cost = sc.cycle_cost()
    bounds = sc.buckets
    groups = []
    for i, lo in enumerate(bounds):
        hi = bounds[i + 1] - 1 if i + 1 < len(bounds) else None
        groups.append((lo, bucket_mix(phase, lo, hi)))

    def tok_time(steps: int, mix) -> tuple[float, float]:
        toks = sum(p * b * (expected_tokens(phase.acceptance, steps) if steps else 1.0) for b, p in mix)
        return toks, sum(p * cost.cycle_ms(steps, b) for b, p in mix)

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

                def gain(steps: int, mix=mix, ratio=ratio) -> tuple[float, int]:
                    toks, ms = tok_time(steps, mix)
                    return toks - ratio * ms, -steps

                choice[lo] = max(candidates, key=gain)
    return [(lo, choice[lo]) for lo, _ in groups]


def run_oracle(sc: Scenario, candidates: Sequence[int], seed: int | None) -> float:
    eng = SimEngine(sc, seed=seed)
    end = 0.0
    for phase in sc.phases:
        end += phase.seconds
        eng.set_step_table(oracle_table(sc, phase, candidates))
        eng.advance(max(end - eng.now, 0.0))
    return eng.tokens_total / eng.now


def open_candidates_config(max_steps: int) -> dict:
    """SGLang's shipped adaptive config with every batch slot's candidates opened to 0..max_steps (its default
    offers odd step counts only at batch 1 and no speculation at batch >= 64); thresholds unchanged."""
    from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG

    return {
        bs: {**entry, "candidate_steps": list(range(0, max_steps + 1))} for bs, entry in DEFAULT_ADAPTIVE_CONFIG.items()
    }


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


def rendered_candidates(min_steps: int, max_steps: int, initial: int, mode: str = "Live") -> list[int]:
    """The step counts a pod rendered for ``mode`` serves, hence all the tuner may choose: in Live the captured
    tiers (steps 0, the target-only tier, plus the spread of ``min..max``); in Rollout the values a restart renders
    (no 0)."""
    return tuner_steps(mode, min_steps, max_steps, initial)


def our_config(
    sc: Scenario,
    mode: Mode,
    interval: float,
    min_steps: int,
    max_steps: int,
    initial: int,
    caps: list[int] | None = None,
) -> TunerConfig:
    caps = caps if caps is not None else rendered_candidates(min_steps, max_steps, initial, mode)
    if mode == "Rollout":  # a restart cannot render steps 0 (SGLang needs --speculative-num-steps >= 1)
        caps = [steps for steps in caps if steps > 0]
    return TunerConfig(
        mode=mode,
        policy=PolicyConfig(
            min_steps=min_steps,
            max_steps=max_steps,
            candidates=tuple(caps),
            cooldown_s=2 * interval,
            explore_every_s=max(12 * interval, 120.0),
        ),
        buckets=tuple(sc.buckets),
        initial_steps=initial,
        restart_s=sc.restart_seconds,
    )


def run_ours(
    sc: Scenario,
    seed: int | None,
    mode: Mode,
    interval: float,
    min_steps: int,
    max_steps: int,
    initial: int,
    caps: list[int] | None = None,
    profile: str = "measured",
    probe_bias: float = DEFAULT_BIAS,
    probe_noise: float = DEFAULT_NOISE,
) -> tuple[float, Tuner]:
    """The operator loop on simulated time: scrape every interval, decide, push (Live) or re-render and restart
    (Rollout). The tuner learns costs and acceptance from the pod's metrics only (``profile`` measured / none);
    ``exact`` gives it the scenario's cost block as an override (the labelled upper bound)."""
    if profile not in PROFILES:
        raise ValueError(f"profile must be one of {PROFILES}, got {profile!r}")
    cfg = our_config(sc, mode, interval, min_steps, max_steps, initial, caps)
    eng = SimEngine(sc, seed=seed, probe_bias=probe_bias if profile == "measured" else None, probe_noise=probe_noise)
    eng.set_candidates(cfg.policy.candidates or ())
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
    candidates = list(range(0, args.max_steps + 1))
    static = {steps: run_static(sc, steps, args.seed) for steps in range(1, args.max_steps + 1)}
    none = run_static(sc, 0, args.seed)
    best_static_steps = max(static, key=lambda steps: static[steps])
    best_static = max(static[best_static_steps], none)
    oracle = run_oracle(sc, candidates, args.seed)
    sglang, sglang_changes = run_sglang(sc, args.seed, args.initial_steps)
    sglang07, _ = run_sglang(sc, args.seed, args.initial_steps, open_candidates_config(args.max_steps))
    known = dict(profile=args.profile, probe_bias=args.probe_bias, probe_noise=args.probe_noise)
    ours, tuner = run_ours(
        sc,
        args.seed,
        "Live",
        args.interval,
        args.min_steps,
        args.max_steps,
        args.initial_steps,
        args.candidates,
        **known,
    )
    rollout, rtuner = (
        (None, None)
        if args.no_rollout
        else run_ours(
            sc,
            args.seed,
            "Rollout",
            args.interval,
            args.min_steps,
            args.max_steps,
            args.initial_steps,
            args.candidates,
            **known,
        )
    )
    return {
        "name": sc.name,
        "simulated": True,
        "duration_s": sc.duration,
        "tokens_per_s": {
            "none": none,
            "static": {str(steps): v for steps, v in static.items()},
            "best_static": best_static,
            "best_static_k": best_static_steps if static[best_static_steps] >= none else 0,
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
        "our_candidates": list(tuner.config.policy.candidates or ()),
    }


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def benchmark(scenarios: Sequence[Scenario], args, progress=None) -> dict:
    """Every scenario against every policy, with the settings they ran under and the geometric mean of each ratio.
    ``args`` carries the settings (the ``specdecode bench tuner`` flags); ``progress(text)`` hears of each scenario."""
    results = []
    t0 = time.time()
    for sc in scenarios:
        results.append(bench_scenario(sc, args))
        if progress is not None:
            progress(f"ran {sc.name} ({time.time() - t0:.1f}s so far)")
    return {
        "simulated": True,
        "note": "all tokens/s are simulated (in-process simulator, scenario cost model); not measurements",
        "settings": {
            "interval_s": args.interval,
            "candidates": args.candidates or "rendered",
            "min_steps": args.min_steps,
            "max_steps": args.max_steps,
            "initial_steps": args.initial_steps,
            "seed": args.seed,
            "profile": args.profile,
            "probe_bias": args.probe_bias if args.profile == "measured" else None,
            "probe_noise": args.probe_noise if args.profile == "measured" else None,
        },
        "scenarios": results,
        "geomean": {r: geomean([s["ratios"][r] for s in results]) for r in RATIOS},
    }
