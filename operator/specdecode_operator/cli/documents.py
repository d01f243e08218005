"""``specdecode render | validate | crd``: the offline commands over SpecDecodeDeployment documents.

``validate`` runs the CRD's schema and CEL rules as the API server would; ``render`` prints what the operator would
apply for the same documents, so a manifest can be reviewed (or applied by GitOps) without a running operator.
"""

from __future__ import annotations

import argparse
import sys

from ..images import RUNTIME_IMAGE


def add_parser(subparsers, name: str, help_text: str) -> argparse.ArgumentParser:
    p = subparsers.add_parser(name, help=help_text)
    if name == "render":
        _add_file_argument(p)
        p.add_argument(
            "-o",
            "--output",
            choices=("yaml", "json", "runtime-config"),
            default="yaml",
            help="yaml/json: every manifest; runtime-config: only the runtime.yaml each runtime pod reads",
        )
        p.add_argument("--default-image", default=RUNTIME_IMAGE, help="runtime image when spec.runtime.image is empty")
        p.add_argument(
            "--operator-namespace", default="specdecode-system", help="namespace allowed to reach the control port"
        )
        p.set_defaults(func=render)
    elif name == "validate":
        _add_file_argument(p)
        p.set_defaults(func=validate)
    else:
        p.set_defaults(func=crd)
    return p


def _add_file_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("-f", "--file", required=True, help="YAML file with one or more documents ('-' for stdin)")


def parse_file(path: str) -> list:
    """Every SpecDecodeDeployment in the file, validated as the API server would (schema + CEL) and refused where the
    runtime would refuse to serve it."""
    # lazy: `render/validate/crd --help` and completion skip pydantic, the CRD and render/ (0.68 s)
    from ..api.documents import load_sdds
    from ..render.runtime_config import serving_problems

    return load_sdds(path, serving_problems)


def render(args: argparse.Namespace) -> int:
    # lazy: `render/validate/crd --help` and completion skip pydantic, the CRD and render/ (0.68 s)
    from ..render import RenderOptions, to_json, to_yaml
    from ..render import render as render_manifests

    options = RenderOptions(
        default_image=args.default_image, operator_namespace=args.operator_namespace, tuned_steps=None
    )
    manifests = [m for sdd in parse_file(args.file) for m in render_manifests(sdd, options)]
    if args.output == "runtime-config":
        sys.stdout.write(runtime_configs(manifests))
    else:
        sys.stdout.write(to_json(manifests) + "\n" if args.output == "json" else to_yaml(manifests))
    return 0


def runtime_configs(manifests: list[dict]) -> str:
    """The ``runtime.yaml`` of every rendered runtime ConfigMap: the file ``specdecode-runtime launch`` reads."""
    # lazy: `render/validate/crd --help` and completion skip pydantic, the CRD and render/ (0.68 s)
    from specdecode_runtime.contract.config import CONFIG_FILE_NAME

    files = [
        m["data"][CONFIG_FILE_NAME]
        for m in manifests
        if m.get("kind") == "ConfigMap" and CONFIG_FILE_NAME in (m.get("data") or {})
    ]
    return "---\n".join(files)


def validate(args: argparse.Namespace) -> int:
    for sdd in parse_file(args.file):
        print(f"{args.file}: {sdd.kind}/{sdd.metadata.name}: valid")
    return 0


def crd(args: argparse.Namespace) -> int:
    # lazy: `render/validate/crd --help` and completion skip pydantic, the CRD and render/ (0.68 s)
    from ..api.crd import crd_yaml

    sys.stdout.write(crd_yaml())
    return 0
