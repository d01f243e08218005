"""``specdecode-runtime``: launch (the patched SGLang), check-sglang, simulate, selftest and completion.

A command's module is imported only when that command runs, so ``--help`` loads neither pydantic nor the simulator.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import warnings
from typing import Any, Sequence

from . import SGLANG_VERSION
from .contract import cli_common
from .contract.cli_common import (
    EXIT_INVALID as EXIT_UNSUPPORTED,  # SGLang missing or another version: the environment is the input
)

# Commands defined in their own modules, each exposing add_parser(subparsers); the help shown when another command
# runs (tests/runtime/test_launch.py checks it is the module's own).
COMMANDS = {
    "simulate": ("specdecode_runtime.simulate.cli", "simulated runtime (all numbers simulated)"),
    "selftest": (
        "specdecode_runtime.selftest",
        "run real SGLang with a layout and compare greedy tokens across layouts",
    ),
    "fetch-models": (
        "specdecode_runtime.hub_fetch",
        "fetch runtime.yaml's hf:// models into the hub cache (init container)",
    ),
    "adapt": ("specdecode_runtime.adapt.cli", "train a draft from captured traffic and gate it offline"),
}


def _cmd_launch(ns: argparse.Namespace) -> int:
    # lazy: `--help`, completion and the other commands skip launch: pydantic and the contract's config (0.44 s)
    from .launch import launch

    try:
        return launch(ns.config, ns.sglang_args, dry_run=ns.dry_run)
    except ImportError as e:  # the runtime image provides SGLang's dependencies; a bare install may not
        print(
            f"specdecode-runtime: error: cannot start SGLang: Python module {_missing_module(e)!r} is not "
            f"installed; run inside the runtime image, or install sglang=={_sglang_version()} with its "
            "dependencies (`specdecode-runtime check-sglang` checks the installation)",
            file=sys.stderr,
        )
        return EXIT_UNSUPPORTED


def _missing_module(err: BaseException) -> str:
    """The module that could not be imported, looking through wrappers (the patch set re-raises with context)."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, ModuleNotFoundError) and seen.name:
            return seen.name
        seen = seen.__cause__ or seen.__context__
    return getattr(err, "name", None) or str(err)


def _sglang_version() -> str:
    return SGLANG_VERSION


def _cmd_check(ns: argparse.Namespace) -> int:
    # lazy: only `check-sglang` loads the patch set (0.11 s); `--help` and the other commands skip it
    from .sglang_patch import check_patch_points, installed_sglang_version

    version = installed_sglang_version()
    if version is None:
        print(f"sglang is not installed (the runtime patches sglang=={SGLANG_VERSION})")
        return EXIT_UNSUPPORTED
    if version != SGLANG_VERSION:
        print(f"sglang {version} installed; the patches are written for {SGLANG_VERSION}")
        return EXIT_UNSUPPORTED
    # lazy: only `check-sglang` needs the torchvision stand-in, which loads unittest.mock (0.17 s)
    from .cpu.torchvision_stub import install

    stubbed = install()
    if stubbed:
        print(f"note: torchvision stubbed for import ({len(stubbed)} modules)")
    with _quiet_imports(ns.verbose):
        results = check_patch_points()
    width = max(len(r.point.target) for r in results)
    for r in results:
        print(f"{'ok  ' if r.ok else 'FAIL'} {r.point.role:6} {r.point.target:<{width}}  {r.detail}")
    bad: list[Any] = [r for r in results if not r.ok]
    print(f"{len(results) - len(bad)} of {len(results)} patch points match sglang {version}")
    if not bad:  # names match: check the behaviour the split draft relies on (CPU, no model)
        # lazy: only `check-sglang` loads the patch set (0.11 s); `--help` and the other commands skip it
        from .sglang_patch.behaviour import check_behaviour

        with _quiet_imports(ns.verbose):
            behaviour = check_behaviour()
        for b in behaviour:
            print(f"{'ok  ' if b.ok else 'FAIL'} behave {b.name}: {b.detail}")
        bad = [b for b in behaviour if not b.ok]
    if not bad and ns.apply:
        # lazy: only `check-sglang` loads the patch set (0.11 s); `--help` and the other commands skip it
        from .sglang_patch import SplitConfig, apply_patches, remove_patches

        ps = apply_patches(SplitConfig(draft_tp=1), {})
        n = len(ps.bindings)
        remove_patches()
        print(f"applied and removed {n} bindings")
    return 0 if not bad else EXIT_UNSUPPORTED


@contextlib.contextmanager
def _quiet_imports(verbose: bool):
    """Importing SGLang on a machine without GPUs warns about CUDA, triton and kernels at length; none of it is about
    the patch points, so it is held back (shown with --verbose)."""
    # lazy: only `check-sglang` quiets SGLang's imports; logging would add 13 ms to `--help` (0.1 s in all)
    import logging

    if verbose:
        yield
        return
    buffer = io.StringIO()
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(buffer):
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)


def build_parser(command: str | None = "*") -> argparse.ArgumentParser:
    """The parser; ``command`` names the one module-defined command to load (``"*"``: all of them)."""
    ap = argparse.ArgumentParser(prog="specdecode-runtime", description=__doc__.splitlines()[0].replace("``", ""))
    cli_common.add_version(ap)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("launch", help="start the patched SGLang server from runtime.yaml")
    p.add_argument("--config", required=True, help="runtime.yaml written by the operator's renderer")
    p.add_argument("--dry-run", action="store_true", help="print the environment and SGLang arguments, then exit")
    p.add_argument("sglang_args", nargs=argparse.REMAINDER, help="-- followed by extra SGLang arguments")
    p.set_defaults(func=_cmd_launch)
    c = sub.add_parser("check-sglang", help="verify every patch point against the installed SGLang")
    c.add_argument("--apply", action="store_true", help="also apply and remove the patches once")
    c.add_argument("--verbose", "-v", action="store_true", help="show SGLang's import-time warnings")
    c.set_defaults(func=_cmd_check)
    cli_common.add_lazy_commands(sub, COMMANDS, command, lambda module, _name, _help: module.add_parser(sub))
    cli_common.add_completion_command(sub, "specdecode-runtime")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = build_parser("*" if cli_common.completing() else cli_common.command_in(argv))
    cli_common.autocomplete(ap)
    ns = ap.parse_args(argv)
    if getattr(ns, "sglang_args", None) and ns.sglang_args[:1] == ["--"]:
        ns.sglang_args = ns.sglang_args[1:]
    return int(ns.func(ns) or 0)


if __name__ == "__main__":
    sys.exit(main())
