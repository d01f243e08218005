"""``specdecode-runtime fetch-models``: the init container that fetches runtime.yaml's hf:// models into the hub cache.

Each distinct ``hf://ORG/NAME[@REVISION]`` is downloaded once with ``huggingface_hub.snapshot_download`` into
``HF_HUB_CACHE`` (the cache volume); files already there are not fetched again, so a pod that restarts on a
persistent cache starts at once. ``HF_ENDPOINT`` (a mirror), ``HF_TOKEN`` (from the Secret the SDD names) and
``HF_HUB_OFFLINE`` (a cache filled beforehand) are the library's own settings. A failure exits 1 with one line naming
the model, the endpoint and the reason: the pod's termination message (``FallbackToLogsOnError``).
"""

from __future__ import annotations

import argparse
import sys

from .contract import model_source as ms
from .contract.cli_common import EXIT_FAILED, EXIT_INVALID, EXIT_OK
from .contract.config import load_runtime_config
from .contract.input_files import InputError

PROG = "specdecode-runtime fetch-models"


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "fetch-models",
        help="fetch runtime.yaml's hf:// models into the hub cache (init container)",
        description=__doc__.splitlines()[0].replace("``", ""),
    )
    p.add_argument("--config", required=True, help="runtime.yaml written by the operator's renderer")
    p.set_defaults(func=run)
    return p


def _reason(err: BaseException) -> str:
    """The library's message without its advice to change code; the first line carries the cause."""
    text = " ".join(str(err).split())
    cause = err.__cause__ or err.__context__
    if cause is not None and " ".join(str(cause).split()) not in text:
        text = f"{text} ({type(cause).__name__}: {' '.join(str(cause).split())[:300]})"
    return text[:1000]


def run(ns: argparse.Namespace) -> int:
    try:
        cfg = load_runtime_config(ns.config)
        sources = ms.hub_sources(cfg.target.model, cfg.draft.model)
    except (InputError, ms.ModelSourceError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return EXIT_INVALID
    except OSError as e:
        print(f"{PROG}: error: {ns.config}: {e.strerror or e}", file=sys.stderr)
        return EXIT_INVALID
    if not sources:
        print(f"{PROG}: no hf:// models in {ns.config}; nothing to fetch")
        return EXIT_OK
    from huggingface_hub import constants, snapshot_download

    for source in sources:
        where = "the hub cache only (HF_HUB_OFFLINE)" if constants.HF_HUB_OFFLINE else constants.ENDPOINT
        try:
            path = snapshot_download(source.repo_id, revision=source.revision)
        except Exception as e:  # noqa: BLE001 - every failure of the library ends the pod with the same one line
            print(
                f"{PROG}: error: could not fetch {source.uri} from {where} into {constants.HF_HUB_CACHE}: "
                f"{type(e).__name__}: {_reason(e)}",
                file=sys.stderr,
            )
            return EXIT_FAILED
        print(f"{PROG}: {source.uri} -> {path}", flush=True)
    return EXIT_OK
