"""``specdecode plan -f sdd.yaml --scenario FILE [--plot out.png] [--json]``: the draft-placement advice offline."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

import yaml
from pydantic import ValidationError

from specdecode_runtime.scenario import ScenarioError, format_validation_error, load_scenario

from ..api.models import SpecDecodeDeployment
from .planner import format_plan, plan, plot_plan


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--filename", required=True, help="SpecDecodeDeployment YAML")
    p.add_argument("--scenario", required=True, help="scenario YAML with a draftTp block (cost profile)")
    p.add_argument("--plot", metavar="PNG", help="write a plot of tokens/s by draft TP and steps")
    p.add_argument("--json", action="store_true", help="print the table and recommendation as JSON")


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("plan", help="predict tokens/s per draft TP x steps and recommend draft placement")
    add_arguments(p)
    p.set_defaults(func=run)
    return p


def _error(msg: str) -> int:
    print(f"specdecode plan: error: {msg}", file=sys.stderr)
    return 2


def load_sdd(path: str) -> SpecDecodeDeployment:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except OSError as exc:
        raise ValueError(f"-f {path}: cannot read file: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ValueError(f"-f {path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"-f {path}: expected a SpecDecodeDeployment mapping")
    try:
        return SpecDecodeDeployment.model_validate(data)
    except ValidationError as err:
        raise ValueError(f"-f {path}: invalid SpecDecodeDeployment:\n  " + "\n  ".join(format_validation_error(err))) from None


def run(args) -> int:
    try:
        sdd = load_sdd(args.filename)
    except ValueError as exc:
        return _error(str(exc))
    try:
        sc = load_scenario(args.scenario)
    except ScenarioError as exc:
        return _error(str(exc))
    at = sdd.spec.speculative.autotune
    steps = [0, *range(at.minSteps, at.maxSteps + 1)]
    try:
        p = plan(sc, steps, target_tp=sdd.spec.target.tensorParallelSize, current_tp=sdd.spec.draft.tensorParallelSize)
    except ValueError as exc:
        return _error(str(exc))
    if args.plot:
        try:
            plot_plan(p, args.plot, sdd.metadata.name or sc.name)
        except OSError as exc:
            return _error(f"--plot {args.plot}: {exc.strerror or exc}")
    if args.json:
        print(json.dumps({"simulated": True, "scenario": sc.name,
                          "tokens_per_s": {str(n): {str(k): v for k, v in row.items()} for n, row in p.tokens_per_s.items()},
                          "recommendation": p.recommendation.model_dump()}, indent=2))
    else:
        print(format_plan(p))
        if args.plot:
            print(f"plot written to {args.plot}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specdecode plan", description=__doc__.splitlines()[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
