"""``specdecode``: render, validate and print the CRD offline; run the operator, the planner, benchmarks and the demo.

Every user mistake ends in a message that names the field and what is allowed, and exit code 2; never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any, Callable, Iterable

import yaml

from . import __version__

EXIT_INVALID = 2

# Subcommands that live in their own rooms; each module exposes add_parser(subparsers).
_PLUGINS = (
    "specdecode_operator.operator_cli",
    "specdecode_operator.tuner.plan_cli",
    "specdecode_operator.bench_cli",
    "specdecode_operator.demo.cli",
)


class UsageError(Exception):
    """A problem with the user's input: printed as is, exit code 2."""


def load_documents(path: str) -> list[tuple[int, Any]]:
    try:
        text = sys.stdin.read() if path == "-" else open(path, encoding="utf-8").read()
    except OSError as e:
        raise UsageError(f"{path}: cannot read: {e.strerror}") from None
    try:
        docs = [d for d in yaml.safe_load_all(text)]
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML: {e}") from None
    return [(i, d) for i, d in enumerate(docs) if d is not None]


def _describe(index: int, doc: Any) -> str:
    if isinstance(doc, dict):
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
        return f"document {index + 1} ({doc.get('kind', '?')}/{name or '?'})"
    return f"document {index + 1}"


def parse_file(path: str) -> list:
    """Every SpecDecodeDeployment in the file, validated; all problems of all documents in one error."""
    from .api.validate import InvalidSpec, parse

    sdds, errors = [], []
    docs = load_documents(path)
    if not docs:
        raise UsageError(f"{path}: no documents found")
    for index, doc in docs:
        try:
            sdds.append(parse(doc))
        except InvalidSpec as e:
            errors.append(f"{path}: {_describe(index, doc)}:")
            errors.extend(f"  {p}" for p in e.problems)
    if errors:
        raise UsageError("\n".join(errors))
    return sdds


def cmd_render(args: argparse.Namespace) -> int:
    from .render import RenderOptions, render, to_json, to_yaml

    options = RenderOptions(
        default_image=args.default_image, operator_namespace=args.operator_namespace, tuned_steps=None
    )
    manifests = [m for sdd in parse_file(args.file) for m in render(sdd, options)]
    sys.stdout.write(to_json(manifests) + "\n" if args.output == "json" else to_yaml(manifests))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    sdds = parse_file(args.file)
    for sdd in sdds:
        print(f"{args.file}: {sdd.kind}/{sdd.metadata.name}: valid")
    return 0


def cmd_crd(args: argparse.Namespace) -> int:
    from .api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .images import RUNTIME_IMAGE

    parser = argparse.ArgumentParser(prog="specdecode", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"specdecode {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    p = sub.add_parser("render", help="print the Kubernetes manifests for SpecDecodeDeployment documents")
    p.add_argument("-f", "--file", required=True, help="YAML file with one or more documents ('-' for stdin)")
    p.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    p.add_argument("--default-image", default=RUNTIME_IMAGE, help="runtime image when spec.runtime.image is empty")
    p.add_argument("--operator-namespace", default="specdecode-system", help="namespace allowed to reach the control port")
    p.set_defaults(func=cmd_render)

    p = sub.add_parser("validate", help="check documents against the CRD schema and its CEL rules")
    p.add_argument("-f", "--file", required=True, help="YAML file with one or more documents ('-' for stdin)")
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("crd", help="print the CustomResourceDefinition")
    p.set_defaults(func=cmd_crd)

    for module in _PLUGINS:
        try:
            importlib.import_module(module).add_parser(sub)
        except ModuleNotFoundError as e:
            if e.name and module.startswith(e.name):
                continue  # that room is not installed in this image
            raise
    return parser




def main(argv: Iterable[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(list(argv) if argv is not None else None)
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        return int(func(args) or 0)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
