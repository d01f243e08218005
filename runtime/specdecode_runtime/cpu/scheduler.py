"""SGLang scheduler entry point for CPU runs: installs the CPU stand-ins in the spawned scheduler process, then
hands over to the runtime's patched entry point (which installs the split-draft patches when the launcher asked
for them) or SGLang's own."""

from __future__ import annotations

import os
from typing import Any


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """Passed as SGLang's ``run_scheduler_process_func``; the spawned child unpickles it by reference."""
    from . import DEVICE_ENV, install

    os.environ[DEVICE_ENV] = "cpu"
    install()
    from ..sglang_patch.bootstrap import run_scheduler_process as patched

    return patched(*args, **kwargs)
