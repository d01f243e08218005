"""The start-up cost probe (runtime cost_probe.py) on a real GPU: how long it takes per point and how repeatable it is.

Stages are bf16 matmuls shaped like the draft head measured in bench/results/draft_head_h200.md
(hidden 7168, FFN 18432, draft vocabulary 32000) and a verify stand-in of four target-sized projections over
``batch * (steps + 1)`` tokens. They are stand-ins for SGLang's captured graphs, not the model: what this measures is
the probe itself (time per point, spread between repeated probes), which is what the simulator's per-sample noise
and the "few hundred microseconds per point" budget rest on.

    python bench/gpu/micro/cost_probe_gpu.py --out DIR [--repeats 5] [--budget-ms 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "runtime"))

import torch  # noqa: E402

from specdecode_runtime import cost_probe  # noqa: E402

HIDDEN, FFN, VOCAB, TARGET_FFN = 7168, 18432, 32000, 16384
CAPTURED = (1, 3, 5, 7)
BUCKETS = (1, 2, 8, 32, 64)


class GraphStages:
    """run_step launches the stage's kernels (eagerly: the launch cost is part of what a probe point measures here)."""

    def __init__(self, dev) -> None:
        bf = torch.bfloat16
        self.dev = dev
        self.fc = torch.randn(HIDDEN, FFN, device=dev, dtype=bf) * 0.01
        self.head = torch.randn(HIDDEN, VOCAB, device=dev, dtype=bf) * 0.01
        self.proj = [torch.randn(HIDDEN, TARGET_FFN, device=dev, dtype=bf) * 0.01 for _ in range(2)]
        self.graphs: dict = {}

    def _body(self, stage: str, steps: int, batch: int):
        bf = torch.bfloat16
        if stage == "verify":
            x = torch.randn(batch * (steps + 1), HIDDEN, device=self.dev, dtype=bf)
            return lambda: [x @ w for w in self.proj * 2]
        if stage in ("draft_step", "draft_extend"):
            rows = batch if stage == "draft_step" else batch * (steps + 1)
            x = torch.randn(rows, HIDDEN, device=self.dev, dtype=bf)
            return lambda: (x @ self.fc, x @ self.head)
        if stage == "overhead":
            x = torch.zeros(batch, device=self.dev)
            return lambda: x + 1
        raise RuntimeError(f"no {stage} stage here")

    def __call__(self, stage: str, steps: int, batch: int) -> None:
        key = (stage, steps, batch)
        body = self.graphs.get(key)
        if body is None:
            body = self.graphs[key] = self._body(stage, steps, batch)
        body()


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--budget-ms", type=float, default=2.0)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("cost_probe_gpu: error: needs a CUDA GPU", file=sys.stderr)
        return 2
    dev = torch.device("cuda", 0)
    stages = GraphStages(dev)
    cost_probe.run_probe(stages, CAPTURED, BUCKETS, sync=torch.cuda.synchronize, budget_s=0.0)  # warm every shape
    torch.cuda.synchronize()
    runs, walls = [], []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        runs.append(
            cost_probe.run_probe(
                stages, CAPTURED, BUCKETS, sync=torch.cuda.synchronize, budget_s=args.budget_ms / 1000.0
            )
        )
        walls.append(time.perf_counter() - t0)
    npoints = len(runs[0])
    spreads = []
    for i in range(npoints):
        vals = [r[i].seconds for r in runs]
        spreads.append((max(vals) - min(vals)) / statistics.median(vals))
    rows = [
        {
            "stage": pt.stage,
            "steps": pt.steps,
            "bucket": pt.bucket,
            "batch": pt.batch,
            "median_ms": 1000 * statistics.median(r[i].seconds for r in runs),
            "spread": spreads[i],
        }
        for i, pt in enumerate(runs[0])
    ]
    prof = cost_probe.fit_profile(runs[0])
    out = {
        "device": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "points": npoints,
        "repeats": args.repeats,
        "budget_ms": args.budget_ms,
        "probe_wall_s": walls,
        "ms_per_point": [1000 * w / npoints for w in walls],
        "max_relative_spread": max(spreads),
        "median_relative_spread": statistics.median(spreads),
        "rows": rows,
        "fit": {k: vars(v) for k, v in prof.items()},
    }
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "cost_probe_gpu.json").write_text(json.dumps(out, indent=2))
    print(
        f"{out['device']}: {npoints} points, probe {statistics.median(walls):.3f} s "
        f"({statistics.median(out['ms_per_point']):.2f} ms per point, budget {args.budget_ms} ms); "
        f"spread between {args.repeats} probes: median {100 * out['median_relative_spread']:.2f} %, "
        f"max {100 * out['max_relative_spread']:.2f} %"
    )
    for r in rows:
        if r["bucket"] in ("1", "8-31"):
            print(
                f"  {r['bucket']:>5} b{r['batch']:<3} {r['stage']:<12} steps={r['steps']} {r['median_ms']:.4f} ms "
                f"spread {100 * r['spread']:.2f} %"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
