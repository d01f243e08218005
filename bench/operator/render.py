"""Median render time per SpecDecodeDeployment (goal: <= 2 ms on the 2-core CI machine).

    python bench/operator/render.py [--repeat 300] [--json]

Renders every example (parse + validate excluded, then included) and prints medians and the ratio to the goal.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import yaml

from specdecode_operator.api.validate import parse
from specdecode_operator.render import render, to_yaml

GOAL_MS = 2.0


def measure(fn, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=300)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    root = Path(__file__).resolve().parents[2]
    rows = []
    for path in sorted((root / "examples").glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        sdd = parse(doc)
        render(sdd)  # warm caches
        rows.append(
            {
                "example": path.stem,
                "render_ms": measure(lambda: render(sdd), args.repeat),
                "render_yaml_ms": measure(lambda: to_yaml(render(sdd)), args.repeat // 3 or 1),
                "validate_parse_render_ms": measure(lambda: render(parse(doc)), args.repeat // 3 or 1),
            }
        )
    worst = max(r["render_ms"] for r in rows)
    result = {"goal_ms": GOAL_MS, "rows": rows, "worst_render_ms": worst, "worst_over_goal": worst / GOAL_MS}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{'example':28} {'render ms':>10} {'+yaml ms':>10} {'+validate ms':>13}")
        for r in rows:
            print(
                f"{r['example']:28} {r['render_ms']:10.3f} {r['render_yaml_ms']:10.3f} {r['validate_parse_render_ms']:13.3f}"
            )
        print(f"worst median render {worst:.3f} ms = {worst / GOAL_MS:.2f} x the {GOAL_MS} ms goal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
