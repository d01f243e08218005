"""``specdecode``: render, validate and print the CRD offline; run the operator, the planner, benchmarks and the demo.

Every user mistake ends in a message that names the field and what is allowed, and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Callable, Iterable

from specdecode_runtime import cli_common
from specdecode_runtime.cli_common import EXIT_INVALID, UsageError
from specdecode_runtime.input_files import InputError

__all__ = ["main", "build_parser", "parse_file", "UsageError"]

# Commands defined in their own modules, each exposing add_parser(subparsers). Only the module of the command being
# run is imported, so `specdecode validate` and `--help` never load kopf, aiohttp or matplotlib.
_COMMANDS = {
    "operator": ("specdecode_operator.operator_cli", "run the SpecDecodeDeployment operator"),
    "plan": ("specdecode_operator.tuner.plan_cli", "predict tokens/s per draft TP x steps and recommend draft placement"),
    "bench": ("specdecode_operator.bench_cli", "benchmarks (simulated unless stated otherwise)"),
    "demo": ("specdecode_operator.demo.cli", "run operator + tuner against simulated runtime pods (no cluster, no GPU)"),
}


def parse_file(path: str) -> list:
    """Every SpecDecodeDeployment in the file, validated as the API server would (schema + CEL)."""
    from .api.documents import load_sdds

    return load_sdds(path)


def cmd_render(args: argparse.Namespace) -> int:
    from .render import RenderOptions, render, to_json, to_yaml

    options = RenderOptions(
        default_image=args.default_image, operator_namespace=args.operator_namespace, tuned_steps=None
    )
    manifests = [m for sdd in parse_file(args.file) for m in render(sdd, options)]
    if args.output == "runtime-config":
        sys.stdout.write(runtime_configs(manifests))
    else:
        sys.stdout.write(to_json(manifests) + "\n" if args.output == "json" else to_yaml(manifests))
    return 0


def runtime_configs(manifests: list[dict]) -> str:
    """The ``runtime.yaml`` of every rendered runtime ConfigMap: the file ``specdecode-runtime launch`` reads."""
    from specdecode_runtime.config import CONFIG_FILE_NAME

    files = [m["data"][CONFIG_FILE_NAME] for m in manifests
             if m.get("kind") == "ConfigMap" and CONFIG_FILE_NAME in (m.get("data") or {})]
    return "---\n".join(files)


def cmd_validate(args: argparse.Namespace) -> int:
    sdds = parse_file(args.file)
    for sdd in sdds:
        print(f"{args.file}: {sdd.kind}/{sdd.metadata.name}: valid")
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    from .api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def _command_in(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The parser; ``command`` names the one plugin command to load fully (``"*"``: all of them, for completion
    and tests), the others appear in ``--help`` by name only."""
    from .images import RUNTIME_IMAGE

    parser = argparse.ArgumentParser(prog="specdecode", description=__doc__.splitlines()[0].replace("``", ""))
    cli_common.add_version(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("render", help="print the Kubernetes manifests for SpecDecodeDeployment documents")
    p.add_argument("-f", "--file", required=True, help="YAML file with one or more documents ('-' for stdin)")
    p.add_argument("-o", "--output", choices=("yaml", "json", "runtime-config"), default="yaml",
                   help="yaml/json: every manifest; runtime-config: only the runtime.yaml each runtime pod reads")
    p.add_argument("--default-image", default=RUNTIME_IMAGE, help="runtime image when spec.runtime.image is empty")
    p.add_argument("--operator-namespace", default="specdecode-system", help="namespace allowed to reach the control port")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("validate", help="check documents against the CRD schema and its CEL rules")
    p.add_argument("-f", "--file", required=True, help="YAML file with one or more documents ('-' for stdin)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("crd", help="print the CustomResourceDefinition")
    p.set_defaults(func=cmd_crd)

    for name, (module, help_text) in _COMMANDS.items():
        if command in ("*", name):
            importlib.import_module(module).add_parser(sub)
        else:
            sub.add_parser(name, help=help_text, add_help=False)
    cli_common.add_completion_command(sub, "specdecode")
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser("*" if cli_common.completing() else _command_in(argv))
    cli_common.autocomplete(parser)
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return int(func(args) or 0)
    except (UsageError, InputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
