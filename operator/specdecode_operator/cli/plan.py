"""``specdecode plan -f sdd.yaml --scenario FILE [--plot out.png] [--json]``: the draft-placement advice offline.

The SpecDecodeDeployment is validated exactly as ``specdecode validate`` does (schema and CEL rules), and the scenario
must describe the same deployment shape (target TP, interconnect): advice computed for another box would be wrong.
"""

from __future__ import annotations

import argparse
import json
import sys

from specdecode_runtime.contract.cli_common import UsageError
from specdecode_runtime.contract.scenario import Scenario, load_scenario


def add_parser(subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help=help_text, description=__doc__.splitlines()[0].replace("``", ""))
    p.add_argument(
        "-f",
        "--file",
        "--filename",
        dest="file",
        required=True,
        help="SpecDecodeDeployment YAML (several documents: one plan each; '-' for stdin)",
    )
    p.add_argument("--scenario", required=True, help="scenario YAML with a draftTp block (cost profile)")
    p.add_argument("--plot", metavar="PNG", help="write a plot of tokens/s by draft TP and steps")
    p.add_argument("--json", action="store_true", help="print the table and recommendation as JSON")
    p.set_defaults(func=run)
    return p


def shape_mismatches(sdd, scenario: Scenario) -> list[str]:
    """How the scenario's box differs from the deployment's; empty when it describes the same shape."""
    problems = []
    target_tp = sdd.spec.target.tensorParallelSize
    if scenario.draft_tp is not None and scenario.draft_tp.target_tp != target_tp:
        problems.append(
            f"draftTp.targetTp is {scenario.draft_tp.target_tp} but spec.target.tensorParallelSize is {target_tp}"
        )
    wanted = sdd.spec.placement.interconnect
    if scenario.interconnect is not None and scenario.interconnect != wanted:
        problems.append(f"interconnect is {scenario.interconnect} but spec.placement.interconnect is {wanted}")
    return problems


def run(args) -> int:
    # lazy: `plan --help` and completion skip the CRD, render/ and the planner (0.52 s)
    from ..api.documents import load_sdds
    from ..render.runtime_config import serving_problems
    from ..tuner.planner import format_plan, plan, plot_plan

    sdds = load_sdds(args.file, serving_problems)
    sc = load_scenario(args.scenario)
    results = []
    for sdd in sdds:
        name = sdd.metadata.name
        mismatch = shape_mismatches(sdd, sc)
        if mismatch:
            raise UsageError(
                f"scenario {sc.name!r} ({args.scenario}) describes another deployment than {name}: "
                + "; ".join(mismatch)
                + ". Use a scenario measured on this box's shape."
            )
        if sc.interconnect is None:
            print(
                f"specdecode plan: warning: scenario {sc.name!r} does not state its interconnect; assuming it "
                f"matches spec.placement.interconnect ({sdd.spec.placement.interconnect})",
                file=sys.stderr,
            )
        at = sdd.spec.speculative.autotune
        candidate_steps = [0, *range(at.minSteps, at.maxSteps + 1)]
        try:
            p = plan(
                sc,
                candidate_steps,
                target_tp=sdd.spec.target.tensorParallelSize,
                current_tp=sdd.spec.draft.tensorParallelSize,
            )
        except ValueError as exc:
            raise UsageError(f"{name}: {exc}") from None
        results.append((sdd, p))
    if args.plot:
        for sdd, p in results:
            path = args.plot if len(results) == 1 else _suffixed(args.plot, sdd.metadata.name)
            try:
                plot_plan(p, path, sdd.metadata.name or sc.name)
            except OSError as exc:
                raise UsageError(f"--plot {path}: {exc.strerror or exc}") from None
    inputs = {path: {"kind": p.kind, "how": p.how} for path, p in sc.provenance.items()}
    if args.json:
        out = [
            {
                "simulated": True,
                "scenario": sc.name,
                "name": sdd.metadata.name,
                "inputs": inputs,
                "tokens_per_s": {
                    str(n): {str(steps): v for steps, v in row.items()} for n, row in p.tokens_per_s.items()
                },
                "recommendation": p.recommendation.model_dump(),
            }
            for sdd, p in results
        ]
        print(json.dumps(out[0] if len(out) == 1 else out, indent=2))
        return 0
    print(format_inputs(sc))
    for sdd, p in results:
        if len(results) > 1:
            print(f"== {sdd.metadata.namespace or 'default'}/{sdd.metadata.name}")
        print(format_plan(p))
    if args.plot:
        print(
            f"plot written to {args.plot}"
            if len(results) == 1
            else "plots written to " + ", ".join(_suffixed(args.plot, s.metadata.name) for s, _ in results)
        )
    return 0


def format_inputs(sc: Scenario) -> str:
    """Which of the scenario's inputs are measured and which are estimated: a recommendation is only as good as
    its weakest input, so the reader sees which ones."""
    if not sc.provenance:
        return (
            f"inputs: scenario {sc.name!r} does not say which of its costs are measured (no provenance block); "
            "treat them as estimates"
        )
    lines = [f"inputs of scenario {sc.name!r}:"]
    for path, p in sc.provenance.items():
        lines.append(f"  {p.kind:<9} {path}: {p.how}")
    return "\n".join(lines)


def _suffixed(path: str, name: str) -> str:
    stem, dot, ext = path.rpartition(".")
    return f"{stem}-{name}.{ext}" if dot else f"{path}-{name}"
