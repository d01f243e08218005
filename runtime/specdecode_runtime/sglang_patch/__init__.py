"""Binds :mod:`specdecode_runtime.draft_group` into the pinned SGLang: the EAGLE draft runs on a subset S of the
target's TP ranks and broadcasts its proposals.

SGLang's own code runs unchanged on every rank; only the draft worker differs. The patches, by responsibility:

* :mod:`.patch_points` — every SGLang symbol the runtime wraps, re-binds or relies on (:data:`PATCH_POINTS`);
  :mod:`.compat` checks them against the installed SGLang without starting anything (``check-sglang``).
* :mod:`.patch_set` — the bookkeeping that replaces a binding and restores every original (:class:`PatchSet`);
  :mod:`.apply` — :func:`apply_patches` / :func:`remove_patches`, the ordered list of what gets wrapped.
* :mod:`.draft_layout` — the groups, the third layout case (draft weights and graphs on S only), the shared
  embedding/head, and the draft-only guard; :mod:`.remote_draft_worker` — the stand-in outside S.
* :mod:`.verify_broadcast` — on S, the proposals go out from S's leader before the verify input is built.
* :mod:`.engine_hooks` — verify callback, step control, per-iteration and worker-ready hooks for
  :mod:`specdecode_runtime.engine`.

What each spawned scheduler process runs first (installing these patches and the engine) is
:mod:`specdecode_runtime.scheduler_process`, above this package.
* :mod:`.process_state` — the per-process state all of them share.

Nothing here imports torch or sglang at import time (the operator image and CI use the pure-Python parts).
"""

from __future__ import annotations

from .. import SGLANG_VERSION
from . import draft_layout, process_state
from .apply import active_patches, apply_patches, patched, remove_patches
from .compat import CheckResult, check_patch_points, installed_sglang_version
from .engine_hooks import (
    set_iteration_callback,
    set_step_control,
    set_verify_callback,
    set_worker_ready_callback,
)
from .patch_points import EW2, PATCH_POINTS, PatchPoint
from .patch_set import PatchSet
from .process_state import SplitConfig, _SplitState, split_config

__all__ = [
    "EW2",
    "PATCH_POINTS",
    "PatchPoint",
    "PatchSet",
    "SGLANG_VERSION",
    "CheckResult",
    "SplitConfig",
    "_SplitState",
    "active_patches",
    "apply_patches",
    "check_patch_points",
    "draft_layout",
    "installed_sglang_version",
    "patched",
    "process_state",
    "remove_patches",
    "set_iteration_callback",
    "set_step_control",
    "set_verify_callback",
    "set_worker_ready_callback",
    "split_config",
]
