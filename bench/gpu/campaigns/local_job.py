"""A training Job's container command as a machine without Kubernetes runs it (the adaptation campaign on a GPU
machine, the adaptation-loop test bed on the CPU): the claim's mount path becomes a local directory, the
termination message a local file, ``specdecode-runtime`` this interpreter's module."""

from __future__ import annotations

import sys
from pathlib import Path

from specdecode_runtime.contract.adaptation import TERMINATION_LOG
from specdecode_runtime.contract.config import CAPTURE_MOUNT_DIR


def local_command(command: list[str], claim: Path, message: Path) -> list[str]:
    out = []
    for arg in command:
        if arg == TERMINATION_LOG:
            arg = str(message)
        elif arg == CAPTURE_MOUNT_DIR or arg.startswith(CAPTURE_MOUNT_DIR + "/"):
            arg = str(claim) + arg[len(CAPTURE_MOUNT_DIR) :]
        out.append(arg)
    if not out or out[0] != "specdecode-runtime":
        raise RuntimeError(f"not a specdecode-runtime command: {command}")
    return [sys.executable, "-m", "specdecode_runtime", *out[1:]]
