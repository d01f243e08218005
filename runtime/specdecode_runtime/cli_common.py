"""What ``specdecode`` and ``specdecode-runtime`` share: the exit-code convention, ``--version`` from the installed
package's metadata, and shell completion through argcomplete."""

from __future__ import annotations

import argparse
import os
import sys
from importlib import metadata

EXIT_OK = 0
EXIT_INVALID = 2  # the user's input (flag, file, field) is wrong; the message says which and what is allowed
DISTRIBUTION = "specdecode-operator"  # both commands ship in this one distribution
SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")


def package_version() -> str:
    """The installed distribution's version; the source tree's when run without installing."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        from . import __version__

        return __version__


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action="version", version=f"{parser.prog} {package_version()}")


def add_completion_command(subparsers, prog: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "completion", help="print the shell completion script",
        description=f"Print a completion script for {prog}; e.g. `eval \"$({prog} completion bash)\"` in ~/.bashrc.")
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(func=lambda args: _print_completion(prog, args.shell))
    return p


def _print_completion(prog: str, shell: str) -> int:
    import argcomplete

    sys.stdout.write(argcomplete.shellcode([prog], shell=shell))
    return EXIT_OK


def completing() -> bool:
    """Whether this process was started by a shell asking for completions (argcomplete's protocol)."""
    return "_ARGCOMPLETE" in os.environ


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer a completion request and exit, or do nothing; argcomplete is only imported when asked."""
    if completing():
        import argcomplete

        argcomplete.autocomplete(parser)


class UsageError(Exception):
    """A problem with the user's input (a flag, the environment it names): printed as is, exit code 2."""


def check_port(flag: str, port: int) -> None:
    """A port flag's value must be a port; 0 is accepted and means what the flag's help says (off or any)."""
    if not 0 <= port <= 65535:
        raise UsageError(f"{flag} must be within 0..65535, got {port}")


def check_can_listen(flag: str, host: str, port: int) -> None:
    """Fail now, with the flag's name, when ``host:port`` cannot be bound - not later inside a server thread."""
    import socket

    try:
        socket.create_server((host, port)).close()
    except OSError as e:
        raise UsageError(f"{flag}: cannot listen on {host}:{port}: {e.strerror or e}") from None


def float_in(low: float, high: float):
    """argparse type: a finite number with ``low < value <= high`` (``nan`` and ``inf`` would never end a loop)."""
    import math

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not math.isfinite(value) or value <= low:
            raise argparse.ArgumentTypeError(f"must be > {low:g} (a finite number), got {text}")
        if value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high:g}, got {text}")
        return value

    parse.__name__ = "number"
    return parse


positive_float = float_in(0.0, 1e9)


def int_in(low: int, high: int):
    """argparse type: an integer within ``low..high``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be within {low}..{high}, got {value}")
        return value

    parse.__name__ = f"integer {low}..{high}"
    return parse
