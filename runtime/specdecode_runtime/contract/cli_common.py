"""What ``specdecode`` and ``specdecode-runtime`` share: the exit-code convention and the error types that carry it,
``--version`` from the installed package's metadata, and shell completion through argcomplete.

Kept to the standard library at import time: ``--help`` of either command loads nothing else."""

from __future__ import annotations

import argparse
import importlib
import math
import os
import socket
import sys
from typing import Any, Callable, Sequence

from .. import __version__ as SOURCE_VERSION  # the package's own __init__, which imports nothing

EXIT_OK = 0
EXIT_FAILED = 1  # the command ran but could not do its job; the message says why
EXIT_INVALID = 2  # the user's input (flag, file, field) is wrong; the message says which and what is allowed
EXIT_INTERRUPTED = 130
DISTRIBUTION = "specdecode-operator"  # both commands ship in this one distribution
SHELLS = ("bash", "zsh", "fish", "tcsh", "powershell")


def package_version() -> str:
    """The installed distribution's version; the source tree's when run without installing."""
    # lazy: importlib.metadata costs ~30 ms of every start; only --version reads it
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return SOURCE_VERSION


class _VersionAction(argparse.Action):
    """``--version``: reads the package metadata only when asked (importlib.metadata costs ~30 ms per start)."""

    def __init__(
        self,
        option_strings: Sequence[str],
        dest: str = argparse.SUPPRESS,
        default: Any = argparse.SUPPRESS,
        help: str | None = None,
    ) -> None:
        super().__init__(
            option_strings,
            dest=dest,
            default=default,
            nargs=0,
            help=help or "show the program's version number and exit",
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{parser.prog} {package_version()}\n")
        parser.exit()


def add_version(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--version", action=_VersionAction)


def add_completion_command(subparsers: Any, prog: str) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "completion",
        help="print the shell completion script",
        description=f'Print a completion script for {prog}; e.g. `eval "$({prog} completion bash)"` in ~/.bashrc.',
    )
    p.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    p.set_defaults(func=lambda args: _print_completion(prog, args.shell))
    return p


def _print_completion(prog: str, shell: str) -> int:
    # lazy: argcomplete costs ~0.38 s; only `completion` and a shell's completion request load it
    import argcomplete

    sys.stdout.write(argcomplete.shellcode([prog], shell=shell))
    return EXIT_OK


def command_in(argv: list[str]) -> str | None:
    """The subcommand named on the command line (the first word that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def add_lazy_commands(
    subparsers: Any,
    commands: dict[str, tuple[str, str]],
    wanted: str | None,
    register: Callable[[Any, str, str], object],
) -> None:
    """Declare every command of ``commands`` (name -> (module path, help)) by name, and import only the module of
    ``wanted`` (``"*"``: all of them) to ``register(module, name, help)`` its arguments: ``--help`` and a single
    command never pay for the imports of the others."""
    for name, (module, help_text) in commands.items():
        if wanted in ("*", name):
            register(importlib.import_module(module), name, help_text)
        else:
            subparsers.add_parser(name, help=help_text, add_help=False)


def completing() -> bool:
    """Whether this process was started by a shell asking for completions (argcomplete's protocol)."""
    return "_ARGCOMPLETE" in os.environ


def autocomplete(parser: argparse.ArgumentParser) -> None:
    """Answer a completion request and exit, or do nothing; argcomplete is only imported when asked."""
    if completing():
        # lazy: argcomplete costs ~0.38 s; only a shell's completion request loads it
        import argcomplete

        argcomplete.autocomplete(parser)


class CliError(Exception):
    """A command's error for its user: the message is printed as is (no traceback) and ``exit_code`` returned."""

    exit_code = EXIT_FAILED


class UsageError(CliError):
    """A problem with the user's input (a file, a field, a flag, the environment it names): exit code 2."""

    exit_code = EXIT_INVALID


class CommandFailed(CliError):
    """The input was fine but the command could not do its job (the demo saw no tuning, a run stopped): exit code 1."""

    exit_code = EXIT_FAILED


def run_command(func: Callable[[argparse.Namespace], int | None], args: argparse.Namespace) -> int:
    """Run a parsed command under the exit-code convention: 0 done, 1 :class:`CommandFailed`, 2 :class:`UsageError`
    or an unreadable input file, 130 interrupted; the message goes to stderr as ``error: ...``."""
    try:
        return int(func(args) or 0)
    except CliError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `specdecode render ... | head`: the reader has what it wanted
        return EXIT_OK
    except Exception as e:
        if not _is_input_error(e):
            raise
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID


def _is_input_error(error: Exception) -> bool:
    """Whether ``error`` is the input reader's (a file that cannot be used). Imported here, on the error path only,
    so that a command that reads no file never loads PyYAML and pydantic."""
    from .input_files import InputError  # lazy: PyYAML and pydantic, on the error path only

    return isinstance(error, InputError)


def check_port(flag: str, port: int) -> None:
    """A port flag's value must be a port; 0 is accepted and means what the flag's help says (off or any)."""
    if not 0 <= port <= 65535:
        raise UsageError(f"{flag} must be within 0..65535, got {port}")


def check_can_listen(flag: str, host: str, port: int) -> None:
    """Fail now, with the flag's name, when ``host:port`` cannot be bound - not later inside a server thread."""

    try:
        socket.create_server((host, port)).close()
    except OSError as e:
        raise UsageError(f"{flag}: cannot listen on {host}:{port}: {e.strerror or e}") from None


def float_in(low: float, high: float) -> Callable[[str], float]:
    """argparse type: a finite number with ``low < value <= high`` (``nan`` and ``inf`` would never end a loop)."""

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


def int_in(low: int, high: int) -> Callable[[str], int]:
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
