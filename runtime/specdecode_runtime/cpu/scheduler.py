"""SGLang scheduler entry point for CPU runs: installs the CPU stand-ins in the scheduler process, then hands over
to the runtime's patched entry point (which installs the split-draft patches when the launcher asked for them) or
SGLang's own."""

from __future__ import annotations

import os
from typing import Any, Mapping

from . import DEVICE_ENV, install


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """Passed as SGLang's ``run_scheduler_process_func``; the spawned child unpickles it by reference."""
    os.environ[DEVICE_ENV] = "cpu"
    install()
    # lazy: the CPU stand-ins install before the runtime's scheduler entry and its patches load (module docstring)
    from ..scheduler_process import run_scheduler_process as patched

    return patched(*args, **kwargs)


class SchedulerEntry:
    """:func:`run_scheduler_process` carrying the starting process's environment.

    A child forked from a long-lived forkserver (:func:`.engine.share_preloaded_children`) inherits the
    forkserver's environment, not the engine's: the per-engine variables (thread binding, the runtime config path)
    travel with the entry point instead, which SGLang pickles into every scheduler process."""

    def __init__(self, environ: Mapping[str, str]):
        self.environ = dict(environ)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        os.environ.update(self.environ)
        return run_scheduler_process(*args, **kwargs)
