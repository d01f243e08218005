"""``specdecode``: render, validate and print the CRD offline; run the operator, the planner, benchmarks and the demo.

Each command lives in its own module of this package and is imported only when it is the one being run, so
``specdecode --help`` and ``specdecode validate`` never load kopf, aiohttp, the simulator or matplotlib.

One exit-code convention for every command (:mod:`specdecode_runtime.contract.cli_common`): a :class:`UsageError` (or an
unreadable input file) prints one message naming the file, field or flag and exits 2; a :class:`CommandFailed`
(the command ran but could not do its job) exits 1; never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from typing import Callable, Iterable

from specdecode_runtime.contract import cli_common
from specdecode_runtime.contract.cli_common import CliError, CommandFailed, UsageError

__all__ = ["main", "build_parser", "CliError", "CommandFailed", "UsageError", "COMMANDS"]

# name -> (module in this package exposing add_parser(subparsers), one-line help shown by `specdecode --help`)
COMMANDS = {
    "render": ("documents", "print the Kubernetes manifests for SpecDecodeDeployment documents"),
    "validate": ("documents", "check documents against the CRD schema and its CEL rules"),
    "crd": ("documents", "print the CustomResourceDefinition, or apply it (crd apply)"),
    "plan": ("plan", "predict tokens/s per draft TP x steps and recommend draft placement"),
    "bench": ("bench", "benchmarks (simulated unless stated otherwise)"),
    "demo": ("demo", "run operator + tuner against simulated runtime pods (no cluster, no GPU)"),
    "operator": ("operator", "run the SpecDecodeDeployment operator"),
}


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The parser; ``command`` names the one command whose module is loaded and whose arguments are declared
    (``"*"``: all of them, for shell completion and tests). The others appear in ``--help`` by name only."""
    parser = argparse.ArgumentParser(prog="specdecode", description=__doc__.splitlines()[0].replace("``", ""))
    cli_common.add_version(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    cli_common.add_lazy_commands(
        sub,
        {name: (f"{__name__}.{module}", help_text) for name, (module, help_text) in COMMANDS.items()},
        command,
        lambda module, name, help_text: module.add_parser(sub, name, help_text),
    )
    cli_common.add_completion_command(sub, "specdecode")
    return parser


def main(argv: Iterable[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser("*" if cli_common.completing() else cli_common.command_in(argv))
    cli_common.autocomplete(parser)
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return cli_common.run_command(func, args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
