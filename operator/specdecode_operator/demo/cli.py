"""``specdecode demo``: the whole loop with no cluster and no GPU (simulated), or against a real cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdecode_runtime.simulate.cli import positive_float


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("demo", help="run operator + tuner against simulated runtime pods (no cluster, no GPU)")
    p.add_argument("--out", type=Path, default=Path("demo-out"), help="where the plot and summary go (default demo-out/)")
    p.add_argument("--speed", type=positive_float, default=10.0, help="simulated seconds per wall second (default 10)")
    p.add_argument("-f", "--file", type=Path, default=None, help="SpecDecodeDeployment to apply (default: embedded seed PCIe box)")
    p.add_argument("--scenario", type=Path, default=None, help="scenario for the simulated pods (default: embedded seed scenario with a workload shift)")
    p.add_argument("--kubeconfig", default=None, help="run against a real cluster with the real runtime image instead")
    p.add_argument("--max-seconds", type=positive_float, default=110.0, help="wall-clock limit (default 110)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    from ..cli import UsageError
    from .run import DemoOptions, run_demo

    for path in (args.file, args.scenario):
        if path is not None and not path.is_file():
            raise UsageError(f"{path}: no such file")
    result = run_demo(DemoOptions(out_dir=args.out, speed=args.speed, sdd_file=args.file,
                                  scenario_file=args.scenario, kubeconfig=args.kubeconfig,
                                  max_wall_seconds=args.max_seconds))
    return 0 if any(v for v in result["tokens_per_s"].values()) else 1
