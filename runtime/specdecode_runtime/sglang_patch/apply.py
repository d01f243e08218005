"""Install and remove the patches: the one place that lists, in order, every SGLang symbol that gets wrapped.

Every target below is also a :data:`.patch_points.PATCH_POINTS` entry, so ``check-sglang`` vets it before a pod
starts. :func:`apply_patches` is idempotent within a process (the launcher's process and each spawned scheduler
install once); :func:`remove_patches` restores every original binding and clears every hook callback, which the
tests and ``check-sglang --apply`` rely on.
"""

from __future__ import annotations

import contextlib
import functools
import os
from typing import Iterator

from . import draft_layout, finished_requests
from . import process_state as state
from .engine_hooks import install_engine_hooks
from .patch_points import EW2
from .patch_set import PatchSet
from .process_state import SplitConfig
from .remote_draft_worker import _make_remote_draft_worker_cls
from .verify_broadcast import wrap_build


def apply_patches(
    split: SplitConfig | None = None, nccl_env: dict[str, str] | None = None, *, main_process: bool = False
) -> PatchSet:
    """Install every patch (idempotent: an active set is returned as is). ``split=None`` (or a draft TP equal to
    the target TP) installs only the hooks and the NCCL re-apply. ``main_process``: also wrap SGLang's
    ``_set_envs_and_config`` (the launcher's own process, before the schedulers are spawned; spawned schedulers
    re-apply the profile in :func:`specdecode_runtime.scheduler_process.bootstrap_from_env` instead)."""
    if state.active is not None:
        return state.active
    from sglang.srt.speculative import eagle_worker_v2  # noqa: F401 - loaded before anything is resolved

    ps = PatchSet()
    if main_process:
        ps.wrap("sglang.srt.entrypoints.engine._set_envs_and_config", _reapply_nccl_env(dict(nccl_env or {})))
    install_engine_hooks(ps)
    if split is not None:
        _install_split_draft(ps, split)
    state.active = ps
    return ps


def install_capture_hook() -> None:
    """Add the traffic capture's finished-request hook to the installed patches (idempotent). Called only where
    ``runtime.yaml`` has a ``capture`` section (:meth:`specdecode_runtime.engine.EngineRuntime.install`): without
    one, SGLang's output path stays unwrapped."""
    ps = state.active
    if ps is None:
        raise RuntimeError("install_capture_hook needs apply_patches first")
    if finished_requests.STREAM_OUTPUT not in ps.targets:
        ps.wrap(finished_requests.STREAM_OUTPUT, finished_requests.wrap_stream_output)


def _reapply_nccl_env(env: dict[str, str]):
    """SGLang sets NCCL_CUMEM_ENABLE / NCCL_NVLS_ENABLE itself; the runtime's NCCL profile must win."""

    def wrap_set_envs(orig):
        def _set_envs_and_config(server_args):
            result = orig(server_args)
            os.environ.update(env)
            return result

        return _set_envs_and_config

    return wrap_set_envs


def _install_split_draft(ps: PatchSet, split: SplitConfig) -> None:
    from sglang.srt.speculative import eagle_worker_v2 as ew2

    real = ew2.EagleDraftWorker
    remote = _make_remote_draft_worker_cls()
    state.original_build_verify_input = ew2.build_eagle_verify_input
    ps.wrap(f"{EW2}.EAGLEWorkerV2.__init__", draft_layout.wrap_worker_init(split, real, remote))
    ps.wrap(f"{EW2}.EAGLEWorkerV2.init_cuda_graphs", draft_layout.wrap_tier_build)
    for meth, what in draft_layout.DRAFT_ONLY_METHODS:
        kind = (
            draft_layout.draft_tier
            if meth in draft_layout.TIER_METHODS
            else draft_layout.draft_graphs_then_detach
            if meth == "init_cuda_graphs"
            else draft_layout.draft_pool_in_group
            if meth == "alloc_memory_pool"
            else draft_layout.draft_only
        )
        ps.wrap(f"{EW2}.EagleDraftWorker.{meth}", functools.partial(_wrapped_by, kind, what))
    ps.wrap(f"{EW2}.EagleDraftWorker._resolve_shared_embed_and_head", draft_layout.wrap_embed)
    ps.wrap(
        "sglang.srt.model_executor.pool_configurator.DefaultPoolConfigurator.__init__", draft_layout.wrap_pool_sizing
    )
    ps.wrap(f"{EW2}.resolve_draft_parallel_layout", draft_layout.wrap_layout)
    ps.wrap(f"{EW2}.build_eagle_verify_input", wrap_build)
    ps.rebind_everywhere("sglang.srt.utils.common.get_available_gpu_memory", draft_layout.local_memory_probe)


def _wrapped_by(kind, what, orig):
    """``orig`` wrapped by one of draft_layout's wrappers (``kind``) for the method ``what``."""
    return kind(orig, what)


def remove_patches() -> None:
    """Undo :func:`apply_patches` (tests, and ``check-sglang``); also clears every hook callback."""
    if state.active is not None:
        state.active.remove()
    state.active, state.split, state.original_build_verify_input = None, None, None
    state.verify_cb = state.step_cb = state.iteration_cb = state.ready_cb = state.finished_cb = None
    state.cycle = state.result_cycle = state.prefill_probe = None


@contextlib.contextmanager
def patched(split: SplitConfig | None = None, nccl_env: dict[str, str] | None = None) -> Iterator[PatchSet]:
    ps = apply_patches(split, nccl_env, main_process=False)
    try:
        yield ps
    finally:
        remove_patches()


def active_patches() -> PatchSet | None:
    return state.active
