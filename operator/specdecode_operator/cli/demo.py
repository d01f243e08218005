"""``specdecode demo``: the whole loop with no cluster and no GPU (simulated), or against a real cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

from specdecode_runtime.contract.cli_common import CommandFailed, UsageError, float_in
from specdecode_runtime.simulate.cli import MAX_SPEED


def add_parser(subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help=help_text)
    p.add_argument(
        "--out", type=Path, default=Path("demo-out"), help="where the plot and summary go (default demo-out/)"
    )
    p.add_argument(
        "--speed", type=float_in(0, MAX_SPEED), default=10.0, help="simulated seconds per wall second (default 10)"
    )
    p.add_argument(
        "-f", "--file", type=Path, default=None, help="SpecDecodeDeployment to apply (default: embedded seed PCIe box)"
    )
    p.add_argument(
        "--scenario",
        type=Path,
        default=None,
        help="scenario for the simulated pods (default: embedded seed scenario with a workload shift)",
    )
    p.add_argument("--kubeconfig", default=None, help="run against a real cluster with the real runtime image instead")
    p.add_argument("--max-seconds", type=float_in(0, 86400), default=110.0, help="wall-clock limit (default 110)")
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    # lazy: `demo --help` and completion skip the scenario, render/ and the emulator stack (0.89 s)
    from specdecode_runtime.contract.scenario import load_scenario

    from ..api.documents import load_sdds
    from ..demo.run import DemoFailed, DemoOptions, run_demo
    from ..render.runtime_config import serving_problems

    # Every input is checked before anything starts: the same messages and exit 2 as validate and simulate.
    if args.file is not None:
        sdds = load_sdds(str(args.file), serving_problems)
        if len(sdds) != 1:
            raise UsageError(f"-f {args.file}: holds {len(sdds)} SpecDecodeDeployments; the demo runs one")
    if args.scenario is not None:
        load_scenario(args.scenario)
    if args.kubeconfig is not None:
        _check_kubeconfig(args.kubeconfig)
    try:
        result = run_demo(
            DemoOptions(
                out_dir=args.out,
                speed=args.speed,
                sdd_file=args.file,
                scenario_file=args.scenario,
                kubeconfig=args.kubeconfig,
                max_wall_seconds=args.max_seconds,
            )
        )
    except DemoFailed as e:
        raise CommandFailed(f"demo failed: {e}") from None
    if not any(v for v in result["tokens_per_s"].values()):
        raise CommandFailed("demo failed: no tokens/s were measured")
    return 0


def _check_kubeconfig(path: str) -> None:
    """--kubeconfig must load (the same client the demo then uses), or the demo stops with exit 2 and the path."""
    from kubernetes import config

    try:
        config.new_client_from_config(config_file=path)
    except Exception as e:  # ConfigException, OSError, YAML errors: all mean "this file cannot be used"
        raise UsageError(f"--kubeconfig {path}: cannot load: {str(e).strip() or type(e).__name__}") from None
