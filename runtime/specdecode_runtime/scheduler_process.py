"""Scheduler-process entry points: SGLang spawns one scheduler per TP rank, and each must install the patches
itself (a spawned child starts from a fresh interpreter, so the launcher's patches do not carry over).

It sits above ``sglang_patch/``, ``engine.py`` and ``selftest/`` because it wires them together in each process;
none of them imports it.
"""

from __future__ import annotations

import os
from typing import Any

from .contract.config import load_runtime_config
from .contract.derived import nccl_environment
from .engine import EngineRuntime, EngineSettings
from .sglang_patch.apply import apply_patches
from .sglang_patch.patch_set import PatchSet
from .sglang_patch.process_state import split_config

CONFIG_ENV = "SPECDECODE_RUNTIME_CONFIG"


def bootstrap_from_env() -> PatchSet | None:
    """In a spawned scheduler process: re-apply the NCCL profile and install the patches from the config file
    named by ``SPECDECODE_RUNTIME_CONFIG`` (set by the launcher). No variable: nothing happens."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return None
    cfg = load_runtime_config(path)
    env = nccl_environment(cfg)
    os.environ.update(env)
    ps = apply_patches(split_config(cfg), env)
    EngineRuntime(EngineSettings.from_runtime_config(cfg)).install()
    return ps


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """Passed to SGLang as ``run_scheduler_process_func``: spawned children unpickle it by reference, so they
    import this module, install the patches, then run SGLang's own ``run_scheduler_process``."""
    bootstrap_from_env()
    if os.environ.get("SPECDECODE_SELFTEST_DIR"):  # ``specdecode-runtime selftest`` observes every rank
        # lazy: only under the self-test; a serving scheduler skips the selftest package (options, yaml, tiny models)
        from .selftest.rank_probe import install_from_env

        install_from_env(kwargs.get("tp_rank", args[3] if len(args) > 3 else None))
    from sglang.srt.managers.scheduler import run_scheduler_process as orig  # SGLang is heavy: imported in the child

    return orig(*args, **kwargs)


def sglang_plugin() -> None:
    """Entry point for SGLang's ``sglang.srt.plugins`` group (an alternative to ``run_scheduler_process``):
    SGLang calls every general plugin at the start of each process; a no-op unless the launcher set
    ``SPECDECODE_RUNTIME_CONFIG``."""
    bootstrap_from_env()
