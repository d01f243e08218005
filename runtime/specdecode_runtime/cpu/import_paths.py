"""Import stubs for SGLang's spawned processes.

SGLang starts its scheduler and detokenizer processes with multiprocessing's ``spawn``: each child unpickles
SGLang objects (``ServerArgs``, the detokenizer entry point) before any code of ours runs there, and those imports
reach ``torchvision`` (a CUDA-only wheel on PyPI) and, in the scheduler, ``vllm._custom_ops``. A child inherits
the parent's environment, so the runtime prepends directories holding stub packages to ``PYTHONPATH`` before
SGLang spawns anything; each directory is added only when the real package cannot be imported, so a machine that
has the real one keeps it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

from .torchvision_stub import _real_import_works, installed

STUB_ROOT = Path(__file__).resolve().parent / "import_stubs"
PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the directory that holds specdecode_runtime


def _real_importable(name: str) -> bool:
    if name == "torchvision":
        return not installed() and _real_import_works(name)
    module = sys.modules.get(name)
    if module is not None:
        return not getattr(module, "__file__", "").startswith(str(STUB_ROOT))
    return importlib.util.find_spec(name) is not None


def stub_dirs() -> list[str]:
    """Stub directories this machine needs (checked in the calling process)."""
    return [str(STUB_ROOT / name) for name in ("torchvision", "vllm") if not _real_importable(name)]


def install_in_process() -> list[str]:
    """Put the needed stub directories first on this process's ``sys.path`` and on ``PYTHONPATH`` for its
    children; idempotent. Returns the stub directories in use."""
    dirs = stub_dirs()
    for d in reversed(dirs):
        if d not in sys.path:
            sys.path.insert(0, d)
    export_to_children()
    return dirs


def export_to_children(environ: dict[str, str] | os._Environ | None = None) -> list[str]:
    """Prepend the needed stub directories (and the directory holding this package, so the stubs can import it
    from any working directory) to ``PYTHONPATH``; idempotent. Returns the directories added."""
    env = os.environ if environ is None else environ
    current = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    wanted = [*stub_dirs(), str(PACKAGE_ROOT)]
    added = [d for d in wanted if d not in current]
    if added:
        env["PYTHONPATH"] = os.pathsep.join([*added, *current])
    return added
