"""What one tuning interval costs the operator per pod: parsing the scraped metrics text and stepping the tuner.

This is what sets how short ``autotune.intervalSeconds`` can be in Live mode (a Live change itself costs nothing):
the operator pays it for every pod of every object, every interval. The pod is the in-process simulator serving the
metrics contract (its text has the same series a runtime pod serves); the timings are real CPU time on this machine.

    .venv/bin/python bench/operator/tuner_interval_cost.py [--scenario FILE] [--interval S]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from specdecode_operator.bench import tuner_benchmark
from specdecode_operator.tuner.snapshot import parse_metrics
from specdecode_operator.tuner.tuner import Tuner
from specdecode_runtime.contract.scenario import load_scenario
from specdecode_runtime.simulate.engine import SimEngine

DEFAULT = Path(__file__).resolve().parents[1] / "scenarios" / "unseen" / "ramp-up-down.yaml"


def measure(path: str, interval: float) -> dict:
    sc = load_scenario(path)
    cfg = tuner_benchmark.our_config(sc, "Live", interval, 1, 7, 3)
    eng = SimEngine(sc)
    eng.set_candidates(cfg.policy.candidates)
    eng.set_step_table([(1, 3)])
    tuner = Tuner(cfg)
    parse_ms, step_ms, sizes = [], [], []
    while eng.now < sc.duration:
        text = eng.metrics_text()
        t0 = time.perf_counter()
        snap = parse_metrics(text, "pod-0", eng.now, costs=tuner.wants_costs("pod-0"))
        t1 = time.perf_counter()
        d = tuner.step(eng.now, [snap])
        t2 = time.perf_counter()
        parse_ms.append(1000 * (t1 - t0))
        step_ms.append(1000 * (t2 - t1))
        sizes.append(len(text))
        if d.changed:
            eng.set_step_table(d.table)
        eng.advance(interval)
    return {
        "intervals": len(step_ms),
        "text_bytes": int(statistics.median(sizes)),
        "parse_ms": statistics.median(parse_ms),
        "step_ms": statistics.median(step_ms),
        "first_parse_ms": parse_ms[0],
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", default=str(DEFAULT))
    p.add_argument("--interval", type=float, default=10.0)
    args = p.parse_args(argv)
    if not 5 <= args.interval <= 3600:
        print("tuner_interval_cost: error: --interval must be within 5..3600", file=sys.stderr)
        return 2
    r = measure(args.scenario, args.interval)
    per_pod_s = (r["parse_ms"] + r["step_ms"]) / 1000.0
    print(
        f"{r['intervals']} intervals of {args.interval:g} s on {Path(args.scenario).name}: metrics text "
        f"{r['text_bytes']} bytes; median parse {r['parse_ms']:.2f} ms (first scrape with the cost probe "
        f"{r['first_parse_ms']:.2f} ms), median Tuner.step {r['step_ms']:.2f} ms"
    )
    for iv in (5, 10, 30):
        print(
            f"  interval {iv:>2} s: {1000 * per_pod_s / iv:.2f} ms CPU per pod per second; "
            f"{500 * per_pod_s / iv:.2f} cores at 500 pods"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
